"""The operator in the loop over ROS, as real processes (issue #40): sim_robot, the
safety_shield, the e-stop panel and the runner with a topic contract that names a teleop
source (a leader arm's JointState, published here at 50 Hz) and a std_msgs/Bool pedal.
The pedal takes over and the robot follows the leader through the shield, `resume` hands
back to the policy, and no command the shield clips or refuses at either seam; the e-stop
pressed during a correction ends the episode, the shield forwards only its hold and stays
latched; a runner without a teleop source refuses pause by name (service and
`robokernel ros pause`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.demo import config_dir  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import SENSOR_QOS, STATUS_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402

NS = "/robokernel"
SO101 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
CONTROLLER = "/forward_position_controller/commands"  # the shield's output (sim_robot's input)
LEADER = "/leader/joint_states"
PEDAL = "/pedal"
CONTRACT = f"""
fps: 50
state: {{topic: /joint_states, type: sensor_msgs/msg/JointState, names: [{", ".join(SO101)}]}}
action: {{topic: {CONTROLLER}, type: std_msgs/msg/Float64MultiArray, names: [{", ".join(SO101)}]}}
command: {{name: arm, topic: {CONTROLLER}, kind: forward_command, joints: [{", ".join(SO101)}]}}
teleop: {{topic: {LEADER}, type: sensor_msgs/msg/JointState, names: [{", ".join(SO101)}]}}
takeover: {{topic: {PEDAL}, type: std_msgs/msg/Bool}}
"""
#: where the leader stands (rad): away from the policy's, inside every joint's range
POSE = {"shoulder_pan": 0.35, "elbow_flex": 0.3}
LIMITS = str(config_dir() / "joint_limits_so101.yaml")
#: the node tests' slack for the panel's heartbeat on a loaded machine (the semantics hold)
SLACK = {"estop_timeout_s": "2.0"}
#: a gentle policy: 0.03 of each joint's half range, a 4 s period
MOCK = {"amplitude": 0.03, "period_steps": 200}


def _node(module: str, params_file: str, **params: str) -> list[str]:
    argv = [sys.executable, "-m", f"robokernel_ros.nodes.{module}", "--ros-args",
            "-r", f"__ns:={NS}", "--params-file", str(config_dir() / params_file)]  # fmt: skip
    for key, value in params.items():
        argv += ["-p", f"{key}:={value}"]
    return argv


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robokernel_ros.cli", "ros", *args],
                          capture_output=True, text=True, timeout=90)  # fmt: skip


class Leader:
    """The leader arm: a JointState of POSE (the other joints at 0) at 50 Hz from a thread
    of the test process, until stopped."""

    def __init__(self, ros: Any) -> None:
        self.pub = ros.spinner.run(
            lambda: ros.node.create_publisher(JointState, LEADER, SENSOR_QOS)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        msg = JointState(name=SO101, position=[POSE.get(j, 0.0) for j in SO101])
        while not self._stop.wait(0.02):
            self.pub.publish(msg)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def supervised(processes, ros, tmp_path):
    """sim_robot, safety_shield, estop_panel and the runner with the contract above."""
    contract = tmp_path / "contract_supervised.yaml"
    contract.write_text(CONTRACT)
    procs = {
        "sim_robot": processes.start(
            "sim_robot", _node("sim_robot", "workcell_sim_robot_so101.yaml")
        ),
        "safety_shield": processes.start(
            "safety_shield",
            _node("safety_shield", "shield_so101.yaml", limits_file=LIMITS, **SLACK),
        ),
        "estop_panel": processes.start("estop_panel", _node("estop_panel", "estop_panel.yaml")),
        "runner": processes.start(
            "runner",
            _node("runner", "runner_ros_so101.yaml", trace_dir=str(tmp_path / "runs"),
                  limits_file=LIMITS, contract_file=str(contract), **SLACK),
        ),
    }  # fmt: skip
    shield = ros.collect(ShieldState, f"{NS}/safety_shield/state", STATUS_QOS)
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    wait_active(ros.node, f"{NS}/runner", timeout_s=60)
    assert ros.wait_until(lambda: shield and shield[-1].state == "active", 60), (
        shield[-1:],
        processes.log(procs["safety_shield"])[-2000:],
    )
    leader = Leader(ros)
    try:
        yield procs, shield, events
    finally:
        leader.stop()


def _kinds(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [{**json.loads(e.data_json), "step": e.step} for e in list(events) if e.kind == kind]


def _steps(events: list[Any]) -> int:
    return max((e.step for e in list(events)), default=-1)


def _joint(joints: list[JointState], name: str) -> float | None:
    for msg in reversed(list(joints)):
        for n, v in zip(msg.name, msg.position, strict=False):
            if n == name:
                return float(v)
    return None


def test_pause_without_a_teleop_source_is_refused_by_name_by_the_service_and_the_command(
    sim_runner, ros
) -> None:
    proc, _ = sim_runner(NS)
    assert ros.wait_for(Trigger, f"{NS}/pause", 60)
    reply = ros.answered(Trigger, f"{NS}/pause", Trigger.Request(), timeout_s=30)
    assert not reply.success
    assert reply.message.startswith("pause refused: no teleop source is attached to the runner "
                                    f"{NS}/runner"), reply.message  # fmt: skip
    assert "teleop:" in reply.message, reply.message
    run = _cli("pause")
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stderr.startswith("robokernel ros: error: pause refused: no teleop source"), (
        run.stderr
    )
    assert run.stdout == ""
    bad = _cli("correct", "now")
    assert bad.returncode == 2 and "correct takes no arguments" in bad.stderr, bad.stderr
