"""The hand-written CDR encoders equal rosbags' serialize_cdr byte for byte (properties).

rosbags' generated serialisers are the reference: for randomized messages of every
type the mirror writes, recording.cdr's bytes must be identical, and rosbags must decode
them back to the same fields.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from robokernel_ros.kernel.events import Event, EventBus
from robokernel_ros.kernel.trace import TraceStore
from robokernel_ros.recording import BagMirror, cdr
from robokernel_ros.recording import types as T
from rosbags.rosbag2 import Reader

STORE = T.typestore()
TYPES = STORE.types
Time = TYPES["builtin_interfaces/msg/Time"]
Header = TYPES["std_msgs/msg/Header"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
names = st.lists(texts, max_size=9)
floats = st.floats(width=64)  # NaN and infinities included: the bytes must still match
sec = st.integers(-(2**31), 2**31 - 1)
nanosec = st.integers(0, 2**32 - 1)


def reference(msg, msgtype):
    return bytes(STORE.serialize_cdr(msg, msgtype))


@SETTINGS
@given(
    sec=sec,
    nanosec=nanosec,
    run_id=texts,
    seq=st.integers(0, 2**64 - 1),
    kind=texts,
    step=st.integers(-(2**63), 2**63 - 1),
    data_json=texts,
)
def test_kernel_event(sec, nanosec, run_id, seq, kind, step, data_json):
    msg = TYPES[T.KERNEL_EVENT](
        stamp=Time(sec=sec, nanosec=nanosec),
        run_id=run_id,
        seq=seq,
        kind=kind,
        step=step,
        data_json=data_json,
    )
    ours = cdr.kernel_event(
        sec, nanosec, run_id.encode(), seq, kind.encode(), step, data_json.encode()
    )
    assert ours == reference(msg, T.KERNEL_EVENT)
    back = STORE.deserialize_cdr(ours, T.KERNEL_EVENT)
    assert (back.run_id, back.seq, back.kind, back.step, back.data_json) == (
        run_id,
        seq,
        kind,
        step,
        data_json,
    )
    # The reader's hand decoder is its inverse; big-endian CDR is left to rosbags.
    fields = (sec, nanosec, run_id, seq, kind, step, data_json.encode())
    assert cdr.parse_kernel_event(ours) == fields
    with pytest.raises(ValueError):
        cdr.parse_kernel_event(STORE.serialize_cdr(msg, T.KERNEL_EVENT, little_endian=False))
    with pytest.raises(ValueError):
        cdr.parse_kernel_event(ours[: len(ours) - len(data_json.encode()) - 2])


@st.composite
def joint_states(draw):
    joints = draw(names)
    n = len(joints)
    column = st.lists(floats, min_size=n, max_size=n)
    position = draw(column)
    velocity = draw(st.one_of(st.just([]), column))
    effort = draw(st.one_of(st.just([]), column))
    return draw(sec), draw(nanosec), draw(texts), tuple(joints), position, velocity, effort


@SETTINGS
@given(joint_states())
def test_joint_state(args):
    s, ns, frame_id, joints, position, velocity, effort = args
    msg = TYPES[T.JOINT_STATE](
        header=Header(stamp=Time(sec=s, nanosec=ns), frame_id=frame_id),
        name=list(joints),
        position=np.asarray(position, dtype=np.float64),
        velocity=np.asarray(velocity, dtype=np.float64),
        effort=np.asarray(effort, dtype=np.float64),
    )
    ours = cdr.joint_state(s, ns, frame_id, joints, position, velocity, effort)
    assert ours == reference(msg, T.JOINT_STATE)
    # The same bytes again from the cached layout, with numpy scalars as values.
    assert cdr.joint_state(s, ns, frame_id, joints, np.asarray(position), velocity, effort) == ours
    back = STORE.deserialize_cdr(ours, T.JOINT_STATE)
    assert list(back.name) == list(joints) and back.header.frame_id == frame_id


@SETTINGS
@given(
    sec=sec,
    nanosec=nanosec,
    frame_id=texts,
    height=st.integers(0, 5),
    width=st.integers(0, 7),
    channels=st.sampled_from([None, 1, 3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_image(sec, nanosec, frame_id, height, width, channels, seed):
    shape = (height, width) if channels is None else (height, width, channels)
    pixels = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    c = 1 if channels is None else channels
    msg = TYPES[T.IMAGE](
        header=Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id),
        height=height,
        width=width,
        encoding="rgb8" if c == 3 else "mono8",
        is_bigendian=0,
        step=width * c,
        data=pixels.reshape(-1),
    )
    assert cdr.image(sec, nanosec, frame_id, pixels) == reference(msg, T.IMAGE)


@SETTINGS
@given(
    sec=sec,
    nanosec=nanosec,
    run_id=texts,
    obs_step=st.integers(0, 2**64 - 1),
    keys=names,
    horizon=st.integers(0, 2**32 - 1),
    actions=st.lists(floats, max_size=30),
    inference=floats,
)
def test_action_chunk(sec, nanosec, run_id, obs_step, keys, horizon, actions, inference):
    msg = TYPES[T.ACTION_CHUNK](
        header=Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=""),
        run_id=run_id,
        obs_step=obs_step,
        keys=keys,
        horizon=horizon,
        actions=np.asarray(actions, dtype=np.float64),
        inference_time_s=inference,
    )
    ours = cdr.action_chunk(sec, nanosec, run_id, obs_step, keys, horizon, actions, inference)
    assert ours == reference(msg, T.ACTION_CHUNK)


@SETTINGS
@given(
    sec=sec,
    nanosec=nanosec,
    strings=st.lists(texts, min_size=4, max_size=4),
    value=floats,
    limit=floats,
)
def test_shield_intervention_verdict_and_string(sec, nanosec, strings, value, limit):
    guard, joint, action, detail = strings
    msg = TYPES[T.SHIELD_INTERVENTION](
        stamp=Time(sec=sec, nanosec=nanosec),
        guard=guard,
        joint=joint,
        value=value,
        limit=limit,
        action=action,
        detail=detail,
    )
    ours = cdr.shield_intervention(sec, nanosec, guard, joint, value, limit, action, detail)
    assert ours == reference(msg, T.SHIELD_INTERVENTION)
    assert cdr.verdict(guard, detail) == reference(
        TYPES[T.VERDICT](outcome=guard, note=detail), T.VERDICT
    )
    assert cdr.string(joint) == reference(TYPES[T.STRING](data=joint), T.STRING)


def _bag_event_lines(bag):
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == "/robokernel/events"]
        return [
            STORE.deserialize_cdr(raw, T.KERNEL_EVENT).data_json
            for _, _, raw in reader.messages(connections=conns)
        ]


def test_data_json_is_the_run_directory_line_and_is_encoded_once(tmp_path):
    """Lossless: each KernelEvent.data_json is the events.jsonl line, byte for byte.

    The trace writer and the mirror share one encoding per event (Event.line): an event
    published with a line already cached is mirrored with that very line.
    """
    store = TraceStore(tmp_path / "runs")
    writer = store.open_run()
    bus = EventBus()
    mirror = BagMirror.for_run_dir(writer.path)
    mirror.attach(bus)  # the mirror encodes first, the trace writer reuses its line
    bus.subscribe(writer)
    values = [0.1, 1e-300, math.pi, 2.0**60, -0.0, float("nan"), float("inf")]
    events = [
        Event("episode.start", 0, {"run_id": writer.run_id, "note": "é ☃ \n \u0000"}, 0.0),
        *(
            Event("action", s, {"action": {"j": v}, "hold": False}, 0.1 * s, seq=s + 1)
            for s, v in enumerate(values)
        ),
    ]
    cached = Event("chunk.request", 9, {"request_id": 1}, 1.0, seq=len(events))
    cached.line = b'{"seq":8,"kind":"chunk.request","step":9,"t":1.0,"wall":0.0,"data":{"request_id":1,"cached":true}}\n'
    events.append(cached)
    events.append(Event("episode.end", 9, {"outcome": "success"}, 1.0, seq=len(events)))
    for event in events:
        event.run_id = writer.run_id
        bus.publish(event)
    writer.close()
    assert mirror.closed
    lines = (writer.path / "events.jsonl").read_bytes().splitlines()
    bag_lines = _bag_event_lines(writer.path / "bag")
    assert [line.encode() for line in bag_lines] == lines
    assert json.loads(bag_lines[-2])["data"]["cached"] is True  # the cached line, not re-encoded
    # non-finite numbers are null in both, like the trace's strict JSON
    assert [json.loads(line)["data"]["action"]["j"] for line in bag_lines[1:8]][-2:] == [
        None,
        None,
    ]


@SETTINGS
@given(
    args=joint_states(),
    run_id=texts,
    kind=texts,
    seq=st.integers(0, 2**64 - 1),
    step=st.integers(-(2**63), 2**63 - 1),
    data_json=texts,
    keys=names,
    actions=st.lists(floats, max_size=30),
)
def test_templates_make_the_messages(args, run_id, kind, seq, step, data_json, keys, actions):
    """The mirror's per-topic templates (one pack per message) make the messages checked
    above, byte for byte."""
    s, n, frame_id, joints, position, velocity, effort = args
    template = cdr.JointStateTemplate(frame_id, joints)
    assert template.pack(s, n, position, velocity, effort) == cdr.joint_state(
        s, n, frame_id, joints, position, velocity, effort
    )
    line = data_json.encode() + b"\n"
    run = run_id.encode()
    message = cdr.kernel_event(s, n, run, seq, kind.encode(), step, line[:-1])
    assert cdr.kernel_event_of_line(s, n, run, seq, kind.encode(), step, line) == message
    pack, kind_bytes = cdr.KernelEventTemplate(run).layout(kind)  # as the mirror packs it
    head = pack(cdr.HEADER, s, n, len(run) + 1, run, seq, len(kind_bytes) + 1, kind_bytes, step, len(line))  # fmt: skip
    assert head + line[:-1] + b"\0" == message
    chunk = cdr.action_chunk(s, n, run_id, seq, keys, len(actions), actions, 0.25)
    assert (
        cdr.action_chunk_of_values(s, n, run_id, seq, tuple(keys), len(actions), actions, 0.25)
        == chunk
    )
    # an array of the values, converted as numpy converts them: the same message
    assert (
        cdr.action_chunk(s, n, run_id, seq, keys, len(actions), np.asarray(actions), 0.25) == chunk
    )
