"""`robokernel flywheel`: record, train, deploy, compare - in one command.

    robokernel flywheel --out runs/flywheel [--episodes 100] [--demo-steps 40] [--train-steps 4000]
                        [--eval-episodes 20] [--eval-seed 100000] [--batch-size 32] [--json]
                        [--dagger ROUNDS [--dagger-episodes 20] [--dagger-seed 50000]
                         [--tube-radius 0.3] [--tube-back-steps 5]]

Prints each stage's time as it ends, then the comparison table of the expert, the
trained and the untrained policy on the held-out seeds, and where every artefact is.
With --dagger, after behaviour cloning each round deploys the current policy with the
simulated operator correcting, adds its corrections to the dataset, retrains and
evaluates (flywheel.dagger): one table per round as it ends, and the DAgger policies'
rows in the comparison table. Exit status 0 when every stage ran, 1 when one was
refused or failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from robokernel_ros.cli.registry import register_subcommand

if TYPE_CHECKING:
    from robokernel_ros.flywheel.loop import FlywheelConfig


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="a new or empty folder: every artefact goes there")
    p.add_argument("--episodes", type=int, default=100, help="expert episodes to collect (100)")
    p.add_argument(
        "--demo-steps",
        type=int,
        default=40,
        help="steps per demonstration: reach, then hold the goal (40)",
    )
    p.add_argument("--train-steps", type=int, default=4000, help="lerobot-train steps (4000)")
    p.add_argument("--batch-size", type=int, default=32, help="lerobot-train batch size (32)")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads for training and evaluation (1)",
    )
    p.add_argument("--eval-episodes", type=int, default=20, help="held-out seeds per policy (20)")
    p.add_argument("--collect-seed", type=int, default=0, help="first collected seed (0)")
    p.add_argument("--eval-seed", type=int, default=100_000, help="first held-out seed (100000)")
    p.add_argument(
        "--dagger",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="DAgger rounds after behaviour cloning (0: none)",
    )
    p.add_argument(
        "--dagger-episodes",
        type=int,
        default=20,
        help="episodes each round deploys with the simulated operator (20)",
    )
    p.add_argument(
        "--dagger-seed",
        type=int,
        default=50_000,
        help="first seed of the deployments; round k starts ROUNDS x k later (50000)",
    )
    p.add_argument(
        "--tube-radius",
        type=float,
        default=0.3,
        help="rad: the simulated operator takes over outside this tube (0.3)",
    )
    p.add_argument(
        "--tube-back-steps",
        type=int,
        default=5,
        help="steps inside half the tube before it hands back (5)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _config(args: argparse.Namespace) -> FlywheelConfig:
    """The flywheel's configuration from the flags (ValueError naming the bad one)."""
    from robokernel_ros.flywheel.loop import FlywheelConfig

    return FlywheelConfig(
        out=args.out,
        episodes=args.episodes,
        demo_steps=args.demo_steps,
        train_steps=args.train_steps,
        eval_episodes=args.eval_episodes,
        collect_seed=args.collect_seed,
        eval_seed=args.eval_seed,
        batch_size=args.batch_size,
        torch_threads=args.torch_threads,
        dagger_rounds=args.dagger,
        dagger_episodes=args.dagger_episodes,
        dagger_seed=args.dagger_seed,
        tube_radius=args.tube_radius,
        tube_back_steps=args.tube_back_steps,
    )


def _run(args: argparse.Namespace) -> int:
    from robokernel_ros.flywheel.dagger import run_flywheel_dagger

    try:
        cfg = _config(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def stage(name: str, seconds: float) -> None:
        print(
            f"[flywheel] {name}: {seconds:.1f} s",
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )

    def round_done(r: Any) -> None:
        from robokernel_ros.flywheel.dagger import round_table

        out = sys.stderr if args.json else sys.stdout
        print(f"\n[flywheel] DAgger round {r.round} (deployed {r.deployed}):", file=out)
        print(round_table(r) + "\n", file=out, flush=True)

    try:
        result = run_flywheel_dagger(cfg, on_stage=stage, on_round=round_done)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_json()))
        return 0
    print(
        f"\n{cfg.benchmark}: {result.demos_kept}/{result.demos} expert episodes kept, "
        f"{result.dataset['frames']} frames at {result.dataset['fps']} fps; "
        f"{cfg.train_steps} training steps; {cfg.eval_episodes} held-out seeds "
        f"from {cfg.eval_seed}\n"
    )
    print(result.table())
    print(f"\ntotal {result.stage_s['total']:.1f} s")
    print(f"dataset     {result.dataset['root']}")
    print(f"train log   {result.train_log}")
    print(f"checkpoint  {result.checkpoint}")
    print(f"untrained   {result.untrained}")
    print(f"evaluations {cfg.out / 'eval'}")
    if result.rounds:
        print(f"dagger      {cfg.out / 'dagger'} (round_k/deploy, corrections, dataset, train)")
    print(f"summary     {cfg.out / 'flywheel.json'}")
    return 0


register_subcommand(
    "flywheel", "collect expert demos, train ACT with lerobot-train, evaluate it", _arguments, _run
)
