"""Benchmark of DAgger in the flywheel (issue 40): does the operator's data beat more demos?

    nice -n 10 python bench/dagger.py [--quick] [--demos 10] [--rounds 2] [--dagger-episodes 20]
                                      [--train-steps 1500] [--eval-episodes 30] [--out DIR]

so101_reach_random with few demonstrations, where behaviour cloning falls short of the
expert. `robokernel flywheel --dagger ROUNDS` as the command runs it
(`robokernel_ros.flywheel`): --demos expert demonstrations, lerobot-train (ACT, CPU, one
torch thread), then each round deploys the current policy on --dagger-episodes fresh
seeds with the simulated operator (rollout.takeover: the scripted expert, taking over by
the tube rule through the kernel's handover limiter and shield), adds the
intervention-flagged frames (the corrections-only export) to the dataset with LeRobot's
aggregate_datasets, and retrains from scratch.

The anchor, in the same run: behaviour cloning trained on the SAME number of frames as
each DAgger round's dataset (more expert demonstrations, from seeds no other stage uses,
until its frames reach the round's: at least as many, fewer than one demonstration
more), with the same training settings and steps; and the expert itself. Every policy is
evaluated on the same --eval-episodes held-out seeds; 95 % Wilson intervals.

Target: DAgger's last round at least 15 points above behaviour cloning with the same
data. --quick (10 demos, 1 round of 10 episodes, 300 steps, 10 seeds) checks the
plumbing: corrections recorded and added, equal data; its target verdict is not judged
(None: 300 steps train no policy worth comparing). The last line is one JSON object
with every figure and the verdicts; exit 1 when a verdict fails.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))

from robokernel_ros.flywheel import FlywheelConfig  # noqa: E402
from robokernel_ros.flywheel.dagger import round_table, run_flywheel_dagger  # noqa: E402
from robokernel_ros.flywheel.loop import collect, evaluate, export, train  # noqa: E402
from robokernel_ros.rollout.results import summary_table  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

TARGET_POINTS = 0.15  # DAgger's last round over BC with the same frames
BC_SHORT = 0.2  # BC at least this far below the expert: a setting where BC falls short
EXTRA_SEED = 20_000  # the equal-data baselines' extra demonstrations start here


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--demos", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dagger-episodes", type=int, default=None)
    parser.add_argument("--train-steps", type=int, default=None)
    parser.add_argument("--eval-episodes", type=int, default=None)
    parser.add_argument("--tube-radius", type=float, default=0.3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    quick = {
        "demos": 10,
        "rounds": 1,
        "dagger_episodes": 10,
        "train_steps": 300,
        "eval_episodes": 10,
    }
    full = {
        "demos": 10,
        "rounds": 2,
        "dagger_episodes": 20,
        "train_steps": 1500,
        "eval_episodes": 30,
    }
    sizes = quick if args.quick else full
    for key in sizes:
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="dagger_")) / "out"
    cfg = FlywheelConfig(
        out=out, episodes=sizes["demos"], train_steps=sizes["train_steps"],
        eval_episodes=sizes["eval_episodes"], dagger_rounds=sizes["rounds"],
        dagger_episodes=sizes["dagger_episodes"], tube_radius=args.tube_radius,
    )  # fmt: skip
    t_start = time.monotonic()

    def stage(name: str, seconds: float) -> None:
        print(f"{name:24s} {seconds:7.1f} s", flush=True)

    def round_done(r) -> None:  # noqa: ANN001 - a dagger.RoundResult
        print(f"\nDAgger round {r.round}:\n{round_table(r)}\n", flush=True)

    print(f"dagger bench into {out}: {sizes}, tube radius {args.tube_radius} rad")
    result = run_flywheel_dagger(cfg, on_stage=stage, on_round=round_done)
    rows = {p.name: p for p in result.policies}
    bc_frames = int(result.dataset["frames"])
    demo_frames = bc_frames / max(1, result.demos_kept)

    # The anchor: BC on as many frames as each round's dataset, from more demonstrations.
    targets = [int(r.dataset["frames"]) for r in result.rounds]
    need = max(0, math.ceil((max(targets) - bc_frames) / demo_frames) + 2)
    t0 = time.monotonic()
    extra, _ = collect(cfg, episodes=need, seed=EXTRA_SEED, into=out / "bc_equal" / "demos")
    stage("collect extra demos", time.monotonic() - t0)
    base = [Path(p) for p in result.dataset["sources"]]
    equal: dict[int, dict] = {}
    for r, frames in zip(result.rounds, targets, strict=True):
        k = r.round
        into = out / "bc_equal" / f"round_{k}"
        into.mkdir(parents=True, exist_ok=True)
        runs = list(base)
        dataset: dict = {"frames": bc_frames}
        for run in extra:  # one demonstration more at a time until the frames reach the round's
            if dataset["frames"] >= frames:
                break
            runs.append(run)
            dataset["frames"] += round(demo_frames)
        t0 = time.monotonic()
        dataset = export(cfg, runs, root=into / "dataset")
        stage(f"bc_equal_{k} export", time.monotonic() - t0)
        if dataset["frames"] < frames:
            raise RuntimeError(f"bc_equal_{k}: {dataset['frames']} frames < the round's {frames}")
        t0 = time.monotonic()
        checkpoint = train(cfg, dataset, into=into)
        stage(f"bc_equal_{k} train", time.monotonic() - t0)
        t0 = time.monotonic()
        policy = evaluate(
            cfg, f"bc_equal_{k}", "lerobot", {"device": "cpu", "path": str(checkpoint)},
            horizon=int(cfg.act.get("n_action_steps", 1)),
        )  # fmt: skip
        stage(f"bc_equal_{k} eval", time.monotonic() - t0)
        equal[k] = {"policy": policy, "frames": int(dataset["frames"]), "demos": len(runs)}
    total = time.monotonic() - t_start

    def rate(p) -> float:  # noqa: ANN001 - a PolicyResult
        return p.successes / p.episodes

    def ci(p) -> str:  # noqa: ANN001
        return f"[{p.success_ci95[0]:.2f}, {p.success_ci95[1]:.2f}]"

    table = [("expert (anchor)", "-", "-", rows["expert"]), ("BC", bc_frames, "-", rows["trained"])]
    for r in result.rounds:
        e = equal[r.round]
        table.append((f"DAgger round {r.round}", r.dataset["frames"], r.deploy.share_intervened,
                      r.policy))  # fmt: skip
        table.append((f"BC, same frames as round {r.round}", e["frames"], "-", e["policy"]))
    print(f"\n{cfg.benchmark}, {cfg.eval_episodes} held-out seeds from {cfg.eval_seed}, "
          f"{cfg.train_steps} training steps each; total {total:.0f} s\n")  # fmt: skip
    print(summary_table(
        [(name, frames, share, f"{p.successes}/{p.episodes}", rate(p), ci(p))
         for name, frames, share, p in table],
        ("policy", "frames", "share intervened (deploy)", "success", "rate", "95% CI"),
    ))  # fmt: skip
    diff = {r.round: rate(r.policy) - rate(equal[r.round]["policy"]) for r in result.rounds}
    last = max(diff) if diff else None
    expert, bc = rate(rows["expert"]), rate(rows["trained"])
    print(f"\nBC {bc:.2f} vs the expert's {expert:.2f} (anchor); DAgger minus BC with the same "
          f"frames, per round: " + ", ".join(f"{k}: {100 * d:+.0f} points" for k, d in diff.items()))  # fmt: skip

    figures = {
        "sizes": sizes,
        "tube_radius": args.tube_radius,
        "out": str(out),
        "total_s": round(total, 1),
        "stage_s": {k: round(v, 1) for k, v in result.stage_s.items()},
        "bc_frames": bc_frames,
        "success_rate": {
            "expert": expert,
            "bc": bc,
            **{f"dagger_{r.round}": rate(r.policy) for r in result.rounds},
            **{f"bc_equal_{k}": rate(e["policy"]) for k, e in equal.items()},
        },
        "success_ci95": {
            "expert": list(rows["expert"].success_ci95),
            "bc": list(rows["trained"].success_ci95),
            **{f"dagger_{r.round}": list(r.policy.success_ci95) for r in result.rounds},
            **{f"bc_equal_{k}": list(e["policy"].success_ci95) for k, e in equal.items()},
        },
        "frames": {
            **{f"dagger_{r.round}": r.dataset["frames"] for r in result.rounds},
            **{f"bc_equal_{k}": e["frames"] for k, e in equal.items()},
        },
        "rounds": [
            {
                "round": r.round,
                "deploy_episodes": r.deploy.episodes,
                "deploy_successes_with_operator": r.deploy.successes,
                "interventions_per_episode": r.deploy.interventions_per_episode,
                "share_intervened": r.deploy.share_intervened,
                "correction_episodes": r.corrections.get("episodes"),
                "correction_frames": r.corrections.get("frames"),
            }
            for r in result.rounds
        ],
        "dagger_minus_bc_equal_points": {k: round(100 * d, 1) for k, d in diff.items()},
    }
    added = all(
        (r.corrections.get("frames") or 0) > 0
        and r.dataset["frames"]
        == (result.rounds[i - 1].dataset["frames"] if i else bc_frames) + r.corrections["frames"]
        for i, r in enumerate(result.rounds)
    )
    figures["verdicts"] = {
        "corrections_added_every_round": added,
        "bc_equal_has_the_rounds_frames": all(
            0 <= equal[r.round]["frames"] - r.dataset["frames"] < 2 * demo_frames
            for r in result.rounds
        ),
        "bc_short_of_expert": None if args.quick else bc <= expert - BC_SHORT,
        "dagger_last_ge_bc_equal_plus_15": None if args.quick else diff[last] >= TARGET_POINTS,
    }
    figures["quick"] = bool(args.quick)  # a setting, not a verdict
    print(json.dumps(figures))
    return exit_status(figures["verdicts"], "dagger")


if __name__ == "__main__":
    sys.exit(main())
