"""sim_robot (MuJoCo SO-101) as a ros2_control stand-in: /joint_states at its control
rate, forward_command and joint_trajectory topics, and behind the safety shield a target
beyond a limit ends clipped at the limit."""

from __future__ import annotations

import time

from rclpy.qos import QoSProfile, ReliabilityPolicy
from robokernel_ros.ros.qos import SENSOR_QOS
from sensor_msgs.msg import JointState
from shield_harness import SHIELD, SO101_JOINTS, shield_args, wait_state, wait_until
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

SIM = "robokernel_ros.nodes.sim_robot"
START = [0.0, 0.0, 0.0, 0.0, 0.0, 0.5]


#: Reliable and deep enough for 3 s of 100 Hz states.
RATE_QOS = QoSProfile(depth=300, reliability=ReliabilityPolicy.RELIABLE)


def _stamp(msg: JointState) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _positions(states) -> list[float]:
    msg = states[-1][1]
    by_name = dict(zip(msg.name, msg.position, strict=True))
    return [by_name[j] for j in SO101_JOINTS]


def test_shield_sim_robot_topics(processes, peer):
    js = peer.record(JointState, "/joint_states", SENSOR_QOS)
    # The rate is the sim's, read from its own stamps on a reliable, deep subscription:
    # a stall of this test process (a garbage collection of its large heap) delays
    # delivery but drops nothing, so it cannot pass for a slow publisher.
    stamped = peer.record(JointState, "/joint_states", RATE_QOS)
    fc = peer.publisher(Float64MultiArray, "/forward_position_controller/commands")
    jt = peer.publisher(JointTrajectory, "/joint_trajectory_controller/joint_trajectory")
    processes.python(
        "sim",
        SIM,
        "--ros-args",
        "-p",
        "control_hz:=100.0",
        "-p",
        f"initial_positions:=[{','.join(map(str, START))}]",
    )
    wait_until(lambda: len(js) >= 10, 30, "joint states")
    assert sorted(js[-1][1].name) == sorted(SO101_JOINTS)
    assert all(abs(a - b) < 0.05 for a, b in zip(_positions(js), START, strict=True))
    n0 = len(stamped)
    wait_until(
        lambda: len(stamped) > n0 and _stamp(stamped[-1][1]) - _stamp(stamped[n0][1]) >= 1.0,
        10,
        "1 s of joint states",
    )
    window = [m for _, m in stamped[n0:]]
    rate = (len(window) - 1) / (_stamp(window[-1]) - _stamp(window[0]))
    assert 70 <= rate <= 115, f"/joint_states at {rate:.1f} Hz, expected about 100 Hz"

    peer.wait_for_subscribers(fc)
    cmd = Float64MultiArray()
    cmd.data = [0.4, 0.3, -0.3, 0.2, 0.1, 0.5]
    fc.publish(cmd)
    wait_until(
        lambda: all(abs(a - b) < 0.05 for a, b in zip(_positions(js), cmd.data, strict=True)),
        10,
        "reach forward target",
    )

    peer.wait_for_subscribers(jt)
    traj = JointTrajectory()
    traj.joint_names = list(reversed(SO101_JOINTS))  # any order
    goal = [0.0, 0.0, 0.0, 0.0, 0.0, 0.3]
    point = JointTrajectoryPoint()
    point.positions = list(reversed(goal))
    point.time_from_start.sec = 1
    traj.points = [point]
    n_sent = len(stamped)
    t_sent = time.monotonic()
    jt.publish(traj)
    wait_until(
        lambda: all(abs(a - b) < 0.05 for a, b in zip(_positions(js), goal, strict=True)),
        10,
        "reach trajectory goal",
    )
    assert time.monotonic() - t_sent > 0.8
    # Interpolated, not a jump: by the sim's own stamps, shoulder_pan spent at least 0.4 s
    # of the 1 s trajectory strictly between the start (0.4) and the goal (0.0).
    midway = [
        _stamp(m)
        for _, m in stamped[n_sent:]
        if 0.05 < dict(zip(m.name, m.position, strict=True))["shoulder_pan"] < 0.35
    ]
    assert midway and midway[-1] - midway[0] >= 0.4, f"{len(midway)} samples midway"


def test_shield_in_front_of_sim_robot(processes, peer):
    name = "shield_sim"
    js = peer.record(JointState, "/joint_states", SENSOR_QOS)
    states = peer.record_states(name)
    processes.python(
        "sim",
        SIM,
        "--ros-args",
        "-p",
        "control_hz:=100.0",
        "-p",
        f"initial_positions:=[{','.join(map(str, START))}]",
    )
    processes.python(
        name,
        SHIELD,
        *shield_args(name, "autostart:=true", "command_timeout_s:=5.0", "estop_required:=false"),
    )
    wait_state(states, lambda s: s.state == "active", timeout=30, what="shield active")
    pub = peer.publisher(Float64MultiArray, f"/{name}/commands")
    peer.wait_for_subscribers(pub)
    # shoulder_pan 2.0 is 0.08 beyond its 1.91986 limit (within 5 % of the range): clipped
    target = [2.0, 0.2, 0.0, 0.0, 0.0, 0.5]
    msg = Float64MultiArray()
    msg.data = target
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # a stream at 50 Hz, rate-limited by the shield
        pub.publish(msg)
        time.sleep(0.02)
    q = _positions(js)
    assert abs(q[0] - 1.91986) < 0.05 and abs(q[1] - 0.2) < 0.05, q
    st = wait_state(states, lambda s: s.clipped > 0)
    assert st.refused == 0
