"""The mirror's direct MCAP append writes the very bytes rosbags' Writer.write writes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader
from robokernel_ros.bag import BagMirror, load_bag_trace
from robokernel_ros.kernel.events import Event


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
def test_batched_append_equals_writer_write(tmp_path, flush_interval_s, steps, images):
    fast = BagMirror(tmp_path / "fast" / "bag", flush_interval_s=flush_interval_s)
    # The reference: rosbags' own Writer.write, McapWriter.close_chunk and Writer.close.
    slow = BagMirror(tmp_path / "slow" / "bag", flush_interval_s=flush_interval_s, _batched=False)
    assert fast._appender.batched  # the batched path is the one in use
    assert not slow._appender.batched
    episode = _episode(steps, images)
    for event in episode:
        fast.write(event)
        slow.write(event)
    assert fast.closed and slow.closed and not fast.failed and not slow.failed
    fast_mcap = (tmp_path / "fast" / "bag" / "bag.mcap").read_bytes()
    slow_mcap = (tmp_path / "slow" / "bag" / "bag.mcap").read_bytes()
    assert fast_mcap == slow_mcap
    with open(tmp_path / "fast" / "bag" / "bag.mcap", "rb") as f:
        chunks = len(make_reader(f).get_summary().chunk_indexes)
    assert chunks >= 3  # several chunks, closed by size or by the flush
    for name in ("metadata.yaml",):
        assert (tmp_path / "fast" / "bag" / name).read_bytes() == (
            tmp_path / "slow" / "bag" / name
        ).read_bytes()
    trace = load_bag_trace(tmp_path / "fast" / "bag")
    assert [e.seq for e in trace.events] == sorted(e.seq for e in trace.events)
    assert len(trace.events) == len(episode)


def test_sqlite3_storage_writes_through_rosbags(tmp_path):
    mirror = BagMirror(tmp_path / "bag", storage="sqlite3")
    assert not mirror._appender.batched
    for event in _episode():
        mirror.write(event)
    assert mirror.closed and len(load_bag_trace(tmp_path / "bag").events) == len(_episode())


CUSTOM_VALUES = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    custom=st.dictionaries(st.sampled_from(["robokernel.meta", "a", "yes", "0o17"]), CUSTOM_VALUES),
    counts=st.lists(st.integers(0, 2**63 - 1), min_size=3, max_size=3),
)
def test_metadata_texts_equal_ruamel_dumps(custom, counts):
    """The templated metadata YAML is ruamel's own dump, byte for byte, for any custom_data
    (quoting, folding of long values, unicode) and any counts, the template reused."""
    from robokernel_ros.bag.append import _dump, metadata_texts
    from robokernel_ros.bag.mirror import QOS_RELIABLE
    from rosbags.rosbag2.metadata import dump_qos_v9

    def metadata(custom_data, n):
        return {
            "rosbag2_bagfile_information": {
                "version": 9,
                "storage_identifier": "mcap",
                "relative_file_paths": ["bag.mcap"],
                "duration": {"nanoseconds": n[0]},
                "starting_time": {"nanoseconds_since_epoch": n[1]},
                "message_count": n[2],
                "topics_with_message_count": [
                    {
                        "topic_metadata": {
                            "name": "/robokernel/events",
                            "type": "robokernel_interfaces/msg/KernelEvent",
                            "serialization_format": "cdr",
                            "offered_qos_profiles": dump_qos_v9([QOS_RELIABLE]),
                            "type_description_hash": "RIHS01_" + "ab" * 32,
                        },
                        "message_count": n[2],
                    }
                ],
                "compression_format": "",
                "compression_mode": "",
                "files": [{"path": "bag.mcap", "message_count": n[2]}],
                "custom_data": custom_data or None,
                "ros_distro": "rosbags",
            }
        }

    for n in (counts, [0, 1, 2]):  # the second call fills the cached template
        meta = metadata(custom, n)
        assert metadata_texts(meta) == (_dump(meta), _dump(meta["rosbag2_bagfile_information"]))


def test_chunk_rows_of_every_form_decode_to_the_same_values(tmp_path):
    """Lists, tuples, arrays, ragged rows, mappings and numeric strings: the values numpy
    (or float()) makes of them, row-major."""
    from robokernel_ros.bag import types as T
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
