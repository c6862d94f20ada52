"""Benchmark of the field's policy protocols (issue 39), each next to its anchor in the same run.

    python bench/policy_protocols.py [--quick] [--rounds N] [--no-lerobot]

1. openpi endpoint: one observation (two 224x224 RGB images, a 7-joint state and a
   prompt) sent by openpi's own client (openpi_client.WebsocketClientPolicy) to the
   policy_server's openpi endpoint (a child process, the mock provider, 10 x 7 chunks),
   next to the same message sent by the same client to a bare websocket server on
   openpi-client's codec (a child: it decodes the observation with msgpack_numpy and
   answers a 10 x 7 chunk and server_timing, no policy, no mapping). The two take turns
   call by call. Target: the endpoint's round trip at most 1.3x the bare one at p50.
2. providers: one chunk as the runner asks for it (the provider's get_actions, the
   observation in this project's layout, the chunk bound to the robot's keys), through
   - remote: the ROS 2 provider to the policy_server (the anchor),
   - openpi: the openpi provider to the same policy_server's openpi endpoint,
   on the mock server (the protocols' own cost) and on a small ACT (random weights,
   LeRobot's own classes; state + one 96x96 camera) served by a second policy_server,
   plus lerobot_async: LeRobot's own async-inference PolicyServer (a child, started as
   bench/lerobot_inference.py starts it) on the same ACT checkpoint. Printed side by
   side, p50 and p99, with the server's own inference time where the protocol reports it;
   no target. --no-lerobot (or no torch) leaves the ACT rows out.

Every child is stopped at the end (SIGINT, then SIGKILL) and dies with this process.
The last line is one JSON object with every figure and the target's verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros" / "test"))

from robokernel_ros.policies import create_policy  # noqa: E402
from robokernel_ros.process import die_with_parent, stop_process_groups  # noqa: E402

TARGET_RATIO = 1.3
HORIZON, JOINTS = 10, 7
NAMES = [f"joint_{i}" for i in range(JOINTS)]
ACT_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)), "n": len(ms)}


def timed_interleaved(fns: dict[str, Callable[[], Any]], n: int, warmup: int, gap_s: float) -> dict[str, dict[str, float]]:  # fmt: skip
    """Each path once per round, round after round (load that comes and goes hits all alike)."""
    for _ in range(warmup):
        for fn in fns.values():
            time.sleep(gap_s)
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
            time.sleep(gap_s)
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: percentiles(values) for name, values in samples.items()}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(argv: list[str], cwd: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
        start_new_session=True, preexec_fn=die_with_parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def start_policy_server(ns: str, provider: str, config: dict[str, Any], port: int, keys: list[str]) -> subprocess.Popen:  # fmt: skip
    return start([
        sys.executable, "-m", "robokernel_ros.nodes.policy_server", "--ros-args",
        "-r", f"__ns:={ns}", "-p", f"provider:={provider}", "-p", "autostart:=true",
        "-p", f"policy_config_json:='{json.dumps(config)}'", "-p", f"action_keys:=[{','.join(keys)}]",
        "-p", f"openpi_port:={port}", "-p", "openpi_host:=127.0.0.1",
    ])  # fmt: skip


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the openpi endpoint on port {port} was not healthy within {timeout_s:g} s")


def openpi_message() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "state": rng.uniform(-1, 1, JOINTS),
        "images": {cam: rng.integers(0, 255, (224, 224, 3), dtype=np.uint8) for cam in ("cam_high", "cam_wrist")},
        "prompt": "pick up the cube",
    }  # fmt: skip


def echo_main(port: int) -> int:
    """The bare anchor: openpi's server loop on openpi-client's codec, no policy."""
    from openpi_client import msgpack_numpy
    from websockets.sync.server import serve

    chunk = np.zeros((HORIZON, JOINTS))

    def handle(ws: Any) -> None:
        packer = msgpack_numpy.Packer()
        ws.send(packer.pack({}))
        for frame in ws:
            started = time.monotonic()
            msgpack_numpy.unpackb(frame)
            infer_ms = 1000 * (time.monotonic() - started)
            ws.send(packer.pack({"actions": chunk, "server_timing": {"infer_ms": infer_ms}}))

    with serve(handle, "127.0.0.1", port, compression=None, max_size=None) as server:
        server.serve_forever()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds (40)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed calls per path (default 300)"
    )
    parser.add_argument("--no-lerobot", action="store_true", help="leave the ACT rows out")
    parser.add_argument(
        "--gap-ms", type=float, default=5.0, help="idle before each call (default 5)"
    )
    parser.add_argument("--echo-port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_port is not None:
        return echo_main(args.echo_port)
    n = args.rounds if args.rounds is not None else (40 if args.quick else 300)
    if n < 1:
        parser.error(f"--rounds={n}: must be at least 1")
    if not 0 <= args.gap_ms <= 1000:
        parser.error(f"--gap-ms={args.gap_ms}: must be in [0, 1000]")
    if importlib.util.find_spec("openpi_client") is None:
        parser.error(
            "openpi_client is not installed (scripts/setup.sh installs requirements/models.txt)"
        )
    with_act = not args.no_lerobot and importlib.util.find_spec("lerobot") is not None
    warmup = 10
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(
        1 + (os.getpid() + 71) % 100
    )
    from robokernel_ros.demo import use_dds_profile

    use_dds_profile()  # the workcell's DDS settings unless the environment has its own
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    figures: dict[str, Any] = {"rounds": n, "warmup_rounds": warmup, "gap_ms": args.gap_ms,
                               "message": "2 x 224x224x3 uint8 + 7 floats + prompt", "chunk": [HORIZON, JOINTS]}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        mock_port, echo_port = free_port(), free_port()
        mock = start_policy_server(
            "/pp_mock", "mock", {"execution_horizon": HORIZON, "seed": 1}, mock_port, NAMES
        )
        echo = start([sys.executable, str(Path(__file__).resolve()), "--echo-port", str(echo_port)])
        stack.callback(stop_process_groups, [mock, echo], 10.0)
        act_procs: dict[str, Any] = {}
        if with_act:
            from fixtures.lerobot import build_tiny_checkpoint

            ckpt = build_tiny_checkpoint(Path(tmp) / "act", kind="act", cameras={"front": (96, 96)},
                                         chunk_size=HORIZON, n_action_steps=HORIZON)  # fmt: skip
            act_port, grpc_port = free_port(), free_port()
            act_procs["server"] = start_policy_server("/pp_act", "lerobot", {"path": str(ckpt), "device": "cpu", "full_chunk": True}, act_port, list(ACT_JOINTS))  # fmt: skip
            act_procs["grpc"] = start([sys.executable, "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
                                       f"--port={grpc_port}", "--inference_latency=0"], cwd=tmp)  # fmt: skip
            stack.callback(stop_process_groups, list(act_procs.values()), 10.0)
        wait_healthy(mock_port, mock)

        # 1. the endpoint against the bare echo, both driven by openpi_client
        message = openpi_message()
        endpoint = WebsocketClientPolicy("127.0.0.1", mock_port)
        stack.callback(endpoint._ws.close)
        deadline = time.monotonic() + 30
        while True:
            try:
                bare = WebsocketClientPolicy("127.0.0.1", echo_port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        stack.callback(bare._ws.close)
        assert endpoint.infer(message)["actions"].shape == (HORIZON, JOINTS)
        infer_ms: list[float] = []

        def through_endpoint() -> None:
            infer_ms.append(endpoint.infer(message)["server_timing"]["infer_ms"])

        rows = timed_interleaved({"openpi_endpoint": through_endpoint, "bare_echo": lambda: bare.infer(message)},
                                 n, warmup, args.gap_ms / 1000)  # fmt: skip
        rows["openpi_endpoint"]["server_infer_p50_ms"] = float(np.median(infer_ms[-n:]))
        figures.update(rows)
        ratio = rows["openpi_endpoint"]["p50_ms"] / rows["bare_echo"]["p50_ms"]
        figures["endpoint_over_echo_p50"] = ratio
        figures["verdicts"] = {
            f"endpoint_at_most_{TARGET_RATIO:g}x_bare_echo_p50": ratio <= TARGET_RATIO
        }

        # 2. the providers as the runner calls them
        def provider_rows(label: str, ns: str, port: int, keys: tuple[str, ...] | list[str],
                          obs: dict[str, Any], extra: dict[str, Callable[[], Any]]) -> None:  # fmt: skip
            remote = create_policy("remote", namespace=ns, ready_timeout_s=120)
            stack.callback(remote.close)
            openpi = create_policy("openpi", host="127.0.0.1", port=port)
            stack.callback(openpi.close)
            for policy in (remote, openpi, *extra.values()):
                policy.set_robot_state_keys(list(keys))
                policy.reset(instruction="reach")
            paths = {"remote": lambda: remote.get_actions(obs, "reach"),
                     "openpi": lambda: openpi.get_actions(obs, "reach")}  # fmt: skip
            paths.update(
                {name: (lambda p=p: p.get_actions(obs, "reach")) for name, p in extra.items()}
            )
            found = timed_interleaved(paths, n, warmup, args.gap_ms / 1000)
            found["remote"]["server_inference_p50_ms"] = 1000 * float(np.median([c[1] for c in list(remote.chunk_log)[-n:]]))  # fmt: skip
            found["openpi"]["server_infer_p50_ms"] = openpi.timing_report()["server_infer_ms_p50"]
            for row in found.values():
                row["over_remote_p50"] = row["p50_ms"] / found["remote"]["p50_ms"]
            figures[label] = found

        positions = {j: 0.1 * i for i, j in enumerate(NAMES)}
        provider_rows(
            "providers_mock", "/pp_mock", mock_port, NAMES, {"joint_positions": positions}, {}
        )
        if with_act:
            wait_healthy(act_port, act_procs["server"])
            rng = np.random.default_rng(1)
            act_obs = {"joint_positions": {j: 0.1 * i for i, j in enumerate(ACT_JOINTS)},
                       "images": {"front": rng.integers(0, 255, (96, 96, 3), dtype=np.uint8)}}  # fmt: skip
            lerobot_async = create_policy("lerobot_async", server_address=f"127.0.0.1:{grpc_port}", path=str(ckpt),
                                          connect_timeout_s=120, load_timeout_s=120)  # fmt: skip
            stack.callback(lerobot_async.close)
            provider_rows(
                "providers_act",
                "/pp_act",
                act_port,
                ACT_JOINTS,
                act_obs,
                {"lerobot_async": lerobot_async},
            )
        else:
            figures["providers_act"] = "not measured: --no-lerobot or LeRobot not installed"

    print(
        f"openpi round trip, {figures['message']} -> {HORIZON}x{JOINTS} chunk (p50 / p99 ms, {n} rounds):"
    )
    for name in ("openpi_endpoint", "bare_echo"):
        row = figures[name]
        print(f"  {name:16s} {row['p50_ms']:7.2f} / {row['p99_ms']:7.2f}")
    held = figures["verdicts"][f"endpoint_at_most_{TARGET_RATIO:g}x_bare_echo_p50"]
    print(
        f"  endpoint / bare echo at p50: {ratio:.2f}x (target <= {TARGET_RATIO:g}x: {'held' if held else 'MISSED'})"
    )
    for label in ("providers_mock", "providers_act"):
        rows = figures[label]
        if isinstance(rows, str):
            print(f"{label}: {rows}")
            continue
        print(f"{label}: one chunk through each provider (p50 / p99 ms; x remote at p50):")
        for name, row in rows.items():
            server = row.get("server_inference_p50_ms", row.get("server_infer_p50_ms"))
            extra = f"  (server's own inference {server:.2f} ms)" if server is not None else ""
            print(
                f"  {name:14s} {row['p50_ms']:7.2f} / {row['p99_ms']:7.2f}  {row['over_remote_p50']:.2f}x{extra}"
            )
    print(json.dumps(figures))
    return 0 if all(figures["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
