"""Rollout throughput: eval_policy (mock) steps/s against a bare mujoco.mj_step loop.

For the SO-101 and the Panda, in the same run and on the same compiled model:
  bare      mj_step(model, data, substeps) per control step (the env's substeps at 50 Hz)
  sync      eval_policy(mock, async_rtc=False) with tracing on (run dirs written)
  untraced  the same with trace_dir=None (what the trace costs)
  async     eval_policy(mock chunk-emitting, async_rtc=True) vs the same policy synchronous

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

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
from robokernel_ros.rollout import SimWorkcell, envelope_json  # noqa: E402

CONTROL_HZ = 50.0


def bare_steps_per_s(cell: SimWorkcell, robot: str, steps: int, repeats: int) -> float:
    env = cell.scene.make_env(robot, control_hz=CONTROL_HZ)
    model, data = cell.scene.model, cell.scene.data
    rates = []
    for _ in range(repeats):
        cell.scene.reset()
        t0 = time.perf_counter()
        for _ in range(steps):
            mujoco.mj_step(model, data, env.substeps)
        rates.append(steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def eval_steps_per_s(
    cell: SimWorkcell, robot: str, steps: int, episodes: int, repeats: int, **kwargs
) -> tuple[float, dict]:
    rates, last = [], {}
    for _ in range(repeats):
        out = cell.eval_policy(
            robot, n_episodes=episodes, max_steps=steps, seed=0, progress=False, **kwargs
        )
        if out["status"] != "success":
            raise RuntimeError(out["content"][0]["text"])
        last = envelope_json(out)
        rates.append(last["total_steps"] / last["elapsed_s"])
    return statistics.median(rates), last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args()
    steps, episodes, repeats = (200, 2, 2) if args.quick else (500, 3, 3)
    figures: dict[str, float] = {}
    verdicts: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as runs:
        for model in ("so101", "panda"):
            cell = SimWorkcell(trace_dir=runs)
            cell.add_robot(model, model)
            substeps = cell.scene.make_env(model, control_hz=CONTROL_HZ).substeps
            eval_steps_per_s(cell, model, 20, 1, 1)  # warm up (first-call imports, caches)
            bare = bare_steps_per_s(cell, model, steps * episodes, repeats)
            sync, _ = eval_steps_per_s(cell, model, steps, episodes, repeats)
            untraced, _ = eval_steps_per_s(cell, model, steps, episodes, repeats, trace_dir=None)
            chunked = {"execution_horizon": 8}
            sync_chunked, _ = eval_steps_per_s(
                cell, model, steps, episodes, repeats, policy_config=chunked
            )
            rtc, rtc_report = eval_steps_per_s(
                cell, model, steps, episodes, repeats, policy_config=chunked, async_rtc=True
            )
            cell.close()
            ratio = sync / bare
            rtc_ratio = rtc / sync_chunked
            print(f"{model}: {substeps} substeps per control step at {CONTROL_HZ:g} Hz")
            print(f"  bare mj_step loop        {bare:9.0f} steps/s")
            print(
                f"  eval sync, traced        {sync:9.0f} steps/s  ({ratio:.2f}x bare; target >= 0.85x)"
            )
            print(
                f"  eval sync, no trace      {untraced:9.0f} steps/s  ({untraced / bare:.2f}x bare)"
            )
            print(f"  eval sync, chunks of 8   {sync_chunked:9.0f} steps/s")
            print(
                f"  eval async_rtc, chunks 8 {rtc:9.0f} steps/s  ({rtc_ratio:.2f}x sync; target >= 0.9x; "
                f"hits {rtc_report['chunk_prefetch_hits']}, blocks {rtc_report['chunk_prefetch_blocks']})"
            )
            figures.update(
                {
                    f"{model}_substeps": substeps,
                    f"{model}_bare_steps_per_s": round(bare, 1),
                    f"{model}_sync_traced_steps_per_s": round(sync, 1),
                    f"{model}_sync_untraced_steps_per_s": round(untraced, 1),
                    f"{model}_sync_chunked_steps_per_s": round(sync_chunked, 1),
                    f"{model}_async_rtc_steps_per_s": round(rtc, 1),
                    f"{model}_sync_vs_bare": round(ratio, 3),
                    f"{model}_untraced_vs_bare": round(untraced / bare, 3),
                    f"{model}_async_vs_sync": round(rtc_ratio, 3),
                    f"{model}_async_prefetch_blocks": rtc_report["chunk_prefetch_blocks"],
                }
            )
            verdicts[f"{model}_sync_traced_ge_0.85x_bare"] = "pass" if ratio >= 0.85 else "fail"
            verdicts[f"{model}_async_rtc_ge_0.9x_sync"] = "pass" if rtc_ratio >= 0.9 else "fail"
    print(json.dumps({"bench": "rollout_throughput", "quick": args.quick, "steps": steps, "episodes": episodes,
                      "repeats": repeats, **figures, "verdicts": verdicts}))  # fmt: skip


if __name__ == "__main__":
    main()
