"""A joystick and an actuated leader over ROS, as real processes (issue #40): sim_robot,
the safety_shield, the e-stop panel and the runner with a topic contract whose takeover
channel is a sensor_msgs/Joy (buttons pause 0, correct 4, resume 5) and whose teleop
source is an actuated leader (its JointState, and its command topic). The joystick's
correct button takes over: the runner first drives the leader to the follower's pose and
the robot holds until the leader is there, then follows the leader as the person moves
it; the pause button holds, the resume button hands back; the shield clips and refuses
nothing from before the takeover to the handback."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import SENSOR_QOS, STATUS_QOS  # noqa: E402
from robokernel_ros.ros.takeover import TAKEOVER_QOS  # noqa: E402
from sensor_msgs.msg import JointState, Joy  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from test_nodes_takeover import (  # noqa: E402
    CONTROLLER,
    LIMITS,
    MOCK,
    NS,
    SLACK,
    SO101,
    _idle,
    _joint,
    _kinds,
    _node,
    _steps,
)

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402
from robokernel_interfaces.srv import StartPolicy, StopPolicy  # noqa: E402

LEADER = "/leader/joint_states"
LEADER_COMMAND = "/leader/commands"
JOY = "/joy"
BUTTONS = {"pause": 0, "correct": 4, "resume": 5}
CONTRACT = f"""
fps: 50
state: {{topic: /joint_states, type: sensor_msgs/msg/JointState, names: [{", ".join(SO101)}]}}
action: {{topic: {CONTROLLER}, type: std_msgs/msg/Float64MultiArray, names: [{", ".join(SO101)}]}}
command: {{name: arm, topic: {CONTROLLER}, kind: forward_command, joints: [{", ".join(SO101)}]}}
teleop: {{topic: {LEADER}, type: sensor_msgs/msg/JointState, names: [{", ".join(SO101)}],
          command: {LEADER_COMMAND}}}
takeover: {{topic: {JOY}, type: sensor_msgs/msg/Joy,
            buttons: {{pause: 0, correct: 4, resume: 5}}}}
"""
#: where the actuated leader starts: far from the follower (a jump if the robot went there)
START = {"shoulder_pan": -0.6, "elbow_flex": 0.5}


class ActuatedLeader:
    """A leader arm with motors: it moves 0.02 rad per 20 ms toward the last command on
    LEADER_COMMAND (or where a person's hand puts its target) and publishes its JointState."""

    def __init__(self, ros: Any) -> None:
        self.pose = {j: START.get(j, 0.0) for j in SO101}
        self.target: dict[str, float] | None = None
        self.commands: list[list[float]] = []
        ros.spinner.run(lambda: ros.node.create_subscription(
            Float64MultiArray, LEADER_COMMAND, self._on_command, 10))  # fmt: skip
        self.pub = ros.spinner.run(
            lambda: ros.node.create_publisher(JointState, LEADER, SENSOR_QOS)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)
        self._thread.start()

    def _on_command(self, msg: Float64MultiArray) -> None:
        self.commands.append(list(msg.data))
        self.target = dict(zip(SO101, msg.data, strict=True))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            target = self.target
            if target is not None:
                for j in SO101:
                    self.pose[j] += max(-0.02, min(0.02, target[j] - self.pose[j]))
            self.pub.publish(JointState(name=SO101, position=[self.pose[j] for j in SO101]))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def graph(module_processes, shared_domain, shared_ros, tmp_path_factory):
    folder = tmp_path_factory.mktemp("joystick")
    contract = folder / "contract_joystick.yaml"
    contract.write_text(CONTRACT)
    start = module_processes.start
    procs = {
        "sim_robot": start("sim_robot", _node("sim_robot", "workcell_sim_robot_so101.yaml")),
        "safety_shield": start(
            "safety_shield",
            _node("safety_shield", "shield_so101.yaml", limits_file=LIMITS, **SLACK),
        ),
        "estop_panel": start("estop_panel", _node("estop_panel", "estop_panel.yaml")),
        "runner": start(
            "runner",
            _node("runner", "runner_ros_so101.yaml", trace_dir=str(folder / "runs"),
                  limits_file=LIMITS, contract_file=str(contract), **SLACK),
        ),
    }  # fmt: skip
    ros = shared_ros
    shield = ros.collect(ShieldState, f"{NS}/safety_shield/state", STATUS_QOS)
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    wait_active(ros.node, f"{NS}/runner", timeout_s=60)
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    deadline = time.monotonic() + 30  # refused until the panel's release reaches the runner
    while not (
        cleared := ros.answered(Trigger, f"{NS}/clear_fault", Trigger.Request(), 30)
    ).success:
        assert time.monotonic() < deadline, cleared.message
        ros.wait_until(lambda: False, 0.2)
    assert ros.wait_until(lambda: shield and shield[-1].state == "active", 60), shield[-1:]
    return {"procs": procs, "shield": shield, "events": events}


def test_the_joystick_takes_over_an_actuated_leader_driven_to_the_follower_first(
    graph, shared_ros, module_processes
) -> None:
    ros, procs, shield, events = shared_ros, graph["procs"], graph["shield"], graph["events"]
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    joy = ros.spinner.run(lambda: ros.node.create_publisher(Joy, JOY, TAKEOVER_QOS))
    leader = ActuatedLeader(ros)
    held = [0] * 6

    def press(verb: str) -> None:  # a press: the button down after a message with it up
        index = BUTTONS[verb]
        joy.publish(Joy(buttons=held))
        joy.publish(Joy(buttons=[int(i == index) for i in range(6)]))
        joy.publish(Joy(buttons=held))

    try:
        started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
            robot_name="arm", policy_provider="mock", n_steps=6000,
            policy_config_json=json.dumps(MOCK)), timeout_s=60)  # fmt: skip
        assert started.ok, (started.message, module_processes.log(procs["runner"])[-3000:])
        assert ros.wait_until(lambda: _steps(events) > 30, 60)
        assert ros.wait_until(lambda: joy.get_subscription_count() >= 1, 20)
        assert ros.wait_until(lambda: ros.node.count_subscribers(LEADER) >= 1, 20)
        before = shield[-1]

        # correct: the runner drives the leader to the follower's pose; the robot holds
        press("correct")
        assert ros.wait_until(lambda: _kinds(events, "intervention.start"), 10), (
            module_processes.log(procs["runner"])[-3000:]
        )
        (start,) = _kinds(events, "intervention.start")
        assert start["mode"] == "correcting" and start["by"] == f"joystick {JOY} button 4"
        assert ros.wait_until(lambda: leader.commands, 10)
        follower = dict(zip(SO101, leader.commands[0], strict=True))
        assert abs(follower["shoulder_pan"] - START["shoulder_pan"]) > 0.4, follower
        # the leader arrives (0.6 rad at 1 rad/s), then it drives: the human's actions
        assert ros.wait_until(
            lambda: any(
                e.get("human_action") for e in _kinds(events, "action") if e.get("intervention")
            ),
            20,
        )
        # every command to the leader was the held follower's pose
        assert all(
            abs(c[i] - leader.commands[0][i]) < 0.02 for c in leader.commands for i in range(6)
        ), leader.commands[-1]
        # a person moves the leader: the robot follows it
        goal = {**follower, "shoulder_pan": follower["shoulder_pan"] + 0.3}
        leader.target = goal
        assert ros.wait_until(
            lambda: abs((_joint(joints, "shoulder_pan") or 0.0) - goal["shoulder_pan"]) < 0.06,
            20,
        ), _joint(joints, "shoulder_pan")
        corrected = [e for e in _kinds(events, "action") if e.get("mode") == "correcting"]
        waiting = [e for e in corrected if not e.get("human_action")]
        driving = [e for e in corrected if e.get("human_action")]
        assert waiting and driving and waiting[0]["step"] < driving[0]["step"]
        # while the leader went to the follower the robot held: never toward START
        assert all(
            abs(e["action"]["shoulder_pan"] - follower["shoulder_pan"]) < 0.05
            for e in corrected
            if e["step"] < driving[0]["step"]
        ), waiting[-1]
        # the human's first command was the follower's pose (within the alignment's 0.05)
        # as the runner judged it at that step: the last command it sent the leader (it
        # commands the follower's pose of each step until the leader is there; the held
        # robot still settles, within the 0.02 above, after its takeover)
        first, aligned_to = (
            driving[0]["human_action"],
            dict(zip(SO101, leader.commands[-1], strict=True)),
        )
        assert all(abs(first[j] - aligned_to[j]) <= 0.05 for j in SO101), (first, aligned_to)

        # pause holds; resume hands back
        press("pause")
        assert ros.wait_until(lambda: _kinds(events, "intervention.mode"), 10)
        assert _kinds(events, "intervention.mode")[-1]["mode"] == "paused"
        assert _kinds(events, "intervention.mode")[-1]["by"] == f"joystick {JOY} button 0"
        press("resume")
        assert ros.wait_until(lambda: _kinds(events, "intervention.end"), 10)
        (end,) = _kinds(events, "intervention.end")
        assert end["by"] == f"joystick {JOY} button 5", end
        steps = _steps(events)
        assert ros.wait_until(lambda: _steps(events) > steps + 50, 20)  # the policy drives
        assert ros.wait_until(lambda: shield[-1].passed > before.passed + 100, 10)
        after = shield[-1]
        assert (after.clipped, after.refused) == (before.clipped, before.refused), (before, after)
    finally:
        ros.call(StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name="arm"))
        leader.stop()
    assert ros.wait_until(lambda: _kinds(events, "episode.end"), 30)
    assert ros.wait_until(lambda: _idle(ros), 30)
