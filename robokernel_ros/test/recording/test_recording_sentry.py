"""Sentry episodes (EpisodeRunner.run_sentry) in bags and in a LeRobot dataset: one bag per
rotated episode, and the dataset holds every step of the continuous run exactly once."""

from __future__ import annotations

import numpy as np
import pytest
from bag_fixtures import JOINTS, ChunkAgent, NumpyArm
from robokernel_ros.kernel import EpisodeRunner, EventBus, TraceStore, load_trace
from robokernel_ros.recording import EpisodeBagMirror
from robokernel_ros.recording.export import export_lerobot

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")


def test_sentry_bags_export_every_step_of_the_run_once(tmp_path) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    store = TraceStore(tmp_path / "runs")
    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    runner = EpisodeRunner(
        NumpyArm(images=False, steps_to_success=1000), ChunkAgent(), trace=store, bus=bus
    )
    records = runner.run_sentry(45, rotate_every_s=0.5, seed=0, instruction="watch")  # 20 Hz
    assert [r.steps for r in records] == [10, 10, 10, 10, 5]
    bags = list(sink.bag_paths)
    assert len(bags) == 5
    actions = [e.data["action"] for bag in bags for e in load_trace(bag).of_kind("action")]
    assert len(actions) == 45
    report = export_lerobot(bags, repo_id="robokernel/sentry", root=tmp_path / "ds")
    assert report.episodes == 5 and report.frames == 45
    ds = LeRobotDataset("robokernel/sentry", root=tmp_path / "ds")
    assert [int(n) for n in ds.meta.episodes["length"]] == [10, 10, 10, 10, 5]
    got = np.stack([ds[i]["action"].numpy() for i in range(len(ds))])
    want = np.float32([[a[j] for j in JOINTS] for a in actions])
    np.testing.assert_allclose(got, want)
