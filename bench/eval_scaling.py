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

Targets (2-core machine): ray >= 0.9x pool, ray >= 1.6x serial.

    python bench/eval_scaling.py            # 60 episodes x 500 steps (~8 s of serial work)
    python bench/eval_scaling.py --quick    # 16 x 300

The last line printed is a JSON object of all figures and each target's verdict.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_VS_POOL = 0.9
TARGET_VS_SERIAL = 1.6
WORKERS = 2
SEED = 0

_session: Any = None
_control: Any = None


def _pool_init(description: dict[str, Any], trace_dir: str, episodes: int, steps: int) -> None:
    global _session, _control
    from robokernel_ros.envs import MujocoScene
    from robokernel_ros.rollout.runner import EvalSession, PolicyRunner, RolloutControl, plan_eval

    scene = MujocoScene.from_description(description)
    plan = plan_eval("arm", robots=scene.robots(), n_episodes=episodes, max_steps=steps, seed=SEED,
                     trace_dir=trace_dir)  # fmt: skip
    _control = RolloutControl(plan.robots, plan.call)
    _session = EvalSession(PolicyRunner(scene), plan, scene)


def _pool_ready(_: int) -> bool:
    time.sleep(0.2)  # held, so that each pool process answers one of these
    return _session is not None


def _pool_episode(i: int) -> bool:
    return bool(_session.episode(i, _control)["steps_advanced"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 episodes of 300 steps")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    episodes = args.episodes or (16 if args.quick else 60)
    steps = args.steps or (300 if args.quick else 500)
    import ray
    from robokernel_ros.rollout import SimWorkcell, envelope_json

    root = Path(tempfile.mkdtemp(prefix="eval_scaling-"))
    figures: dict[str, Any] = {"episodes": episodes, "steps": steps, "workers": WORKERS}
    try:
        cell = SimWorkcell(trace_dir=root / "serial")
        cell.add_robot("arm", "panda")
        kwargs = dict(n_episodes=episodes, max_steps=steps, seed=SEED)
        serial = envelope_json(cell.eval_policy("arm", **kwargs))
        figures["serial_eps"] = episodes / serial["elapsed_s"]

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
        init = (cell.scene.description(), str(root / "pool"), episodes, steps)
        with ctx.Pool(WORKERS, initializer=_pool_init, initargs=init) as pool:
            assert all(pool.map(_pool_ready, range(WORKERS), chunksize=1))
            t0 = time.monotonic()
            figures["pool_startup_s"] = t0 - t_start
            assert all(pool.map(_pool_episode, range(episodes), chunksize=1))
            figures["pool_eps"] = episodes / (time.monotonic() - t0)
        cell.close()
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
    }
    print(f"serial  {figures['serial_eps']:7.2f} episodes/s")
    print(f"ray     {figures['ray_eps']:7.2f} episodes/s  ({figures['ray_vs_serial']:.2f}x serial, "
          f"{figures['ray_vs_pool']:.2f}x pool; start-up {figures['ray_startup_s']:.1f} s)")  # fmt: skip
    print(f"pool    {figures['pool_eps']:7.2f} episodes/s  ({figures['pool_vs_serial']:.2f}x serial; "
          f"start-up {figures['pool_startup_s']:.1f} s)  <- anchor")  # fmt: skip
    print(json.dumps({"bench": "eval_scaling", **figures, "verdicts": verdicts}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
