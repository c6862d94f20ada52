"""The mirror's bag through rosbags' Writer: chunks closed by size and by the flush, every
topic the mirror has, every event read back in order."""

from __future__ import annotations

import numpy as np
import pytest
from mcap.reader import make_reader
from robokernel_ros.kernel.events import Event
from robokernel_ros.recording import BagMirror, load_bag_trace


def _episode(steps: int = 30, images: bool = True) -> list[Event]:
    """Chunks closing by size, a stamp out of order, every topic the mirror has."""
    events: list[Event] = []

    def add(kind: str, step: int, data: dict, t: float) -> None:
        events.append(Event(kind, step, data, t, 0.001 * len(events), len(events), "run-1"))

    add("episode.start", 0, {"run_id": "run-1", "instruction": "stack"}, 5.0)
    for s in range(steps):
        t = 1.0 if s == 17 else 5.0 + 0.1 * s  # the episode clock may step back
        q = {"a": 0.1 * s, "b": -0.2 * s, "c": float(s)}
        data: dict = {"obs": {"joint_positions": q, "joint_velocities": dict.fromkeys(q, 0.5)}}
        if images and s % 2 == 0:
            data["images"] = {"front": np.full((240, 320, 3), s, dtype=np.uint8)}
        add("observation", s, data, t)
        if s % 5 == 0:
            rows = [[0.1 * (s + r), 0.2, 0.3] for r in range(5)]
            add("chunk.merge", s, {"obs_step": s, "keys": list(q), "actions": rows, "inference_s": 0.01}, t)  # fmt: skip
        if s == 9:
            add("safety.intervention", s, {"guard": "position", "key": "b", "value": 2.0, "limit": 1.0, "action": "clipped"}, t)  # fmt: skip
        add("action", s, {"action": q, "hold": s == 3, "reward": 0.0}, t)
    add("operator.verdict", steps - 1, {"outcome": "success", "note": ""}, 8.0)
    add("episode.end", steps, {"outcome": "success", "steps": steps}, 8.0)
    return events


@pytest.mark.parametrize(
    ("flush_interval_s", "steps", "images"),
    [(0.0, 30, True), (1e9, 30, True), (1e9, 6000, False), (0.0, 400, False)],
)
def test_chunks_close_by_size_and_flush_and_every_event_reads_back(
    tmp_path, flush_interval_s, steps, images
):
    mirror = BagMirror(tmp_path / "bag", flush_interval_s=flush_interval_s)
    episode = _episode(steps, images)
    for event in episode:
        mirror.write(event)
    assert mirror.closed and not mirror.failed
    with open(tmp_path / "bag" / "bag.mcap", "rb") as f:
        chunks = len(make_reader(f).get_summary().chunk_indexes)
    assert chunks >= 3  # several chunks, closed by size or by the flush
    trace = load_bag_trace(tmp_path / "bag")
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)
    assert len(trace.events) == len(episode)


def test_sqlite3_storage_writes_through_rosbags(tmp_path):
    mirror = BagMirror(tmp_path / "bag", storage="sqlite3")
    for event in _episode():
        mirror.write(event)
    assert mirror.closed and len(load_bag_trace(tmp_path / "bag").events) == len(_episode())


def test_chunk_rows_of_every_form_decode_to_the_same_values(tmp_path):
    """Lists, tuples, arrays, ragged rows, mappings and numeric strings: the values numpy
    (or float()) makes of them, row-major."""
    from robokernel_ros.recording import types as T
    from rosbags.rosbag2 import Reader

    keys = ["a", "b"]
    forms = [
        [[1.0, 2.0]],
        [[1, 2], [3, 4]],
        ((1.0, 2.0), (3.0, 4.0)),
        np.array([[1.0, 2.0], [3.0, 4.0]]),
        [np.array([1.0, 2.0]), np.array([3.0, 4.0])],
        [{"a": 1.0, "b": 2.0}, {"b": 4.0, "a": 3.0}],
        [["1.5", 2.0]],
        [[1.0, 2.0], [3.0]],
        [],
    ]
    expected = [[1, 2], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4],
                [1.5, 2], [1, 2, 3], []]  # fmt: skip
    mirror = BagMirror(tmp_path / "bag")
    for i, rows in enumerate(forms):
        data = {"obs_step": i, "keys": keys, "actions": rows, "inference_s": 0.5}
        mirror.write(Event("chunk.merge", i, data, 0.1 * i, 0.0, i, "run-1"))
    mirror.close()
    store = T.typestore()
    with Reader(tmp_path / "bag") as reader:
        conns = [c for c in reader.connections if c.topic == "/robokernel/action_chunk"]
        msgs = [store.deserialize_cdr(raw, T.ACTION_CHUNK) for _, _, raw in reader.messages(conns)]
    assert [m.actions.tolist() for m in msgs] == expected
    assert [m.horizon for m in msgs] == [1, 2, 2, 2, 2, 2, 1, 2, 0]
    assert all(list(m.keys) == keys and m.inference_time_s == 0.5 for m in msgs)
