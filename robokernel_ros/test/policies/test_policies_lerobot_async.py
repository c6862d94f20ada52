"""The `lerobot_async` provider against LeRobot's own async-inference PolicyServer (started
as bench/lerobot_inference.py starts it, a child process serving a small ACT built
locally): the same actions as the `lerobot` provider on the same checkpoint, in real
MuJoCo episodes; refusals named."""

from __future__ import annotations

import contextlib
import shlex
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from lerobot_test_helpers import SO101

pytestmark = pytest.mark.usefixtures("lerobot_available")
pytest.importorskip("grpc")

from robokernel_ros.policies import PolicyAgent, create_policy  # noqa: E402
from robokernel_ros.policies.lerobot_async import LerobotAsyncPolicy, is_loopback  # noqa: E402

envs = pytest.importorskip("robokernel_ros.envs")
from robokernel_ros.kernel import EpisodeRunner  # noqa: E402


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def lerobot_server(processes, tmp_path: Path):
    port = _free_port()
    # cwd: the server writes logs/policy_server_<time>.log where it runs; no artificial latency
    command = (f"cd {shlex.quote(str(tmp_path))} && exec {shlex.quote(sys.executable)} -m "
               f"lerobot.async_inference.policy_server --host=127.0.0.1 --port={port} "
               "--inference_latency=0")  # fmt: skip
    return processes.start("lerobot_policy_server", ["bash", "-c", command]), port


@contextlib.contextmanager
def _so101_env():
    scene = envs.MujocoScene()
    scene.add_robot("arm", "so101")
    scene.add_camera("front", pos=(0.6, 0.0, 0.5), lookat=(0.0, 0.0, 0.1))
    try:
        yield scene.make_env("arm", control_hz=50, cameras=["front"], image_size=(64, 64))
    finally:
        scene.close()


@pytest.fixture
def so101_env():
    with _so101_env() as env:
        yield env


def _episode(env, policy, steps: int) -> tuple[object, list[np.ndarray]]:
    chunks: list[np.ndarray] = []
    get = policy.get_actions

    def recorded(*args, **kwargs):
        chunk = get(*args, **kwargs)
        chunks.append(np.array([[a[k] for k in SO101] for a in chunk]))
        return chunk

    policy.get_actions = recorded
    policy.set_robot_state_keys(env.env_spec.action_keys)
    record = EpisodeRunner(env, PolicyAgent(policy)).run(steps, seed=0, instruction="reach")
    return record, chunks


def test_an_episode_through_lerobots_policy_server_runs_the_lerobot_providers_actions(
    lerobot_server, so101_env, ckpt_act: Path
) -> None:
    proc, port = lerobot_server
    remote = create_policy("lerobot_async", server_address=f"127.0.0.1:{port}",
                           path=str(ckpt_act), connect_timeout_s=60, load_timeout_s=120)  # fmt: skip
    try:
        assert remote.execution_horizon == 5  # the checkpoint's n_action_steps
        served, served_chunks = _episode(so101_env, remote, 15)
    finally:
        remote.close()
    local = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    with _so101_env() as env:  # a fresh scene: the same first observation
        direct, direct_chunks = _episode(env, local, 15)
    assert served.error is None and direct.error is None, (served.error, direct.error)
    assert served.steps == direct.steps == 15
    assert len(served_chunks) == len(direct_chunks) == 3
    for a, b in zip(served_chunks, direct_chunks, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert proc.poll() is None


def test_a_chunk_of_the_wrong_width_ends_the_episode_naming_it(
    lerobot_server, so101_env, ckpt_act: Path
) -> None:
    _proc, port = lerobot_server
    policy = create_policy("lerobot_async", server_address=f"127.0.0.1:{port}",
                           path=str(ckpt_act), action_names=list(SO101[:5]),
                           connect_timeout_s=60, load_timeout_s=120)  # fmt: skip
    try:
        record, chunks = _episode(so101_env, policy, 10)
    finally:
        policy.close()
    assert record.error is not None and "chunk of width 6" in record.error["message"]
    assert record.steps == 0 and chunks == []  # the robot never moved


def test_a_server_not_on_this_machine_is_refused_before_any_connection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("10.1.2.3") and not is_loopback("gpu-box")
    started = time.monotonic()
    with pytest.raises(ValueError, match="allow_remote_pickle"):
        create_policy("lerobot_async", server_address="10.1.2.3:8080", path="/ckpt")
    assert time.monotonic() - started < 1.0
    # with the user's consent the address passes preflight (nothing is contacted here)
    LerobotAsyncPolicy.preflight(
        {"server_address": "10.1.2.3:8080", "path": "/ckpt", "allow_remote_pickle": True}
    )
    with pytest.raises(ValueError, match="allow_remote_pickle"):
        LerobotAsyncPolicy.preflight(
            {"server_address": "h:1", "path": "/c", "allow_remote_pickle": "yes"}
        )


def test_a_dead_server_is_refused_naming_the_address() -> None:
    port = _free_port()
    with pytest.raises(ConnectionError, match=f"no LeRobot PolicyServer at 127.0.0.1:{port}"):
        create_policy("lerobot_async", server_address=f"127.0.0.1:{port}", path="/ckpt",
                      connect_timeout_s=1.0)  # fmt: skip


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"server_address": "nohost"}, "server_address"),
        ({"server_address": "127.0.0.1:99999", "path": "/c"}, "server_address"),
        ({}, "pretrained_name_or_path"),
        ({"path": "/c", "actions_per_chunk": 0}, "actions_per_chunk"),
        ({"path": "/c", "state_names": "abc"}, "state_names"),
        ({"path": "/c", "chunk_timeout_s": 0}, "chunk_timeout_s"),
        ({"path": "/c", "pickle": True}, "pickle"),
    ],
)
def test_preflight_refuses_a_bad_config_naming_the_key(config, key) -> None:
    with pytest.raises(ValueError, match=key):
        LerobotAsyncPolicy.preflight(config)


class _BadServicer:
    """LeRobot's AsyncInference service answering GetActions with `answer` (bytes or None)."""

    def __init__(self, answer: bytes | None) -> None:
        from lerobot.transport import services_pb2

        self.pb2, self.answer = services_pb2, answer

    def Ready(self, request, context):  # noqa: N802 - gRPC's method names
        return self.pb2.Empty()

    def SendPolicyInstructions(self, request, context):  # noqa: N802
        return self.pb2.Empty()

    def SendObservations(self, request_iterator, context):  # noqa: N802
        for _ in request_iterator:
            pass
        return self.pb2.Empty()

    def GetActions(self, request, context):  # noqa: N802
        if self.answer is None:
            return self.pb2.Empty()
        return self.pb2.Actions(data=self.answer)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"\x80\x05 this is not a pickle", "answered garbage"),
        (__import__("pickle").dumps([1, 2]), "not a list of TimedAction"),
        (None, "answered no chunk"),
    ],
)
def test_a_server_that_answers_garbage_ends_the_episode_before_any_step(
    so101_env, answer: bytes | None, reason: str
) -> None:
    from concurrent import futures

    import grpc
    from lerobot.transport import services_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(_BadServicer(answer), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        policy = create_policy("lerobot_async", server_address=f"127.0.0.1:{port}",
                               path="/nowhere", actions_per_chunk=5)  # fmt: skip
        try:
            record, chunks = _episode(so101_env, policy, 10)
        finally:
            policy.close()
    finally:
        server.stop(grace=None).wait(5)
    assert record.error is not None and reason in record.error["message"], record.error
    assert record.steps == 0 and chunks == []


def test_the_eval_command_runs_on_lerobots_policy_server(
    lerobot_server, ckpt_act: Path, capsys
) -> None:
    import json

    from robokernel_ros import cli

    _proc, port = lerobot_server
    reports = {}
    for provider, config in (
        ("lerobot_async", {"server_address": f"127.0.0.1:{port}", "path": str(ckpt_act),
                           "connect_timeout_s": 60}),
        ("lerobot", {"path": str(ckpt_act), "device": "cpu"}),
    ):  # fmt: skip
        argv = ["eval", "--robot", "so101", "--policy", provider, "--max-steps", "10",
                "--no-trace", "--add-camera", "front", "--image-size", "64x64", "--json",
                "--policy-config", json.dumps(config)]  # fmt: skip
        assert cli.main(argv) == 0, capsys.readouterr().err
        reports[provider] = json.loads(capsys.readouterr().out)
    served, direct = reports["lerobot_async"]["episodes"][0], reports["lerobot"]["episodes"][0]
    assert served["actions_applied"] == direct["actions_applied"] == 10
    assert served["error"] is None and served["outcome"] == direct["outcome"]
    for key in ("chunks", "holds", "safety_interventions", "total_reward"):
        assert served[key] == direct[key], key
