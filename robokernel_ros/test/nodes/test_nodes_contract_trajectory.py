"""A joint_trajectory controller behind a shield, live (issue #35), as real processes: the
SO-101's arm on a joint_trajectory controller (trajectory_msgs/JointTrajectory) and its
gripper on a forward_command controller, both served by sim_robot from one topic
contract, each behind a safety_shield of its own, one e-stop panel, the runner with
contract_file and a policy bound by joint name: both move (measured on /joint_states), and
while the e-stop is pressed no command that is not a hold reaches either controller."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.demo import NAMESPACE, SHIELDS, workcell_graph  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS, STATUS_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402
from robokernel_interfaces.srv import RunPolicy, StartPolicy  # noqa: E402

NS = NAMESPACE
ARM = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
ARM_TOPIC = "/arm_controller/joint_trajectory"
GRIPPER_TOPIC = "/gripper_controller/commands"
CONTRACT = f"""
fps: 50
align: header
state:
  topic: /joint_states
  type: sensor_msgs/msg/JointState
  field: position
  names: [{", ".join(ARM)}, gripper]
action:
  - topic: {ARM_TOPIC}
    type: trajectory_msgs/msg/JointTrajectory
    names: [{", ".join(ARM)}]
  - topic: {GRIPPER_TOPIC}
    type: std_msgs/msg/Float64MultiArray
    names: [gripper]
command:
  - name: arm
    topic: {ARM_TOPIC}
    kind: joint_trajectory
    joints: [{", ".join(ARM)}]
  - name: gripper
    topic: {GRIPPER_TOPIC}
    kind: forward_command
    joints: [gripper]
"""
TARGETS = [
    {"shoulder_pan": 0.5, "elbow_flex": 0.3, "gripper": 0.9},
    {"shoulder_pan": -0.2, "elbow_flex": 0.0, "gripper": 0.1},
]
#: how still the robot stands once held (rad over its last 0.2 s of joint states)
STILL = 0.005
#: how far the robot may settle from its hold (rad): the simulated position servos' error
#: under gravity (the shoulder_lift sags ~0.03 rad); the source's targets lie further
SETTLE = 0.05


def _files(tmp_path: Path) -> tuple[Path, Path]:
    contract = tmp_path / "contract_trajectory.yaml"
    contract.write_text(CONTRACT)
    config = {"targets": TARGETS, "tolerance": 0.06, "settle_steps": 2, "max_delta": 0.04,
              "max_accel": 0.008, "execution_horizon": 10}  # fmt: skip
    params = tmp_path / "policy.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    policy_config_json: '" + json.dumps(config) + "'\n"
    )
    return contract, params


@pytest.fixture
def trajectory_workcell(processes, tmp_path, ros):
    """make demo's graph with the arm's controller a joint_trajectory one: sim_robot and the
    runner read the contract above, the arm's shield forwards JointTrajectory."""
    contract, params = _files(tmp_path)
    graph = {n.name: n for n in workcell_graph(trace_dir=str(tmp_path / "runs"))}
    graph["sim_robot"].params["contract_file"] = str(contract)
    graph["runner"].params["contract_file"] = str(contract)
    graph["safety_shield"].params.update(
        controller="joint_trajectory", input_topic="~/joint_trajectory", output_topic=ARM_TOPIC
    )
    extra = {"policy_server": ["--params-file", str(params)]}
    procs = {
        name: processes.start(name, node.argv() + extra.get(name, []))
        for name, node in graph.items()
    }
    states = {name: ros.collect(ShieldState, f"{NS}/{name}/state", STATUS_QOS) for name in SHIELDS}
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    assert ros.wait_for(StartPolicy, f"{NS}/start_policy", 60), processes.log(procs["runner"])
    for name in ("policy_server", "runner"):
        wait_active(ros.node, f"{NS}/{name}", timeout_s=60)
    for name, received in states.items():
        assert ros.wait_until(lambda r=received: r and r[-1].state == "active", 30), (
            name,
            processes.log(procs[name]),
        )
    return procs, states, events


def _forwarded(state: ShieldState) -> int:
    return state.passed + state.clipped


def _positions(joints: list[JointState], name: str) -> list[float]:
    out = []
    for msg in joints:
        out += [v for n, v in zip(msg.name, msg.position, strict=False) if n == name]
    return out


def test_a_trajectory_arm_and_a_forward_gripper_move_through_their_shields(
    trajectory_workcell, ros, processes
) -> None:
    procs, states, _ = trajectory_workcell
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    arm_out = ros.collect(JointTrajectory, ARM_TOPIC, 1000)
    gripper_out = ros.collect(Float64MultiArray, GRIPPER_TOPIC, 1000)
    before = {name: _forwarded(s[-1]) for name, s in states.items()}
    reply = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=150, async_rtc=1), timeout_s=90)  # fmt: skip
    assert reply.ok, (reply.message, processes.log(procs["runner"]))
    assert ros.wait_until(
        lambda: all(_forwarded(s[-1]) - before[n] >= 100 for n, s in states.items()), 5
    ), {n: _forwarded(s[-1]) - before[n] for n, s in states.items()}
    # the arm's controller was sent trajectories over its five joints, through its shield
    assert arm_out and {tuple(m.joint_names) for m in arm_out} == {tuple(ARM)}
    assert max(m.points[-1].positions[0] for m in arm_out if m.points) > 0.4
    assert {len(m.data) for m in gripper_out} == {1}
    # the robot did it: the arm (trajectory) and the gripper (forward) reached the waypoints
    pan, gripper = _positions(list(joints), "shoulder_pan"), _positions(list(joints), "gripper")
    assert max(pan) > 0.4 and max(gripper) > 0.8, (max(pan), max(gripper))
    assert pan[-1] < 0.0 and gripper[-1] < 0.25, (pan[-5:], gripper[-5:])  # the second one


def test_a_pressed_estop_lets_only_holds_reach_the_trajectory_and_the_forward_controller(
    trajectory_workcell, ros, processes
) -> None:
    procs, states, events = trajectory_workcell
    started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=5000, async_rtc=1))  # fmt: skip
    assert started.ok, started.message
    assert ros.wait_until(lambda: all(_forwarded(s[-1]) > 10 for s in states.values()), 30), {
        n: (s[-1].state, _forwarded(s[-1])) for n, s in states.items()
    }
    assert ros.call(Trigger, f"{NS}/estop_panel/press", timeout_s=10).success
    ends = lambda: [json.loads(e.data_json) for e in list(events) if e.kind == "episode.end"]  # noqa: E731
    assert ros.wait_until(ends, 10)
    assert ends()[-1]["outcome"] == "estopped", ends()[-1]
    assert ros.wait_until(lambda: all(s[-1].estop_latched for s in states.values()), 5), {
        n: (s[-1].state, s[-1].reason) for n, s in states.items()
    }
    held = {name: _forwarded(s[-1]) for name, s in states.items()}
    # From here on (both latched) every command that reaches a controller must be a hold.
    # A source that keeps commanding both shields: the arm away, the gripper shut.
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    arm_out = ros.collect(JointTrajectory, ARM_TOPIC, 1000)
    gripper_out = ros.collect(Float64MultiArray, GRIPPER_TOPIC, 1000)
    ros.wait_matched(ARM_TOPIC)
    ros.wait_matched(GRIPPER_TOPIC)
    arm_in = ros.node.create_publisher(JointTrajectory, f"{NS}/safety_shield/joint_trajectory", COMMAND_QOS)  # fmt: skip
    gripper_in = ros.node.create_publisher(Float64MultiArray, f"{NS}/gripper_shield/commands", COMMAND_QOS)  # fmt: skip
    assert ros.wait_until(
        lambda: arm_in.get_subscription_count() and gripper_in.get_subscription_count(), 10
    )
    now = _positions(list(joints), "shoulder_pan") or [0.0]
    for i in range(50):
        trajectory = JointTrajectory(joint_names=ARM)
        point = JointTrajectoryPoint(positions=[now[-1] + 0.01 * (i + 1), 0.0, 0.0, 0.0, 0.0])
        point.time_from_start.nanosec = 20_000_000
        trajectory.points = [point]
        arm_in.publish(trajectory)
        gripper_in.publish(Float64MultiArray(data=[0.9]))
        time.sleep(0.02)  # the source's 50 Hz
    assert ros.wait_until(lambda: len(arm_out) >= 10 and len(gripper_out) >= 10, 5), (
        len(arm_out),
        len(gripper_out),
    )  # each refused command was answered by a hold
    # Every command either controller was sent is the one hold its shield took at the
    # latch: a one-point trajectory at rest (arm), one value (gripper), never a target of
    # the source's; and the robot settles there (it may still coast when the latch comes).
    holds = {tuple(m.points[0].positions) for m in list(arm_out)}
    assert len(holds) == 1, holds
    assert {len(m.points) for m in arm_out} == {1} and {tuple(m.joint_names) for m in arm_out} == {tuple(ARM)}  # fmt: skip
    assert {tuple(m.points[0].velocities) for m in arm_out} == {(0.0,) * len(ARM)}
    gripper_holds = {tuple(m.data) for m in list(gripper_out)}
    assert len(gripper_holds) == 1, gripper_holds
    hold = dict(zip(ARM, holds.pop(), strict=True))
    hold["gripper"] = gripper_holds.pop()[0]
    assert ros.wait_until(lambda: len(joints) > 100, 5)  # a second of joint states
    for name, value in hold.items():
        settled = _positions(list(joints)[-20:], name)
        assert max(settled) - min(settled) < STILL, (name, settled)
        assert abs(settled[-1] - value) < SETTLE, (name, settled[-1], value)
    # the source's last targets: the arm's pan 0.5 rad on from where it was, the gripper shut
    assert abs(hold["shoulder_pan"] - (now[-1] + 0.5)) > 0.3 and abs(hold["gripper"] - 0.9) > 0.5
    assert {name: _forwarded(s[-1]) for name, s in states.items()} == held, (
        "a command passed a latched shield"
    )
    # released and cleared, both forward again
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    deadline = time.monotonic() + 10
    while not (cleared := ros.call(Trigger, f"{NS}/clear_fault", timeout_s=15)).success:
        assert time.monotonic() < deadline, cleared.message
        time.sleep(0.1)
    again = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=40, async_rtc=1), timeout_s=60)  # fmt: skip
    assert again.ok, (again.message, processes.log(procs["safety_shield"]))
