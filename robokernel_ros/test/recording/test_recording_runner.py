"""A real EpisodeRunner records a run directory and its bag; both load to the same trace."""

from __future__ import annotations

import numpy as np
import pytest
from bag_fixtures import ChunkAgent, NumpyArm
from robokernel_ros.kernel import EpisodeRunner
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.timing import Timing
from robokernel_ros.kernel.trace import TraceStore, load_trace
from robokernel_ros.recording import EpisodeBagMirror, bag_path_for
from rosbags.rosbag2 import Reader


@pytest.mark.parametrize(
    "timing",
    [Timing(), Timing(mode="realtime", refill_steps=2, latency_s=0.12)],
    ids=["sync", "realtime"],
)
def test_runner_episodes_mirror_to_equal_bags(tmp_path, timing):
    store = TraceStore(tmp_path / "runs")
    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    runner = EpisodeRunner(
        NumpyArm(), ChunkAgent(), trace=store, bus=bus, timing=timing, image_every=2
    )
    records = [runner.run(max_steps=60), runner.run(max_steps=60)]
    assert len(sink.bag_paths) == 2
    for record, bag in zip(records, sink.bag_paths, strict=True):
        assert bag == bag_path_for(record.trace_path)
        a, b = load_trace(record.trace_path), load_trace(bag)
        assert not b.truncated
        assert a.events == b.events and len(a.events) > 50
        assert a.meta == b.meta and b.meta["outcome"] == "success"
        kinds = [e.kind for e in a.events]
        with Reader(bag) as reader:
            counts = {c.topic: c.msgcount for c in reader.connections}
        assert counts["/robokernel/events"] == len(a.events)
        assert counts["/robokernel/action"] == kinds.count("action") == record.steps
        assert counts["/robokernel/joint_states"] == kinds.count("observation")
        assert counts["/robokernel/action_chunk"] == kinds.count("chunk.merge") == record.chunks
        frames = [e for e in a.events if e.kind == "observation" and e.data.get("images")]
        assert counts["/robokernel/camera/front/image"] == len(frames) > 5
        rel = frames[3].data["images"]["front"]
        np.testing.assert_array_equal(b.image(rel), a.image(rel))
    if timing.mode == "realtime":
        assert any(e.data.get("hold") for e in a.of_kind("action")), "latency should cause holds"
