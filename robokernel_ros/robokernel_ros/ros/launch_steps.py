"""What the workcell launch files share (launch/*.launch.py import it): the workcell's
DDS settings on one host, and lifecycle nodes brought up one after another.

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
#: The workcell's Fast DDS profile on one host (config/): discovery and data on UDP
#: loopback, no shared memory (the file's header says why).
LOCALHOST_PROFILE = "fastdds_localhost.xml"
RANGE_VAR = "ROS_AUTOMATIC_DISCOVERY_RANGE"


def profile_variable(environ: Mapping[str, str]) -> str | None:
    """The variable that names a Fast DDS profile in `environ`'s ROS distribution; None
    when a profile is set already."""
    if any(environ.get(name) for name in DDS_PROFILE_VARS):
        return None
    return DDS_PROFILE_VARS[environ.get("ROS_DISTRO", "") in ("humble", "jazzy")]


def dds_environment(environ: Mapping[str, str], config: str) -> dict[str, str]:
    """The variables a workcell process gets over `environ` (env.sh, the demo, the launch
    files and the tests share this rule):

    - neither a Fast DDS profile nor ROS_AUTOMATIC_DISCOVERY_RANGE set: the profile
      `config`/fastdds_localhost.xml with the range SYSTEM_DEFAULT. The profile confines
      discovery to this host itself; rmw's LOCALHOST range would add its own
      shared-memory transport to the profile's UDP one.
    - a profile of the user's and no range: LOCALHOST (discovery stays on this host).
    - a range of the user's: nothing (its profile, if any, is the user's too)."""
    if environ.get(RANGE_VAR):
        return {}
    name = profile_variable(environ)
    if name is None:
        return {RANGE_VAR: "LOCALHOST"}
    return {name: os.path.join(config, LOCALHOST_PROFILE), RANGE_VAR: "SYSTEM_DEFAULT"}


def dds_profile(config: str) -> list[object]:
    """The SetEnvironmentVariable actions of dds_environment (none when the user has set
    the DDS variables)."""
    from launch.actions import SetEnvironmentVariable

    return [
        SetEnvironmentVariable(name, value)
        for name, value in dds_environment(os.environ, config).items()
    ]


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
