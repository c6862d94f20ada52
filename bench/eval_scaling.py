"""Episodes per second of an eval: serial, on Ray workers, and a plain multiprocessing pool.

One run, the same workload three ways: the Panda, the mock policy in sync mode, tracing
and bags on, N episodes of S steps (seeded: episode i gets seed + i on every path).
  serial   eval_policy(workers=1): one process, today's path
  ray      eval_policy(workers=2): the product's parallel path (rollout/parallel.py)
  pool     the anchor: multiprocessing.Pool(2), each process building the same scene and
           EvalSession once and running the same episodes (the best local parallelism a
           hand-written script gets on this machine, with no scheduler and no retries)
Each parallel figure is timed from the first episode's start once its workers are up;
the start-up (Ray's instance + actors, the pool's processes) is reported beside it.

Then batched inference: a small LeRobot ACT built here (random weights, CPU, one 64x64
camera), served by the BatchServer Ray actor that `batch_inference=True` uses, with B
client processes (Ray actors) calling it at once (each waits for its chunk, as a worker does) at
max_batch B = 1, 4, 8: observations per second and the queueing latency p50 (the wait
for a batch to fill or its max_wait_ms to pass).

Targets (2-core machine): ray >= 0.9x pool, ray >= 1.6x serial; batched throughput at
B=8 >= 2.5x B=1.

    python bench/eval_scaling.py            # 60 episodes x 500 steps (~8 s of serial work)
    python bench/eval_scaling.py --quick    # 16 x 300

The last line printed is a JSON object of all figures and each target's verdict.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The tiny checkpoints are test fixtures: robokernel_ros/test/fixtures/lerobot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros" / "test"))

TARGET_VS_POOL = 0.9
TARGET_VS_SERIAL = 1.6
TARGET_BATCH8 = 2.5
WORKERS = 2
SEED = 0

_session: Any = None
_control: Any = None


def _pool_init(
    description: dict[str, Any], trace_dir: str, episodes: int, steps: int, bag: bool
) -> None:
    global _session, _control
    from robokernel_ros.envs import MujocoScene
    from robokernel_ros.rollout import PolicyRunner, RolloutControl, plan_eval
    from robokernel_ros.rollout.session import EvalSession

    scene = MujocoScene.from_description(description)
    plan = plan_eval("arm", robots=scene.robots(), n_episodes=episodes, max_steps=steps, seed=SEED,
                     trace_dir=trace_dir, bag="mcap" if bag else False)  # fmt: skip
    _control = RolloutControl(plan.robots, plan.call)
    _session = EvalSession(PolicyRunner(scene).outlet(), plan, scene)


def _cpu_s() -> float:
    """CPU seconds of this process and its children (the pooled bag writer processes)."""
    import os

    t = os.times()
    return t.user + t.system + _children_cpu_s()


def _children_cpu_s() -> float:
    """Live children's CPU (os.times only counts children that were waited for)."""
    import os

    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
            except (OSError, IndexError):
                pass
    return total


def _pool_ready(_: int) -> bool:
    time.sleep(0.2)  # held, so that each pool process answers one of these
    return _session is not None


def _pool_episode(i: int) -> bool:
    return bool(_session.episode(i, _control).steps_advanced)


class _BatchClient:
    """One process asking the batch server for chunks, one at a time (a worker's pattern)."""

    def run(self, server: Any, obs: dict[str, Any], rounds: int) -> list[float]:
        import ray

        return [ray.get(server.infer.remote(obs))["queue_wait_s"] for _ in range(rounds)]


def batching_figures(rounds: int) -> dict[str, Any]:
    """Observations/s and queue wait p50 of the BatchServer actor at max_batch 1, 4, 8."""
    import numpy as np
    import ray
    from fixtures.lerobot import SO101_JOINTS, build_tiny_checkpoint
    from robokernel_ros.policies.batching import BatchServer

    ckpt = build_tiny_checkpoint(tempfile.mkdtemp(prefix="eval_scaling-act-"), chunk_size=10)
    rng = np.random.default_rng(0)
    obs = {**{j: float(v) for j, v in zip(SO101_JOINTS, rng.uniform(-1, 1, 6), strict=True)},
           "images": {"front": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)}}  # fmt: skip
    out: dict[str, Any] = {}
    actor = ray.remote(num_cpus=0, max_concurrency=16)(BatchServer)
    client_class = ray.remote(num_cpus=0)(_BatchClient)
    for b in (1, 4, 8):
        server = actor.remote(
            "lerobot", {"path": str(ckpt), "device": "cpu"}, max_batch=b, max_wait_ms=5.0
        )
        ray.get(server.bind.remote(list(SO101_JOINTS), {}))
        for _ in range(3):  # warm-up
            ray.get(server.infer.remote(obs))
        # The clients are processes (Ray actors), as the workers of a parallel eval are:
        # threads of this process would share its GIL with Ray's own client and starve.
        clients = [client_class.remote() for _ in range(b)]
        ray.get([c.run.remote(server, obs, 1) for c in clients])  # up and warm
        t0 = time.monotonic()
        waits = [
            w for ws in ray.get([c.run.remote(server, obs, rounds) for c in clients]) for w in ws
        ]
        elapsed = time.monotonic() - t0
        for c in clients:
            ray.kill(c)
        out[f"batch{b}_obs_per_s"] = b * rounds / elapsed
        out[f"batch{b}_queue_wait_p50_ms"] = 1000 * float(np.median(waits))
        out[f"batch{b}_mean_batch"] = ray.get(server.stats.remote())["mean_batch"]
        ray.kill(server)
    out["batch8_vs_batch1"] = out["batch8_obs_per_s"] / out["batch1_obs_per_s"]
    out["batch4_vs_batch1"] = out["batch4_obs_per_s"] / out["batch1_obs_per_s"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 episodes of 300 steps")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-bag", action="store_true", help="run directories without their bags")
    args = parser.parse_args()
    episodes = args.episodes or (16 if args.quick else 60)
    steps = args.steps or (300 if args.quick else 500)
    import ray
    from robokernel_ros.rollout import SimWorkcell, envelope_json

    root = Path(tempfile.mkdtemp(prefix="eval_scaling-"))
    figures: dict[str, Any] = {
        "episodes": episodes,
        "steps": steps,
        "workers": WORKERS,
        "bags": not args.no_bag,
    }
    try:
        cell = SimWorkcell(trace_dir=root / "serial", bag=False if args.no_bag else "mcap")
        cell.add_robot("arm", "panda")
        kwargs = dict(n_episodes=episodes, max_steps=steps, seed=SEED)
        cpu0 = _cpu_s()
        serial = envelope_json(cell.eval_policy("arm", **kwargs))
        figures["serial_eps"] = episodes / serial["elapsed_s"]
        figures["serial_cpu_cores"] = (_cpu_s() - cpu0) / serial["elapsed_s"]  # loop + bag writer

        par = envelope_json(
            cell.eval_policy("arm", workers=WORKERS, trace_dir=root / "ray", **kwargs)
        )
        assert par["parallel"]["episodes_completed"] == episodes, par["parallel"]
        figures["ray_eps"] = episodes / par["elapsed_s"]
        figures["ray_startup_s"] = par["parallel"]["startup_s"]
        same = [a["total_reward"] == b["total_reward"] and a["steps_advanced"] == b["steps_advanced"]
                for a, b in zip(serial["episodes"], par["episodes"], strict=True)]  # fmt: skip
        figures["ray_equals_serial"] = all(same)

        t_start = time.monotonic()
        ctx = multiprocessing.get_context("spawn")
        init = (cell.scene.description(), str(root / "pool"), episodes, steps, not args.no_bag)
        with ctx.Pool(WORKERS, initializer=_pool_init, initargs=init) as pool:
            assert all(pool.map(_pool_ready, range(WORKERS), chunksize=1))
            t0 = time.monotonic()
            figures["pool_startup_s"] = t0 - t_start
            assert all(pool.map(_pool_episode, range(episodes), chunksize=1))
            figures["pool_eps"] = episodes / (time.monotonic() - t0)
        cell.close()
        figures.update(batching_figures(rounds=10 if args.quick else 30))
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    figures["ray_vs_pool"] = figures["ray_eps"] / figures["pool_eps"]
    figures["ray_vs_serial"] = figures["ray_eps"] / figures["serial_eps"]
    figures["pool_vs_serial"] = figures["pool_eps"] / figures["serial_eps"]
    verdicts = {
        f"ray >= {TARGET_VS_POOL}x pool": figures["ray_vs_pool"] >= TARGET_VS_POOL,
        f"ray >= {TARGET_VS_SERIAL}x serial": figures["ray_vs_serial"] >= TARGET_VS_SERIAL,
        "ray episodes equal serial": figures["ray_equals_serial"],
        f"batch 8 >= {TARGET_BATCH8}x batch 1": figures["batch8_vs_batch1"] >= TARGET_BATCH8,
    }
    print(
        f"serial  {figures['serial_eps']:7.2f} episodes/s  ({figures['serial_cpu_cores']:.2f} CPU cores busy)"
    )
    print(f"ray     {figures['ray_eps']:7.2f} episodes/s  ({figures['ray_vs_serial']:.2f}x serial, "
          f"{figures['ray_vs_pool']:.2f}x pool; start-up {figures['ray_startup_s']:.1f} s)")  # fmt: skip
    print(f"pool    {figures['pool_eps']:7.2f} episodes/s  ({figures['pool_vs_serial']:.2f}x serial; "
          f"start-up {figures['pool_startup_s']:.1f} s)  <- anchor")  # fmt: skip
    for b in (1, 4, 8):
        print(f"batched ACT, B={b}: {figures[f'batch{b}_obs_per_s']:7.1f} obs/s, queue wait p50 "
              f"{figures[f'batch{b}_queue_wait_p50_ms']:.2f} ms, mean batch {figures[f'batch{b}_mean_batch']:.2f}")  # fmt: skip
    print(f"batch 8 vs batch 1: {figures['batch8_vs_batch1']:.2f}x")
    print(json.dumps({"bench": "eval_scaling", **figures, "verdicts": verdicts}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
