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

The CPU each timed window used is printed beside it, by process: this one (the serial
loop, the drivers), Ray's own (raylet, GCS, idle workers), the rest (the episode
processes and their bag writers); sampled every 0.2 s from /proc. The serial run's cores
bound what two processes on two cores can reach: 2 / serial cores (with its bag writer
beside it serial uses more than one core), and the pool is the measured best.

Then batched inference: a small LeRobot ACT built here (random weights, CPU, one 64x64
camera), served by the BatchServer Ray actor that `batch_inference=True` uses, with B
client processes (Ray actors) calling it at once (each waits for its chunk, as a worker does) at
max_batch B = 1, 4, 8, the server told to expect B callers (as the parallel driver tells
it its episodes in flight): observations per second, the mean batch (fill), and the
queueing latency p50 / p99 (the wait for the batch to close). Its ceiling, in the same
run and without Ray: the same policy's own get_actions_batch throughput at 1, 4, 8 in this
process, with the server actor's torch thread count.

Targets (2-core machine): ray >= 0.9x pool, ray >= 1.6x serial; batched throughput at
B=8 >= 2.5x B=1.

    python bench/eval_scaling.py            # 60 episodes x 500 steps (~8 s of serial work)
    python bench/eval_scaling.py --quick    # 16 x 300
    python bench/eval_scaling.py --batching-only [--max-wait-ms 5]   # the ACT figures alone
    python bench/eval_scaling.py --eval-only        # the eval figures alone

The last line printed is a JSON object of all figures and each target's verdict.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

# The tiny checkpoints are test fixtures: robokernel_ros/test/fixtures/lerobot.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros" / "test"))

TARGET_VS_POOL = 0.9
TARGET_VS_SERIAL = 1.6
TARGET_BATCH8 = 2.5
WORKERS = 2
SEED = 0
BATCHES = (1, 4, 8)

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


def _pool_ready(_: int) -> bool:
    time.sleep(0.2)  # held, so that each pool process answers one of these
    return _session is not None


def _pool_episode(i: int) -> bool:
    return bool(_session.episode(i, _control).steps_advanced)


class TreeCpu:
    """CPU seconds of this process and its descendants by role, sampled from /proc every
    `period` s by a thread; `between(t0, t1)` interpolates each role's CPU over a window.

    Roles: "this" (this process: the serial loop, a driver), "ray" (Ray's processes that
    run no episode: raylet, GCS, idle workers), "rest" (the episode processes, Ray's or
    the pool's, their bag writers, the serial loop's bag writer)."""

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._tick = os.sysconf("SC_CLK_TCK")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-cpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.period):
            self.samples.append(self.sample())

    def sample(self) -> tuple[float, dict[str, float]]:
        procs: dict[int, tuple[int, float]] = {}  # pid -> (ppid, cpu s)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    procs[int(entry.name)] = (
                        int(fields[1]),
                        (int(fields[11]) + int(fields[12])) / self._tick,
                    )
                except (OSError, IndexError, ValueError):
                    pass
        me = os.getpid()
        roles = {"this": procs.get(me, (0, 0.0))[1], "ray": 0.0, "rest": 0.0}
        cmd: dict[int, str] = {}

        def cmdline(pid: int) -> str:
            if pid not in cmd:
                try:
                    cmd[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    cmd[pid] = ""
            return cmd[pid]

        for pid, (_, cpu) in procs.items():
            chain, p = [], pid
            while p in procs and p != me and len(chain) < 32:
                chain.append(p)
                p = procs[p][0]
            if p != me or not chain:
                continue  # not below this process (or this process itself)
            if any("EpisodeWorker" in cmdline(c) for c in chain):
                roles["rest"] += cpu
            elif _is_ray(cmdline(chain[-1])) or _is_ray(cmdline(pid)):
                roles["ray"] += cpu
            else:
                roles["rest"] += cpu
        return time.monotonic(), roles

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """Each role's CPU seconds from t0 to t1 (interpolated between samples)."""

        def at(t: float) -> dict[str, float]:
            before = [s for s in self.samples if s[0] <= t]
            after = [s for s in self.samples if s[0] >= t]
            if not before or not after:
                return (before or after)[-1 if before else 0][1]
            (ta, a), (tb, b) = before[-1], after[0]
            w = 0.0 if tb == ta else (t - ta) / (tb - ta)
            return {k: a.get(k, 0.0) + w * (b.get(k, 0.0) - a.get(k, 0.0)) for k in a}

        start, end = at(t0), at(t1)
        return {k: max(0.0, end[k] - start.get(k, 0.0)) for k in end}

    def close(self) -> None:
        self._done.set()
        self._thread.join()


def _is_ray(cmd: str) -> bool:
    """Ray's own processes (raylet, GCS, agents, idle workers), not any path holding "ray"."""
    return "ray::" in cmd or "site-packages/ray/" in cmd or "/ray/core/" in cmd


def _cores(cpu: dict[str, float], seconds: float) -> dict[str, float]:
    out = {k: round(v / seconds, 2) for k, v in cpu.items()}
    out["total"] = round(sum(cpu.values()) / seconds, 2)
    return out


class _BatchClient:
    """One process asking the batch server for chunks, one at a time (a worker's pattern)."""

    def run(self, server: Any, obs: dict[str, Any], rounds: int) -> list[float]:
        import ray

        return [ray.get(server.infer.remote(obs))["queue_wait_s"] for _ in range(rounds)]


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


class _Forward:
    """The ceiling: the policy's own get_actions_batch in this process (no Ray, no queue),
    with the server actor's torch thread count."""

    def __init__(self, ckpt: Path, threads: int) -> None:
        import torch
        from fixtures.lerobot import SO101_JOINTS
        from robokernel_ros.policies import create_policy

        self.threads = threads
        torch.set_num_threads(threads)  # this process runs no policy of its own after this
        self.policy = create_policy("lerobot", path=str(ckpt), device="cpu")
        self.policy.set_robot_state_keys(list(SO101_JOINTS))

    def run(self, obs: dict[str, Any], b: int, passes: int) -> float:
        """Seconds for `passes` forward passes of B=b copies of obs."""
        t0 = time.monotonic()
        for _ in range(passes):
            self.policy.get_actions_batch([obs] * b, [""] * b)
        return time.monotonic() - t0


def batching_figures(rounds: int, reps: int, max_wait_ms: float, root: Path) -> dict[str, Any]:
    """The BatchServer actor at max_batch 1, 4, 8 with as many client processes: obs/s,
    mean batch, queue wait p50 / p99; and the forward pass alone (no Ray) at the same B.
    The six are interleaved, `reps` times each, so that the load of the shared machine
    falls on all of them alike."""
    import numpy as np
    import ray
    from fixtures.lerobot import SO101_JOINTS, build_tiny_checkpoint
    from robokernel_ros.policies.batching import BatchServer
    from robokernel_ros.rollout.parallel import ray_init

    ray_init(None, WORKERS)
    ckpt = build_tiny_checkpoint(root / "act", chunk_size=10)
    rng = np.random.default_rng(0)
    obs = {**{j: float(v) for j, v in zip(SO101_JOINTS, rng.uniform(-1, 1, 6), strict=True)},
           "images": {"front": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)}}  # fmt: skip
    # As parallel.py starts it: no CPU reserved, threads for every caller.
    actor = ray.remote(num_cpus=0, max_concurrency=16)(BatchServer)
    client_class = ray.remote(num_cpus=0)(_BatchClient)
    servers, clients = {}, {}
    for b in BATCHES:
        servers[b] = actor.remote(
            "lerobot", {"path": str(ckpt), "device": "cpu"}, max_batch=b, max_wait_ms=max_wait_ms
        )
        ray.get(servers[b].bind.remote(list(SO101_JOINTS), {}))
        # The clients are processes (Ray actors), as the workers of a parallel eval are:
        # threads of this process would share its GIL with Ray's own client and starve.
        clients[b] = [client_class.remote() for _ in range(b)]
        ray.get(servers[b].expect_callers.remote(b))  # as the driver sends its episodes in flight
        ray.get([c.run.remote(servers[b], obs, 3) for c in clients[b]])  # up and warm
    forward = _Forward(ckpt, ray.get(ray.remote(num_cpus=0)(_torch_threads).remote()))
    for b in BATCHES:
        forward.run(obs, b, 3)  # warm-up
    served_s = dict.fromkeys(BATCHES, 0.0)
    forward_s = dict.fromkeys(BATCHES, 0.0)
    batches = dict.fromkeys(BATCHES, 0)
    waits: dict[int, list[float]] = {b: [] for b in BATCHES}
    for _ in range(reps):
        for b in BATCHES:
            server = servers[b]
            batches0 = ray.get(server.stats.remote())["batches"]
            t0 = time.monotonic()
            for ws in ray.get([c.run.remote(server, obs, rounds) for c in clients[b]]):
                waits[b].extend(ws)
            served_s[b] += time.monotonic() - t0
            batches[b] += ray.get(server.stats.remote())["batches"] - batches0
            forward_s[b] += forward.run(obs, b, rounds)  # b * rounds observations, as served
    for handle in [*servers.values(), *(c for cs in clients.values() for c in cs)]:
        ray.kill(handle)
    forward.policy.close()
    out: dict[str, Any] = {"max_wait_ms": max_wait_ms, "batch_reps": reps, "batch_rounds": rounds,
                           "forward_torch_threads": forward.threads}  # fmt: skip
    for b in BATCHES:
        n = b * rounds * reps
        out[f"batch{b}_obs_per_s"] = n / served_s[b]
        out[f"batch{b}_mean_batch"] = n / batches[b]  # the timed windows' fill
        out[f"batch{b}_queue_wait_p50_ms"] = 1000 * float(np.quantile(waits[b], 0.5))
        out[f"batch{b}_queue_wait_p99_ms"] = 1000 * float(np.quantile(waits[b], 0.99))
        out[f"forward{b}_obs_per_s"] = n / forward_s[b]
    for b in BATCHES[1:]:
        out[f"batch{b}_vs_batch1"] = out[f"batch{b}_obs_per_s"] / out["batch1_obs_per_s"]
        out[f"forward{b}_vs_forward1"] = out[f"forward{b}_obs_per_s"] / out["forward1_obs_per_s"]
    return out


def eval_figures(episodes: int, steps: int, bag: bool, root: Path) -> dict[str, Any]:
    """Serial, Ray workers=2 and the pool on the same episodes, each window's CPU by role."""
    from robokernel_ros.rollout import SimWorkcell, envelope_json

    figures: dict[str, Any] = {}
    cpu = TreeCpu()
    try:
        cell = SimWorkcell(trace_dir=root / "serial", bag="mcap" if bag else False)
        cell.add_robot("arm", "panda")
        kwargs = dict(n_episodes=episodes, max_steps=steps, seed=SEED)
        serial = envelope_json(cell.eval_policy("arm", **kwargs))
        t_end = time.monotonic()
        figures["serial_eps"] = episodes / serial["elapsed_s"]
        window = (t_end - serial["elapsed_s"], t_end)
        figures["serial_cores"] = _cores(cpu.between(*window), serial["elapsed_s"])

        t_call = time.monotonic()
        par = envelope_json(
            cell.eval_policy("arm", workers=WORKERS, trace_dir=root / "ray", **kwargs)
        )
        assert par["parallel"]["episodes_completed"] == episodes, par["parallel"]
        figures["ray_eps"] = episodes / par["elapsed_s"]
        figures["ray_startup_s"] = par["parallel"]["startup_s"]
        window = (
            t_call + par["parallel"]["startup_s"],
            t_call + par["parallel"]["startup_s"] + par["elapsed_s"],
        )
        figures["ray_cores"] = _cores(cpu.between(*window), par["elapsed_s"])
        same = [a["total_reward"] == b["total_reward"] and a["steps_advanced"] == b["steps_advanced"]
                for a, b in zip(serial["episodes"], par["episodes"], strict=True)]  # fmt: skip
        figures["ray_equals_serial"] = all(same)

        t_start = time.monotonic()
        ctx = multiprocessing.get_context("spawn")
        init = (cell.scene.description(), str(root / "pool"), episodes, steps, bag)
        with ctx.Pool(WORKERS, initializer=_pool_init, initargs=init) as pool:
            assert all(pool.map(_pool_ready, range(WORKERS), chunksize=1))
            t0 = time.monotonic()
            figures["pool_startup_s"] = t0 - t_start
            assert all(pool.map(_pool_episode, range(episodes), chunksize=1))
            t1 = time.monotonic()
            figures["pool_eps"] = episodes / (t1 - t0)
            time.sleep(2 * cpu.period)  # a sample after t1, before the pool's processes end
            figures["pool_cores"] = _cores(cpu.between(t0, t1), t1 - t0)
        cell.close()
    finally:
        cpu.close()
    figures["ray_vs_pool"] = figures["ray_eps"] / figures["pool_eps"]
    figures["ray_vs_serial"] = figures["ray_eps"] / figures["serial_eps"]
    figures["pool_vs_serial"] = figures["pool_eps"] / figures["serial_eps"]
    # Two processes doing serial's work on two cores: at most 2 / (serial's cores) faster.
    figures["two_core_bound_vs_serial"] = WORKERS / figures["serial_cores"]["total"]
    return figures


def _eval_verdicts(f: dict[str, Any]) -> dict[str, bool]:
    """Print the eval figures (as soon as they are measured) and return their verdicts."""
    verdicts: dict[str, bool] = {}
    verdicts[f"ray >= {TARGET_VS_POOL}x pool"] = f["ray_vs_pool"] >= TARGET_VS_POOL
    verdicts[f"ray >= {TARGET_VS_SERIAL}x serial"] = f["ray_vs_serial"] >= TARGET_VS_SERIAL
    verdicts[f"pool >= {TARGET_VS_SERIAL}x serial (the measured floor of the target)"] = (
        f["pool_vs_serial"] >= TARGET_VS_SERIAL
    )
    verdicts["ray episodes equal serial"] = f["ray_equals_serial"]
    for name in ("serial", "ray", "pool"):
        c = f[f"{name}_cores"]
        print(f"{name:7s} {f[f'{name}_eps']:7.2f} episodes/s  CPU {c['total']:.2f} cores "
              f"(this process {c['this']:.2f}, Ray's {c['ray']:.2f}, the rest {c['rest']:.2f})")  # fmt: skip
    print(f"ray {f['ray_vs_serial']:.2f}x serial, {f['ray_vs_pool']:.2f}x pool; start-up "
          f"{f['ray_startup_s']:.1f} s (pool {f['pool_startup_s']:.1f} s)")  # fmt: skip
    print(f"target ray >= {TARGET_VS_SERIAL}x serial: ray {f['ray_vs_serial']:.2f}x, the pool "
          f"(best local parallelism) {f['pool_vs_serial']:.2f}x, two cores over serial's "
          f"{f['serial_cores']['total']:.2f} (on an idle machine): {f['two_core_bound_vs_serial']:.2f}x at most -> "
          f"{TARGET_VS_SERIAL}x is {'within' if f['pool_vs_serial'] >= TARGET_VS_SERIAL else 'above'} "
          "what the pool reached")  # fmt: skip
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 episodes of 300 steps")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-bag", action="store_true", help="run directories without their bags")
    parser.add_argument("--batching-only", action="store_true", help="only the batched ACT figures")
    parser.add_argument("--eval-only", action="store_true", help="only the eval figures (no ACT)")
    parser.add_argument("--max-wait-ms", type=float, default=50.0,
                        help="the batch server's max_wait_ms (default 50)")  # fmt: skip
    args = parser.parse_args()
    episodes = args.episodes or (16 if args.quick else 60)
    steps = args.steps or (300 if args.quick else 500)
    import ray

    root = Path(tempfile.mkdtemp(prefix="eval_scaling-"))
    figures: dict[str, Any] = {"load_avg_1min": os.getloadavg()[0]}
    verdicts: dict[str, bool] = {}
    try:
        if not args.batching_only:
            figures.update(episodes=episodes, steps=steps, workers=WORKERS, bags=not args.no_bag)
            figures.update(eval_figures(episodes, steps, not args.no_bag, root))
            verdicts.update(_eval_verdicts(figures))
        if not args.eval_only:
            figures.update(batching_figures(10, 2 if args.quick else 5, args.max_wait_ms, root))
    finally:
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    f = figures
    if args.eval_only:
        print(json.dumps({"bench": "eval_scaling", **figures, "verdicts": verdicts}))
        return exit_status(verdicts, "eval_scaling")
    verdicts[f"batch 8 >= {TARGET_BATCH8}x batch 1"] = f["batch8_vs_batch1"] >= TARGET_BATCH8
    verdicts[f"forward pass 8 >= {TARGET_BATCH8}x 1 (the ceiling of the target)"] = (
        f["forward8_vs_forward1"] >= TARGET_BATCH8
    )
    for b in BATCHES:
        print(f"batched ACT, B={b}: {f[f'batch{b}_obs_per_s']:7.1f} obs/s, mean batch "
              f"{f[f'batch{b}_mean_batch']:.2f}, queue wait p50 {f[f'batch{b}_queue_wait_p50_ms']:.2f} ms "
              f"p99 {f[f'batch{b}_queue_wait_p99_ms']:.2f} ms | forward pass alone "
              f"{f[f'forward{b}_obs_per_s']:7.1f} obs/s")  # fmt: skip
    print(f"target batch 8 >= {TARGET_BATCH8}x batch 1: served {f['batch8_vs_batch1']:.2f}x "
          f"(max_wait_ms {f['max_wait_ms']:g}); ACT's own forward pass {f['forward8_vs_forward1']:.2f}x "
          f"({f['forward_torch_threads']} torch thread(s), no Ray): the ceiling")  # fmt: skip
    print(json.dumps({"bench": "eval_scaling", **figures, "verdicts": verdicts}))
    return exit_status(verdicts, "eval_scaling")


if __name__ == "__main__":
    raise SystemExit(main())
