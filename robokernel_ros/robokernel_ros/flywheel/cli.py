"""`robokernel flywheel`: record, train, deploy, compare - in one command.

    robokernel flywheel --out runs/flywheel [--episodes 100] [--demo-steps 40] [--train-steps 4000]
                        [--eval-episodes 20] [--eval-seed 100000] [--batch-size 32] [--json]

Prints each stage's time as it ends, then the comparison table of the expert, the
trained and the untrained policy on the held-out seeds, and where every artefact is.
Exit status 0 when every stage ran, 1 when one was refused or failed.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..cli import register_subcommand


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="a new or empty folder: every artefact goes there")
    p.add_argument("--episodes", type=int, default=100, help="expert episodes to collect (100)")
    p.add_argument("--demo-steps", type=int, default=40,
                   help="steps per demonstration: reach, then hold the goal (40)")  # fmt: skip
    p.add_argument("--train-steps", type=int, default=4000, help="lerobot-train steps (4000)")
    p.add_argument("--batch-size", type=int, default=32, help="lerobot-train batch size (32)")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads for training and evaluation (1)")  # fmt: skip
    p.add_argument("--eval-episodes", type=int, default=20, help="held-out seeds per policy (20)")
    p.add_argument("--collect-seed", type=int, default=0, help="first collected seed (0)")
    p.add_argument("--eval-seed", type=int, default=100_000, help="first held-out seed (100000)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _run(args: argparse.Namespace) -> int:
    from .loop import FlywheelConfig, run_flywheel

    try:
        cfg = FlywheelConfig(
            out=args.out, episodes=args.episodes, demo_steps=args.demo_steps,
            train_steps=args.train_steps,
            eval_episodes=args.eval_episodes, collect_seed=args.collect_seed,
            eval_seed=args.eval_seed, batch_size=args.batch_size,
            torch_threads=args.torch_threads,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def stage(name: str, seconds: float) -> None:
        print(f"[flywheel] {name}: {seconds:.1f} s", file=sys.stderr if args.json else sys.stdout,
              flush=True)  # fmt: skip

    try:
        result = run_flywheel(cfg, on_stage=stage)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    print(f"\n{cfg.benchmark}: {result.demos_kept}/{result.demos} expert episodes kept, "
          f"{result.dataset['frames']} frames at {result.dataset['fps']} fps; "
          f"{cfg.train_steps} training steps; {cfg.eval_episodes} held-out seeds "
          f"from {cfg.eval_seed}\n")  # fmt: skip
    print(result.table())
    print(f"\ntotal {result.stage_s['total']:.1f} s")
    print(f"dataset     {result.dataset['root']}")
    print(f"train log   {result.train_log}")
    print(f"checkpoint  {result.checkpoint}")
    print(f"untrained   {result.untrained}")
    print(f"evaluations {cfg.out / 'eval'}")
    print(f"summary     {cfg.out / 'flywheel.json'}")
    return 0


register_subcommand(
    "flywheel", "collect expert demos, train ACT with lerobot-train, evaluate it", _arguments, _run
)
