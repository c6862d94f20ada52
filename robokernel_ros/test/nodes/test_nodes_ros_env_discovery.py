"""The ROS env's first episode waits for a robot that DDS discovers late: until the env
has taken its first joint state, reset waits up to discovery_timeout_s, not the
stream's state_timeout_s (a full run's control-loop test: the test process heard the
robot, the runner's reader had not been paired with it yet, the episode ended
env_error after 2 s). A robot that never reports is still refused, naming the topic.

Real DDS: the robot's joint states from a node of another context in this process."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from robokernel_ros.ros.qos import SENSOR_QOS  # noqa: E402
from robokernel_ros.ros.ros_env import RosRobotEnv  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from spun_node import SpunNode  # noqa: E402

NS = "/rk_env_discovery"
LATE_S = 2.0  # the robot starts this long after reset began: beyond state_timeout_s


def _env(node, discovery_timeout_s: float) -> RosRobotEnv:
    return RosRobotEnv(
        node,
        joints=["j1"],
        command_topic=f"{NS}/commands",
        joint_states_topic=f"{NS}/joint_states",
        state_timeout_s=0.5,
        discovery_timeout_s=discovery_timeout_s,
    )


def test_the_first_reset_waits_for_a_robot_that_starts_late() -> None:
    spun = SpunNode("env_discovery", spin=False)
    env = _env(spun.node, discovery_timeout_s=20.0)
    stop = threading.Event()

    def robot() -> None:
        stop.wait(LATE_S)
        robot = SpunNode("late_robot", spin=False)
        pub = robot.node.create_publisher(JointState, f"{NS}/joint_states", SENSOR_QOS)
        while not stop.wait(0.02):
            pub.publish(JointState(name=["j1"], position=[0.25], velocity=[0.0]))
        robot.close()

    thread = threading.Thread(target=robot, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        observation = env.reset()
        waited = time.monotonic() - started
    finally:
        stop.set()
        thread.join(timeout=5)
        env.close()
        spun.close()
    assert waited >= LATE_S, waited
    assert observation["joint_positions"]["j1"] == pytest.approx(0.25), observation


def test_a_robot_that_never_reports_is_refused_naming_the_topic() -> None:
    spun = SpunNode("env_no_robot", spin=False)
    env = _env(spun.node, discovery_timeout_s=1.0)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=f"no joint state .* on {NS}/joint_states"):
            env.reset()
    finally:
        env.close()
        spun.close()
    assert 0.9 <= time.monotonic() - started < 10.0
