"""The policy_server's openpi endpoint, driven by openpi's own client (`openpi_client`,
from the package index) and by this project's `openpi` provider, beside the ROS path:
real server processes, real websockets, real DDS."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("rclpy")
openpi_client = pytest.importorskip("openpi_client.websocket_client_policy")

from robokernel_ros.policies import create_policy  # noqa: E402
from websockets.exceptions import ConnectionClosedError, InvalidStatus  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

SERVER = "robokernel_ros.nodes.policy_server"
KEYS = ("a", "b", "c")
KEY = "s3cret"
OBSERVATIONS = [{"a": 0.1 * i, "b": -0.2 * i, "c": 0.05} for i in range(4)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(group, ns: str, provider: str, config: dict, *extra: str):
    port = _free_port()
    args = ["--ros-args", "-r", f"__ns:={ns}", "-p", f"provider:={provider}",
            "-p", "autostart:=true", "-p", f"policy_config_json:='{json.dumps(config)}'",
            "-p", f"openpi_port:={port}", "-p", "openpi_host:=127.0.0.1"]  # fmt: skip
    for item in extra:
        args += ["-p", item]
    proc = group.python(f"policy_server{ns.replace('/', '_')}", SERVER, *args)
    _wait_healthy(port, proc, group)
    return proc, port


def _health(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_healthy(port: int, proc, group, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, group.log(proc)
        try:
            if _health(port)[0] == 200:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.2)
    raise AssertionError(f"the openpi endpoint never answered /healthz 200:\n{group.log(proc)}")


def _ros_chunks(ns: str, instruction: str) -> list[np.ndarray]:
    policy = create_policy("remote", namespace=ns, ready_timeout_s=30)
    try:
        policy.set_robot_state_keys(list(KEYS))
        policy.reset(instruction=instruction)
        out = []
        for step, joints in enumerate(OBSERVATIONS):
            chunk = policy.get_actions({"joint_positions": joints}, instruction, step=step)
            out.append(np.array([[row[k] for k in KEYS] for row in chunk]))
        return out
    finally:
        policy.close()


@pytest.fixture(scope="module")
def _mock_server(module_processes, shared_domain):
    proc, port = _start(module_processes, "/openpi_mock", "mock", {"execution_horizon": 5, "seed": 7},
                        "action_keys:=[a,b,c]", f"openpi_api_key:={KEY}")  # fmt: skip
    return proc, port, module_processes


@pytest.fixture
def mock_server(_mock_server):
    """A mock policy_server (5-action chunks, seeded: every episode the same) with the
    openpi endpoint and an API key: one for the module's tests (each client's episode
    starts the mock anew), alive and healthy when a test gets it."""
    proc, port, group = _mock_server
    _wait_healthy(port, proc, group)
    return _mock_server


def _openpi_chunks(client, instruction: str) -> list[np.ndarray]:
    return [
        client.infer({"state": np.array([j[k] for k in KEYS]), "prompt": instruction})
        for j in OBSERVATIONS
    ]


def test_openpi_client_gets_the_chunks_the_ros_path_gets_from_the_mock(mock_server) -> None:
    proc, port, group = mock_server
    ros = _ros_chunks("/openpi_mock", "reach")
    client = openpi_client.WebsocketClientPolicy("127.0.0.1", port, api_key=KEY)
    try:
        meta = client.get_server_metadata()
        assert meta["provider"] == "mock" and meta["action_names"] == list(KEYS)
        answers = _openpi_chunks(client, "reach")
    finally:
        client._ws.close()
    assert len(answers) == len(ros)
    for answer, chunk in zip(answers, ros, strict=True):
        assert answer["actions"].shape == (5, 3)
        np.testing.assert_array_equal(answer["actions"], chunk)
        assert answer["server_timing"]["infer_ms"] >= 0.0
    assert "prev_total_ms" in answers[-1]["server_timing"]
    assert len({a["actions"].tobytes() for a in answers}) == len(answers)  # the mock moves
    assert proc.poll() is None, group.log(proc)


def test_our_openpi_provider_gets_the_same_chunks_from_our_endpoint(mock_server) -> None:
    _proc, port, _group = mock_server
    ros = _ros_chunks("/openpi_mock", "reach")
    policy = create_policy("openpi", host="127.0.0.1", port=port, api_key=KEY)
    try:
        policy.set_robot_state_keys(list(KEYS))
        policy.reset(instruction="reach")
        for joints, chunk in zip(OBSERVATIONS, ros, strict=True):
            got = policy.get_actions({"joint_positions": joints}, "reach")
            np.testing.assert_array_equal(np.array([[r[k] for k in KEYS] for r in got]), chunk)
        report = policy.timing_report()
        assert report["chunks"] == len(OBSERVATIONS)
        assert 0.0 <= report["server_infer_ms_p50"] <= report["round_trip_ms_p50"]
    finally:
        policy.close()


def test_a_client_without_the_api_key_is_refused_at_the_handshake(mock_server) -> None:
    _proc, port, _group = mock_server
    for key in (None, "wrong"):
        with pytest.raises(InvalidStatus) as info:
            openpi_client.WebsocketClientPolicy("127.0.0.1", port, api_key=key)
        assert info.value.response.status_code == 401
    with pytest.raises(ConnectionError, match="refused the API key"):
        create_policy("openpi", host="127.0.0.1", port=port, api_key="wrong")
    assert _health(port)[0] == 200  # the health check needs no key


def test_an_observation_the_endpoint_cannot_read_is_answered_with_a_text_frame_and_a_close(
    mock_server,
) -> None:
    _proc, port, _group = mock_server
    headers = {"Authorization": f"Api-Key {KEY}"}
    for frame, reason in ((b"\xc1 not msgpack", "not an openpi msgpack message"),
                          (b"\x81\xa6prompt\xa1x", "no state key 'state'")):  # fmt: skip
        with connect(f"ws://127.0.0.1:{port}", additional_headers=headers) as ws:
            ws.recv(timeout=10)  # the metadata frame
            ws.send(frame)
            text = ws.recv(timeout=10)
            assert isinstance(text, str) and reason in text, text
            with pytest.raises(ConnectionClosedError) as info:
                ws.recv(timeout=10)
            assert info.value.rcvd.code == 1011


def test_openpi_client_gets_the_chunks_the_ros_path_gets_from_the_scripted_policy(
    processes,
) -> None:
    config = {"targets": [{"a": 0.5, "b": -0.4, "c": 0.2}], "execution_horizon": 3}
    proc, port = _start(processes, "/openpi_scripted", "scripted", config)
    ros = _ros_chunks("/openpi_scripted", "")
    client = openpi_client.WebsocketClientPolicy("127.0.0.1", port)
    try:
        answers = _openpi_chunks(client, "")
    finally:
        client._ws.close()
    for answer, chunk in zip(answers, ros, strict=True):
        np.testing.assert_array_equal(answer["actions"], chunk)
    assert not np.array_equal(answers[0]["actions"][0], answers[0]["actions"][-1])  # it moves
    assert proc.poll() is None, processes.log(proc)


def test_a_bad_openpi_mapping_stops_the_server_naming_the_parameter(processes) -> None:
    proc = processes.python(
        "policy_server_bad_mapping", SERVER, "--ros-args", "-p", "openpi_port:=0",
        "-p", "openpi_mapping:='{\"image_layout\": \"cwh\"}'",
    )  # fmt: skip
    assert proc.wait(timeout=60) == 2
    log = processes.log(proc)
    assert "openpi_mapping" in log and "image_layout" in log, log


def test_an_inactive_policy_server_refuses_openpi_clients_naming_its_state(processes) -> None:
    port = _free_port()
    proc = processes.python(
        "policy_server_inactive", SERVER, "--ros-args", "-r", "__ns:=/openpi_inactive",
        "-p", f"openpi_port:={port}", "-p", "openpi_host:=127.0.0.1",
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:  # listening, not serving: no autostart, so the lifecycle node is unconfigured
        assert proc.poll() is None, processes.log(proc)
        try:
            status, text = _health(port)
            break
        except OSError:
            assert time.monotonic() < deadline, processes.log(proc)
            time.sleep(0.2)
    assert status == 503 and "unconfigured" in text, text
    with pytest.raises(InvalidStatus) as info:
        openpi_client.WebsocketClientPolicy("127.0.0.1", port)
    assert info.value.response.status_code == 503
    with pytest.raises(ConnectionError, match="HTTP 503"):
        create_policy("openpi", host="127.0.0.1", port=port)
