"""Benchmark of LeRobot inference paths (issue 8), each next to its anchor in the same run.

    python bench/lerobot_inference.py [--quick] [--chunks N] [--device cpu] [--gap-ms 20]

One small ACT checkpoint (random weights, LeRobot's own config classes and
save_pretrained; 6 joints + one camera, 96x96 unless --image HxW; chunk 20) and one fixed
observation. Every
path below is timed per chunk, and a chunk is one whole `predict_action_chunk` call
with LeRobot's pre- and postprocessors, observation dict in, 20 actions out (except
direct_select_action: one action out). The paths take turns call by call after the same
warm-up rounds, with an idle gap before each call (see timed_interleaved), so load from
other processes falls on all alike. Median and p99 per path.

1. direct_chunk: LeRobot used directly - batch from the observation, preprocessor ->
   predict_action_chunk -> postprocessor. The anchor of everything below.
2. direct_select_action: the same through select_action with the policy reset before
   each call, so every call computes a chunk (LeRobot's single-step API, one action).
3. provider: the `lerobot` policy provider in-process (binding by name, tensors in,
   {key: float} actions out, full_chunk=True).
4. ros_path: runner -> policy_server -> chunk back. The policy_server node runs as a
   child process (same checkpoint, provider lerobot, full_chunk, this --device) on a
   private ROS_DOMAIN_ID; the `remote` policy provider (what the runner node uses) sends
   the observation and waits for the chunk. Target: at most 2 ms over direct_chunk at
   p50. Its breakdown: the server's own inference time (reported in every ActionChunk),
   the rest of the round trip, and the wire conversions timed here.
5. ros_echo: the transport floor - the same Observation message (built from the dict
   per call) to a bare rclpy echo child, a 20 x 6 ActionChunk back; both ends take
   messages from rcl wait sets in the working thread, as the policy_server and the
   remote provider do, and convert them as they do; no policy, no executor.
6. lerobot_grpc: LeRobot's own async-inference gRPC PolicyServer as a child (same
   checkpoint, actions_per_chunk 20, no artificial latency), driven as its RobotClient
   does: pickled TimedObservation in (SendObservations, must_go), GetActions out. Its
   server also resizes the image and postprocesses action by action. "not measured:
   <reason>" when grpcio is missing or the server does not come up.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))
# The tiny checkpoints are test fixtures: robokernel_ros/test/fixtures/lerobot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros" / "test"))

from fixtures.lerobot import SO101_JOINTS, build_tiny_checkpoint  # noqa: E402
from robokernel_ros.policies import create_policy  # noqa: E402
from robokernel_ros.process import die_with_parent, stop_process_groups  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

ROS_TARGET_P50_MS = 2.0
GRPC_RATIO_TARGET = 0.3  # the ROS path's overhead / LeRobot gRPC's, both over direct_chunk
CHUNK_SIZE = 20


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)), "n": len(ms)}


def observation(height: int = 96, width: int = 96) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "joint_positions": {j: 0.1 * i for i, j in enumerate(SO101_JOINTS)},
        "joint_velocities": {j: 0.0 for j in SO101_JOINTS},
        "actuator_targets": {j: 0.0 for j in SO101_JOINTS},
        "images": {"front": rng.integers(0, 255, (height, width, 3), dtype=np.uint8)},
    }


def image_size(text: str) -> tuple[int, int]:
    """--image HxW: the camera's height and width in pixels, each in [16, 2160]."""
    try:
        height, width = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--image={text!r}: must be HxW, e.g. 480x640") from None
    if not (16 <= height <= 2160 and 16 <= width <= 3840):
        raise argparse.ArgumentTypeError(
            f"--image={text!r}: height must be in [16, 2160] and width in [16, 3840]"
        )
    return height, width


def timed_interleaved(
    fns: dict[str, Callable[[], Any]], n: int, warmup: int, gap_s: float = 0.0
) -> dict[str, dict[str, float]]:
    """Time every path once per round, round after round: on a shared machine, load that
    comes and goes then hits every path alike instead of whichever ran at the time.

    `gap_s` of idle before each call: torch's OpenMP threads spin for milliseconds after
    an inference, and when the next call runs in another process (a server) they take
    its cores. A control loop asks for chunks with gaps; the gap gives each call that."""
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


def direct_paths(path: Path, obs: dict[str, Any], device: str) -> dict[str, Callable[[], Any]]:
    """LeRobot's own API on the checkpoint: the anchor."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    cfg = PreTrainedConfig.from_pretrained(str(path))
    cfg.device = device
    model = get_policy_class(cfg.type).from_pretrained(str(path), config=cfg).to(device).eval()
    pre, post = make_pre_post_processors(
        cfg,
        pretrained_path=str(path),
        preprocessor_overrides={"device_processor": {"device": device}},
    )

    def batch() -> dict[str, Any]:
        # built from the observation on every call, as the provider does
        state = torch.tensor(
            [[obs["joint_positions"][j] for j in SO101_JOINTS]], dtype=torch.float32
        )
        image = torch.from_numpy(obs["images"]["front"]).float().div(255).permute(2, 0, 1)[None]
        return {
            "observation.state": state,
            "observation.images.front": image.contiguous(),
            "task": "",
        }

    def chunk() -> None:
        with torch.inference_mode():
            post(model.predict_action_chunk(pre(batch()))).numpy()

    def select() -> None:
        model.reset()
        with torch.inference_mode():
            post(model.select_action(pre(batch()))).numpy()

    return {"direct_chunk": chunk, "direct_select_action": select}


def provider_path(
    path: Path, obs: dict[str, Any], device: str
) -> tuple[Callable[[], Any], dict[str, Any]]:
    policy = create_policy("lerobot", path=str(path), device=device, full_chunk=True)
    policy.set_robot_state_keys(SO101_JOINTS)
    policy.reset()
    info: dict[str, Any] = {
        "load_time_s": policy.load_time_s,
        "resident_rss_mb": policy.resident_rss_mb,
        "chunk_len": len(policy.get_actions(obs)),
    }
    again = create_policy("lerobot", path=str(path), device=device, full_chunk=True)
    info["second_load_cache_hit"] = again.load_cache_hit
    info["second_load_time_s"] = again.load_time_s
    return (lambda: policy.get_actions(obs)), info


ROS_NS = "/bench_lerobot"


def _start(argv: list[str], cwd: str | None = None) -> Any:
    """A server child in its own process group that dies with this process (offline:
    nothing may come from a hub)."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
        start_new_session=True,
        preexec_fn=die_with_parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_policy_server(path: Path, device: str) -> Any:
    """The policy_server node hosting the checkpoint as the provider path hosts it."""
    config = json.dumps({"path": str(path), "device": device, "full_chunk": True})
    return _start(
        [sys.executable, "-m", "robokernel_ros.nodes.policy_server", "--ros-args",
         "-r", f"__ns:={ROS_NS}", "-p", "provider:=lerobot",
         "-p", f"policy_config_json:='{config}'",
         "-p", f"action_keys:=[{','.join(SO101_JOINTS)}]", "-p", "autostart:=true"]
    )  # fmt: skip


def ros_path(obs: dict[str, Any]) -> tuple[Callable[[], Any], Any, list[float]]:
    """runner -> policy_server -> chunk back: the `remote` provider, as the runner node
    uses it, against the policy_server child. Returns (one chunk, the policy, and per
    chunk the time spent outside the provider's publish -> chunk round trip)."""
    # Waits for the load (a failed load is refused at once with the server's reason).
    policy = create_policy("remote", namespace=ROS_NS, ready_timeout_s=180)
    policy.set_robot_state_keys(SO101_JOINTS)
    policy.reset()
    chunk = policy.get_actions(obs)
    if len(chunk) != CHUNK_SIZE:
        raise RuntimeError(f"policy_server answered {len(chunk)} actions, not {CHUNK_SIZE}")
    outside: list[float] = []

    def once() -> None:
        start = time.perf_counter()
        policy.get_actions(obs)
        outside.append(time.perf_counter() - start - policy.chunk_log[-1][2])

    return once, policy, outside


def _echo_qos() -> Any:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
    )


class _Taker:
    """One subscription whose messages the calling thread takes from an rcl wait set, no
    executor: the lowest-latency receive rclpy allows (the policy_server and the remote
    provider receive this way too), written out here so the anchor shares no code with
    what it anchors."""

    def __init__(self, node: Any, msg_type: Any, topic: str) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        self._sub = node.create_subscription(msg_type, topic, lambda _msg: None, _echo_qos())
        self._wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, node.context.handle)

    def take(self, timeout_s: float) -> Any:
        handle, msg_type = self._sub.handle, self._sub.msg_type
        taken = handle.take_message(msg_type, False)
        if taken is None:
            self._wait_set.clear_entities()
            self._wait_set.add_subscription(handle)
            self._wait_set.wait(int(timeout_s * 1e9))
            taken = handle.take_message(msg_type, False)
        return None if taken is None else taken[0]


def _echo() -> int:
    """The bare rclpy peer of the ros_echo anchor: takes each Observation (wait set), reads
    it back into a dict as the policy_server does, and answers a pre-built ActionChunk of
    CHUNK_SIZE x 6. No policy, no executor, no other thread."""
    import rclpy
    from robokernel_ros.ros import wire

    from robokernel_interfaces.msg import ActionChunk, Observation

    rclpy.init()
    node = rclpy.create_node("bare_echo", namespace=ROS_NS)
    pub = node.create_publisher(ActionChunk, "echo_chunk", _echo_qos())
    observations = _Taker(node, Observation, "echo_observation")
    rows = [dict.fromkeys(SO101_JOINTS, 0.1)] * CHUNK_SIZE
    reply = wire.chunk_to_msg(rows, run_id="", obs_step=0, inference_time_s=0.0)
    try:
        while rclpy.ok():
            msg = observations.take(0.2)
            if msg is None:
                continue
            wire.msg_to_observation(msg)
            reply.run_id, reply.obs_step = msg.run_id, msg.step
            pub.publish(reply)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


class EchoClient:
    """The ros_echo anchor's client: the same Observation message out (built per call from
    the observation dict), the chunk taken back by the calling thread (wait set)."""

    def __init__(self, obs: dict[str, Any], echo: Any) -> None:
        import rclpy
        from robokernel_ros.ros import wire

        from robokernel_interfaces.msg import ActionChunk, Observation

        self._wire, self._obs = wire, obs
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("echo_client", namespace=ROS_NS, context=self.context)
        self._step = 0
        self._chunks = _Taker(self.node, ActionChunk, "echo_chunk")
        self._pub = self.node.create_publisher(Observation, "echo_observation", _echo_qos())
        deadline = time.monotonic() + 60
        while (
            self._pub.get_subscription_count() == 0
            or self.node.count_publishers(f"{ROS_NS}/echo_chunk") == 0
        ):
            if echo.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(
                    f"the bare echo peer did not come up (exit status {echo.poll()})"
                )
            time.sleep(0.05)

    def __call__(self) -> None:
        self._step += 1
        self._pub.publish(self._wire.observation_to_msg(self._obs, run_id="echo", step=self._step))
        deadline = time.monotonic() + 10.0
        while True:
            msg = self._chunks.take(max(0.0, deadline - time.monotonic()))
            if msg is not None and msg.obs_step == self._step:
                self._wire.msg_to_chunk(msg)
                return
            if msg is None:
                raise TimeoutError(f"no echo of the observation of step {self._step} within 10 s")

    def close(self) -> None:
        import rclpy

        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def wire_costs(obs: dict[str, Any], chunk: list[dict[str, float]], n: int) -> dict[str, float]:
    """What the ROS path does besides inference and DDS, timed in this process: the
    Observation message built from the dict (client), read back (server), the chunk
    message built (server) and read back (client). p50 in ms each."""
    from robokernel_ros.ros import wire

    msg = wire.observation_to_msg(obs, run_id="w", step=0)
    cmsg = wire.chunk_to_msg(chunk, run_id="w", obs_step=0, inference_time_s=0.0)
    steps = {
        "observation_to_msg": lambda: wire.observation_to_msg(obs, run_id="w", step=0),
        "msg_to_observation": lambda: wire.msg_to_observation(msg),
        "chunk_to_msg": lambda: wire.chunk_to_msg(
            chunk, run_id="w", obs_step=0, inference_time_s=0.0
        ),
        "msg_to_chunk": lambda: wire.msg_to_chunk(cmsg),
    }
    return {name: timed_interleaved({name: fn}, n, 3)[name]["p50_ms"] for name, fn in steps.items()}


def start_lerobot_grpc(tmp: Path) -> tuple[Any, int] | str:
    """LeRobot's own async-inference PolicyServer (gRPC) as a child, on a free port."""
    if importlib.util.find_spec("grpc") is None:
        return "not measured: grpcio is not installed (pip install -r requirements/lerobot.txt)"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # cwd: the server writes logs/policy_server_<time>.log where it runs. No artificial
    # latency (its default sleeps until 1/30 s per chunk).
    proc = _start(
        [sys.executable, "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
         f"--port={port}", "--inference_latency=0"],
        cwd=str(tmp),
    )  # fmt: skip
    return proc, port


def lerobot_grpc_path(
    path: Path, obs: dict[str, Any], device: str, port: int, server: Any
) -> tuple[Callable[[], Any], Any]:
    """A minimal RobotClient: observation in (SendObservations), chunk out (GetActions),
    with LeRobot's own stubs and pickled TimedObservation, as its robot_client sends them.
    Returns (one chunk, the channel)."""
    import pickle  # nosec - LeRobot's own wire format, both ends are ours

    import grpc
    from lerobot.async_inference.helpers import RemotePolicyConfig, TimedObservation
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks

    channel = grpc.insecure_channel(f"127.0.0.1:{port}", grpc_channel_options())
    try:
        grpc.channel_ready_future(channel).result(timeout=120)
    except grpc.FutureTimeoutError:
        raise RuntimeError(
            f"LeRobot's gRPC policy server did not listen on port {port} within 120 s "
            f"(exit status {server.poll()})"
        ) from None
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    h, w, _ = obs["images"]["front"].shape
    features = {  # LeRobot dataset features, as hw_to_dataset_features writes a robot's
        "observation.state": {"dtype": "float32", "shape": (len(SO101_JOINTS),), "names": list(SO101_JOINTS)},
        "observation.images.front": {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]},
    }  # fmt: skip
    stub.Ready(services_pb2.Empty())
    setup = RemotePolicyConfig(
        policy_type="act",
        pretrained_name_or_path=str(path),
        lerobot_features=features,
        actions_per_chunk=CHUNK_SIZE,
        device=device,
    )
    stub.SendPolicyInstructions(services_pb2.PolicySetup(data=pickle.dumps(setup)))  # loads it
    raw = {**obs["joint_positions"], "front": obs["images"]["front"], "task": ""}
    counter = iter(range(10**9))

    def once() -> list[Any]:
        # must_go: the server otherwise skips observations too close to the last one
        timed = TimedObservation(
            timestamp=time.time(), timestep=next(counter), observation=raw, must_go=True
        )
        stub.SendObservations(send_bytes_in_chunks(pickle.dumps(timed), services_pb2.Observation))
        reply = stub.GetActions(services_pb2.Empty())
        if not reply.data:
            raise RuntimeError("LeRobot's gRPC policy server answered no chunk")
        return pickle.loads(reply.data)  # nosec

    if len(once()) != CHUNK_SIZE:
        raise RuntimeError(f"LeRobot's gRPC server answered a chunk not of {CHUNK_SIZE} actions")
    return once, channel


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer chunks (30)")
    parser.add_argument(
        "--chunks", type=int, default=None, help="chunks measured per path (default 200)"
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=20.0,
        help="idle before each timed call (default 20; 0 lets one process's spinning "
        "OpenMP threads slow the next process's call)",
    )
    parser.add_argument(
        "--image",
        type=image_size,
        default=(96, 96),
        metavar="HxW",
        help="the camera's size (default 96x96; 480x640 for issue 15's real camera)",
    )
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    height, width = args.image
    if args.echo:
        return _echo()
    n = args.chunks if args.chunks is not None else (30 if args.quick else 200)
    if n < 1:
        parser.error(f"--chunks={n}: must be at least 1")
    if not 0 <= args.gap_ms <= 1000:
        parser.error(f"--gap-ms={args.gap_ms}: must be in [0, 1000]")
    warmup = 10
    # A private domain (unless ROS_DOMAIN_ID is set): the children and this process only.
    from robokernel_ros.ros.domain import free_domain_id  # one no process here uses

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(free_domain_id())
    from robokernel_ros.demo import use_dds_profile

    use_dds_profile()  # the workcell's DDS settings unless the environment has its own

    figures: dict[str, Any] = {
        "policy": "act",
        "device": args.device,
        "chunks": n,
        "warmup_rounds": warmup,
        "chunk_actions": CHUNK_SIZE,
        "gap_ms": args.gap_ms,
        "image": [height, width],
    }
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        path = build_tiny_checkpoint(
            Path(tmp) / "act",
            kind="act",
            cameras={"front": (height, width)},
            chunk_size=CHUNK_SIZE,
            n_action_steps=10,
        )
        obs = observation(height, width)
        # Both servers load while this process builds its own paths.
        ros_server = start_policy_server(path, args.device)
        stack.callback(stop_process_groups, [ros_server], 10.0)
        grpc_server = start_lerobot_grpc(Path(tmp))
        if isinstance(grpc_server, str):
            figures["lerobot_grpc"] = grpc_server
        else:
            stack.callback(stop_process_groups, [grpc_server[0]], 10.0)

        paths = direct_paths(path, obs, args.device)
        paths["provider"], provider_info = provider_path(path, obs, args.device)
        paths["ros_path"], remote, outside = ros_path(obs)
        stack.callback(remote.close)
        echo = _start([sys.executable, str(Path(__file__).resolve()), "--echo"])
        stack.callback(stop_process_groups, [echo], 10.0)
        paths["ros_echo"] = EchoClient(obs, echo)
        stack.callback(paths["ros_echo"].close)
        if not isinstance(grpc_server, str):
            try:
                paths["lerobot_grpc"], channel = lerobot_grpc_path(
                    path, obs, args.device, grpc_server[1], grpc_server[0]
                )
                stack.callback(channel.close)
            except Exception as exc:  # noqa: BLE001 - the anchor is optional; say why it is missing
                figures["lerobot_grpc"] = f"not measured: {type(exc).__name__}: {exc}"

        figures.update(timed_interleaved(paths, n, warmup, args.gap_ms / 1000))
        figures["provider"].update(provider_info)
        log = list(remote.chunk_log)[-n:]  # (obs_step, server inference s, round trip s)
        figures["ros_path"]["server_inference_p50_ms"] = percentiles([c[1] for c in log])["p50_ms"]
        figures["ros_path"]["transport_p50_ms"] = percentiles([c[2] - c[1] for c in log])["p50_ms"]
        # publish -> chunk received, as the remote provider times it (no message building)
        figures["ros_path"]["round_trip_p50_ms"] = percentiles([c[2] for c in log])["p50_ms"]
        # building the Observation before, reading the chunk after (client side)
        figures["ros_path"]["client_outside_p50_ms"] = percentiles(outside[-n:])["p50_ms"]
        figures["ros_path"]["wire_p50_ms"] = wire_costs(obs, paths["provider"](), min(n, 50))

    anchor = figures["direct_chunk"]["p50_ms"]
    provider_over = figures["provider"]["p50_ms"] - anchor
    figures["provider_overhead_p50_ms"] = provider_over
    figures["provider_ratio_p50"] = figures["provider"]["p50_ms"] / anchor
    figures["ros_overhead_p50_ms"] = figures["ros_path"]["p50_ms"] - anchor
    if isinstance(figures["lerobot_grpc"], dict):
        figures["lerobot_grpc_overhead_p50_ms"] = figures["lerobot_grpc"]["p50_ms"] - anchor
    figures["verdicts"] = {
        f"ros_path_adds_at_most_{ROS_TARGET_P50_MS:g}ms_p50": figures["ros_overhead_p50_ms"]
        <= ROS_TARGET_P50_MS
    }
    if "lerobot_grpc_overhead_p50_ms" in figures:
        # issue 15: the ROS path's overhead over direct inference at most 0.3x that of
        # LeRobot's own gRPC server, measured in the same run
        # (the inequality, not the ratio: at large images either overhead can be below 0,
        # the servers' inference faster than this busier process's own)
        grpc_over = figures["lerobot_grpc_overhead_p50_ms"]
        figures["ros_over_grpc_overhead_p50"] = (
            figures["ros_overhead_p50_ms"] / grpc_over if grpc_over > 0 else None
        )
        figures["verdicts"][f"ros_overhead_at_most_{GRPC_RATIO_TARGET:g}x_grpc_p50"] = (
            figures["ros_overhead_p50_ms"] <= GRPC_RATIO_TARGET * grpc_over
        )

    verdict = figures["verdicts"][f"ros_path_adds_at_most_{ROS_TARGET_P50_MS:g}ms_p50"]
    print(
        f"ACT, {args.device}, one fixed observation (6 joints + {width}x{height} camera), {CHUNK_SIZE}-action "
        f"chunks; {n} chunks per path after {warmup} warm-up rounds, paths interleaved, "
        f"{args.gap_ms:g} ms idle before each call"
    )
    for name in ("direct_chunk", "direct_select_action", "provider", "ros_path", "lerobot_grpc"):
        f = figures[name]
        if isinstance(f, str):
            print(f"{name:22s} {f}")
            continue
        over = "" if name == "direct_chunk" else f"   {f['p50_ms'] - anchor:+7.2f} ms at p50"
        print(f"{name:22s} p50 {f['p50_ms']:8.2f} ms   p99 {f['p99_ms']:8.2f} ms{over}")
    ros, echo_f = figures["ros_path"], figures["ros_echo"]
    print(
        f"ros_echo (bare rclpy round trip of the same messages, wait sets, no policy) p50 "
        f"{echo_f['p50_ms']:.2f} ms   p99 {echo_f['p99_ms']:.2f} ms"
    )
    print(
        f"ros_path: publish -> chunk p50 {ros['round_trip_p50_ms']:.2f} ms, of which server inference "
        f"p50 {ros['server_inference_p50_ms']:.2f} ms; round trip minus inference p50 "
        f"{ros['transport_p50_ms']:.2f} ms (bare echo {echo_f['p50_ms']:.2f}); client side outside the "
        f"round trip p50 {ros['client_outside_p50_ms']:.2f} ms; wire "
        "conversions p50 (ms): " + ", ".join(f"{k} {v:.3f}" for k, v in ros["wire_p50_ms"].items())
    )
    print(
        f"ros_path overhead over direct_chunk at p50: {figures['ros_overhead_p50_ms']:+.2f} ms "
        f"(target <= {ROS_TARGET_P50_MS:g} ms: {'pass' if verdict else 'MISSED'})"
    )
    if "ros_over_grpc_overhead_p50" in figures:
        held = figures["verdicts"][f"ros_overhead_at_most_{GRPC_RATIO_TARGET:g}x_grpc_p50"]
        ratio = figures["ros_over_grpc_overhead_p50"]
        print(
            f"ros_path overhead {figures['ros_overhead_p50_ms']:+.2f} ms against lerobot_grpc's "
            f"{figures['lerobot_grpc_overhead_p50_ms']:+.2f} ms at p50"
            + (f" ({ratio:.2f}x)" if ratio is not None else "")
            + f" (target <= {GRPC_RATIO_TARGET:g}x gRPC's: {'pass' if held else 'MISSED'})"
        )
    print(
        f"provider load {figures['provider']['load_time_s']:.3f} s, second create cache hit "
        f"{figures['provider']['second_load_cache_hit']} in {figures['provider']['second_load_time_s'] * 1000:.2f} ms, "
        f"RSS {figures['provider']['resident_rss_mb']:.0f} MiB"
    )
    print(json.dumps(figures))
    return exit_status(figures["verdicts"], "lerobot_inference")


if __name__ == "__main__":
    raise SystemExit(main())
