"""`robokernel flywheel --dagger 1`, fast: three expert episodes, two lerobot-train steps, one
DAgger round of two deployments with the simulated operator, two held-out seeds. The full
comparison with behaviour cloning on the same frames is bench/dagger.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.kernel.trace import load_trace

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")
# The module's fixture runs lerobot-train twice: 17 s for the module on an idle 2-core
# machine, 765 s at load average 30-50 (each start alone took 3 minutes there), more than
# the suite's 300 s default.
pytestmark = pytest.mark.timeout(900)

EPISODES, EVAL, DEPLOY = 3, 2, 2
EVAL_SEED, DAGGER_SEED = 500, 700
REPO = "robokernel/so101_reach_random"


@pytest.fixture(scope="module")
def dagger(tmp_path_factory: pytest.TempPathFactory, lerobot_available: None) -> tuple[Path, str]:
    """The output folder and what the command printed."""
    from robokernel_ros.cli import main

    out = tmp_path_factory.mktemp("dagger") / "out"
    argv = ["flywheel", "--out", str(out), "--episodes", str(EPISODES), "--train-steps", "2"]
    argv += ["--batch-size", "4", "--eval-episodes", str(EVAL), "--eval-seed", str(EVAL_SEED)]
    argv += ["--dagger", "1", "--dagger-episodes", str(DEPLOY), "--dagger-seed", str(DAGGER_SEED)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(argv)
    assert code == 0, printed.getvalue()
    return out, printed.getvalue()


def _flags(run: Path) -> list[bool]:
    return [bool(e.data.get("intervention")) for e in load_trace(run).of_kind("action")]


def test_the_operator_corrected_the_deployed_policy_and_the_trace_flags_each_step(
    dagger: tuple[Path, str],
) -> None:
    out, _ = dagger
    summary = json.loads((out / "flywheel.json").read_text())
    (r,) = summary["rounds"]
    assert r["deployed"] == summary["checkpoint"]  # round 1 deploys the BC checkpoint
    runs = sorted((out / "dagger" / "round_1" / "deploy").iterdir())
    assert sorted(load_trace(p).meta.get("seed") for p in runs) == [DAGGER_SEED, DAGGER_SEED + 1]
    flags = [f for run in runs for f in _flags(run)]
    starts = sum(len(load_trace(run).of_kind("intervention.start")) for run in runs)
    # a policy trained for two steps leaves the expert's tube: the operator took over
    assert r["deploy"]["interventions"] == starts >= 1
    assert r["deploy"]["intervened_steps"] == sum(flags) > 0
    assert r["deploy"]["steps"] == len(flags)
    assert r["deploy"]["share_intervened"] == pytest.approx(sum(flags) / len(flags))


def test_the_corrections_are_added_to_the_dataset_that_lerobot_loads(
    dagger: tuple[Path, str],
) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out, _ = dagger
    summary = json.loads((out / "flywheel.json").read_text())
    (r,) = summary["rounds"]
    corrections = LeRobotDataset(REPO, root=r["corrections"]["root"], video_backend="pyav")
    assert len(corrections) == r["corrections"]["frames"] > 0
    assert all(bool(corrections[i]["intervention"]) for i in range(len(corrections)))
    merged = LeRobotDataset(REPO, root=r["dataset"]["root"], video_backend="pyav")
    bc_frames = summary["dataset"]["frames"]
    assert len(merged) == r["dataset"]["frames"] == bc_frames + len(corrections)
    assert merged.num_episodes == summary["dataset"]["episodes"] + corrections.num_episodes
    flags = np.array([bool(merged[i]["intervention"]) for i in range(len(merged))])
    assert (
        not flags[:bc_frames].any() and flags[bc_frames:].all()
    )  # the demos, then the corrections
    # the corrections' actions are the operator's: the expert's commands in the trace
    # (lerobot's convention: body joints in degrees; the gripper's 0..100 left out here)
    human = [
        e.data["human_action"]
        for run in sorted((out / "dagger" / "round_1" / "deploy").iterdir())
        for e in load_trace(run).of_kind("action")
        if e.data.get("mode") == "correcting" and e.data.get("human_action")
    ]
    body = [n.removesuffix(".pos") for n in merged.meta.features["action"]["names"]][:-1]
    for i in (0, len(corrections) - 1):
        action = corrections[i]["action"].numpy()[: len(body)]
        assert any(
            np.allclose(action, np.degrees([h[n] for n in body]), atol=1e-3) for h in human
        ), action


def test_the_round_retrains_on_the_aggregate_and_evaluates_on_the_held_out_seeds(
    dagger: tuple[Path, str],
) -> None:
    out, _ = dagger
    summary = json.loads((out / "flywheel.json").read_text())
    (r,) = summary["rounds"]
    round_dir = out / "dagger" / "round_1"
    log = (round_dir / "train.log").read_text()
    assert "step:" in log and str(round_dir / "dataset") in log  # lerobot-train on the aggregate
    assert (Path(r["checkpoint"]) / "model.safetensors").is_file()
    assert r["checkpoint"] != summary["checkpoint"]
    row = r["policy"]
    assert row["name"] == "dagger_1" and row["episodes"] == EVAL
    seeds = sorted(load_trace(p).meta.get("seed") for p in Path(row["runs"]).iterdir())
    assert seeds == [EVAL_SEED, EVAL_SEED + 1]
    assert [p["name"] for p in summary["policies"]] == [
        "expert",
        "trained",
        "untrained",
        "dagger_1",
    ]


def test_the_cli_prints_one_table_per_round_and_refuses_overlapping_seeds(
    dagger: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from robokernel_ros.cli import main

    out, printed = dagger
    for stage in ("round 1 deploy", "round 1 corrections", "round 1 train", "round 1 eval"):
        assert f"[flywheel] {stage}: " in printed
    lines = printed.splitlines()
    title = next(i for i, line in enumerate(lines) if "DAgger round 1" in line)
    header = lines[title + 1]
    for column in ("round", "interventions/episode", "steps intervened", "success", "95% CI"):
        assert column in header
    assert lines[title + 3].split()[0] == "1"
    assert "dagger_1" in printed  # the comparison table's row
    new = out.parent / "refused"
    argv = ["flywheel", "--out", str(new), "--dagger", "1", "--eval-seed", "100000"]
    assert main([*argv, "--dagger-seed", "100010"]) == 1
    assert "--dagger-seed=100010" in capsys.readouterr().err
    assert main([*argv, "--tube-radius", "0"]) == 1
    assert "--tube-radius=0.0" in capsys.readouterr().err
    assert main([*argv[:3], "--dagger", "-1"]) == 1
    assert "--dagger=-1" in capsys.readouterr().err
    assert not new.exists()
