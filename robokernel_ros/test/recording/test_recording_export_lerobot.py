"""Recorded episodes -> LeRobotDataset with lerobot's writer, loaded back with lerobot."""

from __future__ import annotations

import json

import numpy as np
import pytest
from bag_fixtures import ChunkAgent, NumpyArm
from robokernel_ros.cli.export import main as export_main
from robokernel_ros.kernel import EpisodeRunner
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.trace import TraceStore, load_trace
from robokernel_ros.recording import EpisodeBagMirror

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")


class CameraArm(NumpyArm):
    def _obs(self):
        obs = super()._obs()
        obs["images"] = {"front": np.full((32, 48, 3), (self.n * 9) % 256, dtype=np.uint8)}
        return obs


@pytest.fixture
def two_episodes(tmp_path):
    store = TraceStore(tmp_path / "runs")
    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    runner = EpisodeRunner(
        CameraArm(steps_to_success=12), ChunkAgent(), trace=store, bus=bus, image_every=2
    )
    records = [runner.run(max_steps=30, instruction="reach the shelf") for _ in range(2)]
    return records, sink.bag_paths


def test_export_round_trip(tmp_path, two_episodes, capsys):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    records, bags = two_episodes
    root = tmp_path / "dataset"
    assert (
        export_main([*map(str, bags), "--repo-id", "robokernel/arm", "--root", str(root), "--json"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"] == 2 and report["frames"] == sum(r.steps for r in records) == 24
    assert report["fps"] == 20 and report["cameras"] == ["front"]

    ds = LeRobotDataset("robokernel/arm", root=root, video_backend="pyav")
    assert ds.meta.info["codebase_version"] == report["codebase_version"] == "v3.0"
    assert ds.fps == 20 and ds.num_episodes == 2 and len(ds) == 24
    assert ds.meta.features["action"]["names"] == ["j0", "j1", "j2"]
    i = 0
    for episode, bag in enumerate(bags):
        trace = load_trace(bag)
        obs = {e.step: e.data["obs"] for e in trace.of_kind("observation")}
        for k, action in enumerate(trace.of_kind("action")):
            item = ds[i]
            assert int(item["episode_index"]) == episode and int(item["frame_index"]) == k
            assert item["task"] == "reach the shelf"
            expected_action = [action.data["action"][j] for j in ("j0", "j1", "j2")]
            np.testing.assert_allclose(item["action"].numpy(), np.float32(expected_action))
            expected_state = [obs[action.step]["joint_positions"][j] for j in ("j0", "j1", "j2")]
            np.testing.assert_allclose(
                item["observation.state"].numpy(), np.float32(expected_state)
            )
            # frames are recorded every 2nd step; the latest recorded frame is held in between
            frame_step = action.step - action.step % 2
            expected_pixel = (frame_step * 9) % 256
            image = item["observation.images.front"]
            assert tuple(image.shape) == (3, 32, 48)
            assert abs(float(image.mean()) * 255 - expected_pixel) < 4  # video is lossy
            assert float(item["timestamp"]) == pytest.approx(k / 20, abs=1e-4)
            i += 1


def test_export_refusals(tmp_path, two_episodes, capsys):
    from robokernel_ros.recording.export import export_lerobot

    _, bags = two_episodes
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="root=.*not empty"):
        export_lerobot(bags, repo_id="a/b", root=tmp_path / "full")
    with pytest.raises(ValueError, match="repo_id="):
        export_lerobot(bags, repo_id="", root=tmp_path / "d1")
    assert (
        export_main([str(tmp_path / "missing"), "--repo-id", "a/b", "--root", str(tmp_path / "d2")])
        == 1
    )
    assert "does not exist" in capsys.readouterr().err


class LateCameraArm(NumpyArm):
    """A live workcell's camera: its first frame arrives at step `first`."""

    first = 3

    def _obs(self):
        obs = super()._obs()
        if self.n >= self.first:
            obs["images"] = {"front": np.full((32, 48, 3), 7 * self.n, dtype=np.uint8)}
        else:
            obs.pop("images", None)
        return obs


def test_export_starts_the_episode_once_every_camera_has_a_frame(tmp_path, caplog):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from robokernel_ros.recording.export import export_lerobot

    store = TraceStore(tmp_path / "runs")
    runner = EpisodeRunner(LateCameraArm(steps_to_success=50), ChunkAgent(), trace=store)
    record = runner.run(max_steps=20)
    report = export_lerobot([record.trace_path], repo_id="robokernel/late", root=tmp_path / "ds")
    assert report.frames == record.steps - 3 == 17
    assert "steps 0..2 skipped: camera(s) ['front'] had no frame yet" in caplog.text
    ds = LeRobotDataset("robokernel/late", root=tmp_path / "ds", video_backend="pyav")
    first_action = load_trace(record.trace_path).of_kind("action")[3].data["action"]
    np.testing.assert_allclose(
        ds[0]["action"].numpy(), np.float32([first_action[j] for j in ("j0", "j1", "j2")])
    )


def test_export_refuses_a_camera_without_a_frame_for_any_executed_step(tmp_path):
    from robokernel_ros.recording.export import export_lerobot

    class LastMomentArm(LateCameraArm):
        first = 5  # only the final observation (after the last action) has a frame

    store = TraceStore(tmp_path / "runs")
    record = EpisodeRunner(LastMomentArm(steps_to_success=50), ChunkAgent(), trace=store).run(5)
    assert record.steps == 5
    with pytest.raises(ValueError, match=r"camera\(s\) \['front'\] have no frame in the episode"):
        export_lerobot([record.trace_path], repo_id="robokernel/blind", root=tmp_path / "d")
