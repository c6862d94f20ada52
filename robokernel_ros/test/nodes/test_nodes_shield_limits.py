"""Limit loading in the node: joint_limits.* parameters with a URDF, refusals that name
the parameter, robot_description_topic failing closed, command_rate_hz refused against
max_step_dt_s. (The parsing itself and the rate guards' interval: test/safety/.)"""

from __future__ import annotations

import pytest
import rclpy
from rclpy.context import Context
from rclpy.parameter import Parameter
from robokernel_ros.nodes.safety_shield import SafetyShieldNode
from robokernel_ros.ros.params import ParameterError
from robokernel_ros.safety.limits import JointLimit

URDF = """<robot name="r">
  <joint name="a" type="revolute"><limit lower="-1.0" upper="1.0" velocity="2.0" effort="5"/></joint>
  <joint name="b" type="continuous"><limit velocity="3.0" effort="1"/></joint>
  <joint name="c" type="prismatic"><limit lower="0.0" upper="0.1" velocity="0" effort="1"/></joint>
  <joint name="f" type="fixed"/>
</robot>"""


def _node(overrides: list[Parameter]) -> tuple[Context, SafetyShieldNode]:
    context = Context()
    rclpy.init(context=context)
    return context, SafetyShieldNode("limits_probe", context=context, parameter_overrides=overrides)


def test_shield_limits_from_parameters_and_urdf():
    overrides = [
        Parameter("joints", value=["a", "b"]),
        Parameter("joint_limits.a.has_position_limits", value=True),
        Parameter("joint_limits.a.min_position", value=-0.5),
        Parameter("joint_limits.a.max_position", value=2),  # an integer is a number too
        Parameter("robot_description", value=URDF),
    ]
    context, node = _node(overrides)
    try:
        config = node._read_configuration()
        assert config.limits["a"] == JointLimit(-0.5, 1.0, 2.0, None, 5.0)
        assert config.limits["b"] == JointLimit(None, None, 3.0, None, 1.0)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_shield_limits_parameter_refusal_names_it():
    overrides = [
        Parameter("joints", value=["a"]),
        Parameter("joint_limits.a.has_velocity_limits", value=True),
        Parameter("joint_limits.a.max_velocity", value="fast"),
    ]
    context, node = _node(overrides)
    try:
        with pytest.raises(ParameterError, match="max_velocity='fast': must be a finite number"):
            node._read_configuration()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_shield_limits_robot_description_topic_fails_closed():
    """No URDF on robot_description_topic within robot_description_wait_s: configure is
    refused naming the parameter (nothing is forwarded without the limits)."""
    overrides = [
        Parameter("joints", value=["a"]),
        Parameter("robot_description_topic", value="/limits_probe_nobody/robot_description"),
        Parameter("robot_description_wait_s", value=0.2),
    ]
    context, node = _node(overrides)
    try:
        with pytest.raises(ParameterError, match="robot_description_topic=.*no URDF received"):
            node._read_configuration()
        node.trigger_configure()
        assert not node._configured and node._review is None
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_shield_command_rate_refusal_names_it():
    """A nominal period longer than max_step_dt_s could never be credited: refused."""
    overrides = [
        Parameter("joints", value=["a"]),
        Parameter("robot_description", value=URDF),
        Parameter("command_rate_hz", value=10.0),
    ]
    context, node = _node(overrides)
    try:
        with pytest.raises(ParameterError, match="command_rate_hz=10.*exceeds max_step_dt_s"):
            node._read_configuration()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
