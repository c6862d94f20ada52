"""policy_server node + remote provider: real processes over Fast DDS."""

from __future__ import annotations

import json
import logging
import math
import time

import numpy as np
import pytest

pytest.importorskip("rclpy")

from robokernel_ros.policies import create_policy  # noqa: E402
from robokernel_ros.ros import wire  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.remote_policy import RemotePolicy  # noqa: E402
from robokernel_ros.ros.transport import DirectReader, close_private_link  # noqa: E402

SERVER = "robokernel_ros.nodes.policy_server"


def _server(processes, ns: str, provider: str, config: dict | None = None, *extra: str):
    args = [
        "--ros-args",
        "-r",
        f"__ns:={ns}",
        "-p",
        f"provider:={provider}",
        "-p",
        "autostart:=true",
    ]
    if config is not None:
        args += ["-p", f"policy_config_json:='{json.dumps(config)}'"]
    for item in extra:
        args += ["-p", item]
    return processes.python(f"policy_server{ns.replace('/', '_')}", SERVER, *args)


@pytest.fixture(scope="module")
def _mock_server(module_processes, shared_domain):
    return _server(
        module_processes, "/ps_mock", "mock", {"execution_horizon": 4}, "action_keys:=[a,b]"
    )


@pytest.fixture
def mock_server(_mock_server, module_processes):
    """The module's mock server on /ps_mock (4 actions a chunk, keys a and b), alive: each
    test's RemotePolicy has a run id of its own, so what the server cached for another
    test's observations is never an answer to this one's."""
    assert _mock_server.poll() is None, module_processes.log(_mock_server)
    return _mock_server


@pytest.fixture(scope="module")
def _steps_server(module_processes, shared_domain):
    return _server(module_processes, "/ps_steps", "mock", {"execution_horizon": 8})


def test_mock_server_answers_observations_by_topic_and_service(
    mock_server, module_processes
) -> None:
    server = mock_server
    policy = create_policy("remote", namespace="/ps_mock", ready_timeout_s=30)
    try:
        assert policy.server_provider == "mock"
        assert policy.server_action_keys == ("a", "b")
        assert policy.is_chunk_emitting()
        policy.set_robot_state_keys(["a", "b"])
        policy.reset()
        steps = []
        for step in (0, 5, 11):
            chunk = policy.get_actions(
                {"joint_positions": {"a": 0.0, "b": 1.0}}, "reach", step=step
            )
            assert len(chunk) == 4 and all(set(row) == {"a", "b"} for row in chunk)
            assert all(math.isfinite(v) for row in chunk for v in row.values())
            steps.append(policy.chunk_log[-1][0])
        # Every chunk carries the step of the observation it answered.
        assert steps == [0, 5, 11]
        assert all(inf >= 0.0 and rt >= inf for _, inf, rt in policy.chunk_log)
        policy.mode = "service"
        chunk = policy.get_actions({"joint_positions": {"a": 0.0, "b": 1.0}}, step=12)
        assert len(chunk) == 4 and policy.chunk_log[-1][0] == 12
    finally:
        policy.close()
    assert server.poll() is None, module_processes.log(server)


def test_remote_refuses_a_server_that_failed_to_load(processes) -> None:
    _server(processes, "/ps_bad", "scripted", {"targets": "not a list"})
    with pytest.raises(RuntimeError) as info:
        create_policy("remote", namespace="/ps_bad", ready_timeout_s=20)
    text = str(info.value)
    assert "not ready" in text and "targets" in text, text


def test_remote_refuses_when_no_server_runs() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="no heartbeat on /ps_none/policy_server/status"):
        create_policy("remote", namespace="/ps_none", ready_timeout_s=1.5)
    assert time.monotonic() - started < 10


def test_remote_preflight_refuses_bad_config() -> None:
    with pytest.raises(ValueError, match="mode"):
        RemotePolicy.preflight({"mode": "udp"})
    with pytest.raises(ValueError, match="namespace"):
        RemotePolicy.preflight({"namespace": "relative"})
    with pytest.raises(ValueError, match="chunk_timeout_s"):
        RemotePolicy.preflight({"chunk_timeout_s": float("nan")})
    with pytest.raises(ValueError, match="unknown"):
        RemotePolicy.preflight({"bogus": 1})


def test_chunk_timeout_when_the_server_dies(processes) -> None:
    server = _server(processes, "/ps_dies", "mock", {"execution_horizon": 2}, "action_keys:=[a]")
    policy = create_policy("remote", namespace="/ps_dies", ready_timeout_s=30, chunk_timeout_s=1.0)
    try:
        policy.set_robot_state_keys(["a"])
        assert policy.get_actions({"joint_positions": {"a": 0.0}}, step=0)
        processes.kill(server)
        with pytest.raises(TimeoutError, match="/ps_dies"):
            policy.get_actions({"joint_positions": {"a": 0.0}}, step=1)
    finally:
        policy.close()


def test_wire_format_round_trips_observations_and_chunks() -> None:
    image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    obs = {
        "joint_positions": {"j1": 0.5, "j2": -1.0},
        "joint_velocities": {"j1": 0.1, "j2": 0.0},
        "actuator_targets": {"m1": 0.25},
        "images": {"front": image, "depth": np.ones((2, 3), dtype=np.float32)},
        "ee_pos": np.array([1.0, 2.0, 3.0]),
    }
    msg = wire.observation_to_msg(
        obs,
        run_id="r",
        step=7,
        instruction="go",
        queued_actions=[{"j1": 1.0, "j2": 2.0}],
        queued_keys=["j1", "j2"],
        delay_steps=3,
    )
    back = wire.msg_to_observation(msg)
    assert back["joint_positions"] == obs["joint_positions"]
    assert back["joint_velocities"] == obs["joint_velocities"]
    assert back["actuator_targets"] == {"m1": 0.25}
    np.testing.assert_array_equal(back["images"]["front"], image)
    np.testing.assert_array_equal(back["images"]["depth"], obs["images"]["depth"])
    np.testing.assert_array_equal(back["ee_pos"], obs["ee_pos"])
    assert (msg.step, msg.run_id, msg.instruction, msg.delay_steps) == (7, "r", "go", 3)
    assert wire.queued_actions_from_msg(msg, ["j1", "j2"]) == [{"j1": 1.0, "j2": 2.0}]
    chunk = [{"j1": 0.1, "j2": 0.2}, {"j1": 0.3}]
    cmsg = wire.chunk_to_msg(chunk, run_id="r", obs_step=7, inference_time_s=0.01)
    assert (cmsg.horizon, list(cmsg.keys)) == (2, ["j1", "j2"])
    assert wire.msg_to_chunk(cmsg) == chunk


def test_lerobot_checkpoint_served_readiness_waits_for_the_load(processes, tmp_path) -> None:
    pytest.importorskip("lerobot")
    from fixtures.lerobot import SO101_JOINTS, build_tiny_checkpoint

    path = build_tiny_checkpoint(
        tmp_path / "act", kind="act", cameras={"front": (64, 64)}, chunk_size=8
    )
    server = _server(
        processes,
        "/ps_lerobot",
        "lerobot",
        None,
        f"checkpoint:={path}",
        "device:=cpu",
        f"action_keys:=[{','.join(SO101_JOINTS)}]",
    )
    policy = create_policy("remote", namespace="/ps_lerobot", ready_timeout_s=120)
    try:
        assert policy.server_provider == "lerobot"
        assert policy.server_action_keys == SO101_JOINTS
        policy.set_robot_state_keys(list(SO101_JOINTS))
        policy.reset()
        obs = {
            "joint_positions": dict.fromkeys(SO101_JOINTS, 0.1),
            "images": {"front": np.full((64, 64, 3), 128, dtype=np.uint8)},
        }
        chunk = policy.get_actions(obs, step=3)
        assert len(chunk) >= 1 and set(chunk[0]) == set(SO101_JOINTS)
        assert all(math.isfinite(v) for row in chunk for v in row.values())
        obs_step, inference_s, round_trip_s = policy.chunk_log[-1]
        assert obs_step == 3 and 0.0 < inference_s <= round_trip_s
    finally:
        policy.close()
    assert server.poll() is None, processes.log(server)


@pytest.mark.parametrize("async_rtc", [False, True])
def test_chunks_carry_the_kernels_observation_step(
    _steps_server, module_processes, ros, tmp_path, async_rtc
) -> None:
    """A rollout through the remote provider: every chunk on the wire is tagged with the
    kernel step of the observation it answers (not a count of requests), the same step
    as the trace's chunk events, although the kernel skips steps between requests
    (several actions per chunk; in async mode the actions it executes meanwhile)."""
    from robokernel_ros.kernel import load_trace
    from robokernel_ros.rollout import SimWorkcell
    from robokernel_ros.ros.qos import CHUNK_QOS

    from robokernel_interfaces.msg import ActionChunk

    ns = "/ps_steps"  # the module's server: 8 actions a chunk
    server = _steps_server
    assert server.poll() is None, module_processes.log(server)
    wire_chunks = ros.collect(ActionChunk, f"{ns}/action_chunk", CHUNK_QOS)
    wait_active(ros.node, f"{ns}/policy_server", timeout_s=30)
    ros.wait_matched(f"{ns}/action_chunk")  # the collector matched the server's publisher
    cell = SimWorkcell(trace_dir=tmp_path / "runs", bag=False)
    try:
        cell.add_robot("arm", "so101")
        out = cell.run_policy(
            "arm",
            policy_provider="remote",
            policy_config={"namespace": ns, "ready_timeout_s": 30},
            n_steps=60,
            action_horizon=8,
            async_rtc=async_rtc,
        )
        assert out["status"] == "success", out
    finally:
        cell.close()
    (run_dir,) = [p.parent for p in (tmp_path / "runs").glob("*/events.jsonl")]
    trace = load_trace(run_dir)
    merged = [e.data["obs_step"] for e in trace.of_kind("chunk.merge")]
    requested = [e.data["step"] for e in trace.of_kind("chunk.request")]
    # (a round trip stalled by a busy machine means fewer, later merges: 3 are enough)
    assert len(merged) >= 3 and merged == requested[: len(merged)], (merged, requested)
    # Steps were skipped between requests: a request counter would read 0, 1, 2, ...
    assert merged != list(range(len(merged))), merged
    assert ros.wait_until(lambda: len(wire_chunks) >= len(merged), 10), (len(wire_chunks), merged)
    on_wire = [c.obs_step for c in list(wire_chunks)]
    # an observation resent without its chunk (resend_after_s) is answered again, the same
    on_wire = [step for i, step in enumerate(on_wire) if i == 0 or step != on_wire[i - 1]]
    assert on_wire[: len(merged)] == merged, (on_wire, merged)
    assert server.poll() is None, module_processes.log(server)


def test_wire_messages_refilled_in_place_carry_nothing_over() -> None:
    """The remote provider and the server refill one message per send: a field the
    previous observation or chunk had must not leak into the next."""
    full = {
        "joint_positions": {"a": 1.0, "b": 2.0},
        "joint_velocities": {"a": 0.5, "b": 0.5},
        "ee": np.array([1.0, 2.0, 3.0]),
        "images": {"cam": np.zeros((2, 3, 3), dtype=np.uint8)},
    }
    msg = wire.observation_to_msg(
        full, run_id="r", step=4, instruction="x", queued_actions=[{"a": 1.0, "b": 2.0}],
        queued_keys=["a", "b"], delay_steps=2,
    )  # fmt: skip
    same = wire.observation_to_msg({"joint_positions": {"c": 3.0}}, run_id="s", step=5, msg=msg)
    assert same is msg
    assert wire.msg_to_observation(msg) == {"joint_positions": {"c": 3.0}}
    assert (msg.run_id, msg.step, msg.instruction, msg.delay_steps) == ("s", 5, "", 0)
    assert len(msg.queued_actions) == 0 and len(msg.images) == 0 and len(msg.arrays) == 0
    # the Image messages are refilled too: a new size and encoding leave nothing behind
    first = wire.observation_to_msg(full, run_id="r", step=6, msg=msg)
    image_msg = first.images[0]
    grey = np.arange(20, dtype=np.uint8).reshape(4, 5)
    second = wire.observation_to_msg(
        {"joint_positions": {"a": 1.0}, "images": {"wrist": grey}}, run_id="r", step=7, msg=msg
    )
    assert second.images[0] is image_msg  # refilled, not rebuilt
    back = wire.msg_to_observation(second)["images"]
    assert list(back) == ["wrist"] and np.array_equal(back["wrist"], grey)
    chunk = wire.chunk_to_msg(
        [{"a": 1.0, "b": 2.0}] * 3, run_id="r", obs_step=4, inference_time_s=0.1
    )
    again = wire.chunk_to_msg([{"c": 5.0}], run_id="s", obs_step=6, inference_time_s=0.2, msg=chunk)
    assert again is chunk and wire.msg_to_chunk(chunk) == [{"c": 5.0}]
    assert (chunk.run_id, chunk.obs_step, chunk.horizon, chunk.inference_time_s) == ("s", 6, 1, 0.2)


def test_closing_the_link_wakes_a_policy_waiting_for_its_chunk(processes) -> None:
    """A node shutting down (close_private_link) must not leave its rollout thread waiting
    out chunk_timeout_s for a chunk that can no longer arrive."""
    import threading

    _server(processes, "/ps_slow", "mock", {"execution_horizon": 4, "latency_s": 5.0})
    policy = create_policy("remote", namespace="/ps_slow", ready_timeout_s=30, chunk_timeout_s=30)
    outcome: list = []

    def ask() -> None:
        try:
            policy.get_actions({"joint_positions": {"a": 0.0}}, step=0)
            outcome.append("answered")
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    try:
        policy.set_robot_state_keys(["a"])
        sent = _Sent(policy._obs_pub)
        policy._obs_pub = sent
        thread = threading.Thread(target=ask)
        thread.start()
        # the request is out (5 s before its chunk): the policy waits for it now
        assert _until(lambda: sent.steps, 30), "the observation was never published"
        closed_at = time.monotonic()
        close_private_link()
        thread.join(timeout=10)
        assert not thread.is_alive() and time.monotonic() - closed_at < 3.0
        (result,) = outcome
        assert isinstance(result, RuntimeError) and "closed" in str(result), result
    finally:
        policy.close()


class _Sent:
    """The remote provider's observation publisher, noting the step of each message sent."""

    def __init__(self, publisher) -> None:
        self._publisher = publisher
        self.steps: list[int] = []

    def publish(self, msg) -> None:
        self._publisher.publish(msg)
        self.steps.append(int(msg.step))

    def get_subscription_count(self) -> int:
        return self._publisher.get_subscription_count()


def _until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_chunk_stamps_follow_the_servers_clock() -> None:
    """The server stamps chunks from the system clock while ROS time is off (what the
    node's clock reads then) and from the node's clock once use_sim_time turns it on."""
    import rclpy
    from rclpy.parameter import Parameter
    from robokernel_ros.nodes.policy_server import PolicyServer

    context = rclpy.Context()
    rclpy.init(context=context)
    server = PolicyServer(context=context)
    try:
        server.autostart()  # configure loads the policy, activate serves it
        assert server.ready, server.detail
        obs = wire.observation_to_msg({"joint_positions": {"a": 0.0}}, run_id="r", step=3)
        before = time.time_ns()
        chunk = server.infer(obs)
        stamp = chunk.header.stamp.sec * 1_000_000_000 + chunk.header.stamp.nanosec
        assert before <= stamp <= time.time_ns()
        assert (chunk.obs_step, list(chunk.keys)) == (3, ["a"])
        server.set_parameters([Parameter("use_sim_time", Parameter.Type.BOOL, True)])
        chunk = server.infer(obs)  # no /clock published: ROS time reads 0
        assert (chunk.header.stamp.sec, chunk.header.stamp.nanosec) == (0, 0)
        server.set_parameters([Parameter("use_sim_time", Parameter.Type.BOOL, False)])
        chunk = server.infer(obs)
        assert chunk.header.stamp.sec * 1_000_000_000 + chunk.header.stamp.nanosec >= before
    finally:
        server.destroy_node()
        rclpy.try_shutdown(context=context)


def test_direct_reader_drains_what_waits_and_answers_the_first_after_a_wait() -> None:
    """DirectReader.take: every message already waiting at once; after a wait, the first
    one that came (returned without another take), and what came with it next call."""
    import threading

    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("direct_reader_test", context=context)
    qos = QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
    )
    reader = DirectReader(node, String, "/direct_reader_test", qos)
    pub = node.create_publisher(String, "/direct_reader_test", qos)
    try:
        assert _until(lambda: reader.publisher_count() > 0, 10)
        for text in ("a", "b", "c"):
            pub.publish(String(data=text))
        assert pub.wait_for_all_acked(Duration(seconds=10))  # they arrived at the reader
        assert [m.data for m in reader.take(1.0)] == ["a", "b", "c"]
        assert reader.take(0.0) == []

        def later() -> None:
            time.sleep(0.2)
            pub.publish(String(data="d"))
            pub.publish(String(data="e"))

        threading.Thread(target=later).start()
        assert [m.data for m in reader.take(5.0)] == ["d"]
        assert [m.data for m in reader.take(5.0)] == ["e"]
    finally:
        reader.close()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_observation_view_is_the_observation_dict_converted_as_read(monkeypatch) -> None:
    """What the server hands its policy: msg_to_observation's dict, each entry converted
    when first read (a policy reading only the joints never converts the images)."""
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    obs = {
        "joint_positions": {"j1": 0.5, "j2": -1.0},
        "joint_velocities": {"j1": 0.1, "j2": 0.0},
        "actuator_targets": {"m1": 0.25},
        "images": {"front": image},
        "ee_pos": np.array([1.0, 2.0, 3.0]),
    }
    msg = wire.observation_to_msg(obs, run_id="r", step=1)
    converted = []
    real = wire.image_from_msg
    monkeypatch.setattr(wire, "image_from_msg", lambda m: converted.append(1) or real(m))
    view = wire.ObservationView(msg)
    assert view["joint_positions"] == obs["joint_positions"]
    assert view.get("actuator_targets") == {"m1": 0.25} and "missing" not in view
    assert view.get("missing", 7) == 7 and "joint_velocities" in view
    assert converted == []  # the images were not read
    np.testing.assert_array_equal(view["images"]["front"], image)
    assert converted == [1]
    positions = view["joint_positions"]
    whole = wire.msg_to_observation(msg)
    assert sorted(view) == sorted(whole) and len(view) == len(whole)
    assert view["joint_positions"] is positions  # an entry read stays the same object
    np.testing.assert_array_equal(view["ee_pos"], obs["ee_pos"])
    view["extra"] = 1.0
    assert view["extra"] == 1.0 and dict(view).keys() == {*whole, "extra"}
    del view["extra"]
    assert "extra" not in view
    # Without velocities or images those entries are absent, as in the dict.
    bare = wire.ObservationView(
        wire.observation_to_msg({"joint_positions": {"a": 1.0}}, run_id="r", step=0)
    )
    assert (
        "joint_velocities" not in bare
        and "images" not in bare
        and dict(bare) == {"joint_positions": {"a": 1.0}}
    )
    # An array entry merging into the joints' entry reads as msg_to_observation's.
    odd = wire.observation_to_msg({"joint_positions": {"a": 1.0}}, run_id="r", step=0)
    odd.arrays = [wire._named_array("joint_positions/b", [2.0])]
    assert wire.ObservationView(odd)["joint_positions"] == {"a": 1.0, "b": 2.0}


def test_a_resent_observation_gets_the_same_chunk_without_a_second_inference(
    mock_server, module_processes, ros
) -> None:
    """The remote provider publishes an unanswered observation again (RESEND_S): the
    server answers the repeat with the chunk it computed, so its policy (stateful: the
    scripted one integrates its command) sees each observation once."""
    from robokernel_ros.ros import wire
    from robokernel_ros.ros.qos import CHUNK_QOS, OBSERVATION_QOS, STATUS_QOS

    from robokernel_interfaces.msg import ActionChunk, Observation, PolicyServerStatus

    ns = "/ps_mock"  # the module's server: other tests' inferences are in its count
    server = mock_server
    began = time.time_ns()
    chunks = ros.collect(ActionChunk, f"{ns}/action_chunk", CHUNK_QOS)
    status = ros.collect(PolicyServerStatus, f"{ns}/policy_server/status", STATUS_QOS)
    wait_active(ros.node, f"{ns}/policy_server", timeout_s=30)

    def _stamp(msg) -> int:
        return msg.stamp.sec * 1_000_000_000 + msg.stamp.nanosec

    # its count before this test: a heartbeat stamped after the test began (the earlier
    # tests' requests were all answered by then)
    assert ros.wait_until(lambda: status and _stamp(status[-1]) >= began, 30)
    before = status[-1].chunks_served
    pub = ros.node.create_publisher(Observation, f"{ns}/observation", OBSERVATION_QOS)
    assert ros.wait_until(
        lambda: pub.get_subscription_count() and ros.node.count_publishers(f"{ns}/action_chunk"),
        30,
    )
    obs = {"joint_positions": {"a": 0.0, "b": 1.0}}

    def send(step: int, want: int) -> None:
        # published until `want` chunks have come (the first copy may precede matching)
        msg = wire.observation_to_msg(obs, run_id="resend", step=step)
        assert ros.wait_until(lambda: (pub.publish(msg), len(chunks) >= want)[1], 30, 0.3)

    send(7, 1)
    served = len(chunks)
    send(7, served + 1)  # the same observation again
    send(8, len(chunks) + 1)  # a new one
    steps = [c.obs_step for c in list(chunks)]
    assert set(steps) == {7, 8} and steps[-1] == 8, steps
    first_sevens = [c for c in list(chunks) if c.obs_step == 7]
    assert len({tuple(c.actions) for c in first_sevens}) == 1, "a repeat got another chunk"
    # one inference per distinct observation: the heartbeat's count, published after
    assert ros.wait_until(lambda: status[-1].chunks_served == before + 2, 10), (
        status[-1].chunks_served, before, steps,
    )  # fmt: skip
    assert server.poll() is None, module_processes.log(server)


class _LosesFirstCopy:
    """The remote provider's observation publisher, losing the first copy of one step's
    observation on the way (fault injection: every other copy reaches DDS)."""

    def __init__(self, publisher, step: int) -> None:
        self._publisher = publisher
        self._step = step
        self.sent: list[tuple[int, float]] = []

    def publish(self, msg) -> None:
        self.sent.append((int(msg.step), time.monotonic()))
        if int(msg.step) == self._step and sum(s == self._step for s, _ in self.sent) == 1:
            return
        self._publisher.publish(msg)

    def get_subscription_count(self) -> int:
        return self._publisher.get_subscription_count()


def test_a_lost_copy_is_resent_after_a_few_round_trips_not_after_resend_s(
    mock_server, module_processes, caplog
) -> None:
    """An observation or chunk lost on the way costs four of the recent round trips
    (resend_after_s), not RESEND_S: at 50 Hz, 0.2 s was 10 holds and then a jump that the
    shield clipped. The late chunk is warned about, with the real longest round trip."""
    from robokernel_ros.ros.remote_policy import MIN_RESEND_S, RESEND_FACTOR, RESEND_S

    server = mock_server
    policy = create_policy("remote", namespace="/ps_mock", ready_timeout_s=30)
    try:
        policy.set_robot_state_keys(["a", "b"])
        policy.reset()
        obs = {"joint_positions": {"a": 0.0, "b": 1.0}}
        assert policy.resend_after_s() == RESEND_S  # no round trip known yet
        for step in range(5):
            policy.get_actions(obs, step=step)
        longest = max(rt for _, _, rt in policy.chunk_log)
        wait = policy.resend_after_s()
        assert wait == min(RESEND_S, max(MIN_RESEND_S, RESEND_FACTOR * longest))
        lossy = _LosesFirstCopy(policy._obs_pub, step=5)
        policy._obs_pub = lossy
        caplog.set_level(logging.DEBUG, logger="robokernel_ros.ros.remote_policy")
        chunk = policy.get_actions(obs, step=5)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "step 5" in warned[0], warned
        assert f"round trips: {1000 * longest:.0f} ms" in warned[0], (warned, longest)
        assert len(chunk) == 4 and policy.chunk_log[-1][0] == 5
        copies = [t for s, t in lossy.sent if s == 5]
        assert len(copies) == 2 and policy.resends == 1
        assert wait - 0.002 <= copies[1] - copies[0] <= wait + 0.1, (copies[1] - copies[0], wait)
        if longest < RESEND_S / RESEND_FACTOR / 2:  # the mock answers in a few ms
            assert copies[1] - copies[0] < RESEND_S / 2
    finally:
        policy.close()
    assert server.poll() is None, module_processes.log(server)


def test_a_policy_slower_than_the_resend_cap_is_not_warned_about_every_chunk(
    processes, caplog
) -> None:
    """A policy whose inference takes longer than RESEND_S (a VLA at 0.3 s a chunk) gets
    its observation published again at RESEND_S every request, answered from the server's
    cache: a routine copy, logged at debug, not a warning per chunk."""
    from robokernel_ros.ros.remote_policy import RESEND_S

    latency = 1.5 * RESEND_S
    server = _server(processes, "/ps_slow", "mock", {"execution_horizon": 4, "latency_s": latency},
                     "action_keys:=[a,b]")  # fmt: skip
    policy = create_policy("remote", namespace="/ps_slow", ready_timeout_s=30)
    caplog.set_level(logging.DEBUG, logger="robokernel_ros.ros.remote_policy")
    try:
        policy.set_robot_state_keys(["a", "b"])
        policy.reset()
        obs = {"joint_positions": {"a": 0.0, "b": 1.0}}
        for step in range(3):
            assert len(policy.get_actions(obs, step=step)) == 4
        assert policy.resends >= 3  # each request's copy at RESEND_S, before its chunk
        assert min(rt for _, _, rt in policy.chunk_log) >= latency
    finally:
        policy.close()
    routine = [r for r in caplog.records if "published it again" in r.getMessage()]
    assert len(routine) >= 3 and all(r.levelno == logging.DEBUG for r in routine), [
        (r.levelname, r.getMessage()) for r in routine
    ]
    assert server.poll() is None, processes.log(server)
