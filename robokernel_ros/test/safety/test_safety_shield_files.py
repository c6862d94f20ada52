"""A safety_shield process started against each fixture layout (UR's !degrees YAML,
MoveIt's nesting, a URDF read from a latched robot_description topic) refuses a
command outside the tightest limit, reports that limit, sends a hold, and logs the
source of every limit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from robokernel_ros.ros.qos import LATCHED_QOS
from shield_harness import SHIELD, is_hold, shield_args, wait_state, wait_until
from std_msgs.msg import Float64MultiArray, String

FIXTURES = Path(__file__).with_name("fixtures")
UR_JOINTS = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint",
             "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]  # fmt: skip
PANDA_JOINTS = ["panda_joint1", "panda_joint2", "panda_joint3", "panda_joint4"]
ARM_JOINTS = ["joint1", "joint2", "joint3", "finger_joint"]

# (joints, limits_file, URDF published on robot_description_topic, measured positions,
#  the joint commanded out of range, the value, the tightest bound, a line of the log)
CASES = {
    "ur_degrees": (
        UR_JOINTS, FIXTURES / "ur5e_joint_limits.yaml", None, [0.0] * 6,
        # within the other joints' +-2 pi, outside the elbow's +-180 degrees
        "elbow_joint", math.pi + 0.5, math.pi,
        "elbow_joint: position [-3.14159, 3.14159] (limits_file)",
    ),
    "moveit_nested": (
        PANDA_JOINTS, FIXTURES / "panda_moveit_joint_limits.yaml", None, [0.0, 0.0, 0.0, -1.0],
        "panda_joint4", 0.3, -0.0698,
        "panda_joint3: position [-2.8973, 2.8973] (limits_file), velocity <= 2.175 (limits_file)",
    ),
    "urdf_topic": (
        ARM_JOINTS, None, FIXTURES / "arm_ros2_control.urdf", [0.0, 0.0, 0.0, 0.02],
        # within <limit>'s 1.7, outside the <ros2_control> block's 1.2
        "joint2", 1.5, 1.2,
        "joint2: position [-1.5, 1.2] (/rk_arm/robot_description topic <ros2_control>)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_shield_refuses_outside_the_tightest_limit_of_each_layout(processes, peer, case):
    joints, limits_file, urdf, measured, joint, value, bound, log_line = CASES[case]
    name = f"shield_{case}"
    params = [
        "autostart:=true",
        "estop_required:=false",
        "estop_wait_s:=0.0",
        "clip_tolerance:=0.05",
    ]
    if urdf is not None:
        latched = peer.publisher(String, "/rk_arm/robot_description", LATCHED_QOS)
        latched.publish(String(data=urdf.read_text()))
        params.append("robot_description_topic:=/rk_arm/robot_description")
    out = peer.record_commands()
    interventions = peer.record_interventions(name)
    states = peer.record_states(name)
    peer.publish_joint_states(joints, measured)
    proc = processes.python(
        name, SHIELD, *shield_args(name, *params, joints=joints, limits=limits_file)
    )
    wait_state(states, lambda s: s.state == "active", what=f"{name} active")
    wait_until(lambda: log_line in processes.log(proc), 10, f"{name} logs: {log_line}")

    commands = peer.publisher(Float64MultiArray, f"/{name}/commands")
    peer.wait_for_subscribers(commands)
    command = list(measured)
    command[joints.index(joint)] = value
    commands.publish(Float64MultiArray(data=command))

    wait_until(lambda: any(m.action == "refused" for _, m in interventions), 10, "a refusal")
    refusal = next(m for _, m in interventions if m.action == "refused")
    assert (refusal.guard, refusal.joint) == ("position", joint)
    assert refusal.value == pytest.approx(value) and refusal.limit == pytest.approx(bound)
    wait_until(lambda: out, 10, "a hold after the refusal")
    assert all(is_hold(m.data, measured) for _, m in out), [m.data for _, m in out]
    assert wait_state(states, lambda s: s.refused >= 1).passed == 0
