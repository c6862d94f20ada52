"""Limit loading without ROS: ros2_control's joint_limits YAML layout (plain and as a
ROS parameter file) of the shipped configs, URDF <limit> tags, the most restrictive
merge, refusals that name the key, and the kernel shield built from limits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from robokernel_ros.safety.limits import (
    JointLimit,
    MissingLimitsError,
    build_shield,
    limits_from_urdf,
    load_limits_file,
    merge_limits,
)

CONFIG = Path(__file__).resolve().parents[2] / "config"
SO101_LIMITS = CONFIG / "joint_limits_so101.yaml"
SO101_JOINTS = [
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
]

URDF = """<robot name="r">
  <joint name="a" type="revolute"><limit lower="-1.0" upper="1.0" velocity="2.0" effort="5"/></joint>
  <joint name="b" type="continuous"><limit velocity="3.0" effort="1"/></joint>
  <joint name="c" type="prismatic"><limit lower="0.0" upper="0.1" velocity="0" effort="1"/></joint>
  <joint name="f" type="fixed"/>
</robot>"""


def test_config_limits_yaml_layouts():
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
def test_config_limits_yaml_refusals(tmp_path, text, words):
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_limits_file(path)
    for word in words:
        assert word in str(info.value)


def test_config_limits_missing_file():
    with pytest.raises(ValueError, match="limits_file=.*cannot be read"):
        load_limits_file("/nonexistent/limits.yaml")


def test_config_limits_urdf_and_merge():
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


def test_config_limits_guards_from_limits():
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
