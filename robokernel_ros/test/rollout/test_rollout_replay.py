"""replay_episode from a bag folder and from a LeRobot dataset root (made with
`robokernel export-lerobot` from recorded runs): the actions go through the shield into
a new episode with its own trace and bag."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text
from robokernel_ros.rollout.replay import bind_dataset_names

STEPS = 8


def executed(trace_path: str) -> list[dict[str, float]]:
    return [e.data["action"] for e in load_trace(trace_path).of_kind("action")]


def final_qpos(trace_path: str) -> np.ndarray:
    return np.asarray(load_trace(trace_path).of_kind("privileged")[-1].data["state"]["qpos"])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two recorded episodes (run dirs + bags) and a workcell to replay them on."""
    root = tmp_path_factory.mktemp("replay")
    cell = SimWorkcell(trace_dir=root / "runs")
    cell.add_robot("arm", "so101")
    out = cell.eval_policy(
        "arm", n_episodes=2, max_steps=STEPS, seed=5, policy_config={"noise": 0.2},
        instruction="wave",
    )  # fmt: skip
    assert out["status"] == "success", envelope_text(out)
    yield cell, envelope_json(out)["episodes"], root
    cell.close()


@pytest.fixture(scope="module")
def dataset(recorded):
    pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")
    from robokernel_ros.cli.export import main as export_main

    _, episodes, root = recorded
    ds = root / "dataset"
    args = [*(e["bag_path"] for e in episodes), "--repo-id", "robokernel/arm", "--root", str(ds)]
    assert export_main(args) == 0
    assert json.loads((ds / "meta" / "info.json").read_text())["total_episodes"] == 2
    return ds


def test_replay_from_a_bag_repeats_the_episode_into_a_new_trace_and_bag(recorded):
    cell, episodes, root = recorded
    source = episodes[1]
    out = cell.replay_episode(source["bag_path"], trace_dir=root / "replays")
    assert out["status"] == "success", envelope_text(out)
    j = envelope_json(out)
    assert j["replayed_source"] == "trace" and j["replayed_from"] == source["bag_path"]
    assert j["recorded_steps"] == STEPS and j["actions_applied"] == STEPS
    assert j["max_qpos_divergence"] == pytest.approx(0.0, abs=1e-9)
    assert Path(j["trace_path"]).parent == root / "replays"
    assert j["bag_path"] == str(Path(j["trace_path"]) / "bag")
    assert len(load_trace(j["bag_path"]).events) == len(load_trace(j["trace_path"]).events)
    assert executed(j["trace_path"]) == executed(source["trace_path"])


def test_replay_from_a_lerobot_dataset(recorded, dataset):
    cell, episodes, root = recorded
    out = cell.replay_episode(str(dataset), episode=1, trace_dir=root / "from_dataset")
    assert out["status"] == "success", envelope_text(out)
    j = envelope_json(out)
    assert j["replayed_source"] == "lerobot_dataset" and j["replayed_episode"] == 1
    assert j["recorded_steps"] == STEPS and j["steps_advanced"] == STEPS
    assert j["actions_applied"] == STEPS and j["action_resolution_rate"] == 1.0
    assert j["instruction"] == "wave"
    assert (Path(j["bag_path"]) / "metadata.yaml").is_file()
    # the dataset's rows (float32) are the executed actions of episode 1, by name
    replayed, original = executed(j["trace_path"]), executed(episodes[1]["trace_path"])
    assert len(replayed) == len(original) == STEPS
    for a, b in zip(replayed, original, strict=True):
        assert a.keys() == b.keys()
        np.testing.assert_allclose([a[k] for k in b], [b[k] for k in b], atol=1e-6)
    np.testing.assert_allclose(
        final_qpos(j["trace_path"]), final_qpos(episodes[1]["trace_path"]), atol=1e-4
    )
    # episode 0 is a different trajectory
    other = envelope_json(cell.replay_episode(str(dataset), episode=0, trace_dir=None))
    assert other["replayed_episode"] == 0 and other["actions_applied"] == STEPS


def test_dataset_replay_refusals(recorded, dataset):
    cell, _, _ = recorded
    out = cell.replay_episode(str(dataset), episode=2)
    assert out["status"] == "error"
    assert "episode=2" in envelope_text(out) and "2 episodes (0..1)" in envelope_text(out)
    out = cell.replay_episode(str(dataset), episode=-1)
    assert out["status"] == "error" and "episode=-1" in envelope_text(out)
    assert envelope_json(cell.list_policies_running())["count"] == 0


def test_dataset_names_bind_to_action_keys_by_name():
    keys = ["shoulder_pan", "gripper"]
    assert bind_dataset_names(["gripper.pos", "shoulder_pan"], keys, where="repo_id='d'") == {
        "gripper.pos": "gripper",
        "shoulder_pan": "shoulder_pan",
    }
    with pytest.raises(ValueError, match=r"repo_id='d'.*\['elbow.pos'\].*shoulder_pan"):
        bind_dataset_names(["elbow.pos", "gripper"], keys, where="repo_id='d'")
    with pytest.raises(ValueError, match="two entries to the robot key 'gripper'"):
        bind_dataset_names(["gripper", "gripper.pos"], keys, where="repo_id='d'")
