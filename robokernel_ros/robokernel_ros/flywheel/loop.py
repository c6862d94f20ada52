"""Record, train, deploy: the stages of `robokernel flywheel`, each handing the next a path.

    collect   the benchmark's scripted expert, N episodes in simulation, each reaching the
              goal then holding it -> the run directories of those that reached it
    export    export_lerobot(--convention lerobot, fps = the control rate, the goal as
              observation.environment_state) -> a LeRobotDataset
    train     LeRobot's own `lerobot-train` (ACT, small, CPU, nothing from a hub)
              -> a checkpoint folder, its log
    untrained the same checkpoint with freshly initialised weights (same architecture,
              same normalisation, same names): the baseline
    evaluate  evaluate_benchmark on held-out seeds for the expert, the trained and the
              untrained policy, each through the kernel's shield -> run directories

Everything lands under one output folder::

    OUT/demos/           the expert's run directories (traces)
    OUT/dataset/         the LeRobotDataset (meta/, data/)
    OUT/train.log        lerobot-train's output
    OUT/train/           lerobot-train's output_dir (checkpoints/last/pretrained_model)
    OUT/untrained/       the untrained baseline checkpoint
    OUT/eval/<policy>/   each evaluation's run directories
    OUT/dagger/round_k/  with dagger_rounds (`--dagger`): each DAgger round's deployment,
                         corrections, aggregate dataset and training (flywheel.dagger)
    OUT/flywheel.json    the figures, the stage timings and the paths

`run_flywheel(FlywheelConfig(...))` runs them in order (`dagger.run_flywheel_dagger`, then
the DAgger rounds); every stage also runs alone (collect / export / train take other destinations for that).
lerobot and torch are imported only by the stages that need them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..kernel.observation import GOAL_PREFIX
from ..kernel.trace import load_trace
from ..rollout import SimWorkcell, envelope_json, envelope_text
from ..rollout.results import summary_table
from ..tasks.context import trace_contexts
from ..tasks.predicates import compile_criteria, first_true
from ..tasks.statistics import wilson_interval

_log = logging.getLogger(__name__)

BENCHMARK = "so101_reach_random"
EXPERT = "scripted_goal"
EXPERT_CONFIG: dict[str, Any] = {"max_delta": 0.08, "max_accel": 0.02, "tolerance": 0.05}
# ACT small enough to train on two CPU cores in minutes; no camera, so no backbone.
ACT_CONFIG: dict[str, Any] = {
    "dim_model": 64,
    "n_heads": 4,
    "dim_feedforward": 128,
    "n_encoder_layers": 1,
    "n_decoder_layers": 1,
    "chunk_size": 10,
    "n_action_steps": 5,
    "optimizer_lr": 1e-3,
    "use_vae": False,  # a deterministic expert: nothing for a latent to explain
}
SAFETY: dict[str, Any] = {"max_velocity": 3.0}  # rad/s: the shield the three policies pass
CHECKPOINT = Path("train") / "checkpoints" / "last" / "pretrained_model"


def _count(flag: str, value: Any, *, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{flag}={value!r}: must be a whole number >= {low}")
    return value


@dataclass(frozen=True)
class FlywheelConfig:
    """One flywheel run; validated where it is built (errors name the CLI flag)."""

    out: Path
    episodes: int = 100
    demo_steps: int = 40
    train_steps: int = 4000
    eval_episodes: int = 20
    collect_seed: int = 0
    eval_seed: int = 100_000
    batch_size: int = 32
    benchmark: str = BENCHMARK
    act: Mapping[str, Any] = field(default_factory=lambda: dict(ACT_CONFIG))
    expert: Mapping[str, Any] = field(default_factory=lambda: dict(EXPERT_CONFIG))
    safety: Mapping[str, Any] = field(default_factory=lambda: dict(SAFETY))
    train_timeout_s: float = 3600.0
    torch_threads: int = 1  # lerobot-train's, and this process's while it evaluates
    # DAgger (flywheel.dagger): rounds after BC, each deploying on its own fresh seeds
    dagger_rounds: int = 0
    dagger_episodes: int = 20
    dagger_seed: int = 50_000
    tube_radius: float = 0.3  # rad: the simulated operator takes over outside this tube
    tube_back_steps: int = 5  # and hands back after this many steps inside half of it

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        if self.out.exists() and (not self.out.is_dir() or any(self.out.iterdir())):
            raise ValueError(
                f"--out={str(self.out)!r}: must be a new or empty folder (every artefact goes there)"
            )
        _count("--episodes", self.episodes)
        _count("--demo-steps", self.demo_steps)
        _count("--train-steps", self.train_steps)
        _count("--eval-episodes", self.eval_episodes)
        _count("--batch-size", self.batch_size)
        _count("--torch-threads", self.torch_threads)
        _count("--collect-seed", self.collect_seed, low=0)
        _count("--eval-seed", self.eval_seed, low=0)
        _count("--dagger", self.dagger_rounds, low=0)
        _count("--dagger-episodes", self.dagger_episodes)
        _count("--dagger-seed", self.dagger_seed, low=0)
        _count("--tube-back-steps", self.tube_back_steps)
        radius = self.tube_radius
        if isinstance(radius, bool) or not isinstance(radius, int | float) or not 0 < radius < 10:
            raise ValueError(f"--tube-radius={radius!r}: must be a number in (0, 10) (rad)")
        collected = range(self.collect_seed, self.collect_seed + self.episodes)
        held_out = range(self.eval_seed, self.eval_seed + self.eval_episodes)
        if collected.start < held_out.stop and held_out.start < collected.stop:
            raise ValueError(
                f"--eval-seed={self.eval_seed}: seeds {held_out.start}..{held_out.stop - 1} overlap the "
                f"collected seeds {collected.start}..{collected.stop - 1}; evaluation must be held out"
            )
        if self.dagger_rounds:
            deployed = range(
                self.dagger_seed, self.dagger_seed + self.dagger_rounds * self.dagger_episodes
            )
            for what, other in (("held-out", held_out), ("collected", collected)):
                if deployed.start < other.stop and other.start < deployed.stop:
                    raise ValueError(
                        f"--dagger-seed={self.dagger_seed}: the deployments' seeds "
                        f"{deployed.start}..{deployed.stop - 1} overlap the {what} seeds "
                        f"{other.start}..{other.stop - 1}; every round deploys on fresh seeds"
                    )


@dataclass
class PolicyResult:
    """One policy's evaluation: the figures of the comparison table."""

    name: str
    provider: str
    successes: int
    episodes: int
    success_ci95: tuple[float, float]
    mean_return: float | None
    shield_interventions: int
    chunk_latency_ms: float | None
    chunk_latency_max_ms: float | None
    runs: str


@dataclass
class FlywheelResult:
    out: str
    stage_s: dict[str, float]
    demos: int
    demos_kept: int
    dataset: dict[str, Any]
    checkpoint: str
    untrained: str
    train_log: str
    policies: list[PolicyResult]
    rounds: list[Any] = field(default_factory=list)  # dagger.RoundResult, one per round

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["rounds"] = [r.to_json() for r in self.rounds]
        return out

    def table(self) -> str:
        return comparison_table(self.policies)


def workcell() -> SimWorkcell:
    """A trace-less SimWorkcell with the builtin benchmarks (use it as a context manager)."""
    cell = SimWorkcell(trace_dir=None)
    cell.register_builtin_benchmarks()
    return cell


def report_json(out: dict[str, Any], what: str) -> dict[str, Any]:
    """A rollout envelope's report; RuntimeError naming `what` when the call failed."""
    if out["status"] != "success":
        raise RuntimeError(f"{what}: {envelope_text(out)}")
    report = envelope_json(out)
    assert report is not None
    return report


def collect(
    cfg: FlywheelConfig, *, episodes: int | None = None, seed: int | None = None,
    into: Path | None = None,
) -> tuple[list[Path], int]:  # fmt: skip
    """The expert's episodes -> (the run directories of those that reached the goal, episodes run).

    The demonstrations run the benchmark forked to `demo_steps` steps whatever happens
    (its success would end them the step the goal is within tolerance): they show the
    expert reaching the goal and then holding it, so the policy learns where to stop.
    An episode is kept when its last observation meets the benchmark's success clauses.
    episodes / seed / into: cfg.episodes from cfg.collect_seed into OUT/demos unless given."""
    episodes = cfg.episodes if episodes is None else episodes
    seed = cfg.collect_seed if seed is None else seed
    into = cfg.out / "demos" if into is None else into
    with workcell() as cell:
        spec = cell.benchmarks.get(cfg.benchmark)
        success = compile_criteria("success", spec["success"])
        demo = {**spec, "name": f"{spec['name']}_demo", "max_steps": cfg.demo_steps,
                "success": [{"predicate": "step_at_least", "n": cfg.demo_steps}]}  # fmt: skip
        report = report_json(
            cell.evaluate_benchmark(
                demo, policy_provider=EXPERT, policy_config=dict(cfg.expert),
                n_episodes=episodes, seed=seed, trace_dir=str(into),
                progress=False, safety=dict(cfg.safety), action_horizon=1,
            ),
            "collect",
        )  # fmt: skip
    kept = []
    for episode in report["episodes"]:
        # kept: the success clause holds on the final step's predicate context
        contexts = list(trace_contexts(load_trace(episode["trace_path"])))
        if contexts and first_true(success, contexts[-1], episode=0) is not None:
            kept.append(Path(episode["trace_path"]))
    if not kept:
        raise RuntimeError(f"collect: the expert reached the goal in none of {episodes} episodes")
    return kept, len(report["episodes"])


def goal_names(cfg: FlywheelConfig) -> list[str]:
    """The observation names of the benchmark's goal: the dataset's environment state."""
    with workcell() as cell:
        spec = cell.benchmarks.get(cfg.benchmark)
    if not spec.get("goal"):
        raise ValueError(f"benchmark={cfg.benchmark!r}: declares no goal to learn")
    return [GOAL_PREFIX + j for j in spec["goal"]["joints"]]


def export(
    cfg: FlywheelConfig, runs: list[Path], *, root: Path | None = None, **options: Any
) -> dict[str, Any]:
    """The demonstrations -> a LeRobotDataset under `root` (OUT/dataset), lerobot's
    convention; `options` go to export_lerobot (e.g. the corrections-only switch)."""
    from ..recording.export import export_lerobot

    report = export_lerobot(
        runs, repo_id=repo_id(cfg), root=cfg.out / "dataset" if root is None else root,
        convention="lerobot", fps=control_fps(cfg), env_state=goal_names(cfg), **options,
    )  # fmt: skip
    return asdict(report)


def repo_id(cfg: FlywheelConfig) -> str:
    """The datasets' repo id (every dataset of a run has it: they live in their own roots)."""
    return f"robokernel/{cfg.benchmark}"


def control_fps(cfg: FlywheelConfig) -> int:
    """The benchmark's control rate: the datasets' fps."""
    with workcell() as cell:
        return int(cell.benchmarks.get(cfg.benchmark)["control_frequency"])


def train_command(
    cfg: FlywheelConfig, dataset: Mapping[str, Any], *, output_dir: Path | None = None
) -> list[str]:
    """The lerobot-train command line (ACT on CPU, pretrained backbone off, no hub push)."""
    args = [sys.executable, "-m", "lerobot.scripts.lerobot_train"]
    args += [f"--dataset.repo_id={dataset['repo_id']}", f"--dataset.root={dataset['root']}"]
    args += ["--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false"]
    args += ["--policy.pretrained_backbone_weights=null"]
    args += [f"--policy.{k}={v}" for k, v in cfg.act.items()]
    args += [f"--steps={cfg.train_steps}", f"--batch_size={cfg.batch_size}", "--num_workers=0"]
    args += [f"--save_freq={cfg.train_steps}", f"--log_freq={max(1, cfg.train_steps // 10)}"]
    output_dir = cfg.out / "train" if output_dir is None else output_dir
    args += ["--seed=0", "--wandb.enable=false", f"--output_dir={output_dir}"]
    return args


def train(cfg: FlywheelConfig, dataset: Mapping[str, Any], *, into: Path | None = None) -> Path:
    """lerobot-train on the dataset, its output in INTO/train.log -> the checkpoint folder
    INTO/train/checkpoints/last/pretrained_model (INTO: OUT unless given)."""
    into = cfg.out if into is None else into
    log_path = into / "train.log"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        # One intra-op thread: on the loaded 2-core machine two threads that wait on each
        # other made an ACT step 10x slower (567 vs 54 ms for this model and batch).
        "OMP_NUM_THREADS": str(cfg.torch_threads),
        "MKL_NUM_THREADS": str(cfg.torch_threads),
    }
    with log_path.open("w") as log:
        proc = subprocess.run(
            train_command(cfg, dataset, output_dir=into / "train"), stdout=log,
            stderr=subprocess.STDOUT, env=env,
            timeout=cfg.train_timeout_s, check=False,
        )  # fmt: skip
    checkpoint = into / CHECKPOINT
    if proc.returncode != 0 or not (checkpoint / "model.safetensors").is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"train: lerobot-train exited {proc.returncode}; {log_path}:\n{tail}")
    return checkpoint


def untrained_copy(checkpoint: Path, dest: Path, *, seed: int = 0) -> Path:
    """The checkpoint with freshly initialised weights: same config, processors (the
    dataset's normalisation) and training dataset, so it binds the same names."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class

    config = PreTrainedConfig.from_pretrained(checkpoint)
    shutil.copytree(checkpoint, dest)
    torch.manual_seed(seed)
    get_policy_class(config.type)(config).save_pretrained(dest)
    return dest


def evaluate(
    cfg: FlywheelConfig, name: str, provider: str, config: Mapping[str, Any], *, horizon: int
) -> PolicyResult:
    """evaluate_benchmark on the held-out seeds -> the policy's figures; runs in OUT/eval/name."""
    runs = cfg.out / "eval" / name
    with (
        workcell() as cell,
        limited_torch_threads(cfg.torch_threads if provider == "lerobot" else None),
    ):
        report = report_json(
            cell.evaluate_benchmark(
                cfg.benchmark, policy_provider=provider, policy_config=dict(config),
                n_episodes=cfg.eval_episodes, seed=cfg.eval_seed, trace_dir=str(runs),
                progress=False, safety=dict(cfg.safety), action_horizon=horizon,
            ),
            f"evaluate {name}",
        )  # fmt: skip
    episodes = report["episodes"]
    k = sum(1 for e in episodes if e["success"])
    returns = [float(e.get("total_reward") or 0.0) for e in episodes]
    return PolicyResult(
        name=name,
        provider=provider,
        successes=k,
        episodes=len(episodes),
        success_ci95=wilson_interval(k, len(episodes)),
        mean_return=sum(returns) / len(returns) if returns else None,
        shield_interventions=int(report.get("safety_interventions") or 0),
        chunk_latency_ms=report.get("avg_inference_ms"),
        chunk_latency_max_ms=report.get("max_inference_ms"),
        runs=str(runs),
    )


@contextlib.contextmanager
def limited_torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to n for the block (None: untouched)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def comparison_table(rows: list[PolicyResult]) -> str:
    """The expert, trained and untrained policies side by side."""
    header = ("policy", "success", "rate", "95% CI", "mean return", "shield interventions",
              "chunk ms (mean)", "chunk ms (max)")  # fmt: skip
    return summary_table(
        [
            (
                r.name,
                f"{r.successes}/{r.episodes}",
                r.successes / r.episodes,
                f"[{r.success_ci95[0]:.2f}, {r.success_ci95[1]:.2f}]",
                r.mean_return,
                r.shield_interventions,
                r.chunk_latency_ms,
                r.chunk_latency_max_ms,
            )  # fmt: skip
            for r in rows
        ],
        header,
    )


def run_flywheel(
    cfg: FlywheelConfig, *, on_stage: Callable[[str, float], None] | None = None
) -> FlywheelResult:
    """All the stages in order (see the module docstring); `on_stage(name, seconds)` after
    each. The DAgger rounds (cfg.dagger_rounds) are `dagger.run_flywheel_dagger`'s.

    Raises RuntimeError naming the stage that failed; what it left stays under cfg.out."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    stage_s: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        value = fn()
        stage_s[name] = time.monotonic() - t0
        _log.info("flywheel: %s took %.1f s", name, stage_s[name])
        if on_stage is not None:
            on_stage(name, stage_s[name])
        return value

    runs, demos = timed("collect", lambda: collect(cfg))
    dataset = timed("export", lambda: export(cfg, runs))
    checkpoint = timed("train", lambda: train(cfg, dataset))
    untrained = timed(
        "untrained", lambda: untrained_copy(checkpoint, cfg.out / "untrained", seed=1)
    )
    horizon = int(cfg.act.get("n_action_steps", 1))
    lerobot = {"device": "cpu"}
    policies = [
        timed("eval expert", lambda: evaluate(cfg, "expert", EXPERT, cfg.expert, horizon=1)),
        timed(
            "eval trained",
            lambda: evaluate(
                cfg, "trained", "lerobot", {**lerobot, "path": str(checkpoint)}, horizon=horizon
            ),  # fmt: skip
        ),
        timed(
            "eval untrained",
            lambda: evaluate(
                cfg, "untrained", "lerobot", {**lerobot, "path": str(untrained)}, horizon=horizon
            ),  # fmt: skip
        ),
    ]
    stage_s["total"] = sum(stage_s.values())
    result = FlywheelResult(
        out=str(cfg.out),
        stage_s=stage_s,
        demos=demos,
        demos_kept=len(runs),
        dataset={
            k: dataset[k]
            for k in (
                "repo_id",
                "root",
                "episodes",
                "frames",
                "fps",
                "state_names",
                "action_names",
                "env_state_names",
                "robot_type",
                "codebase_version",
                "sources",
            )
        },  # fmt: skip
        checkpoint=str(checkpoint),
        untrained=str(untrained),
        train_log=str(cfg.out / "train.log"),
        policies=policies,
    )
    (cfg.out / "flywheel.json").write_text(json.dumps(result.to_json(), indent=2))
    return result
