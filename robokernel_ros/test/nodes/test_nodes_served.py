"""policy_server in served mode: an external harness (this test process) owns the loop and
drives episodes over ROS against the server process: shielded actions, a trace and a bag
per episode, episode start/end signalled over ROS, the e-stop, and refusals."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rclpy")

import robokernel_ros.recording  # noqa: E402, F401 - registers the rosbag2 reader with load_trace
from rclpy.duration import Duration  # noqa: E402
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.ros import wire  # noqa: E402
from robokernel_ros.ros.qos import (  # noqa: E402  # noqa: E402
    CHUNK_QOS,
    ESTOP_QOS,
    EVENT_QOS,
    EVENTS_QOS,
    SERVED_OBSERVATION_QOS,
    STATUS_QOS,
)
from robokernel_ros.ros.transport import check_server_ready  # noqa: E402
from robokernel_ros.safety.limits import load_limits_file  # noqa: E402
from std_msgs.msg import Bool, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from test_nodes_launch import served_graph  # noqa: E402

from robokernel_interfaces.msg import (  # noqa: E402
    ActionChunk,
    KernelEvent,
    Observation,
    PolicyServerStatus,
)
from robokernel_interfaces.srv import GetActionChunk  # noqa: E402

SERVER = "robokernel_ros.nodes.policy_server"
CONFIG = Path(__file__).resolve().parents[2] / "config"
LIMITS_FILE = CONFIG / "joint_limits_so101.yaml"
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
LIMITS = {
    j: (lim.min_position, lim.max_position) for j, lim in load_limits_file(LIMITS_FILE).items()
}
# Reaches for shoulder_pan = 3.0 rad, beyond its limit (1.91986): the shield must clip the
# policy's steps to the velocity limit, then hold once a proposal is out of reach.
OUT_OF_LIMITS = {
    "targets": [{"shoulder_pan": 3.0}],
    "max_delta": 0.5,
    "tolerance": 0.01,
    "settle_steps": 1,
    "execution_horizon": 1,
}


class Harness:
    """The external loop: a kinematic arm whose joints go where the shielded action says."""

    def __init__(self, ros, ns: str) -> None:
        self.ros = ros
        self.ns = ns
        self.statuses = ros.collect(String, f"{ns}/served/episode_status", EVENT_QOS)
        self.events = ros.collect(KernelEvent, f"{ns}/served/events", EVENTS_QOS)
        self.start_pub = ros.node.create_publisher(String, f"{ns}/served/episode_start", EVENT_QOS)
        self.end_pub = ros.node.create_publisher(String, f"{ns}/served/episode_end", EVENT_QOS)
        self.estop_pub = ros.node.create_publisher(Bool, f"{ns}/estop", ESTOP_QOS)
        self.chunks = ros.collect(ActionChunk, f"{ns}/served/action_chunk", CHUNK_QOS)
        self.obs_pub = ros.node.create_publisher(
            Observation, f"{ns}/served/observation", SERVED_OBSERVATION_QOS
        )

    def connect(self, processes, proc) -> None:
        assert self.ros.wait_for(GetActionChunk, f"{self.ns}/served/step", 60), processes.log(proc)
        check_server_ready(self.ros.node, self.ns, timeout_s=60)
        assert self.ros.wait_until(
            lambda: (
                self.start_pub.get_subscription_count() >= 1
                and self.end_pub.get_subscription_count() >= 1
                and self.estop_pub.get_subscription_count() >= 1
                and self.obs_pub.get_subscription_count() >= 1
                and self.ros.node.count_publishers(f"{self.ns}/served/action_chunk") >= 1
            ),
            20,
        ), processes.log(proc)
        for topic in ("episode_status", "events", "action_chunk"):  # the collectors matched
            self.ros.wait_matched(f"{self.ns}/served/{topic}")

    def status(self, episode_id: str, state: str, after: int = 0, timeout_s: float = 10.0) -> dict:
        """The first status of `episode_id` in `state` among those from index `after` on."""

        def find() -> dict | None:
            for msg in list(self.statuses)[after:]:
                data = json.loads(msg.data)
                if data["episode_id"] == episode_id and data["state"] == state:
                    return data
            return None

        assert self.ros.wait_until(lambda: find() is not None, timeout_s), (
            episode_id,
            state,
            [m.data for m in self.statuses],
        )
        return find()

    def start(self, episode_id: str, **fields) -> None:
        payload = {"episode_id": episode_id, **fields}
        self.start_pub.publish(String(data=json.dumps(payload)))

    def end(self, episode_id: str, **fields) -> dict:
        self.end_pub.publish(String(data=json.dumps({"episode_id": episode_id, **fields})))
        return self.status(episode_id, "ended")

    @staticmethod
    def observation(episode_id: str, step: int, q: dict, reward: float | None = None):
        obs: dict = {"joint_positions": dict(q)}
        if reward is not None:
            obs["served.reward"] = np.array([reward])
        return wire.observation_to_msg(obs, run_id=episode_id, step=step, instruction="reach")

    def step(self, episode_id: str, step: int, q: dict, reward: float | None = None):
        msg = self.observation(episode_id, step, q, reward)
        return self.ros.call(
            GetActionChunk,
            f"{self.ns}/served/step",
            GetActionChunk.Request(observation=msg),
            timeout_s=30,
        )

    def step_topic(self, episode_id: str, step: int, q: dict, reward: float | None = None):
        """One step over topics: the ActionChunk answering it, or the step_refused status."""
        mark = len(self.statuses)
        self.obs_pub.publish(self.observation(episode_id, step, q, reward))

        def answer():
            for chunk in list(self.chunks):
                if (chunk.run_id, chunk.obs_step) == (episode_id, step):
                    return chunk
            for msg in list(self.statuses)[mark:]:
                data = json.loads(msg.data)
                if data["state"] == "step_refused" and (data["episode_id"], data["step"]) == (
                    episode_id,
                    step,
                ):
                    return data
            return None

        assert self.ros.wait_until(lambda: answer() is not None, 30), (episode_id, step)
        return answer()

    def episode(self, episode_id: str, n_steps: int) -> list[dict]:
        """Drive n_steps steps (reward 1.0 per action); returns the shielded actions."""
        q = dict.fromkeys(JOINTS, 0.0)
        actions = []
        for step in range(n_steps):
            response = self.step(episode_id, step, q, reward=1.0 if step else None)
            assert response.ok, response.message
            chunk = response.chunk
            assert chunk.horizon == 1 and list(chunk.keys) == JOINTS
            assert (chunk.run_id, chunk.obs_step) == (episode_id, step)
            (action,) = wire.msg_to_chunk(chunk)
            actions.append(action)
            q = {j: action[j] for j in JOINTS}
        return actions


def _server(processes, ns: str, trace_dir: Path, *extra: str):
    args = [
        "--ros-args",
        "-r",
        f"__ns:={ns}",
        "--params-file",
        str(CONFIG / "served.yaml"),
        "-p",
        f"limits_file:={LIMITS_FILE}",
        "-p",
        f"trace_dir:={trace_dir}",
        "-p",
        f"policy_config_json:='{json.dumps(OUT_OF_LIMITS)}'",
    ]
    for item in extra:
        args += ["-p", item]
    return processes.python(f"served{ns.replace('/', '_')}", SERVER, *args)


NS = "/rk_served"


@pytest.fixture(scope="module")
def _served_server(module_processes, shared_domain, tmp_path_factory):
    """One served-mode server (the OUT_OF_LIMITS scripted policy) for the module's tests
    that drive episodes: every episode id is used once in the module."""
    trace_dir = tmp_path_factory.mktemp("served") / "runs"
    return _server(module_processes, NS, trace_dir, "start_timeout_s:=0.5"), trace_dir


@pytest.fixture
def served(_served_server, module_processes, ros):
    """(a Harness connected to the module's server, its process, its trace dir), the
    server at rest: alive, the e-stop input released and no latch (what a test's e-stop
    leaves is cleared). An episode a failed test left open ends 'stopped' at the next
    start, as the server does for any harness."""
    proc, trace_dir = _served_server
    assert proc.poll() is None, module_processes.log(proc)
    harness = Harness(ros, NS)
    harness.connect(module_processes, proc)
    harness.estop_pub.publish(Bool(data=False))
    assert ros.wait_until(
        lambda: ros.call(Trigger, f"{NS}/served/clear_fault", timeout_s=10).success, 10, 0.1
    ), "served/clear_fault refused with the e-stop input released"
    return harness, proc, trace_dir


def _within_limits(action: dict) -> bool:
    return all(LIMITS[j][0] - 1e-9 <= action[j] <= LIMITS[j][1] + 1e-9 for j in JOINTS)


def test_harness_drives_two_episodes_gets_shielded_actions_traces_and_bags(
    served, module_processes, ros
) -> None:
    harness, proc, trace_dir = served

    results = {}
    for episode_id, n_steps, end in (
        ("ep-1", 40, {"success": True, "reward": 1.0}),
        ("ep-2", 12, {"success": False, "reward": 1.0}),
    ):
        harness.start(episode_id, instruction="reach", seed=7, meta={"harness": "test"})
        started = harness.status(episode_id, "started")
        actions = harness.episode(episode_id, n_steps)
        ended = harness.end(episode_id, **end)
        results[episode_id] = (n_steps, started, actions, ended)

    for episode_id, (n_steps, started, actions, ended) in results.items():
        expected = "success" if episode_id == "ep-1" else "failure"
        assert ended["outcome"] == expected, ended
        assert ended["steps"] == n_steps and ended["run_id"] == started["run_id"]
        assert ended["total_reward"] == pytest.approx(float(n_steps))  # one 1.0 per action
        # Shielded: every action the harness received is within the joint limits, although
        # the policy asked for shoulder_pan = 3.0 (and steps of 0.5 rad, rate-clipped).
        assert all(_within_limits(a) for a in actions), actions
        pans = [a["shoulder_pan"] for a in actions]
        assert all(b - a <= 3.0 / 50 + 1e-9 for a, b in zip(pans, pans[1:], strict=False)), pans
        assert ended["safety_interventions"] >= n_steps - 1

        run_dir = Path(ended["trace_path"])
        assert run_dir.parent == trace_dir and run_dir.name == ended["run_id"]
        assert Path(started["trace_path"]) == run_dir
        trace = load_trace(run_dir)
        start = trace.of_kind("episode.start")[0].data
        assert start["mode"] == "served" and start["episode_id"] == episode_id
        assert start["instruction"] == "reach" and start["seed"] == 7
        assert start["harness"] == "test"
        recorded = [e.data for e in trace.of_kind("action")]
        assert len(recorded) == n_steps
        for row, action in zip(recorded, actions, strict=True):
            assert row["action"] == pytest.approx(action)
        # What the policy proposed was outside the limits; what was sent was not.
        proposed = [
            dict(zip(e.data["keys"], r, strict=True))
            for e in trace.of_kind("chunk.merge")
            for r in e.data["actions"]
        ]
        assert len(proposed) == n_steps
        assert max(p["shoulder_pan"] for p in proposed) > actions[-1]["shoulder_pan"]
        interventions = trace.of_kind("safety.intervention")
        assert interventions, "no shield intervention recorded"
        (end_event,) = trace.of_kind("episode.end")
        assert end_event.data["outcome"] == expected

        bag = load_trace(Path(ended["bag_path"]))
        assert Path(ended["bag_path"]) == run_dir / "bag"
        assert [e.kind for e in bag.events] == [e.kind for e in trace.events]
        assert bag.of_kind("episode.end")[0].data["outcome"] == expected
        for row, action in zip(bag.of_kind("action"), actions, strict=True):
            assert row.data["action"] == pytest.approx(action)

    # ep-1 ran long enough for the policy's proposal to leave the clip band: held, not sent.
    ep1 = load_trace(Path(results["ep-1"][3]["trace_path"]))
    kinds = {i["action"] for e in ep1.of_kind("safety.intervention") for i in _items(e.data)}
    assert {"clipped", "refused"} <= kinds, kinds
    assert results["ep-1"][2][-1]["shoulder_pan"] <= LIMITS["shoulder_pan"][1]

    # Every event of both episodes went out live too, in order.
    assert ros.wait_until(
        lambda: sum(e.kind == "episode.end" for e in list(harness.events)) == 2, 10
    )
    for _, _, _, ended in results.values():
        seqs = [e.seq for e in list(harness.events) if e.run_id == ended["run_id"]]
        assert seqs == list(range(len(seqs))) and len(seqs) == len(
            load_trace(Path(ended["trace_path"])).events
        )
    assert proc.poll() is None, module_processes.log(proc)


def test_harness_steps_over_topics_gets_shielded_chunks_refusals_trace_and_bag(
    served, module_processes
) -> None:
    """served/observation in, served/action_chunk out (tagged with the step); refusals on
    served/episode_status; the service and the topics share one step sequence."""
    harness, proc, trace_dir = served
    q = dict.fromkeys(JOINTS, 0.0)

    ghost = harness.step_topic("ghost", 0, q)
    assert ghost["state"] == "step_refused" and "'ghost'" in ghost["message"], ghost
    assert "episode_start" in ghost["message"]

    harness.start("t-1", instruction="reach", seed=3)
    started = harness.status("t-1", "started")
    n_steps = 30
    actions = []
    for step in range(n_steps):
        reward = 1.0 if step else None
        if step == 10:  # one step over the service, in the same sequence
            response = harness.step("t-1", step, q, reward=reward)
            assert response.ok, response.message
            chunk = response.chunk
        else:
            chunk = harness.step_topic("t-1", step, q, reward=reward)
            assert isinstance(chunk, ActionChunk), chunk
        assert (chunk.run_id, chunk.obs_step, chunk.horizon) == ("t-1", step, 1)
        assert list(chunk.keys) == JOINTS
        (action,) = wire.msg_to_chunk(chunk)
        assert _within_limits(action), action
        actions.append(action)
        q = {j: action[j] for j in JOINTS}
        if step == 20:
            # Out of the domain: refused on the status topic, the episode goes on.
            skipped = harness.step_topic("t-1", 25, q)
            assert skipped["state"] == "step_refused", skipped
            assert "observation.step=25: expected 21" in skipped["message"], skipped
            nan = harness.step_topic("t-1", 21, q, reward=float("nan"))
            assert nan["state"] == "step_refused" and "served.reward" in nan["message"], nan
    ended = harness.end("t-1", success=True, reward=1.0)
    assert ended["outcome"] == "success" and ended["steps"] == n_steps, ended
    assert ended["total_reward"] == pytest.approx(float(n_steps))
    late = harness.step_topic("t-1", n_steps, q)
    assert late["state"] == "step_refused" and "has ended" in late["message"], late
    # Each step got exactly one chunk.
    answered = [c.obs_step for c in list(harness.chunks) if c.run_id == "t-1"]
    assert sorted(answered) == [s for s in range(n_steps) if s != 10], answered

    run_dir = Path(ended["trace_path"])
    assert run_dir == Path(started["trace_path"]) and run_dir.parent == trace_dir
    trace = load_trace(run_dir)
    start = trace.of_kind("episode.start")[0].data
    assert start["mode"] == "served" and start["episode_id"] == "t-1" and start["seed"] == 3
    recorded = [e.data for e in trace.of_kind("action")]
    assert [r["step"] for r in recorded] == list(range(n_steps))
    for row, action in zip(recorded, actions, strict=True):
        assert row["action"] == pytest.approx(action)
    assert [e.data["obs_step"] for e in trace.of_kind("chunk.merge")] == list(range(n_steps))
    assert trace.of_kind("safety.intervention"), "the shield never intervened"
    bag = load_trace(Path(ended["bag_path"]))
    assert Path(ended["bag_path"]) == run_dir / "bag"
    assert [e.kind for e in bag.events] == [e.kind for e in trace.events]
    for row, action in zip(bag.of_kind("action"), actions, strict=True):
        assert row.data["action"] == pytest.approx(action)
    assert bag.of_kind("episode.end")[0].data["outcome"] == "success"
    assert proc.poll() is None, module_processes.log(proc)


def test_the_launch_graph_serves_a_harness_over_topics(processes, ros, tmp_path) -> None:
    """served_policy.launch.py's graph (the same executable and config files) as processes:
    the scripted policy of config/served.yaml reaches its first target through a harness
    that steps over topics."""
    trace_dir = tmp_path / "runs"
    (node,) = served_graph(trace_dir=str(trace_dir))
    proc = processes.start(node.name, node.argv())
    harness = Harness(ros, "/robokernel")
    harness.connect(processes, proc)
    harness.start("g-1", instruction="reach the targets")
    started = harness.status("g-1", "started")
    q = dict.fromkeys(JOINTS, 0.0)
    actions = []
    for step in range(40):
        chunk = harness.step_topic("g-1", step, q, reward=0.0 if step else None)
        assert isinstance(chunk, ActionChunk), chunk
        (action,) = wire.msg_to_chunk(chunk)
        assert _within_limits(action), action
        actions.append(action)
        q = {j: action[j] for j in JOINTS}
    # The first target of served.yaml (shoulder_pan 0.6, shoulder_lift -0.4, elbow_flex
    # 0.5) is reached, then the policy heads for the second (shoulder_pan -0.5).
    peak = max(actions, key=lambda a: a["shoulder_pan"])
    assert peak["shoulder_pan"] == pytest.approx(0.6, abs=0.07), peak
    assert peak["shoulder_lift"] == pytest.approx(-0.4, abs=0.07), peak
    assert peak["elbow_flex"] == pytest.approx(0.5, abs=0.07), peak
    assert q["shoulder_pan"] < peak["shoulder_pan"] - 0.1, q
    ended = harness.end("g-1", success=True)
    assert ended["outcome"] == "success" and ended["steps"] == 40, ended
    run_dir = Path(ended["trace_path"])
    assert run_dir == Path(started["trace_path"]) and run_dir.parent == trace_dir
    trace = load_trace(run_dir)
    recorded = [e.data["action"] for e in trace.of_kind("action")]
    assert len(recorded) == len(actions)
    for row, action in zip(recorded, actions, strict=True):
        assert row == pytest.approx(action)
    bag = load_trace(Path(ended["bag_path"]))
    assert [e.kind for e in bag.events] == [e.kind for e in trace.events]
    assert proc.poll() is None, processes.log(proc)


def _items(data: dict) -> list[dict]:
    """The interventions of one safety.intervention event (a list, or the event itself)."""
    items = data.get("interventions")
    return list(items) if isinstance(items, list) else [data]


def test_estop_holds_ends_estopped_and_refuses_starts_until_clear_fault(served, ros) -> None:
    harness, _, _ = served
    ns = NS
    harness.start("a")
    harness.status("a", "started")
    q = dict.fromkeys(JOINTS, 0.0)
    last = None
    for step in range(5):
        response = harness.step("a", step, q)
        assert response.ok, response.message
        (last,) = wire.msg_to_chunk(response.chunk)
        q = {j: last[j] for j in JOINTS}
    harness.estop_pub.publish(Bool(data=True))
    # the press has reached the server: its clear_fault says the input is still pressed
    harness.estop_pub.wait_for_all_acked(Duration(seconds=10))
    assert ros.wait_until(
        lambda: "still pressed" in ros.call(Trigger, f"{ns}/served/clear_fault").message, 10, 0.1
    ), "the server never heard the press"
    for step in range(5, 8):
        response = harness.step("a", step, q)
        assert response.ok, response.message
        (held,) = wire.msg_to_chunk(response.chunk)
        assert held == pytest.approx(last)  # the hold action: the last target, every step
    ended = harness.end("a", success=True)
    assert ended["outcome"] == "estopped", ended
    harness.start("b")
    refused = harness.status("b", "refused")
    assert "e-stop is latched" in refused["message"]
    step = harness.step("b", 0, q)
    assert not step.ok and "refused" in step.message and "e-stop" in step.message
    pressed = ros.call(Trigger, f"{ns}/served/clear_fault", timeout_s=10)
    assert not pressed.success and "still pressed" in pressed.message
    harness.estop_pub.publish(Bool(data=False))
    # refused only while the release has not reached the server
    deadline = time.monotonic() + 10
    while not (cleared := ros.call(Trigger, f"{ns}/served/clear_fault", timeout_s=10)).success:
        assert "still pressed" in cleared.message and time.monotonic() < deadline, cleared.message
        time.sleep(0.05)
    harness.start("c")
    harness.status("c", "started")
    assert harness.step("c", 0, q).ok
    assert harness.end("c", success=True)["outcome"] == "success"


def test_refusals_name_field_value_and_domain_and_the_server_keeps_serving(
    served, module_processes, ros
) -> None:
    harness, proc, _ = served
    q = dict.fromkeys(JOINTS, 0.0)

    t0 = time.monotonic()
    unknown = harness.step("ghost", 0, q)
    assert not unknown.ok and "'ghost'" in unknown.message and "episode_start" in unknown.message
    assert time.monotonic() - t0 < 10

    for payload, needle in (
        ("not json", "episode_start"),
        ("[1]", "JSON object"),
        ('{"instruction": "x"}', "episode_id"),
        ('{"episode_id": "s", "seed": "7"}', "seed"),
        ('{"episode_id": "s", "bogus": 1}', "bogus"),
    ):
        harness.start_pub.publish(String(data=payload))
        assert ros.wait_until(
            lambda needle=needle: any(
                json.loads(m.data)["state"] == "refused" and needle in json.loads(m.data)["message"]
                for m in list(harness.statuses)
            ),
            10,
        ), (payload, [m.data for m in harness.statuses])

    # A refused start does not use its id up; an unfinished episode ends as stopped
    # when the next one starts.
    harness.start("s")
    harness.status("s", "started")
    assert harness.step("s", 0, q).ok
    harness.start("e1")
    assert harness.status("s", "ended")["outcome"] == "stopped"
    harness.status("e1", "started")
    skipped = harness.step("e1", 3, q)
    assert not skipped.ok and "observation.step=3: expected 0" in skipped.message
    bad_reward = harness.step("e1", 0, q, reward=float("nan"))
    assert not bad_reward.ok and "served.reward" in bad_reward.message
    assert harness.step("e1", 0, q).ok
    harness.end_pub.publish(String(data=json.dumps({"episode_id": "other"})))
    harness.status("other", "refused")
    harness.end_pub.publish(String(data=json.dumps({"episode_id": "e1", "success": "yes"})))
    assert harness.status("e1", "refused")["message"].startswith("episode_end['success']='yes'")
    ended = harness.end("e1", outcome="truncated")
    assert ended["outcome"] == "truncated" and ended["steps"] == 1
    late = harness.step("e1", 1, q)
    assert not late.ok and "has ended" in late.message
    mark = len(harness.statuses)
    harness.start("e1")
    assert "already used" in harness.status("e1", "refused", after=mark)["message"]
    assert proc.poll() is None, module_processes.log(proc)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("limits_file:=''",), "limits_file"),
        (("limits_file:=/no/such/file.yaml",), "cannot be read"),
        (("action_keys:=[shoulder_pan,ghost_joint]",), "ghost_joint"),
        (("action_keys:=[a]", "served:=false", "command_interface:=torque"), None),
        (("command_interface:=torque",), "command_interface"),
        (("served:='false'",), "served"),
        (("control_hz:=0.0",), "control_hz"),
    ],
)
def test_served_parameters_are_refused_at_start(
    processes, tmp_path, request, extra, needle
) -> None:
    params = {
        "served": "true",
        "provider": "mock",
        "action_keys": "[shoulder_pan]",
        "limits_file": str(LIMITS_FILE),
        "trace_dir": str(tmp_path),
    }
    # rcl keeps the first of two -p of one name: each case replaces a default instead.
    params.update(item.split(":=", 1) for item in extra)
    args = ["--ros-args", "-r", "__ns:=/rk_served_bad"]
    for name, value in params.items():
        args += ["-p", f"{name}:={value}"]
    proc = processes.python("served_bad", SERVER, *args)
    if needle is None:
        # Driven mode ignores served mode's parameters: it starts and serves (its heartbeat
        # comes), and lives on.
        ros = request.getfixturevalue("ros")
        status = ros.collect(PolicyServerStatus, "/rk_served_bad/policy_server/status", STATUS_QOS)
        assert ros.wait_until(lambda: status or proc.poll() is not None, 60), processes.log(proc)
        assert status and proc.poll() is None, processes.log(proc)
        return
    assert proc.wait(timeout=60) == 2, processes.log(proc)
    log = processes.log(proc)
    assert "refused: parameter" in log and needle in log, log
