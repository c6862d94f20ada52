"""destroy_node() of each lifecycle node takes the node out of the graph at once, in a
process that goes on: rclpy.lifecycle's state machine holds the node's handle, so
without ros.lifecycle.release_state_machine the node, its endpoints and its DDS
participant lived on until the process exited, matched by every later peer under the
same names (the node tests failed in full runs and never alone)."""

from __future__ import annotations

import pytest
import rclpy
from rclpy.parameter import Parameter
from robokernel_ros.nodes.policy_server import PolicyServer
from robokernel_ros.nodes.runner import RunnerNode
from robokernel_ros.nodes.safety_shield import SafetyShieldNode

SHIELD_JOINTS = [Parameter("joints", value=["a"])]


def _names(ros) -> list[str]:
    return [name for name, _ns in ros.node.get_node_names_and_namespaces()]


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda ctx: PolicyServer(context=ctx), "policy_server"),
        (lambda ctx: RunnerNode(context=ctx), "runner"),
        (
            lambda ctx: SafetyShieldNode(
                "destroy_probe_shield", context=ctx, parameter_overrides=SHIELD_JOINTS
            ),
            "destroy_probe_shield",
        ),
    ],
    ids=["policy_server", "runner", "safety_shield"],
)
def test_a_destroyed_lifecycle_node_leaves_the_graph(ros, make, name) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = make(context)
        node.trigger_configure()  # a configured node holds more (the policy, the scene)
        assert ros.wait_until(lambda: name in _names(ros), 30), _names(ros)
        node.destroy_node()
        # the context stays up: only the node's own destruction can take it out
        assert ros.wait_until(lambda: name not in _names(ros), 10), _names(ros)
    finally:
        rclpy.try_shutdown(context=context)
