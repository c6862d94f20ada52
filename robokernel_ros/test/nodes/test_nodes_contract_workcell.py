"""The live workcell reads a topic contract (issue #35), as real processes: an SO-101 whose
arm and gripper are two sim_robot controllers, driven by a policy that names both through
two shields, held by one e-stop; a contract with a wrench and a pose beside the joint
states, observed live and checked by `robokernel contract check --live`; a contract with a
mistake refused at configure, naming contract_file."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.demo import NAMESPACE, SHIELDS, workcell_graph  # noqa: E402
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import SENSOR_QOS, STATUS_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402
from robokernel_interfaces.srv import ListPoliciesRunning, RunPolicy, StartPolicy  # noqa: E402

NS = NAMESPACE
ARM = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]
#: the scripted policy's waypoints, by joint name: the arm and the gripper both move
TARGETS = [
    {"shoulder_pan": 0.5, "elbow_flex": 0.3, "gripper": 0.9},
    {"shoulder_pan": -0.2, "elbow_flex": 0.0, "gripper": 0.1},
]


def _policy_params(tmp_path: Path) -> Path:
    config = {"targets": TARGETS, "tolerance": 0.06, "settle_steps": 2, "max_delta": 0.04,
              "max_accel": 0.008, "execution_horizon": 10}  # fmt: skip
    path = tmp_path / "policy_arm_gripper.yaml"
    path.write_text(
        "/**:\n  ros__parameters:\n    policy_config_json: '" + json.dumps(config) + "'\n"
    )
    return path


@pytest.fixture(scope="module")
def _arm_and_gripper_graph(module_processes, shared_ros, tmp_path_factory):
    """The graph of `arm_and_gripper`, started once for the module's tests that use it."""
    tmp_path = tmp_path_factory.mktemp("arm_and_gripper")
    graph = workcell_graph(trace_dir=str(tmp_path / "runs"))
    extra = {"policy_server": ["--params-file", str(_policy_params(tmp_path))]}
    procs = {
        n.name: module_processes.start(n.name, n.argv() + extra.get(n.name, [])) for n in graph
    }
    assert shared_ros.wait_for(StartPolicy, f"{NS}/start_policy", 60), module_processes.log(
        procs["runner"]
    )
    return procs


@pytest.fixture
def arm_and_gripper(_arm_and_gripper_graph, module_processes, ros):
    """make demo's graph: sim_robot with the contract's two controllers, safety_shield
    (arm) and gripper_shield, one panel, the policy server (waypoints for both) and the
    runner (contract_file, shields): one graph for the module's tests, handed to each at
    rest (every process alive, the panel released, no fault latched, both shields active,
    no policy running); the shields' states and the runner's events collected from now."""
    procs, processes = _arm_and_gripper_graph, module_processes
    for name, proc in procs.items():
        assert proc.poll() is None, (name, processes.log(proc)[-2000:])
    states = {name: ros.collect(ShieldState, f"{NS}/{name}/state", STATUS_QOS) for name in SHIELDS}
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    for name in ("policy_server", "runner"):
        wait_active(ros.node, f"{NS}/{name}", timeout_s=60)
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    # refused while a release is younger than estop_timeout_s at the runner or a shield
    deadline = time.monotonic() + 30
    while not ros.call(Trigger, f"{NS}/clear_fault", timeout_s=15).success:
        assert time.monotonic() < deadline, "clear_fault refused for 30 s"
        time.sleep(0.1)
    for name, received in states.items():
        assert ros.wait_until(
            lambda r=received: r and r[-1].state == "active" and not r[-1].estop_latched, 30
        ), (name, processes.log(procs[name]))
    running = ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=10)
    assert list(running.robots) == [], "a policy still runs"
    ros.wait_matched(f"{NS}/events")  # the runner's events reach this test's collector
    return procs, states, events


def _forwarded(state: ShieldState) -> int:
    return state.passed + state.clipped


def test_a_policy_bound_by_name_drives_arm_and_gripper_through_two_shields(
    arm_and_gripper, ros, module_processes
) -> None:
    procs, states, events = arm_and_gripper
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    arm_out = ros.collect(Float64MultiArray, "/arm_controller/commands", 1000)
    gripper_out = ros.collect(Float64MultiArray, "/gripper_controller/commands", 1000)
    # The handshakes: the robot's joint states arrive here (a full run once collected none
    # until the 3 s episode was over), and the controller topics' readers have matched.
    assert ros.wait_until(lambda: joints, 20), "no /joint_states reached the test"
    ros.wait_matched("/arm_controller/commands")
    ros.wait_matched("/gripper_controller/commands")
    before = {name: _forwarded(s[-1]) for name, s in states.items()}
    reply = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=150, async_rtc=1), timeout_s=90)  # fmt: skip
    assert reply.ok, (reply.message, module_processes.log(procs["runner"]))
    # Each shield forwarded the episode's commands of its own controller, in its own size.
    assert ros.wait_until(
        lambda: all(_forwarded(s[-1]) - before[n] >= 100 for n, s in states.items()), 5
    ), {n: _forwarded(s[-1]) - before[n] for n, s in states.items()}
    assert {len(m.data) for m in arm_out} == {5} and {len(m.data) for m in gripper_out} == {1}
    # The robot did it: both the arm and the gripper moved to the waypoints (measured).
    seen = {name: [] for name in ("shoulder_pan", "elbow_flex", "gripper")}
    for msg in list(joints):
        for name, value in zip(msg.name, msg.position, strict=False):
            if name in seen:
                seen[name].append(value)
    assert max(seen["shoulder_pan"]) > 0.4 and max(seen["gripper"]) > 0.8, (
        max(seen["shoulder_pan"]),
        max(seen["gripper"]),
    )
    assert seen["gripper"][-1] < 0.25, seen["gripper"][-5:]  # the second waypoint
    assert max(m.data[0] for m in gripper_out) > 0.8  # through the gripper's shield
    # The runner's trace: one action names all six joints; the report is the env's.
    report = json.loads(reply.report_json)
    trace = load_trace(report["trace_path"])
    action = next(e for e in trace.events if e.kind == "action" and not e.data["hold"])
    assert sorted(action.data["action"]) == sorted([*ARM, "gripper"])


def test_one_estop_holds_both_shields_and_clear_fault_releases_both(arm_and_gripper, ros) -> None:
    procs, states, events = arm_and_gripper
    started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=5000, async_rtc=1))  # fmt: skip
    assert started.ok, started.message
    assert ros.wait_until(
        lambda: (
            any(e.kind == "action" for e in list(events))
            and all(_forwarded(s[-1]) > 10 for s in states.values())
        ),
        20,
    )
    assert ros.call(Trigger, f"{NS}/estop_panel/press", timeout_s=10).success
    ends = lambda: [json.loads(e.data_json) for e in list(events) if e.kind == "episode.end"]  # noqa: E731
    assert ros.wait_until(ends, 10)
    assert ends()[-1]["outcome"] == "estopped", ends()[-1]
    assert ros.wait_until(lambda: all(s[-1].estop_latched for s in states.values()), 5), {
        n: (s[-1].state, s[-1].reason) for n, s in states.items()
    }
    held = {name: _forwarded(s[-1]) for name, s in states.items()}
    time.sleep(1.5)
    assert {name: _forwarded(s[-1]) for name, s in states.items()} == held, (
        "a command passed a latched shield"
    )
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    deadline = time.monotonic() + 10
    while not (cleared := ros.call(Trigger, f"{NS}/clear_fault", timeout_s=15)).success:
        assert time.monotonic() < deadline, cleared.message
        time.sleep(0.1)
    # the runner's clear_fault cleared each shield of its contract
    for name in SHIELDS:
        assert f"/{name}/clear_fault" in cleared.message, cleared.message
    assert ros.wait_until(lambda: not any(s[-1].estop_latched for s in states.values()), 5)
    again = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=40, async_rtc=1), timeout_s=60)  # fmt: skip
    assert again.ok, again.message


WRENCH_POSE_CONTRACT = """
fps: 50
state:
  - topic: /joint_states
    type: sensor_msgs/msg/JointState
    names: [shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll, gripper]
  - topic: /ft/wrench
    type: geometry_msgs/msg/WrenchStamped
  - topic: /tcp_pose          # no type: the runner finds it on the graph
    field: position
action:
  topic: /forward_position_controller/commands
  type: std_msgs/msg/Float64MultiArray
  names: [shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll, gripper]
"""


def _publish_wrench_and_pose(ros, stop: threading.Event) -> None:
    from geometry_msgs.msg import PoseStamped, WrenchStamped

    wrench = ros.node.create_publisher(WrenchStamped, "/ft/wrench", 10)
    pose = ros.node.create_publisher(PoseStamped, "/tcp_pose", 10)
    w = WrenchStamped()
    w.wrench.force.x, w.wrench.torque.z = 1.5, -0.25
    p = PoseStamped()
    p.pose.position.x, p.pose.position.z = 0.1, 0.42
    while not stop.wait(0.02):
        w.header.stamp = p.header.stamp = ros.node.get_clock().now().to_msg()
        wrench.publish(w)
        pose.publish(p)


def test_a_contract_with_a_wrench_and_a_pose_is_observed_live(processes, tmp_path, ros) -> None:
    contract = tmp_path / "contract_ft.yaml"
    contract.write_text(WRENCH_POSE_CONTRACT)
    stop = threading.Event()
    publisher = threading.Thread(target=_publish_wrench_and_pose, args=(ros, stop), daemon=True)
    publisher.start()
    try:
        processes.python("sim_robot", "robokernel_ros.nodes.sim_robot", "--ros-args",
                         "-r", "__ns:=/rk_ft", "-p", "robot:=so101")  # fmt: skip
        runner = processes.python(
            "runner", "robokernel_ros.nodes.runner", "--ros-args", "-r", "__ns:=/rk_ft",
            "-p", "env:=ros", "-p", f"contract_file:={contract}", "-p", "shields:=['']",
            "-p", "estop_required:=false", "-p", f"trace_dir:={tmp_path / 'runs'}",
            "-p", "autostart:=true",
        )  # fmt: skip
        assert ros.wait_for(RunPolicy, "/rk_ft/run_policy", 60), processes.log(runner)
        wait_active(ros.node, "/rk_ft/runner", timeout_s=60)
        reply = ros.call(RunPolicy, "/rk_ft/run_policy", RunPolicy.Request(
            robot_name="arm", policy_provider="mock", n_steps=30), timeout_s=60)  # fmt: skip
        assert reply.ok, (reply.message, processes.log(runner))
        trace = load_trace(json.loads(reply.report_json)["trace_path"])
        observations = [e.data["obs"] for e in trace.events if e.kind == "observation"]
        assert len(observations) >= 30
        for obs in observations:  # every state source, by the contract's names
            assert obs["ft_wrench.force.x"] == pytest.approx(1.5)
            assert obs["ft_wrench.torque.z"] == pytest.approx(-0.25)
            assert obs["tcp_pose.position.z"] == pytest.approx(0.42)
            assert len(obs["joint_positions"]) == 6
        assert "tcp_pose.orientation.w" not in observations[0]  # field: position only
        # The same contract on the same graph, as `robokernel contract check --live` sees it.
        check = subprocess.run(
            [sys.executable, "-m", "robokernel_ros.cli", "contract", "check", str(contract),
             "--live", "--duration", "1.5"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        stop.set()
        publisher.join(timeout=5)
    assert check.returncode == 0, check.stdout + check.stderr
    rows = {line.split()[1]: line.split() for line in check.stdout.splitlines()[1:] if "/" in line}
    assert rows["/ft/wrench"][2] == "geometry_msgs/msg/WrenchStamped", check.stdout
    assert rows["/tcp_pose"][2] == "geometry_msgs/msg/PoseStamped", check.stdout
    assert rows["/joint_states"][2] == "sensor_msgs/msg/JointState", check.stdout
    rate = float(rows["/joint_states"][-3])  # msgs, rate_hz, first, last stamp
    assert 50 < rate < 150, check.stdout  # sim_robot's 100 Hz


def test_a_contract_with_a_mistake_is_refused_at_configure_naming_contract_file(
    processes, tmp_path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(WRENCH_POSE_CONTRACT.replace("type: geometry_msgs/msg/WrenchStamped",
                                                "type: geometry_msgs/msg/Wrench"))  # fmt: skip
    runner = processes.python(
        "runner_bad", "robokernel_ros.nodes.runner", "--ros-args", "-r", "__ns:=/rk_bad",
        "-p", "env:=ros", "-p", f"contract_file:={bad}", "-p", "autostart:=true",
        "-p", f"trace_dir:={tmp_path / 'runs'}",
    )  # fmt: skip
    robot = processes.python("sim_robot_bad", "robokernel_ros.nodes.sim_robot", "--ros-args",
                             "-r", "__ns:=/rk_bad", "-p", f"contract_file:={tmp_path / 'none.yaml'}")  # fmt: skip
    assert runner.wait(timeout=60) == 2, processes.log(runner)
    log = processes.log(runner)
    assert "contract_file" in log and "state[1].type" in log, log
    assert robot.wait(timeout=60) == 2, processes.log(robot)
    assert "contract_file" in processes.log(robot) and "cannot be read" in processes.log(robot)
    assert not (tmp_path / "runs").exists()  # nothing was started or written
