"""Limit loading: ros2_control's joint_limits YAML layout (plain and as a ROS parameter
file), joint_limits.* parameters, URDF <limit> tags, the most restrictive merge, and
refusals that name the parameter."""

from __future__ import annotations

import math

import pytest
import rclpy
from rclpy.context import Context
from rclpy.parameter import Parameter
from robokernel_ros.nodes._common import ParameterError
from robokernel_ros.nodes.safety_shield import SafetyShieldNode
from robokernel_ros.safety.limits import (
    JointLimit,
    MissingLimitsError,
    build_shield,
    limits_from_urdf,
    load_limits_file,
    merge_limits,
)
from shield_harness import CONFIG, SO101_JOINTS, SO101_LIMITS

URDF = """<robot name="r">
  <joint name="a" type="revolute"><limit lower="-1.0" upper="1.0" velocity="2.0" effort="5"/></joint>
  <joint name="b" type="continuous"><limit velocity="3.0" effort="1"/></joint>
  <joint name="c" type="prismatic"><limit lower="0.0" upper="0.1" velocity="0" effort="1"/></joint>
  <joint name="f" type="fixed"/>
</robot>"""


def test_shield_limits_yaml_layouts():
    so101 = load_limits_file(SO101_LIMITS)
    assert list(so101) == SO101_JOINTS
    assert so101["shoulder_pan"] == JointLimit(-1.91986, 1.91986, 3.0, 30.0)
    assert so101["gripper"].max_acceleration is None
    panda = load_limits_file(CONFIG / "joint_limits_panda.yaml")  # under /**: ros__parameters:
    assert panda["joint4"].max_position == -0.0698 and panda["joint2"].max_acceleration == 7.5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("joint_limits:\n  a: {min_position: -1.0}\n", ["min_position", "has_position_limits"]),
        ("joint_limits:\n  a: {has_position_limits: true, min_position: -1}\n", ["max_position"]),
        (
            "joint_limits:\n  a: {has_position_limits: 'true', min_position: -1, max_position: 1}\n",
            ["has_position_limits", "boolean"],
        ),
        (
            "joint_limits:\n  a: {has_velocity_limits: true, max_velocity: -2}\n",
            ["max_velocity", "> 0"],
        ),
        (
            "joint_limits:\n  a: {has_position_limits: true, min_position: 1, max_position: -1}\n",
            ["min_position", "max_position"],
        ),
        ("joint_limits:\n  a: {max_velocityy: 1}\n", ["unknown key", "max_velocityy"]),
        ("joint_limits:\n  a: {has_velocity_limits: true, max_velocity: .nan}\n", ["finite"]),
        ("limits:\n  a: {}\n", ["no 'joint_limits'"]),
        ("joint_limits: [1, 2\n", ["not valid YAML"]),
    ],
)
def test_shield_limits_yaml_refusals(tmp_path, text, words):
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_limits_file(path)
    for word in words:
        assert word in str(info.value)


def test_shield_limits_missing_file():
    with pytest.raises(ValueError, match="limits_file=.*cannot be read"):
        load_limits_file("/nonexistent/limits.yaml")


def test_shield_limits_urdf_and_merge():
    urdf = limits_from_urdf(URDF)
    assert urdf == {  # effort is read (reported, not enforced)
        "a": JointLimit(-1.0, 1.0, 2.0, None, 5.0),
        "b": JointLimit(None, None, 3.0, None, 1.0),
        "c": JointLimit(0.0, 0.1, None, None, 1.0),
    }
    tighter = {"a": JointLimit(-2.0, 0.5, 5.0, 10.0)}
    merged = merge_limits(["a", "b"], [("urdf", urdf), ("file", tighter)])
    assert merged["a"] == JointLimit(-1.0, 0.5, 2.0, 10.0, 5.0)  # the most restrictive of each
    assert merged["b"] == JointLimit(None, None, 3.0, None, 1.0)
    with pytest.raises(MissingLimitsError, match=r"\['zz'\] have no limits"):
        merge_limits(["a", "zz"], [("urdf", urdf)])
    with pytest.raises(ValueError, match="do not overlap"):
        merge_limits(["a"], [("urdf", urdf), ("file", {"a": JointLimit(2.0, 3.0)})])
    with pytest.raises(ValueError, match="robot_description: not valid XML"):
        limits_from_urdf("<robot>")


def test_shield_limits_guards_from_limits():
    shield = build_shield(
        ["a", "b"], {"a": JointLimit(-1.0, 1.0, 2.0, None), "b": JointLimit(None, None, None, None)}
    )
    shield.record_sent({"a": 0.0, "b": 0.0})
    # within limits and velocity: unchanged
    r = shield.review({"a": 0.05, "b": 100.0}, dt=0.05, record=False)
    assert not r.refused and r.action == {"a": 0.05, "b": 100.0} and not r.interventions
    # faster than 2 rad/s over 0.05 s: rate-limited to 0.1
    r = shield.review({"a": 0.5, "b": 0.0}, dt=0.05, record=False)
    assert math.isclose(r.action["a"], 0.1) and r.interventions[0].guard == "max_velocity"
    # gross violation of the position limit: refused
    assert shield.review({"a": 1.5, "b": 0.0}, dt=0.05, record=False).refused
    assert shield.review({"a": math.nan, "b": 0.0}, dt=0.05, record=False).refused
    # velocity interface: +-max_velocity is the range
    vel = build_shield(["a"], {"a": JointLimit(-1.0, 1.0, 2.0, None)}, command_interface="velocity")
    assert vel.review({"a": 2.05}, dt=0.01).action == {"a": 2.0}
    assert vel.review({"a": 3.0}, dt=0.01).refused


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
        assert config["limits"]["a"] == JointLimit(-0.5, 1.0, 2.0, None, 5.0)
        assert config["limits"]["b"] == JointLimit(None, None, 3.0, None, 1.0)
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


def test_rate_guards_judge_an_early_command_over_the_streams_period():
    """Arrival jitter is not speed: a 50 Hz stream's early command gets the stream's
    period; a stream that really is faster (1 kHz) is judged at its own rate."""
    context, node = _node([Parameter("joints", value=["a"])])
    try:
        node._max_dt = 0.05  # max_step_dt_s, as configure sets it
        node._reset_motion()
        t = node._t_sent = 100.0
        dts = []
        for interval in (0.020, 0.021, 0.019, 0.020, 0.003, 0.037, 0.020, 0.019):
            t += interval
            dts.append(node._command_dt(t))
            node._t_sent = t
        assert min(dts) >= 0.019  # the 3 ms arrival is judged over ~20 ms
        assert dts[5] == pytest.approx(0.037)  # a late one over its real interval
        for _ in range(5):
            t += 0.001
            dt = node._command_dt(t)
            node._t_sent = t
        assert dt == pytest.approx(0.001)  # a real 1 kHz stream: its own rate within 5
        t += 1.0
        assert node._command_dt(t) == pytest.approx(node._max_dt)  # at most max_step_dt_s
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
        assert not node._configured and node._shield is None
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
