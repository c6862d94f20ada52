"""The ROS env's first episode waits for a robot that DDS discovers late: until the env
has taken its first joint state, reset waits up to discovery_timeout_s, not the
stream's state_timeout_s (a full run's control-loop test: the test process heard the
robot, the runner's reader had not been paired with it yet, the episode ended
env_error after 2 s). A robot that never reports is still refused, naming the topic.
Likewise reset waits (up to discovery_timeout_s, once) until its command publisher is
paired with a subscriber: commands are volatile, so a full run's episode commanded a
robot that had not heard it for 0.7 s, and the shield then clipped the first command
that arrived as a jump.

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
from std_msgs.msg import Float64MultiArray  # noqa: E402

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
    received: list = []

    def robot() -> None:
        stop.wait(LATE_S)
        robot = SpunNode("late_robot", spin=False)
        robot.node.create_subscription(Float64MultiArray, f"{NS}/commands", received.append, 10)
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


def test_the_first_reset_waits_for_its_commands_to_have_a_subscriber() -> None:
    """The robot reports from the start; the one that takes the commands (the shield,
    the controller) is paired LATE_S later: reset returns only then, and the first
    command the env publishes reaches it."""
    spun = SpunNode("env_consumer", spin=False)
    env = _env(spun.node, discovery_timeout_s=20.0)
    stop = threading.Event()
    received: list = []

    def robot() -> None:
        robot = SpunNode("reporting_robot", spin=False)
        pub = robot.node.create_publisher(JointState, f"{NS}/joint_states", SENSOR_QOS)
        consumer = None
        started = time.monotonic()
        while not stop.wait(0.02):
            if consumer is None and time.monotonic() - started >= LATE_S:
                consumer = SpunNode("late_consumer")
                consumer.node.create_subscription(
                    Float64MultiArray, f"{NS}/commands", received.append, 10
                )
            pub.publish(JointState(name=["j1"], position=[0.25], velocity=[0.0]))
        if consumer is not None:
            consumer.close()
        robot.close()

    thread = threading.Thread(target=robot, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        env.reset()
        waited = time.monotonic() - started
        env.step({"j1": 0.3})
        assert_received = time.monotonic() + 5
        while not received and time.monotonic() < assert_received:
            time.sleep(0.01)
    finally:
        stop.set()
        thread.join(timeout=5)
        env.close()
        spun.close()
    assert waited >= LATE_S, waited
    assert received and list(received[0].data) == [0.3], received


def test_commands_that_nobody_subscribes_to_are_refused_naming_the_topic() -> None:
    spun = SpunNode("env_no_consumer", spin=False)
    robot = SpunNode("robot_without_commands", spin=False)
    pub = robot.node.create_publisher(JointState, f"{NS}/joint_states", SENSOR_QOS)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(0.02):
            pub.publish(JointState(name=["j1"], position=[0.25]))

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    env = _env(spun.node, discovery_timeout_s=1.0)
    try:
        with pytest.raises(RuntimeError, match=f"no subscriber on {NS}/commands within 1 s"):
            env.reset()
    finally:
        stop.set()
        reporter.join(timeout=5)
        env.close()
        robot.close()
        spun.close()


def test_a_robot_that_does_not_follow_its_reset_is_refused_naming_the_command_topic() -> None:
    """A robot that reports but never moves (a shield holding every command, a controller
    not following): reset ends after reset_timeout_s, naming the error and where the
    commands went, so the shield's state is the next place to look."""
    spun = SpunNode("env_still", spin=False)
    env = RosRobotEnv(
        spun.node,
        joints=["j1"],
        command_topic=f"{NS}/still_commands",
        joint_states_topic=f"{NS}/still_joint_states",
        reset_positions={"j1": 0.5},
        reset_timeout_s=1.0,
    )
    stop = threading.Event()

    def robot() -> None:  # hears the commands, stays at 0.0
        still = SpunNode("still_robot", spin=False)
        still.node.create_subscription(Float64MultiArray, f"{NS}/still_commands", len, 10)
        pub = still.node.create_publisher(JointState, f"{NS}/still_joint_states", SENSOR_QOS)
        while not stop.wait(0.02):
            pub.publish(JointState(name=["j1"], position=[0.0], velocity=[0.0]))
        still.close()

    thread = threading.Thread(target=robot, daemon=True)
    thread.start()
    try:
        with pytest.raises(RuntimeError) as refused:
            env.reset()
    finally:
        stop.set()
        thread.join(timeout=5)
        env.close()
        spun.close()
    message = str(refused.value)
    assert "did not reach reset_positions within 1 s" in message, message
    assert "largest error 0.500" in message and f"{NS}/still_commands" in message, message
    assert "safety shield" in message, message
