"""What the workcell launch files share (launch/*.launch.py import it): Fast DDS's
shared-memory profile, and lifecycle nodes brought up one after another.

    LaunchDescription([*dds_profile(config), ..., policy_server, runner,
                       *bring_up_in_order([policy_server, runner])])

`launch`, `launch_ros` and `lifecycle_msgs` are imported when a launch file calls these,
so this module imports on machines without them (the demo and the tests start the same
graph as processes: robokernel_ros.demo).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

#: Fast DDS 3 reads the first name (and warns about the second); 2 (Humble, Jazzy) the second.
DDS_PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


def profile_variable(environ: Mapping[str, str]) -> str | None:
    """The variable that points Fast DDS at config/fastdds_shm.xml (a 16 MiB
    shared-memory segment, so 640x480 camera frames travel on shared memory) in
    `environ`'s ROS distribution; None when a profile is set already."""
    if any(environ.get(name) for name in DDS_PROFILE_VARS):
        return None
    return DDS_PROFILE_VARS[environ.get("ROS_DISTRO", "") in ("humble", "jazzy")]


def dds_profile(config: str) -> list[object]:
    """config/fastdds_shm.xml unless a profile is set (profile_variable): the
    SetEnvironmentVariable action, or none."""
    from launch.actions import SetEnvironmentVariable

    name = profile_variable(os.environ)
    if name is None:
        return []
    return [SetEnvironmentVariable(name, os.path.join(config, "fastdds_shm.xml"))]


def transition(node: object, transition_id: int) -> object:
    """The action that asks the lifecycle node `node` (a launch_ros LifecycleNode) for
    the transition `transition_id` (lifecycle_msgs/Transition)."""
    from launch.actions import EmitEvent
    from launch.events import matches_action
    from launch_ros.events.lifecycle import ChangeState

    return EmitEvent(
        event=ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id)
    )


def bring_up_in_order(nodes: Sequence[object]) -> list[object]:
    """Lifecycle nodes brought up one after another: the first is configured at once,
    each is activated when its configure succeeded, and the next is configured when it
    is active. Only the transitions out of configuring and activating trigger the next
    step, so an operator's later deactivate is not undone."""
    from launch.actions import RegisterEventHandler
    from launch_ros.event_handlers import OnStateTransition
    from lifecycle_msgs.msg import Transition

    actions = [transition(nodes[0], Transition.TRANSITION_CONFIGURE)]
    for node, following in zip(nodes, [*nodes[1:], None], strict=True):
        actions.append(
            RegisterEventHandler(
                OnStateTransition(
                    target_lifecycle_node=node,
                    start_state="configuring",
                    goal_state="inactive",
                    entities=[transition(node, Transition.TRANSITION_ACTIVATE)],
                )
            )
        )
        if following is not None:
            actions.append(
                RegisterEventHandler(
                    OnStateTransition(
                        target_lifecycle_node=node,
                        start_state="activating",
                        goal_state="active",
                        entities=[transition(following, Transition.TRANSITION_CONFIGURE)],
                    )
                )
            )
    return actions
