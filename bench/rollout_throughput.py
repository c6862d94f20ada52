"""Rollout throughput: eval_policy (mock) steps/s against a bare mujoco.mj_step loop.

For the SO-101 and the Panda, in the same run and on the same compiled model:
  bare      mj_step(model, data, substeps) per control step (the env's substeps at 50 Hz)
  env       MujocoEnv.step(hold action) per control step: mj_step + ctrl + observation
  sync      eval_policy(mock, async_rtc=False) with tracing on: the run directory
            (events.jsonl + meta.json) streamed to disk, no rosbag mirror (bag=False)
  sync+bag  the same with the SimWorkcell default, which also mirrors every event into
            a rosbag2 (MCAP) file next to the run directory
  untraced  the same with trace_dir=None (what the trace costs)
  async     eval_policy(mock chunk-emitting, async_rtc=True) vs the same policy synchronous

The variants are interleaved (one pass of each per repeat) and each figure is the best
pass (the fastest), so that load from other processes on a shared machine disturbs
the ratios as little as possible; the median pass is printed next to it. A per-step
breakdown in microseconds follows: mj_step, the env's own step work, the mock policy,
the kernel + rollout loop untraced, the trace, the bag mirror, and privileged_state()
(recorded every 10th step by default, every step when a benchmark or predicate needs it).

Targets: sync (traced) >= 0.85x bare; async_rtc >= 0.9x sync with the same chunked policy.
The last line is one JSON object with every figure and each target's verdict.

    python bench/rollout_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
from robokernel_ros.policies.base import PolicyAgent  # noqa: E402
from robokernel_ros.policies.mock import MockPolicy  # noqa: E402
from robokernel_ros.rollout import SimWorkcell, envelope_json  # noqa: E402

CONTROL_HZ = 50.0


def bare_seconds_per_step(cell: SimWorkcell, robot: str, steps: int) -> float:
    env = cell.scene.make_env(robot, control_hz=CONTROL_HZ)
    model, data, substeps = cell.scene.model, cell.scene.data, env.substeps
    cell.scene.reset()
    t0 = time.perf_counter()
    for _ in range(steps):
        mujoco.mj_step(model, data, substeps)
    return (time.perf_counter() - t0) / steps


def env_seconds_per_step(cell: SimWorkcell, robot: str, steps: int) -> float:
    env = cell.scene.make_env(robot, control_hz=CONTROL_HZ)
    env.reset(seed=0)
    action = env.hold_action(None)
    step = env.step
    t0 = time.perf_counter()
    for _ in range(steps):
        step(action)
    return (time.perf_counter() - t0) / steps


def call_seconds(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def eval_seconds_per_step(
    cell: SimWorkcell, robot: str, steps: int, episodes: int, **kwargs: Any
) -> tuple[float, dict]:
    out = cell.eval_policy(
        robot, n_episodes=episodes, max_steps=steps, seed=0, progress=False, **kwargs
    )
    if out["status"] != "success":
        raise RuntimeError(out["content"][0]["text"])
    report = envelope_json(out)
    return report["elapsed_s"] / report["total_steps"], report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args()
    steps, episodes, repeats = (200, 2, 3) if args.quick else (500, 3, 5)
    figures: dict[str, Any] = {}
    verdicts: dict[str, str] = {}
    chunked = {"execution_horizon": 8}
    with tempfile.TemporaryDirectory() as runs:
        for model in ("so101", "panda"):
            cell = SimWorkcell(trace_dir=runs)
            cell.add_robot(model, model)
            env = cell.scene.make_env(model, control_hz=CONTROL_HZ)
            substeps = env.substeps
            eval_seconds_per_step(cell, model, 20, 1)  # warm up (first-call imports, caches)
            policy = MockPolicy(seed=0)
            policy.set_robot_state_keys(env.action_keys)
            policy.set_action_limits(env.env_spec.action_limits)
            agent = PolicyAgent(policy, action_horizon=1)
            agent.reset(seed=0)
            env.reset(seed=0)
            obs = env.observe()
            n = steps * episodes
            passes: dict[str, list[float]] = {}

            def record(name: str, seconds: float, passes: dict = passes) -> None:
                passes.setdefault(name, []).append(seconds)

            rtc_report: dict = {}
            for _ in range(repeats):
                record("bare", bare_seconds_per_step(cell, model, n))
                record("env", env_seconds_per_step(cell, model, n))
                record("privileged", call_seconds(env.privileged_state, n))
                record("policy", call_seconds(lambda: agent.act(obs, 0), n))  # noqa: B023
                record("untraced", eval_seconds_per_step(cell, model, steps, episodes, trace_dir=None)[0])  # fmt: skip
                record("sync", eval_seconds_per_step(cell, model, steps, episodes, bag=False)[0])
                record("sync_bag", eval_seconds_per_step(cell, model, steps, episodes)[0])
                record("sync_chunked", eval_seconds_per_step(cell, model, steps, episodes, bag=False, policy_config=chunked)[0])  # fmt: skip
                rtc, rtc_report = eval_seconds_per_step(cell, model, steps, episodes, bag=False,
                                                        policy_config=chunked, async_rtc=True)  # fmt: skip
                record("async_rtc", rtc)
            cell.close()
            best = {k: min(v) for k, v in passes.items()}
            median = {k: statistics.median(v) for k, v in passes.items()}
            rate = {k: 1.0 / v for k, v in best.items()}
            us = {k: v * 1e6 for k, v in best.items()}
            ratio = rate["sync"] / rate["bare"]
            bag_ratio = rate["sync_bag"] / rate["bare"]
            rtc_ratio = rate["async_rtc"] / rate["sync_chunked"]
            # what each layer adds per step (best passes; small negatives are noise)
            breakdown = {
                "mj_step": us["bare"],
                "env_step_work": us["env"] - us["bare"],
                "mock_policy": us["policy"],
                "kernel_and_rollout_untraced": us["untraced"] - us["env"] - us["policy"],
                "trace_run_dir": us["sync"] - us["untraced"],
                "bag_mirror": us["sync_bag"] - us["sync"],
                "privileged_state_call": us["privileged"],
            }
            print(f"{model}: {substeps} substeps per control step at {CONTROL_HZ:g} Hz "
                  f"(best of {repeats} interleaved passes of {n} steps; median in brackets)")  # fmt: skip
            for name, label in (
                ("bare", "bare mj_step loop"),
                ("env", "MujocoEnv.step loop"),
                ("untraced", "eval sync, no trace"),
                ("sync", "eval sync, traced"),
                ("sync_bag", "eval sync, traced + bag"),
                ("sync_chunked", "eval sync, chunks of 8"),
                ("async_rtc", "eval async_rtc, chunks 8"),
            ):
                extra = ""
                if name in ("env", "untraced", "sync", "sync_bag"):
                    extra = f"  ({rate[name] / rate['bare']:.2f}x bare)"
                if name == "sync":
                    extra = f"  ({ratio:.2f}x bare; target >= 0.85x)"
                if name == "async_rtc":
                    extra = (f"  ({rtc_ratio:.2f}x sync; target >= 0.9x; hits "
                             f"{rtc_report['chunk_prefetch_hits']}, blocks {rtc_report['chunk_prefetch_blocks']})")  # fmt: skip
                print(f"  {label:26s} {rate[name]:8.0f} steps/s [{1.0 / median[name]:6.0f}]{extra}")
            print("  per step (us): " + ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items()))
            budget = us["bare"] / 0.85 - us["bare"]
            print(f"  budget at 0.85x: {budget:.1f} us/step beyond mj_step; traced run adds "
                  f"{us['sync'] - us['bare']:.1f}")  # fmt: skip
            figures.update({f"{model}_substeps": substeps})
            for k in passes:
                figures[f"{model}_{k}_steps_per_s"] = round(rate[k], 1)
                figures[f"{model}_{k}_steps_per_s_median"] = round(1.0 / median[k], 1)
            figures.update(
                {
                    f"{model}_sync_vs_bare": round(ratio, 3),
                    f"{model}_sync_bag_vs_bare": round(bag_ratio, 3),
                    f"{model}_untraced_vs_bare": round(rate["untraced"] / rate["bare"], 3),
                    f"{model}_async_vs_sync": round(rtc_ratio, 3),
                    f"{model}_async_prefetch_blocks": rtc_report["chunk_prefetch_blocks"],
                    f"{model}_breakdown_us": {k: round(v, 1) for k, v in breakdown.items()},
                    f"{model}_budget_us_at_0.85x": round(budget, 1),
                }
            )
            verdicts[f"{model}_sync_traced_ge_0.85x_bare"] = "pass" if ratio >= 0.85 else "fail"
            verdicts[f"{model}_async_rtc_ge_0.9x_sync"] = "pass" if rtc_ratio >= 0.9 else "fail"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps({"bench": "rollout_throughput", "quick": args.quick, "steps": steps, "episodes": episodes,
                      "repeats": repeats, "load_avg_1min": load, "cpu_count": os.cpu_count(), **figures,
                      "verdicts": verdicts}))  # fmt: skip


if __name__ == "__main__":
    main()
