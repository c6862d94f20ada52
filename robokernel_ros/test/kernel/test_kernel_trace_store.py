"""TraceStore run directories and load_trace: layout, streaming, images, truncation, loaders."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.kernel import Event, TraceStore, load_trace, register_trace_loader
from robokernel_ros.kernel.trace import Trace, trace_loaders


def _events(run_id: str) -> list[Event]:
    image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    return [
        Event(
            "episode.start",
            0,
            {"run_id": run_id, "seed": 3, "instruction": "pick"},
            seq=0,
            run_id=run_id,
        ),
        Event(
            "observation",
            0,
            {"obs": {"q": [0.0, 1.0]}, "images": {"wrist/cam": image}},
            seq=1,
            run_id=run_id,
        ),
        Event(
            "action",
            0,
            {"action": {"j": 0.5}, "hold": False, "reward": float("nan")},
            t=0.02,
            wall=0.001,
            seq=2,
        ),
        Event(
            "episode.end", 1, {"outcome": "success", "steps": 1, "value": np.float32(2.5)}, seq=3
        ),
    ]


def test_run_directory_layout_and_round_trip(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "runs")
    writer = store.open_run()
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", writer.run_id)
    for event in _events(writer.run_id):
        writer(event)
    writer.close()
    run = store.run_dir(writer.run_id)
    assert (run / "meta.json").is_file() and (run / "events.jsonl").is_file()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["seed"] == 3 and meta["outcome"] == "success" and meta["value"] == 2.5
    lines = (run / "events.jsonl").read_text().splitlines()
    assert len(lines) == 4
    first = json.loads(lines[2])
    assert set(first) == {"seq", "kind", "step", "t", "wall", "data"}
    assert first["data"]["reward"] is None  # strict JSON: non-finite numbers become null

    trace = load_trace(run)
    assert trace.meta["instruction"] == "pick" and not trace.truncated
    assert [e.kind for e in trace.events] == [
        "episode.start",
        "observation",
        "action",
        "episode.end",
    ]
    assert [e.seq for e in trace.events] == [0, 1, 2, 3]
    assert trace.events[2].t == pytest.approx(0.02)
    assert all(e.run_id == writer.run_id for e in trace.events)
    relative = trace.events[1].data["images"]["wrist/cam"]
    assert relative == "images/wrist_cam/000000.npy"
    np.testing.assert_array_equal(
        trace.image(relative), _events("x")[1].data["images"]["wrist/cam"]
    )
    assert store.runs() == [run]


def test_meta_json_comes_with_episode_start_or_at_close(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    writer = store.open_run()
    meta = writer.path / "meta.json"
    assert not meta.exists()  # written with the first event, not also before it
    writer(Event("episode.start", 0, {"seed": 4}, seq=0))
    assert json.loads(meta.read_text()) == {"run_id": writer.run_id, "seed": 4}
    writer.close()
    bare = store.open_run()  # no episode.start ever came: meta.json still left at close
    bare(Event("action", 0, {}, seq=0))
    bare.close()
    assert json.loads((bare.path / "meta.json").read_text()) == {"run_id": bare.run_id}
    assert load_trace(bare.path).meta["run_id"] == bare.run_id


def test_live_event_keeps_its_array(tmp_path: Path) -> None:
    writer = TraceStore(tmp_path).open_run("fixed-id")
    event = _events("fixed-id")[1]
    writer(event)
    writer.close()
    assert isinstance(event.data["images"]["wrist/cam"], np.ndarray)


def test_events_are_streamed_before_close(tmp_path: Path) -> None:
    writer = TraceStore(tmp_path, flush_interval_s=0.0).open_run()
    for i in range(10):
        writer(Event("action", i, {"i": i}, seq=i))
    lines = (writer.path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 10  # on disk while the episode still runs
    writer.close()


def test_lines_are_flushed_by_the_events_own_clock(tmp_path: Path) -> None:
    writer = TraceStore(tmp_path, flush_interval_s=0.5).open_run()
    on_disk = writer.path / "events.jsonl"
    for i, wall in enumerate((0.1, 0.2, 0.45)):
        writer(Event("action", i, {"i": i}, wall=wall, seq=i))
    assert on_disk.read_bytes() == b""  # buffered: 0.45 s of the episode
    writer(Event("action", 3, {"i": 3}, wall=0.5, seq=3))
    assert len(on_disk.read_bytes().splitlines()) == 4  # half a second: flushed
    writer(Event("action", 4, {"i": 4}, wall=0.9, seq=4))
    assert len(on_disk.read_bytes().splitlines()) == 4  # the next flush is due at 1.0 s
    writer(Event("action", 5, {"i": 5}, wall=1.0, seq=5))
    assert len(on_disk.read_bytes().splitlines()) == 6
    writer.close()


def test_truncated_last_line_is_tolerated_but_a_bad_middle_line_is_not(tmp_path: Path) -> None:
    writer = TraceStore(tmp_path).open_run()
    for i in range(3):
        writer(Event("action", i, {"i": i}, seq=i))
    writer.close()
    events_file = writer.path / "events.jsonl"
    text = events_file.read_text()
    events_file.write_text(text + '{"seq": 3, "kind": "act')  # a killed process
    trace = load_trace(writer.path)
    assert trace.truncated and [e.step for e in trace.events] == [0, 1, 2]
    assert load_trace(events_file).path == writer.path

    lines = text.splitlines()
    events_file.write_text("\n".join([lines[0], "{broken", lines[2]]) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        load_trace(writer.path)


def test_explicit_run_id_collision_and_bad_paths(tmp_path: Path) -> None:
    store = TraceStore(tmp_path)
    store.open_run("same").close()
    with pytest.raises(ValueError, match="run_id='same'"):
        store.open_run("same")
    with pytest.raises(ValueError, match="does not exist"):
        load_trace(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a trace"):
        load_trace(tmp_path / "empty")
    with pytest.raises(ValueError, match="flush_interval_s"):
        TraceStore(tmp_path, flush_interval_s=-1)


def test_registered_loader_is_dispatched_by_path_content(tmp_path: Path) -> None:
    folder = tmp_path / "other_format"
    folder.mkdir()
    (folder / "marker.txt").write_text("x")

    def load_other(path: Path) -> Trace:
        return Trace(meta={"format": "other"}, events=[Event("episode.start", 0)], path=path)

    unregister = register_trace_loader(
        "test_other", lambda p: (p / "marker.txt").exists(), load_other
    )
    try:
        assert load_trace(folder).meta == {"format": "other"}
        assert trace_loaders()[0] == "test_other"
    finally:
        unregister()
    assert "test_other" not in trace_loaders()


def test_open_run_creates_a_missing_root_with_its_parents(tmp_path):
    """The root is created when the first run directory cannot be (not checked for every
    episode), parents included; the next run goes beside the first."""
    root = tmp_path / "not" / "yet"
    first = TraceStore(root).open_run()
    second = TraceStore(root).open_run()
    assert first.path.parent == root and second.path.parent == root
    assert first.path != second.path and first.path.is_dir() and second.path.is_dir()
    first.close()
    second.close()


def test_write_fields_writes_the_bytes_that_write_does(tmp_path: Path) -> None:
    # the recorder's path when only the trace listens (no Event built) against the Event path
    frame = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    events = [
        Event("episode.start", 0, {"run_id": "r", "seed": 3}, 0.0, 0.0, 0),
        Event("observation", 0, {"obs": {"q": [0.1, 2.0], "v": np.float32(1.5)}}, 0.0, 0.001, 1),
        Event("observation", 1, {"obs": {}, "images": {"wrist/cam": frame}}, 0.02, 0.02, 2),
        Event(
            "chunk.merge",
            1,
            {"keys": ["a"], "actions": [[math.nan]], "inference_s": 1e-5},
            0.02,
            0.6,
            3,
        ),  # fmt: skip
        Event("action", 1, {"action": {"a": math.inf}, "hold": False, 7: "int key"}, 0.02, 0.7, 4),
        Event("episode.end", 2, {"outcome": "truncated", "steps": 2}, 0.04, 1.3, 5),
    ]
    by_event = TraceStore(tmp_path / "a", flush_interval_s=0.5).open_run("same")
    by_fields = TraceStore(tmp_path / "b", flush_interval_s=0.5).open_run("same")
    for e in events:
        by_event.write(Event(e.kind, e.step, e.data, e.t, e.wall, e.seq, e.run_id))
        by_fields.write_fields(e.seq, e.kind, e.step, e.t, e.wall, e.data)
    by_event.close()
    by_fields.close()
    for name in ("events.jsonl", "meta.json", "images/wrist_cam/000001.npy"):
        assert (by_event.path / name).read_bytes() == (by_fields.path / name).read_bytes(), name
    lines = (by_fields.path / "events.jsonl").read_text().splitlines()
    assert len(lines) == 6 and json.loads(lines[3])["data"]["actions"] == [[None]]
