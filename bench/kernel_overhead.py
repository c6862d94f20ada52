"""What the kernel adds per step, next to a bare hand-written loop (the anchor).

One process, a trivial numpy env (7 joints, absolute control) and a trivial agent (a
precomputed 50-action chunk). Measured in the same run:
  bare       the anchor: a hand-written loop (chunk queue, env.step), no shield, no events
  kernel     EpisodeRunner in sync mode, no trace (events built only when someone listens)
  traced     EpisodeRunner in sync mode with a TraceStore streaming to disk
Figures: per-step microseconds of each, the kernel's added microseconds per step with
and without the trace, and the resident memory of the traced run sampled along a long
episode (flat = no growth with episode length).

Targets: traced - bare <= 20 us/step; RSS growth over the long traced episode <= 20 MiB.

    python bench/kernel_overhead.py            # 1,000,000-step memory episode (~1-2 min)
    python bench/kernel_overhead.py --quick    # < 1 min

The last line printed is a JSON object of all figures and each target's verdict.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from robokernel_ros.kernel import EnvSpec, EpisodeRunner, StepResult, TraceStore
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

TARGET_ADDED_US = 20.0
TARGET_RSS_GROWTH_MIB = 20.0
N_JOINTS = 7
CHUNK = 50


class TrivialEnv:
    def __init__(self) -> None:
        keys = tuple(f"joint{i}" for i in range(N_JOINTS))
        self.keys = keys
        self.env_spec = EnvSpec(keys, "absolute", 50.0, {k: (-3.0, 3.0) for k in keys})
        self.q = np.zeros(N_JOINTS)
        self.t = 0.0

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        self.q = np.zeros(N_JOINTS)
        self.t = 0.0
        return {"state": self.q.copy()}

    def step(self, action: dict[str, float]) -> StepResult:
        self.q = np.fromiter(action.values(), float, N_JOINTS)
        self.t += 0.02
        return StepResult({"state": self.q}, 0.0, False, False, {"sim_time_s": self.t})


class TrivialAgent:
    def __init__(self, keys: tuple[str, ...]) -> None:
        rows = np.linspace(-1.0, 1.0, CHUNK)
        self.chunk = [{k: float(v) for k in keys} for v in rows]

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        pass

    def act(self, observation: Any, step: int) -> list[dict[str, float]]:
        return self.chunk


def bare_loop(steps: int) -> float:
    """The anchor: what any hand-written rollout does, nothing more."""
    env = TrivialEnv()
    agent = TrivialAgent(env.keys)
    start = time.perf_counter()
    observation = env.reset(seed=0)
    agent.reset()
    queue: collections.deque[dict[str, float]] = collections.deque()
    for step in range(steps):
        if not queue:
            queue.extend(agent.act(observation, step))
        result = env.step(queue.popleft())
        observation = result.observation
        if result.terminated or result.truncated:
            break
    return time.perf_counter() - start


def kernel_run(
    steps: int, trace_root: Path | None, rss_samples: list[float] | None = None
) -> float:
    env = TrivialEnv()
    runner = EpisodeRunner(
        env, TrivialAgent(env.keys), trace=TraceStore(trace_root) if trace_root else None
    )
    if rss_samples is not None:
        every = max(1, steps // 20)

        def sample(event: Any) -> None:
            if event.step % every == 0:
                rss_samples.append(rss_mib())

        runner.bus.subscribe(sample, kinds=["action"])
    start = time.perf_counter()
    record = runner.run(steps, seed=0)
    elapsed = time.perf_counter() - start
    if record.steps != steps:
        raise RuntimeError(f"the kernel ran {record.steps} of {steps} steps: {record.status}")
    return elapsed


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def best_of(repeats: int, fn: Any, *args: Any) -> float:
    return min(fn(*args) for _ in range(repeats))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs (< 1 min)")
    parser.add_argument("--steps", type=int, default=None, help="steps per timed run")
    parser.add_argument(
        "--memory-steps", type=int, default=None, help="steps of the long traced episode"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    steps = args.steps or (20_000 if args.quick else 100_000)
    memory_steps = args.memory_steps or (200_000 if args.quick else 1_000_000)
    repeats = 3

    load_start = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="kernel_bench_"))
    try:
        kernel_run(1000, tmp / "warmup")  # imports, caches
        bare = best_of(repeats, bare_loop, steps)
        kernel = best_of(repeats, kernel_run, steps, None)
        traced = best_of(repeats, kernel_run, steps, tmp / "timed")
        shutil.rmtree(tmp / "timed", ignore_errors=True)

        samples: list[float] = []
        long_elapsed = kernel_run(memory_steps, tmp / "long", samples)
        trace_bytes = sum(p.stat().st_size for p in (tmp / "long").rglob("*") if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    us = 1e6 / steps
    figures: dict[str, Any] = {
        "steps": steps,
        "bare_us_per_step": round(bare * us, 2),
        "kernel_no_trace_us_per_step": round(kernel * us, 2),
        "kernel_traced_us_per_step": round(traced * us, 2),
        "added_us_per_step_no_trace": round((kernel - bare) * us, 2),
        "added_us_per_step_traced": round((traced - bare) * us, 2),
        "traced_over_bare_ratio": round(traced / bare, 2),
        "memory_episode_steps": memory_steps,
        "memory_episode_us_per_step": round(long_elapsed * 1e6 / memory_steps, 2),
        "trace_bytes_per_step": round(trace_bytes / memory_steps, 1),
        "rss_first_mib": round(samples[1], 1),  # after the first slice: buffers allocated
        "rss_last_mib": round(samples[-1], 1),
        "rss_growth_mib": round(samples[-1] - samples[1], 1),
        # Context for the absolute figures: on a shared machine everything slows together.
        "load_avg_1min_start": round(load_start, 2),
        "load_avg_1min_end": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
    }
    verdicts = {
        "added_us_per_step_traced<=20": figures["added_us_per_step_traced"] <= TARGET_ADDED_US,
        "rss_growth_mib<=20": figures["rss_growth_mib"] <= TARGET_RSS_GROWTH_MIB,
    }
    print(f"bare loop (anchor)        {figures['bare_us_per_step']:8.2f} us/step")
    print(
        f"EpisodeRunner, no trace   {figures['kernel_no_trace_us_per_step']:8.2f} us/step  (+{figures['added_us_per_step_no_trace']:.2f})"
    )
    print(
        f"EpisodeRunner, traced     {figures['kernel_traced_us_per_step']:8.2f} us/step  (+{figures['added_us_per_step_traced']:.2f}, x{figures['traced_over_bare_ratio']} the anchor)"
    )
    print(
        f"target: added <= {TARGET_ADDED_US} us/step traced: {'PASS' if verdicts['added_us_per_step_traced<=20'] else 'FAIL'}"
    )
    print(
        f"{memory_steps}-step traced episode: RSS {figures['rss_first_mib']} -> {figures['rss_last_mib']} MiB, {figures['trace_bytes_per_step']} B/step on disk"
    )
    print(
        f"target: RSS growth <= {TARGET_RSS_GROWTH_MIB} MiB: {'PASS' if verdicts['rss_growth_mib<=20'] else 'FAIL'}"
    )
    print(
        f"load average {figures['load_avg_1min_start']} -> {figures['load_avg_1min_end']} on {figures['cpu_count']} CPUs"
    )
    print(json.dumps({**figures, "verdicts": verdicts}))
    return exit_status(verdicts, "kernel_overhead")


if __name__ == "__main__":
    sys.exit(main())
