"""A replay reports what the robot did (issue #36, items 3 and 12): a dataset exported
with `--convention lerobot` (degrees, gripper 0..100, robot_type so101_follower) is
replayed in radians on the robot its robot_type names; actions the shield refuses are
not "applied", and a replay none of whose actions reached the robot exits 1; an
interrupted replay reports the steps it replayed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text

from robokernel_ros import cli

STEPS = 30


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One so101 episode at 25 Hz (so a 25 fps export holds every step once)."""
    root = tmp_path_factory.mktemp("replay_truth")
    runs = root / "runs"
    with SimWorkcell(trace_dir=runs) as cell:
        cell.add_robot("so101", "so101")
        out = cell.eval_policy("so101", max_steps=STEPS, seed=3, control_frequency=25.0,
                               policy_config={"noise": 0.3}, bag=False)  # fmt: skip
        assert out["status"] == "success", envelope_text(out)
    (run_dir,) = runs.iterdir()
    return root, run_dir


@pytest.fixture(scope="module")
def lerobot_dataset(recorded):
    pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")
    root, run_dir = recorded
    ds = root / "dataset"
    code = cli.main(["export-lerobot", str(run_dir), "--repo-id", "u/so101", "--root", str(ds),
                     "--convention", "lerobot", "--fps", "25"])  # fmt: skip
    assert code == 0
    assert json.loads((ds / "meta" / "info.json").read_text())["robot_type"] == "so101_follower"
    return ds


def executed(run_dir: Path) -> np.ndarray:
    keys = load_trace(run_dir).meta["env"]["action_keys"]
    return np.asarray([[e.data["action"][k] for k in keys]
                       for e in load_trace(run_dir).of_kind("action")])  # fmt: skip


def test_a_lerobot_convention_dataset_replays_in_radians_on_the_robot_its_robot_type_names(
    recorded, lerobot_dataset, tmp_path, capfd
):
    _, run_dir = recorded
    replays = tmp_path / "replays"
    # no --robot: the dataset's robot_type so101_follower is the packaged so101
    code = cli.main(["replay", str(lerobot_dataset), "--trace-dir", str(replays), "--json"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "Traceback" not in err and "torchcodec" not in err
    report = json.loads(out)
    assert report["safety_interventions"] == 0
    assert report["actions_applied"] == STEPS and report["actions_refused"] == 0
    (replay_dir,) = replays.iterdir()
    # the robot ran the recorded commands: degrees converted back to radians
    np.testing.assert_allclose(executed(replay_dir), executed(run_dir), atol=1e-5)


def test_a_replay_whose_every_action_the_shield_refuses_applies_none_and_exits_1(
    recorded, tmp_path, capsys
):
    """A recording in foreign units (here: the run's actions x 100) moves nothing: the
    report says the shield refused them, not that they were applied."""
    _, run_dir = recorded
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "meta.json").write_text((run_dir / "meta.json").read_text())
    lines = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "action":
            event["data"]["action"] = {k: v * 100 for k, v in event["data"]["action"].items()}
        lines.append(json.dumps(event))
    (foreign / "events.jsonl").write_text("\n".join(lines) + "\n")
    code = cli.main(["replay", str(foreign), "--robot", "so101", "--no-trace", "--json"])
    captured = capsys.readouterr()
    assert code == 1
    report = json.loads(captured.out)["json"]
    assert report["actions_applied"] == 0 and report["actions_refused"] == STEPS
    assert "applied" not in captured.err.split(";")[0] or "0 actions applied" in captured.err
    assert "refused" in captured.err and "limits" in captured.err


def test_an_interrupted_replay_reports_the_steps_it_replayed(recorded):
    _, run_dir = recorded
    with SimWorkcell(trace_dir=None) as cell:
        cell.add_robot("so101", "so101")

        def stop_at_ten(event):
            if event.kind == "action" and event.step == 9:
                cell.interrupt()

        out = cell.replay_episode(str(run_dir), observer=stop_at_ten)
    report = envelope_json(out)
    text = envelope_text(out)
    assert report["stopped_reason"] == "interrupted"
    replayed = report["steps_advanced"]
    assert replayed < STEPS and report["replayed_steps"] == replayed
    assert report["recorded_steps"] == STEPS
    assert f"replayed {replayed} of {STEPS} recorded actions" in text, text
