"""The `openpi` provider against a minimal openpi server written on openpi-client's own
codec (openpi_client.msgpack_numpy; openpi's server package is not installable here):
real websockets on loopback, real MuJoCo episodes through the kernel."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from lerobot_test_helpers import SO101

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")

from robokernel_ros.policies import PolicyAgent, create_policy  # noqa: E402
from robokernel_ros.policies.openpi import OpenpiPolicy  # noqa: E402
from websockets.sync.server import serve  # noqa: E402

envs = pytest.importorskip("robokernel_ros.envs")
from robokernel_ros.kernel import EpisodeRunner  # noqa: E402

HORIZON = 4
OFFSET = np.linspace(-0.02, 0.03, len(SO101))


class MiniOpenpiServer:
    """openpi's WebsocketPolicyServer loop, on openpi-client's msgpack_numpy: metadata on
    connect, then {"actions": state + offsets, "server_timing"} per observation.
    `mode` from call `fail_from` on: "garbage" (bytes that are not msgpack), "wide" (a
    chunk one column too wide), "error" (openpi's text frame and close), "silent" (no
    answer). `api_key`: refuse other keys at the handshake (HTTP 401)."""

    def __init__(self, mode: str = "ok", fail_from: int = 0, api_key: str = "") -> None:
        self.mode, self.fail_from, self.api_key = mode, fail_from, api_key
        self.calls = 0
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None,
                            process_request=self._check)  # fmt: skip
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _check(self, connection: Any, request: Any) -> Any:
        if self.api_key and request.headers.get("Authorization") != f"Api-Key {self.api_key}":
            return connection.respond(401, "bad key\n")
        return None

    def _handle(self, ws: Any) -> None:
        packer = msgpack_numpy.Packer()
        ws.send(packer.pack({"note": "mini openpi server"}))
        for frame in ws:
            obs = msgpack_numpy.unpackb(frame)
            self.requests.append(obs)
            call, self.calls = self.calls, self.calls + 1
            mode = self.mode if call >= self.fail_from else "ok"
            state = np.asarray(obs["state"])
            actions = np.tile(state + OFFSET[: len(state)], (HORIZON, 1)).astype(np.float32)
            if mode == "garbage":
                ws.send(b"\xc1\xc1 this is not msgpack")
            elif mode == "wide":
                ws.send(packer.pack({"actions": np.hstack([actions, actions[:, :1]])}))
            elif mode == "error":
                ws.send("Traceback (most recent call last):\n  ValueError: policy exploded")
                ws.close(1011, "Internal server error.")
                return
            elif mode == "silent":
                self.release.wait(10)
                return
            else:
                ws.send(packer.pack({"actions": actions, "server_timing": {"infer_ms": 1.5}}))

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.thread.join(timeout=5)


@pytest.fixture
def mini() -> Iterator[Any]:
    servers: list[MiniOpenpiServer] = []

    def start(**kwargs: Any) -> MiniOpenpiServer:
        servers.append(MiniOpenpiServer(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
        assert not server.thread.is_alive()


@pytest.fixture(scope="module")
def so101_env():
    scene = envs.MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm", control_hz=50)
    yield env
    scene.close()


def _episode(env, policy, steps: int):
    policy.set_robot_state_keys(env.env_spec.action_keys)
    return EpisodeRunner(env, PolicyAgent(policy)).run(steps, seed=0, instruction="reach")


def test_an_episode_runs_on_the_chunks_of_an_openpi_server(mini, so101_env) -> None:
    server = mini()
    policy = create_policy("openpi", host="127.0.0.1", port=server.port)
    seen: list[list[dict[str, float]]] = []
    get = policy.get_actions
    policy.get_actions = lambda *a, **k: seen.append(get(*a, **k)) or seen[-1]
    try:
        record = _episode(so101_env, policy, 12)
    finally:
        policy.close()
    assert record.error is None, record.error
    assert record.steps == 12 and server.calls == 12 // HORIZON
    first = server.requests[0]
    assert first["prompt"] == "reach" and first["state"].shape == (len(SO101),)
    for request, chunk in zip(server.requests, seen, strict=True):
        expected = (np.asarray(request["state"]) + OFFSET).astype(np.float32)
        assert len(chunk) == HORIZON and list(chunk[0]) == list(SO101)
        np.testing.assert_array_equal([chunk[0][k] for k in SO101], expected)
    report = policy.timing_report()
    assert report["chunks"] == 12 // HORIZON and report["server_infer_ms_p50"] == 1.5
    assert report["round_trip_ms_p50"] > 0


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "answered garbage"),
        ("wide", f"a chunk of width {len(SO101) + 1}"),
        ("error", "refused the observation: Traceback"),
        ("silent", "within chunk_timeout_s=2"),
    ],
)
def test_a_bad_answer_ends_the_episode_with_its_reason_and_the_robot_holds(
    mini, so101_env, mode: str, reason: str
) -> None:
    server = mini(mode=mode, fail_from=1)
    # 2 s: long enough for the first (good) chunk on a loaded machine, short for the test
    timeout = 2.0 if mode == "silent" else 10.0
    policy = create_policy("openpi", host="127.0.0.1", port=server.port, chunk_timeout_s=timeout)
    try:
        record = _episode(so101_env, policy, 12)
    finally:
        policy.close()
    assert record.error is not None and reason in record.error["message"], record.error
    # the first chunk ran; nothing after the bad answer moved the robot
    assert record.steps == HORIZON and server.calls == 2


def test_a_wrong_api_key_and_a_dead_server_are_refused_before_any_episode(mini) -> None:
    server = mini(api_key="right")
    with pytest.raises(ConnectionError, match="refused the API key"):
        create_policy("openpi", host="127.0.0.1", port=server.port, api_key="wrong")
    create_policy("openpi", host="127.0.0.1", port=server.port, api_key="right").close()
    port = server.port
    server.close()
    with pytest.raises(ConnectionError, match=f"no openpi server at ws://127.0.0.1:{port}"):
        create_policy("openpi", host="127.0.0.1", port=port, connect_timeout_s=2)


def test_the_mapping_lays_out_a_policys_own_keys(mini) -> None:
    """LIBERO-style flat keys, a split state and a renamed chunk: what the server sees."""
    server = mini()
    mapping = {"state": {"state": list(SO101[:5]), "observation/gripper": ["gripper"]},
               "flat_keys": True, "prompt": "task"}  # fmt: skip
    policy = create_policy("openpi", host="127.0.0.1", port=server.port, mapping=mapping)
    try:
        policy.set_robot_state_keys(SO101[:5])  # the chunk's 5 columns
        joints = {j: 0.1 * i for i, j in enumerate(SO101)}  # gripper: 0.5
        chunk = policy.get_actions({"joint_positions": joints}, "stack")
    finally:
        policy.close()
    request = server.requests[0]
    assert request["task"] == "stack" and list(request["observation/gripper"]) == [0.5]
    np.testing.assert_array_equal(request["state"], [joints[j] for j in SO101[:5]])
    assert list(chunk[0]) == list(SO101[:5])


def test_preflight_refuses_a_bad_config_naming_the_key() -> None:
    for config, key in (
        ({"port": 0}, "port"),
        ({"host": ""}, "host"),
        ({"chunk_timeout_s": -1}, "chunk_timeout_s"),
        ({"mapping": {"image_layout": "cwh"}}, "image_layout"),
        ({"mapping": {"state": 3}}, "state"),
        ({"portt": 1}, "portt"),
    ):
        with pytest.raises(ValueError, match=key):
            OpenpiPolicy.preflight(config)


def test_an_eval_through_the_rollout_api_runs_on_an_openpi_server(mini) -> None:
    from robokernel_ros.rollout import SimWorkcell

    server = mini()
    cell = SimWorkcell(trace_dir=None)
    try:
        cell.add_robot("arm", "so101")
        config = {"host": "127.0.0.1", "port": server.port}
        result = cell.eval_policy("arm", policy_provider="openpi", policy_config=config,
                                  n_episodes=2, max_steps=8)  # fmt: skip
        assert result["status"] == "success", result
        assert server.calls == 2 * 8 // HORIZON
        refused = cell.eval_policy("arm", policy_provider="openpi", n_episodes=1, max_steps=8,
                                   policy_config={**config, "mapping": {"image_layout": "x"}})  # fmt: skip
        assert refused["status"] == "error" and "image_layout" in str(refused["content"])
        assert server.calls == 2 * 8 // HORIZON  # the refused call sent nothing
    finally:
        cell.close()
