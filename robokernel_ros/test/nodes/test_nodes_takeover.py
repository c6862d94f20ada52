"""The operator in the loop over ROS, as real processes (issue #40): sim_robot, the
safety_shield, the e-stop panel and the runner with a topic contract that names a teleop
source (a leader arm's JointState) and a std_msgs/Bool pedal. With the leader published
here, the pedal takes over and hands back, and the shield clips and refuses nothing from
just before the takeover to 3 s after the handback; pause then correct by the services,
and the e-stop pressed during that correction ends the episode, the shield forwards at
most its one hold and stays latched. The sim_operator node plays the leader and the
pedal from the scripted expert: it takes over when a policy leaves the expert's tube and
hands back, with nothing clipped from its first takeover on. A runner without a teleop
source refuses pause by name (service and `robokernel ros pause`)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.demo import config_dir  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import EVENT_QOS, SENSOR_QOS, STATUS_QOS  # noqa: E402
from robokernel_ros.ros.takeover import TAKEOVER_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Bool, Float64MultiArray  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldIntervention, ShieldState  # noqa: E402
from robokernel_interfaces.srv import ListPoliciesRunning, StartPolicy, StopPolicy  # noqa: E402

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

    def __init__(self, ros: Any, pose: dict[str, float] = POSE) -> None:
        self.pose = pose
        self.pub = ros.spinner.run(
            lambda: ros.node.create_publisher(JointState, LEADER, SENSOR_QOS)
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        msg = JointState(name=SO101, position=[self.pose.get(j, 0.0) for j in SO101])
        while not self._stop.wait(0.02):
            self.pub.publish(msg)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class Since:
    """The messages a shared collector got since `mark()` (a test's own)."""

    def __init__(self, received: list[Any]) -> None:
        self.received = received
        self.start = len(received)

    def mark(self) -> None:
        self.start = len(self.received)

    def __iter__(self) -> Any:
        return iter(list(self.received)[self.start :])

    def __len__(self) -> int:
        return max(0, len(self.received) - self.start)


@pytest.fixture(scope="module")
def graph(module_processes, shared_domain, shared_ros, tmp_path_factory):
    """sim_robot, safety_shield, estop_panel and the runner with the contract above,
    shared by the module's tests on its `shared_domain` (`supervised` resets it)."""
    folder = tmp_path_factory.mktemp("takeover")
    contract = folder / "contract_supervised.yaml"
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
    return {"procs": procs, "shield": shield, "events": events, "contract": contract}


@pytest.fixture
def supervised(graph, shared_ros, module_processes):
    """The shared graph at rest: every process alive, the e-stop released and cleared, the
    shield forwarding, no policy running. (procs, shield states, this test's events)."""
    ros, procs, shield = shared_ros, graph["procs"], graph["shield"]
    for name, proc in procs.items():
        assert proc.poll() is None, (name, module_processes.log(proc)[-2000:])
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    deadline = time.monotonic() + 30  # refused until the panel's release reaches the runner
    while not (
        cleared := ros.answered(Trigger, f"{NS}/clear_fault", Trigger.Request(), 30)
    ).success:
        assert time.monotonic() < deadline, cleared.message
        ros.wait_until(lambda: False, 0.2)
    assert ros.wait_until(lambda: shield and shield[-1].state == "active", 60), (
        shield[-1:],
        module_processes.log(procs["safety_shield"])[-2000:],
    )
    assert ros.wait_until(lambda: _idle(ros), 30)
    return procs, shield, Since(graph["events"])


def _kinds(events: list[Any], kind: str) -> list[dict[str, Any]]:
    return [{**json.loads(e.data_json), "step": e.step} for e in list(events) if e.kind == kind]


def _steps(events: list[Any]) -> int:
    return max((e.step for e in list(events)), default=-1)


def _idle(ros: Any) -> bool:
    """No rollout runs on the runner (an ended episode's rollout has closed its trace)."""
    reply = ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=10)
    return json.loads(reply.report_json or "{}").get("count") == 0


def _joint(joints: list[JointState], name: str) -> float | None:
    for msg in reversed(list(joints)):
        for n, v in zip(msg.name, msg.position, strict=False):
            if n == name:
                return float(v)
    return None


def test_the_pedal_takes_over_resume_hands_back_and_the_shield_clips_nothing_at_either_seam(
    supervised, shared_ros, module_processes
) -> None:
    procs, shield, events = supervised
    leader = Leader(shared_ros)
    try:
        _pedal_service_and_estop(procs, shield, events, shared_ros, module_processes)
    finally:
        leader.stop()


def _pedal_service_and_estop(procs, shield, events, ros, processes) -> None:
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    pedal = ros.spinner.run(lambda: ros.node.create_publisher(Bool, PEDAL, TAKEOVER_QOS))
    started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
        robot_name="arm", policy_provider="mock", n_steps=6000,
        policy_config_json=json.dumps(MOCK)), timeout_s=60)  # fmt: skip
    assert started.ok, (started.message, processes.log(procs["runner"])[-3000:])
    # the episode runs (past its reset), and the pedal's reader is matched: a handshake
    assert ros.wait_until(lambda: _steps(events) > 30, 60), processes.log(procs["runner"])[-3000:]
    assert ros.wait_until(lambda: pedal.get_subscription_count() >= 1, 20)
    before = shield[-1]

    # takeover by the pedal: the robot follows the leader through the shield (released
    # first: the runner acts on the pedal's changes, and an earlier test may have left it down)
    pedal.publish(Bool(data=False))
    pedal.publish(Bool(data=True))
    assert ros.wait_until(lambda: _kinds(events, "intervention.start"), 10), processes.log(
        procs["runner"]
    )[-3000:]
    (start,) = _kinds(events, "intervention.start")
    assert start["mode"] == "correcting" and "pedal" in start["by"], start
    reached = lambda: all(  # noqa: E731
        abs((_joint(joints, j) or 0.0) - POSE.get(j, 0.0)) < 0.06
        for j in ("shoulder_pan", "elbow_flex")
    )
    assert ros.wait_until(reached, 20), {j: _joint(joints, j) for j in SO101}
    # the human's commands went through the shield (its ~/state comes every 0.5 s)
    assert ros.wait_until(lambda: shield[-1].passed > before.passed + 50, 10), shield[-1]
    took = shield[-1]
    assert (took.clipped, took.refused) == (before.clipped, before.refused), (before, took)

    # handback by the pedal: the policy drives again, nothing clipped on the way
    pedal.publish(Bool(data=False))
    assert ros.wait_until(lambda: _kinds(events, "intervention.end"), 10)
    (end,) = _kinds(events, "intervention.end")
    assert "pedal" in end["by"], end
    assert ros.wait_until(lambda: _steps(events) > end["step"] + 150, 20)  # 3 s of the policy
    assert ros.wait_until(lambda: shield[-1].passed > took.passed + 150, 10), shield[-1]
    back = shield[-1]
    assert (back.clipped, back.refused) == (before.clipped, before.refused), (before, back)
    assert abs(_joint(joints, "shoulder_pan")) < 0.2, _joint(joints, "shoulder_pan")  # the policy's
    # who drove is in every action event: the human's command beside the policy's shadow
    flagged = [e for e in _kinds(events, "action") if e.get("intervention")]
    assert flagged and all("human_action" in e and "policy_action" in e for e in flagged), flagged[
        :1
    ]

    # pause, then correct, by the services; the e-stop during that correction ends the
    # episode estopped, the shield latches and forwards nothing but its hold
    assert ros.call(Trigger, f"{NS}/pause", timeout_s=10).success
    assert ros.wait_until(lambda: len(_kinds(events, "intervention.start")) == 2, 10)
    assert _kinds(events, "intervention.start")[-1]["mode"] == "paused"
    assert ros.call(Trigger, f"{NS}/correct", timeout_s=10).success
    assert ros.wait_until(lambda: _kinds(events, "intervention.mode"), 10)
    assert _kinds(events, "intervention.mode")[-1]["mode"] == "correcting"
    assert ros.wait_until(lambda: shield[-1].passed > back.passed + 25, 10)
    out = ros.collect(Float64MultiArray, CONTROLLER, 1000)
    ros.wait_matched(CONTROLLER)
    assert ros.call(Trigger, f"{NS}/estop_panel/press", timeout_s=10).success
    assert ros.wait_until(lambda: _kinds(events, "episode.end"), 10)
    (episode_end,) = _kinds(events, "episode.end")
    assert episode_end["outcome"] == "estopped", episode_end
    assert episode_end["takeover"]["interventions"] == 2, episode_end["takeover"]
    assert ros.wait_until(lambda: shield[-1].estop_latched, 5), shield[-1:]
    latched, seen, latched_at = shield[-1], len(joints), len(out)
    # a second of the latch (the robot's 100 Hz joint states): the leader still publishes
    assert ros.wait_until(lambda: len(joints) > seen + 100 and len(shield) > 2, 10)
    held = {tuple(m.data) for m in list(out)[latched_at:]}
    assert len(held) <= 1, held  # the shield's one hold (or nothing), never a leader's target
    now = shield[-1]
    assert now.estop_latched and now.state != "active" and now.passed == latched.passed, now
    refused = ros.call(Trigger, f"{NS}/correct", timeout_s=10)
    assert not refused.success and "no episode is running" in refused.message, refused.message
    again = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
        robot_name="arm", policy_provider="mock", n_steps=100), timeout_s=30)  # fmt: skip
    assert not again.ok and "latched" in again.message, again.message


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


EXPERT = [{"shoulder_pan": 0.5, "elbow_flex": 0.4}, {"shoulder_pan": -0.2, "elbow_flex": 0.1}]
WRONG = [{"shoulder_pan": -0.5, "elbow_flex": 0.4}]  # the policy heads the other way
SPEED = {"max_delta": 0.02, "max_accel": 0.004}  # 1 rad/s, 10 rad/s^2 at 50 Hz


def test_the_sim_operator_node_takes_over_when_the_policy_leaves_the_tube_and_hands_back(
    supervised, graph, shared_ros, processes
) -> None:
    procs, shield, events = supervised
    ros, contract = shared_ros, graph["contract"]
    expert = json.dumps({"targets": EXPERT, "tolerance": 0.03, **SPEED})
    operator = processes.start("sim_operator", [
        sys.executable, "-m", "robokernel_ros.nodes.sim_operator", "--ros-args", "-r", f"__ns:={NS}",
        "-p", f"contract_file:={contract}", "-p", f"expert_config_json:='{expert}'",
        "-p", "radius:=0.15", "-p", "back_steps:=10"])  # fmt: skip
    leader = ros.collect(JointState, LEADER, SENSOR_QOS)
    # The handshake: a short episode until the operator plays the leader in it (it heard
    # the runner's events and the robot's joints) and its pedal matched the runner's reader.
    policy = json.dumps({"targets": WRONG, "tolerance": 0.03, **SPEED})
    assert ros.wait_until(lambda: ros.node.count_publishers(PEDAL) >= 1, 30), processes.log(
        operator
    )
    for _ in range(5):  # a few tries: discovery takes seconds on a loaded machine
        if leader:
            break
        warm = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
            robot_name="arm", policy_provider="scripted", n_steps=10, policy_config_json=policy),
            timeout_s=60)  # fmt: skip
        assert warm.ok, warm.message
        assert ros.wait_until(lambda: _kinds(events, "episode.end"), 60)
        ros.wait_until(lambda: leader, 2)
        assert ros.wait_until(lambda: _idle(ros), 30)
        events.mark()
    assert leader, processes.log(operator)[-2000:]
    # what the shield did with each command, and the takeovers, in the order they arrive
    arrivals: list[tuple[float, str, Any]] = []
    for msg_type, topic, qos in ((ShieldIntervention, f"{NS}/safety_shield/interventions", EVENT_QOS),
                                 (KernelEvent, f"{NS}/events", EVENTS_QOS)):  # fmt: skip
        ros.spinner.run(lambda t=msg_type, n=topic, q=qos: ros.node.create_subscription(
            t, n, lambda m, n=n: arrivals.append((time.monotonic(), n, m)), q))  # fmt: skip
    ros.wait_matched(f"{NS}/events")
    # An episode long enough for a loaded machine (60 s), stopped once the operator has
    # handed back by its rule (an intervention ended by the pedal): the test waits for
    # the behaviour, not for a step count that a slow machine may not fit it in.
    started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
        robot_name="arm", policy_provider="scripted", n_steps=3000, policy_config_json=policy),
        timeout_s=60)  # fmt: skip
    assert started.ok, started.message

    def handed_back() -> bool:
        return any(e["by"] == f"pedal {PEDAL}" for e in _kinds(events, "intervention.end"))

    ros.wait_until(lambda: handed_back() or _kinds(events, "episode.end"), 70)
    if not _kinds(events, "episode.end"):
        ros.call(StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name="arm"))
    assert ros.wait_until(lambda: _kinds(events, "episode.end"), 30), (
        processes.log(procs["runner"])[-3000:] + processes.log(operator)[-2000:]
    )
    (end,) = _kinds(events, "episode.end")
    starts, ends = _kinds(events, "intervention.start"), _kinds(events, "intervention.end")
    assert starts, (end, processes.log(operator)[-2000:])
    assert all(s["mode"] == "correcting" and s["by"] == f"pedal {PEDAL}" for s in starts), starts
    # it handed back by the rule at least once (an end by the pedal, not the episode's end)
    assert handed_back(), [(e.get("by"), e.get("start_step"), e.get("step")) for e in ends]
    assert end["outcome"] == "stopped" and end["steps"] < 3000, end  # stopped by the test
    # while it corrected, the robot was commanded the expert's leader (the human's action)
    corrected = [e for e in _kinds(events, "action") if e.get("mode") == "correcting"]
    humans = [e["human_action"] for e in corrected if e.get("human_action")]
    assert humans and max(h["shoulder_pan"] for h in humans) > 0.3, humans[-1:]
    assert leader and set(leader[-1].name) == set(SO101)
    # Through the shield: from the first takeover to the episode's end, nothing clipped
    # or refused (the episode's first command may be, whoever drives: not a seam).
    first = min(
        t for t, n, m in arrivals if n.endswith("events") and m.kind == "intervention.start"
    )
    seams = [m for t, n, m in arrivals if n.endswith("interventions") and t >= first - 0.01]
    assert not [(m.guard, m.joint, m.action, m.detail) for m in seams if m.action != "held"], seams


def test_an_actuated_leader_is_driven_to_the_followers_pose_before_it_drives(ros) -> None:
    """ros.teleop.RosTeleopSource with `teleop.command`: at a takeover the source commands
    the leader to the follower's pose and answers None (the robot holds) until the leader
    reports it; then the leader's pose; a silent leader is stale (None) after stale_s."""
    from robokernel_ros.contract import parse_contract
    from robokernel_ros.ros.teleop import RosTeleopSource

    contract = parse_contract(
        {"fps": 50, "state": {"topic": "/joint_states", "type": "sensor_msgs/msg/JointState",
                              "names": SO101},
         "action": {"topic": CONTROLLER, "type": "std_msgs/msg/Float64MultiArray", "names": SO101},
         "teleop": {"topic": LEADER, "type": "sensor_msgs/msg/JointState", "names": SO101,
                    "command": "/leader/commands"}},
    )  # fmt: skip
    source = ros.spinner.run(lambda: RosTeleopSource(ros.node, contract.teleop))
    # The actuated leader: starts at POSE, moves 0.02 rad per 20 ms toward its command.
    state = {"pose": {j: POSE.get(j, 0.0) for j in SO101}, "target": None, "commands": []}

    def on_command(msg: Float64MultiArray) -> None:
        state["commands"].append(list(msg.data))
        state["target"] = dict(zip(SO101, msg.data, strict=True))

    ros.spinner.run(lambda: ros.node.create_subscription(
        Float64MultiArray, "/leader/commands", on_command, 10))  # fmt: skip
    pub = ros.spinner.run(lambda: ros.node.create_publisher(JointState, LEADER, SENSOR_QOS))
    stop = threading.Event()

    def leader() -> None:
        while not stop.wait(0.02):
            target = state["target"]
            if target is not None:
                for j in SO101:
                    d = target[j] - state["pose"][j]
                    state["pose"][j] += max(-0.02, min(0.02, d))
            pub.publish(JointState(name=SO101, position=[state["pose"][j] for j in SO101]))

    thread = threading.Thread(target=leader, name="actuated_leader", daemon=True)
    thread.start()
    follower = {j: 0.0 for j in SO101}
    follower["wrist_flex"] = -0.2
    observation = {"joint_positions": follower}
    try:
        assert ros.wait_until(lambda: source.publisher_count() >= 1, 20)
        answers, step = [], 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the loop's 50 Hz correcting steps
            source.observe(step, observation)
            answers.append(source.teleop_action(observation))
            step += 1
            if answers[-1] is not None:
                break
            time.sleep(0.02)
        assert answers[0] is None and answers[-1] is not None, answers[-3:]
        assert all(abs(answers[-1][j] - follower[j]) <= 0.05 for j in SO101), answers[-1]
        assert state["commands"] and state["commands"][-1] == [follower[j] for j in SO101]
        assert (source.alignments, source.aligned) == (1, 1)
        # the steps after: the leader's pose, no realignment
        source.observe(step, observation)
        assert source.teleop_action(observation) is not None and source.alignments == 1
        stop.set()
        thread.join(timeout=5)
        silent_since, last = time.monotonic(), answers[-1]
        while last is not None and time.monotonic() - silent_since < 5.0:
            step += 1
            source.observe(step, observation)
            last = source.teleop_action(observation)
            time.sleep(0.02)
        # stale once its newest message is older than stale_s (0.25 s): the loop holds
        assert last is None and source.alignments == 1
        assert (
            time.monotonic() - silent_since > 0.2
        )  # not before (its last message: <= 20 ms before)
    finally:
        stop.set()
        thread.join(timeout=5)
        ros.spinner.run(source.close)


def test_a_takeover_accepted_during_the_reset_sends_every_command_through_the_shield_unchanged(
    supervised, shared_ros, module_processes
) -> None:
    """A correct() accepted before the episode's first command (while the runner resets
    the robot) starts the handover limiter at the reset's last command: every command of
    the episode, from its first, leaves the shield as the runner sent it. The reset
    itself, after the shield's watchdog held an idle robot at its measured (sagging)
    pose, may be clipped: that is the reset's seam, not the takeover's (docs/operator_ros.md)."""
    procs, shield, events = supervised
    ros = shared_ros
    out = ros.collect(Float64MultiArray, CONTROLLER, 1000)  # what the shield forwarded
    ros.wait_matched(CONTROLLER)
    far = {"shoulder_pan": 1.2, "elbow_flex": 1.0}  # the reset back takes about a second
    leader = Leader(ros, far)
    stop = threading.Event()

    def press() -> None:  # the operator's correct, from before the episode until it is taken
        while not stop.is_set():
            if ros.call(Trigger, f"{NS}/correct", timeout_s=10).success:
                return
            time.sleep(0.005)

    try:
        rounds: list[int] = []  # the step each round's takeover was taken at
        while len(rounds) < 6 and rounds.count(0) < 2:
            events.mark()
            timeouts = shield[-1].timeouts
            presser = threading.Thread(target=press, daemon=True)
            presser.start()
            started = ros.call(StartPolicy, f"{NS}/start_policy", StartPolicy.Request(
                robot_name="arm", policy_provider="mock", n_steps=200,
                policy_config_json=json.dumps(MOCK)), timeout_s=60)  # fmt: skip
            assert started.ok, started.message
            presser.join(30)
            assert ros.wait_until(lambda: _kinds(events, "episode.end"), 60)
            assert ros.wait_until(lambda: _idle(ros), 30)
            (start,) = _kinds(events, "intervention.start")
            rounds.append(start["step"])
            actions = _kinds(events, "action")
            assert [a["step"] for a in actions] == list(range(200)), actions[-1:]
            assert all(a.get("mode") == "correcting" for a in actions if a["step"] >= start["step"])
            # every command the runner sent from the takeover on (from step 0 in a round
            # whose takeover came during the reset) left the shield unchanged; a round
            # whose correct came later has policy steps first, and the policy's first
            # commands after a reset may be clipped: not the takeover's seam
            assert ros.wait_until(lambda: len(out) > 0, 5)
            forwarded = {tuple(m.data) for m in list(out)}
            changed = [a["step"] for a in actions if a["step"] >= start["step"]
                       and tuple(a["action"][j] for j in SO101) not in forwarded]  # fmt: skip
            assert not changed, (start, changed[:10], actions[changed[0]]["action"])
            reached = actions[-1]["action"]  # the leader's pose, reached within the limits
            assert all(abs(reached[j] - far[j]) < 1e-6 for j in far), reached
            # the robot idles at the leader's pose until the shield's watchdog holds it:
            # the next reset has a way to go, from the shield's hold
            assert ros.wait_until(lambda t=timeouts: shield[-1].timeouts > t, 10), shield[-1]
        assert rounds.count(0) >= 1, rounds  # a takeover at step 0 was tested
    finally:
        stop.set()
        leader.stop()


def test_a_sentry_run_over_ros_rotates_episodes_without_losing_a_step(
    supervised, graph, shared_ros, module_processes
) -> None:
    """RunPolicy's sentry_rotate_s on the runner driving the robot over ROS: one reset,
    an episode (run directory, trace, bag) every second of robot time; the episodes'
    steps add up to the run's and each trace and bag holds its own; a bad period is
    refused by name and runs nothing."""
    import robokernel_ros.recording  # noqa: F401 - load_trace reads bags once imported
    from robokernel_ros.kernel.trace import load_trace

    from robokernel_interfaces.srv import RunPolicy

    procs, shield, events = supervised
    ros, runs = shared_ros, graph["contract"].parent / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    for bad in (-1.0, float("nan")):
        refused = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
            robot_name="arm", policy_provider="mock", n_steps=150, sentry_rotate_s=bad),
            timeout_s=60)  # fmt: skip
        assert not refused.ok and refused.message.startswith(
            f"sentry_rotate_s={bad!r}: must be 0 (one episode) or positive finite seconds"
        ), refused.message
    assert not _kinds(events, "episode.start")
    assert (set(runs.iterdir()) if runs.is_dir() else set()) == before
    reply = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="mock", n_steps=150, sentry_rotate_s=1.0,
        policy_config_json=json.dumps(MOCK)), timeout_s=120)  # fmt: skip
    assert reply.ok, (reply.message, module_processes.log(procs["runner"])[-3000:])
    report = json.loads(reply.report_json)
    episodes = report["sentry"]["episodes"]
    assert [e["steps"] for e in episodes] == [50, 50, 50], episodes
    assert sum(e["steps"] for e in episodes) == report["steps"] == 150
    assert [e["first_step"] for e in episodes] == [0, 50, 100]
    assert len(_kinds(events, "episode.start")) == 3
    for e in episodes:
        traced = [x.data["action"] for x in load_trace(e["trace_path"]).of_kind("action")]
        assert len(traced) == e["steps"], e
        assert e["bag_path"], e
        bagged = [x.data["action"] for x in load_trace(e["bag_path"]).of_kind("action")]
        assert bagged == traced, e
