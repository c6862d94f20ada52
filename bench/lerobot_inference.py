"""Benchmark of LeRobot inference paths (issue 8), each next to its anchor in the same run.

    python bench/lerobot_inference.py [--quick] [--device cpu] [--chunks N]

One small ACT checkpoint (random weights, LeRobot's own config classes and
save_pretrained; 6 joints + one 96x96 camera; chunk 20, 10 actions executed) and one
fixed observation, measured per chunk (median and p99 over N chunks after warm-up; the
paths take turns call by call, so load from other processes falls on all alike):

1. direct_chunk: LeRobot used directly - preprocessor -> predict_action_chunk ->
   postprocessor. The anchor of everything below.
2. direct_select_action: preprocessor -> select_action -> postprocessor with the
   policy reset before each call, so every call computes a chunk (LeRobot's
   single-step API, one action back).
3. provider: the `lerobot` policy provider in-process (binding by name, tensors in,
   {key: float} actions out): its overhead over direct_chunk at p50.
4. ros_path: runner -> policy_server node -> chunk back over ROS. Not measured by this
   script yet: `measure_ros_path` is the function to extend (target: adds <= 2 ms at
   p50 over direct_chunk).
5. lerobot_grpc: LeRobot's own async-inference gRPC PolicyServer round trip, the
   anchor of the ROS path, when grpcio is installed (`measure_lerobot_grpc`; not
   implemented here - see the function).

The last line is one JSON object with every figure and each target's verdict.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))

from robokernel_ros.policies import create_policy  # noqa: E402
from robokernel_ros.policies.lerobot_fixtures import SO101_JOINTS, build_tiny_checkpoint  # noqa: E402

ROS_TARGET_P50_MS = 2.0


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)), "n": len(ms)}


def observation(size: int = 96) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "joint_positions": {j: 0.1 * i for i, j in enumerate(SO101_JOINTS)},
        "joint_velocities": {j: 0.0 for j in SO101_JOINTS},
        "actuator_targets": {j: 0.0 for j in SO101_JOINTS},
        "images": {"front": rng.integers(0, 255, (size, size, 3), dtype=np.uint8)},
    }


def timed_interleaved(
    fns: dict[str, Callable[[], Any]], n: int, warmup: int
) -> dict[str, dict[str, float]]:
    """Time every path once per round, round after round: on a shared machine, load that
    comes and goes then hits every path alike instead of whichever ran at the time."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(n):
        for name, fn in fns.items():
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
    policy = create_policy("lerobot", path=str(path), device=device)
    policy.set_robot_state_keys(SO101_JOINTS)
    policy.reset()
    info: dict[str, Any] = {
        "load_time_s": policy.load_time_s,
        "resident_rss_mb": policy.resident_rss_mb,
        "chunk_len": len(policy.get_actions(obs)),
    }
    again = create_policy("lerobot", path=str(path), device=device)
    info["second_load_cache_hit"] = again.load_cache_hit
    info["second_load_time_s"] = again.load_time_s
    return (lambda: policy.get_actions(obs)), info


def measure_ros_path(
    path: Path, obs: dict[str, Any], device: str, n: int, warmup: int
) -> dict[str, Any] | None:
    """runner -> policy_server node -> chunk back, per chunk. Returns None: not measured yet.

    To extend (the policy_server owner): start `robokernel_ros.nodes.policy_server` with
    provider=lerobot and policy_config_json={"path": str(path), "device": device} in its
    own process and ROS_DOMAIN_ID, wait for readiness, then time n `get_actions(obs)`
    calls of the `remote` provider after `warmup` calls (interleaved with the direct
    path, as timed_interleaved does) and return a `percentiles(...)` dict.
    """
    return None


def measure_lerobot_grpc(
    path: Path, obs: dict[str, Any], n: int, warmup: int
) -> dict[str, Any] | str:
    """LeRobot's async-inference gRPC PolicyServer round trip (the ROS path's anchor).

    Not implemented in this script: it needs grpcio and protobuf (lerobot's `grpcio-dep`
    extra), which the project does not install. Measured by hand on 2026-11-30 (see
    shared notes): direct 21-22 ms, gRPC 35-45 ms median for a 51.6M-parameter ACT.
    """
    if importlib.util.find_spec("grpc") is None:
        return "not measured: grpcio is not installed (pip install 'lerobot[grpcio-dep]==0.6.1')"
    return "not measured: the gRPC anchor is not implemented in this script"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer chunks (30)")
    parser.add_argument(
        "--chunks", type=int, default=None, help="chunks measured per path (default 200)"
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    args = parser.parse_args()
    n = args.chunks or (30 if args.quick else 200)
    warmup = 5

    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_checkpoint(
            Path(tmp) / "act",
            kind="act",
            cameras={"front": (96, 96)},
            chunk_size=20,
            n_action_steps=10,
        )
        obs = observation(96)
        figures: dict[str, Any] = {"policy": "act", "device": args.device, "chunks": n}
        paths = direct_paths(path, obs, args.device)
        paths["provider"], provider_info = provider_path(path, obs, args.device)
        figures.update(timed_interleaved(paths, n, warmup))
        figures["provider"].update(provider_info)
        figures["ros_path"] = measure_ros_path(path, obs, args.device, n, warmup)
        figures["lerobot_grpc"] = measure_lerobot_grpc(path, obs, n, warmup)

    anchor = figures["direct_chunk"]["p50_ms"]
    provider_over = figures["provider"]["p50_ms"] - anchor
    figures["provider_overhead_p50_ms"] = provider_over
    figures["provider_ratio_p50"] = figures["provider"]["p50_ms"] / anchor
    ros = figures["ros_path"]
    if ros is not None:
        figures["ros_overhead_p50_ms"] = ros["p50_ms"] - anchor
        verdict: Any = figures["ros_overhead_p50_ms"] <= ROS_TARGET_P50_MS
    else:
        verdict = None
    figures["verdicts"] = {f"ros_path_adds_at_most_{ROS_TARGET_P50_MS:g}ms_p50": verdict}

    for name in ("direct_chunk", "direct_select_action", "provider"):
        f = figures[name]
        print(f"{name:22s} p50 {f['p50_ms']:8.2f} ms   p99 {f['p99_ms']:8.2f} ms   (n={f['n']})")
    print(
        f"provider overhead over direct_chunk at p50: {provider_over:+.2f} ms (x{figures['provider_ratio_p50']:.3f})"
    )
    print(
        f"provider load {figures['provider']['load_time_s']:.3f} s, second create cache hit "
        f"{figures['provider']['second_load_cache_hit']} in {figures['provider']['second_load_time_s'] * 1000:.2f} ms, "
        f"RSS {figures['provider']['resident_rss_mb']:.0f} MiB"
    )
    print(f"ros_path: {'not measured (measure_ros_path to extend)' if ros is None else ros}")
    print(f"lerobot_grpc: {figures['lerobot_grpc']}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
