"""`robokernel flywheel`, fast: a few expert episodes, two lerobot-train steps, two held-out
seeds. Every stage hands the next what it needs; the full run is bench/flywheel.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from lerobot_test_helpers import SO101
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.tasks.benchmarks import builtin_benchmark_specs
from robokernel_ros.tasks.goals import draw_goal

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")

SPEC = builtin_benchmark_specs()["so101_reach_random"]
GOAL = [f"goal.{j}" for j in SPEC["goal"]["joints"]]
EPISODES, EVAL = 3, 2


@pytest.fixture(scope="module")
def flywheel(tmp_path_factory: pytest.TempPathFactory, lerobot_available: None) -> tuple[Path, str]:
    """The output folder and what the command printed."""
    from robokernel_ros.cli import main

    out = tmp_path_factory.mktemp("flywheel") / "out"
    argv = ["flywheel", "--out", str(out), "--episodes", str(EPISODES), "--train-steps", "2"]
    argv += ["--batch-size", "4", "--eval-episodes", str(EVAL), "--eval-seed", "500"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    assert code == 0, printed.getvalue()
    return out, printed.getvalue()


def test_the_dataset_loads_in_lerobot_with_the_goal_as_environment_state(
    flywheel: tuple[Path, str],
) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out, _ = flywheel
    summary = json.loads((out / "flywheel.json").read_text())
    ds = LeRobotDataset(summary["dataset"]["repo_id"], root=out / "dataset", video_backend="pyav")
    assert ds.fps == int(SPEC["control_frequency"]) and ds.meta.robot_type == "so101_follower"
    assert ds.meta.features["observation.state"]["names"] == [f"{j}.pos" for j in SO101]
    assert ds.meta.features["action"]["names"] == [f"{j}.pos" for j in SO101]
    assert ds.meta.features["observation.environment_state"]["names"] == GOAL
    assert ds.num_episodes == summary["demos_kept"] >= EPISODES - 1
    # each dataset episode's environment state is the goal its seed drew, every frame
    seeds = [load_trace(Path(p)).meta.get("seed") for p in summary["dataset"]["sources"]]
    for episode, seed in enumerate(seeds):
        goal = draw_goal(SPEC["goal"], seed)
        frames = [i for i in range(len(ds)) if int(ds[i]["episode_index"]) == episode]
        assert frames
        for i in frames:
            np.testing.assert_allclose(
                ds[i]["observation.environment_state"].numpy(), list(goal.values()), rtol=1e-6
            )


def test_training_writes_a_checkpoint_the_lerobot_provider_binds_by_name(
    flywheel: tuple[Path, str],
) -> None:
    from robokernel_ros.policies import create_policy

    out, _ = flywheel
    summary = json.loads((out / "flywheel.json").read_text())
    assert "step:" in (out / "train.log").read_text()  # lerobot-train's own log
    for path in (summary["checkpoint"], summary["untrained"]):
        policy = create_policy("lerobot", path=path, device="cpu")
        policy.set_robot_state_keys(list(SO101))
        obs = {"joint_positions": dict.fromkeys(SO101, 0.0), **dict.fromkeys(GOAL, 0.1)}
        policy.bind_observation(obs)
        binding = policy.binding_description()
        assert binding["environment_state"] == GOAL and binding["actions"] == list(SO101)
    trained = (Path(summary["checkpoint"]) / "model.safetensors").read_bytes()
    untrained = (Path(summary["untrained"]) / "model.safetensors").read_bytes()
    assert trained != untrained  # the baseline has its own weights, the same architecture
    assert json.loads((Path(summary["untrained"]) / "config.json").read_text()) == json.loads(
        (Path(summary["checkpoint"]) / "config.json").read_text()
    )


def test_the_three_policies_are_evaluated_on_the_held_out_seeds(
    flywheel: tuple[Path, str],
) -> None:
    out, _ = flywheel
    summary = json.loads((out / "flywheel.json").read_text())
    rows = {p["name"]: p for p in summary["policies"]}
    assert list(rows) == ["expert", "trained", "untrained"]
    for name, row in rows.items():
        assert row["episodes"] == EVAL
        runs = sorted(Path(row["runs"]).iterdir())
        assert len(runs) == EVAL
        seeds = sorted(load_trace(r).meta.get("seed") for r in runs)
        assert seeds == [500, 501], name
        assert 0.0 <= row["success_ci95"][0] <= row["success_ci95"][1] <= 1.0
        assert row["chunk_latency_ms"] is not None and row["mean_return"] < 0
    assert rows["expert"]["successes"] == EVAL
    assert set(summary["stage_s"]) >= {"collect", "export", "train", "eval trained", "total"}


def test_the_cli_prints_stage_timings_the_table_and_the_artefacts(
    flywheel: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from robokernel_ros.cli import main

    out, printed = flywheel
    for stage in ("collect", "export", "train", "untrained", "eval expert", "eval trained"):
        assert f"[flywheel] {stage}: " in printed
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy "))
    assert lines[header].split()[:3] == ["policy", "success", "rate"]
    assert [line.split()[0] for line in lines[header + 2 : header + 5]] == [
        "expert", "trained", "untrained",
    ]  # fmt: skip
    for artefact in ("dataset", "train.log", "pretrained_model", "untrained", "flywheel.json"):
        assert artefact in printed
    # a used folder, or held-out seeds that overlap the collected ones: refused by flag
    assert main(["flywheel", "--out", str(out)]) == 1
    assert "--out=" in capsys.readouterr().err
    assert main(["flywheel", "--out", str(out.parent / "new"), "--eval-seed", "0"]) == 1
    assert "--eval-seed=0" in capsys.readouterr().err
    assert not (out.parent / "new").exists()
