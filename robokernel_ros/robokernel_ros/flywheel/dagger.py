"""DAgger in the flywheel: deploy with a simulated operator, keep its corrections, retrain.

After behaviour cloning (`loop.run_flywheel`'s stages), each round k = 1..R:

    deploy      the current checkpoint (BC's for round 1) on `dagger_episodes` fresh seeds
                (round k: dagger_seed + (k-1) x dagger_episodes; never a collected or a
                held-out seed), through evaluate_benchmark with `teleop=` a
                rollout.takeover.SimulatedOperator: the scripted expert beside the policy,
                taking over by the TubeRule (the robot leaves a tube of `tube_radius` around
                the expert's command) and handing back inside half of it. The takeover runs
                the kernel's path: handover limiter, then the shield, every step; the
                trace flags every intervened step -> OUT/dagger/round_k/deploy/
    corrections export_lerobot(corrections_only=True) of those runs: only the
                intervention-flagged frames, each correction one episode, the executed
                (the operator's) action as `action` -> OUT/dagger/round_k/corrections/
    aggregate   LeRobot's own aggregate_datasets(the previous round's dataset, the
                corrections) -> OUT/dagger/round_k/dataset/ (the BC dataset is round 0's)
    train       lerobot-train from scratch on the aggregate, the BC run's settings and
                step count -> OUT/dagger/round_k/train/, train.log
    evaluate    the held-out seeds, autonomous (no operator) -> OUT/eval/dagger_k/

`run_flywheel_dagger(cfg)` runs the flywheel and then the rounds (`robokernel flywheel
--dagger`); `run_dagger(cfg, bc_dataset, bc_checkpoint)` the rounds alone; `round_table(r)`
prints one.
Every figure comes from the traces: interventions = `intervention.start` events, the
share intervened = action events flagged `intervention` over all action events.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..kernel.trace import load_trace
from ..rollout.results import summary_table
from .loop import (
    EXPERT,
    FlywheelConfig,
    FlywheelResult,
    PolicyResult,
    evaluate,
    export,
    limited_torch_threads,
    repo_id,
    report_json,
    run_flywheel,
    train,
    workcell,
)

_log = logging.getLogger(__name__)

INTERVENTION_START = "intervention.start"
INTERVENTION = "intervention"  # the LeRobot feature (recording.export)
ACTION = "action"


@dataclass
class DeployFigures:
    """What the operator did in one round's deployment (from the traces)."""

    episodes: int
    successes: int  # the episodes that met the benchmark's success, operator included
    interventions: int
    steps: int
    intervened_steps: int
    runs: str

    @property
    def interventions_per_episode(self) -> float:
        return self.interventions / self.episodes if self.episodes else 0.0

    @property
    def share_intervened(self) -> float:
        return self.intervened_steps / self.steps if self.steps else 0.0


@dataclass
class RoundResult:
    """One DAgger round: the deployment, the data it added, the retrained policy."""

    round: int
    deployed: str  # the checkpoint the operator corrected
    deploy_seed: int
    deploy: DeployFigures
    corrections: dict[str, Any]  # the corrections-only export (episodes, frames, root)
    dataset: dict[str, Any]  # the aggregate: root, episodes, frames
    checkpoint: str
    policy: PolicyResult
    stage_s: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        out = asdict(self)
        out["deploy"]["interventions_per_episode"] = self.deploy.interventions_per_episode
        out["deploy"]["share_intervened"] = self.deploy.share_intervened
        return out


def simulated_operator(cfg: FlywheelConfig) -> Any:
    """The simulated operator of the deployments: the flywheel's expert (scripted_goal,
    the collection's settings) bound to the benchmark robot's action keys, and the
    TubeRule of cfg.tube_radius / cfg.tube_back_steps."""
    from ..envs import MujocoScene
    from ..policies import create_policy
    from ..policies.base import PolicyAgent
    from ..rollout.takeover import SimulatedOperator, TubeRule

    with workcell() as cell:
        spec = cell.benchmarks.get(cfg.benchmark)
    robot = dict(spec["robot"])
    name, model = robot.pop("name"), robot.pop("model")
    scene = MujocoScene()  # the benchmark's robot alone: its action keys
    try:
        scene.add_robot(name, model, **robot)
        keys = list(scene.robot_action_keys(name))
    finally:
        scene.close()
    expert = create_policy(EXPERT, **dict(cfg.expert))
    expert.set_robot_state_keys(keys)
    rule = TubeRule(radius=cfg.tube_radius, back_steps=cfg.tube_back_steps)
    return SimulatedOperator(PolicyAgent(expert, action_horizon=1), rule)


def deploy_figures(runs: list[Path]) -> tuple[int, int, int]:
    """(interventions, steps, intervened steps) over the run directories' traces."""
    interventions = steps = intervened = 0
    for run in runs:
        trace = load_trace(run)
        interventions += len(trace.of_kind(INTERVENTION_START))
        for event in trace.of_kind(ACTION):
            steps += 1
            intervened += bool((event.data or {}).get("intervention"))
    return interventions, steps, intervened


def deploy(
    cfg: FlywheelConfig, checkpoint: Path, *, seed: int, into: Path, operator: Any = None
) -> tuple[DeployFigures, list[Path]]:
    """The checkpoint on cfg.dagger_episodes seeds from `seed`, the simulated operator
    correcting -> its figures and the run directories (under `into`)."""
    operator = simulated_operator(cfg) if operator is None else operator
    horizon = int(cfg.act.get("n_action_steps", 1))
    with workcell() as cell, limited_torch_threads(cfg.torch_threads):
        report = report_json(
            cell.evaluate_benchmark(
                cfg.benchmark, policy_provider="lerobot",
                policy_config={"device": "cpu", "path": str(checkpoint)},
                n_episodes=cfg.dagger_episodes, seed=seed, trace_dir=str(into),
                progress=False, safety=dict(cfg.safety), action_horizon=horizon,
                teleop=operator,
            ),
            f"deploy {checkpoint}",
        )  # fmt: skip
    episodes = report["episodes"]
    runs = [Path(e["trace_path"]) for e in episodes]
    interventions, steps, intervened = deploy_figures(runs)
    figures = DeployFigures(
        episodes=len(episodes),
        successes=sum(1 for e in episodes if e["success"]),
        interventions=interventions,
        steps=steps,
        intervened_steps=intervened,
        runs=str(into),
    )
    return figures, runs


def aggregate(cfg: FlywheelConfig, roots: list[Path], into: Path) -> dict[str, Any]:
    """LeRobot's aggregate_datasets over the datasets at `roots` -> a new one at `into`.

    A dataset without a feature another one has (the BC demonstrations have no
    `intervention`: they ran without a teleop source) is first copied with it, all False
    (LeRobot's add_features, into INTO's sibling `<name>_flagged`): LeRobot aggregates only
    datasets of the same features, and the aggregate then tells corrections from demos."""
    from lerobot.datasets.aggregate import aggregate_datasets
    from lerobot.datasets.dataset_tools import add_features
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

    rid = repo_id(cfg)
    metas = [LeRobotDatasetMetadata(rid, root=root) for root in roots]
    features: dict[str, Any] = {}
    for meta in metas:
        features.update(meta.features)
    flagged: list[Path] = []
    for root, meta in zip(roots, metas, strict=True):
        missing = {name: info for name, info in features.items() if name not in meta.features}
        unknown = sorted(name for name in missing if name != INTERVENTION)
        if unknown:
            raise ValueError(
                f"{root}: lacks the features {unknown} of the datasets it joins (only "
                f"'{INTERVENTION}' is filled in)"
            )
        if missing:
            dest = into.parent / f"{Path(root).name}_flagged"
            source = LeRobotDataset(rid, root=root, video_backend="pyav")
            info = {
                k: v for k, v in missing[INTERVENTION].items() if k in ("dtype", "shape", "names")
            }
            values = np.zeros(meta.total_frames, dtype=bool)
            add_features(source, {INTERVENTION: (values, info)}, output_dir=dest, repo_id=rid)
            root = dest
        flagged.append(Path(root))
    aggregate_datasets([rid] * len(flagged), rid, roots=flagged, aggr_root=into)
    meta = LeRobotDatasetMetadata(rid, root=into)
    return {
        "repo_id": rid,
        "root": str(into),
        "episodes": int(meta.total_episodes),
        "frames": int(meta.total_frames),
    }


def run_flywheel_dagger(
    cfg: FlywheelConfig,
    *,
    on_stage: Callable[[str, float], None] | None = None,
    on_round: Callable[[RoundResult], None] | None = None,
) -> FlywheelResult:
    """`loop.run_flywheel`, then cfg.dagger_rounds DAgger rounds (none: the flywheel alone):
    the result gains the rounds, their policies and stage times; OUT/flywheel.json is
    written again with them."""
    result = run_flywheel(cfg, on_stage=on_stage)
    if not cfg.dagger_rounds:
        return result
    rounds = run_dagger(
        cfg, result.dataset, Path(result.checkpoint), on_stage=on_stage, on_round=on_round
    )
    total = result.stage_s.pop("total")
    for r in rounds:
        result.stage_s.update({f"round {r.round} {name}": s for name, s in r.stage_s.items()})
        total += sum(r.stage_s.values())
    result.stage_s["total"] = total
    result.rounds = rounds
    result.policies.extend(r.policy for r in rounds)
    (cfg.out / "flywheel.json").write_text(json.dumps(result.to_json(), indent=2))
    return result


def run_dagger(
    cfg: FlywheelConfig,
    dataset: Mapping[str, Any],
    checkpoint: Path,
    *,
    on_stage: Callable[[str, float], None] | None = None,
    on_round: Callable[[RoundResult], None] | None = None,
) -> list[RoundResult]:
    """cfg.dagger_rounds rounds from the BC dataset and checkpoint (module docstring).

    Raises RuntimeError naming the round and stage that failed (also when a deployment
    gave no correction: nothing to add); what it left stays under OUT/dagger."""
    operator = simulated_operator(cfg)
    rounds: list[RoundResult] = []
    root, current = Path(dataset["root"]), checkpoint
    for k in range(1, cfg.dagger_rounds + 1):
        result = dagger_round(cfg, k, root, current, operator=operator, on_stage=on_stage)
        rounds.append(result)
        if on_round is not None:
            on_round(result)
        root, current = Path(result.dataset["root"]), Path(result.checkpoint)
    return rounds


def dagger_round(
    cfg: FlywheelConfig,
    k: int,
    dataset_root: Path,
    checkpoint: Path,
    *,
    operator: Any,
    on_stage: Callable[[str, float], None] | None = None,
) -> RoundResult:
    """Round k: deploy `checkpoint` with the operator, add its corrections to the dataset
    at `dataset_root`, retrain, evaluate (the module docstring's stages)."""
    into = cfg.out / "dagger" / f"round_{k}"
    into.mkdir(parents=True, exist_ok=True)
    stage_s: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            value = fn()
        except (RuntimeError, ValueError, OSError) as exc:
            raise RuntimeError(f"dagger round {k} {name}: {exc}") from exc
        stage_s[name] = time.monotonic() - t0
        _log.info("dagger round %d: %s took %.1f s", k, name, stage_s[name])
        if on_stage is not None:
            on_stage(f"round {k} {name}", stage_s[name])
        return value

    seed = cfg.dagger_seed + (k - 1) * cfg.dagger_episodes
    figures, runs = timed(
        "deploy",
        lambda: deploy(cfg, checkpoint, seed=seed, into=into / "deploy", operator=operator),
    )
    if figures.intervened_steps == 0:
        raise RuntimeError(
            f"dagger round {k} deploy: the operator corrected nothing in {figures.episodes} "
            f"episodes (--tube-radius={cfg.tube_radius}): no data to add"
        )
    corrections = timed(
        "corrections", lambda: export(cfg, runs, root=into / "corrections", corrections_only=True)
    )
    merged = timed(
        "aggregate", lambda: aggregate(cfg, [dataset_root, into / "corrections"], into / "dataset")
    )
    new_checkpoint = timed("train", lambda: train(cfg, merged, into=into))
    policy = timed(
        "eval",
        lambda: evaluate(
            cfg, f"dagger_{k}", "lerobot", {"device": "cpu", "path": str(new_checkpoint)},
            horizon=int(cfg.act.get("n_action_steps", 1)),
        ),
    )  # fmt: skip
    return RoundResult(
        round=k,
        deployed=str(checkpoint),
        deploy_seed=seed,
        deploy=figures,
        corrections={key: corrections.get(key) for key in ("root", "episodes", "frames")},
        dataset=merged,
        checkpoint=str(new_checkpoint),
        policy=policy,
        stage_s=stage_s,
    )


def round_table(r: RoundResult) -> str:
    """One round: the deployment's interventions next to the retrained policy's success."""
    p = r.policy
    header = ("round", "deployed on", "interventions/episode", "steps intervened",
              "frames added", "dataset frames", "success", "rate", "95% CI")  # fmt: skip
    row = (
        r.round,
        f"{r.deploy.episodes} seeds from {r.deploy_seed}",
        r.deploy.interventions_per_episode,
        f"{r.deploy.intervened_steps}/{r.deploy.steps} ({100 * r.deploy.share_intervened:.1f} %)",
        r.corrections.get("frames"),
        r.dataset["frames"],
        f"{p.successes}/{p.episodes}",
        p.successes / p.episodes,
        f"[{p.success_ci95[0]:.2f}, {p.success_ci95[1]:.2f}]",
    )
    return summary_table([row], header)
