"""Benchmark of the whole flywheel (issue 18): record, train, deploy, compare.

    nice -n 10 python bench/flywheel.py [--quick] [--episodes 100] [--train-steps 4000]
                                        [--eval-episodes 20] [--out DIR]

`robokernel flywheel`'s stages, as the command runs them (`robokernel_ros.flywheel`):
the so101_reach_random expert (scripted_goal) collects --episodes episodes in MuJoCo,
export-lerobot writes them as a LeRobotDataset (lerobot convention, 25 fps, the goal as
observation.environment_state), LeRobot's own lerobot-train trains a small ACT on CPU,
and evaluate_benchmark runs the expert, the trained checkpoint and an untrained twin
(same architecture and normalisation, fresh weights) on --eval-episodes held-out seeds
through the kernel's shield (max_velocity 3 rad/s).

The anchor is the expert, measured in the same run on the same seeds. Targets: the
whole loop under 15 minutes, the trained policy at >= 80 % success where the untrained
one is near 0 % (<= 10 %). --quick: 20 episodes, 200 steps, 10 seeds (a smoke run; its
verdicts are not the targets'). The artefacts stay in --out (default: a temporary
folder, kept). The last line is one JSON object with every figure and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))

from robokernel_ros.flywheel import FlywheelConfig, run_flywheel  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

TARGET_TOTAL_S = 15 * 60
TARGET_TRAINED = 0.8
TARGET_UNTRAINED = 0.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--episodes", type=int, default=None)
    parser.add_argument("--train-steps", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    quick = {"episodes": 20, "train_steps": 200, "eval_episodes": 10}
    full = {"episodes": 100, "train_steps": 4000, "eval_episodes": 20}
    sizes = quick if args.quick else full
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="flywheel_")) / "out"
    cfg = FlywheelConfig(out=out, batch_size=args.batch_size, **sizes)

    def stage(name: str, seconds: float) -> None:
        print(f"{name:16s} {seconds:7.1f} s", flush=True)

    print(f"flywheel into {out}: {sizes}, batch {args.batch_size}")
    result = run_flywheel(cfg, on_stage=stage)
    total = result.stage_s["total"]
    print(f"{'total':16s} {total:7.1f} s (target < {TARGET_TOTAL_S} s)\n")
    print(result.table())
    rows = {p.name: p for p in result.policies}
    rate = {name: p.successes / p.episodes for name, p in rows.items()}
    expert = rate["expert"]
    print(
        f"\ntrained {rate['trained']:.2f} = {rate['trained'] / expert if expert else 0:.2f} x "
        f"the expert's {expert:.2f} (anchor); untrained {rate['untrained']:.2f}"
    )
    figures = {
        "sizes": sizes,
        "batch_size": args.batch_size,
        "out": str(out),
        "stage_s": {k: round(v, 2) for k, v in result.stage_s.items()},
        "dataset_frames": result.dataset["frames"],
        "demos_kept": result.demos_kept,
        "success_rate": rate,
        "success_ci95": {n: list(p.success_ci95) for n, p in rows.items()},
        "mean_return": {n: p.mean_return for n, p in rows.items()},
        "shield_interventions": {n: p.shield_interventions for n, p in rows.items()},
        "chunk_latency_ms": {n: p.chunk_latency_ms for n, p in rows.items()},
        "trained_over_expert": rate["trained"] / expert if expert else None,
    }
    figures["verdicts"] = {
        "total_under_15_min": total < TARGET_TOTAL_S,
        "trained_ge_80pct": rate["trained"] >= TARGET_TRAINED,
        "untrained_le_10pct": rate["untrained"] <= TARGET_UNTRAINED,
    }
    figures["quick"] = bool(args.quick)  # a setting, not a verdict
    print(json.dumps(figures))
    return exit_status(figures["verdicts"], "flywheel")


if __name__ == "__main__":
    sys.exit(main())
