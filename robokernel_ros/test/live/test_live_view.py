"""The live Foxglove view during real evals: a real WebSocket client on the SDK's server.

The client (foxglove_client.py) speaks the protocol over a plain socket; every wait is a
bounded deadline on a state (a port that listens, channels advertised, the connection
closed), never a sleep.
"""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from pathlib import Path

import pytest
from foxglove_client import FoxgloveClient, proto_decoder
from robokernel_ros.live import LAYOUT_FILE, MCAP_FILE, live_option
from robokernel_ros.live.channels import (
    ACTION_TOPIC,
    JOINTS_TOPIC,
    LOG_TOPIC,
    PROGRESS_TOPIC,
    SCENE_TOPIC,
)
from robokernel_ros.rollout import SimWorkcell, envelope_json

SCHEMAS = {
    JOINTS_TOPIC: ("foxglove.JointStates", "protobuf"),
    ACTION_TOPIC: ("foxglove.JointStates", "protobuf"),
    LOG_TOPIC: ("foxglove.Log", "protobuf"),
    PROGRESS_TOPIC: ("robokernel.Progress", "jsonschema"),
    SCENE_TOPIC: ("foxglove.SceneUpdate", "protobuf"),
}
HZ = 50.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def cell(tmp_path):
    cell = SimWorkcell(trace_dir=tmp_path)
    assert cell.add_robot("so101", "so101")["status"] == "success"
    yield cell
    cell.close()


def in_thread(fn):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=fn()), daemon=True)
    thread.start()
    return thread, out


def test_a_client_sees_the_eval_live_at_the_control_rate_and_the_port_is_freed(cell, tmp_path):
    port = free_port()
    steps = 100
    thread, out = in_thread(lambda: cell.eval_policy("so101", max_steps=steps, control_frequency=HZ,
                                                     fast_mode=False, progress=False, live=port))  # fmt: skip
    client = FoxgloveClient(port, deadline_s=60.0)
    channels = client.wait_for(set(SCHEMAS), deadline_s=30.0)
    for topic, (schema, encoding) in SCHEMAS.items():
        assert (channels[topic]["schemaName"], channels[topic]["schemaEncoding"]) == (
            schema,
            encoding,
        )
        assert channels[topic]["schema"], f"{topic} advertised without its schema"
    assert client.server_info is not None and client.server_info["name"] == "robokernel"
    client.subscribe([channels[t]["id"] for t in SCHEMAS])
    arrivals: list[float] = []
    end = time.monotonic() + 60.0
    while not client.closed and time.monotonic() < end:  # the server closes with the call
        before = len(client.messages)
        client._read(0.2)
        arrivals += [time.monotonic()] * (len(client.messages) - before)
    thread.join(30.0)
    assert client.closed, "the server did not close the connection when the eval ended"
    assert port_is_free(port), "the port is still bound after the eval"
    report = envelope_json(out["result"])
    live = report["episodes"][0]["live"]

    joints_id = channels[JOINTS_TOPIC]["id"]
    decode = proto_decoder(channels[JOINTS_TOPIC])
    got = [
        (t, decode(p), a)
        for (c, t, p), a in zip(client.messages, arrivals, strict=True)
        if c == joints_id
    ]
    assert len(got) >= 0.8 * (steps + 1), f"{len(got)} joint messages of {steps + 1} steps"
    assert len(got) <= live["sent"][JOINTS_TOPIC]
    names = [j.name for j in got[-1][1].joints]
    assert names == list(cell.scene.robot_joint_names("so101"))
    assert all(len(m.joints) == len(names) for _, m, _ in got)
    stamps = [t for t, _, _ in got]
    period = statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)) / 1e9
    assert abs(period - 1 / HZ) < 1e-6, (
        f"stamped {period * 1e3:.3f} ms apart: not the episode clock"
    )
    # a paced (wall-clock) loop is not sampled: every step from the client's first one on
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert all(abs(g - 1e9 / HZ) <= 1 for g in gaps), f"steps left out: gaps {sorted(set(gaps))}"
    # and they arrive as the loop runs them: at the control rate, not in one burst at the end
    rate = (len(got) - 1) / (got[-1][2] - got[0][2])
    assert 0.7 * HZ < rate < 1.3 * HZ, (
        f"joint messages arrived at {rate:.1f} Hz, control at {HZ} Hz"
    )
    # the message's own timestamp is its log time
    assert got[-1][1].timestamp.seconds * 10**9 + got[-1][1].timestamp.nanos == stamps[-1]
    progress_id = channels[PROGRESS_TOPIC]["id"]
    final = json.loads([p for c, _, p in client.messages if c == progress_id][-1])
    assert (final["step"], final["n_steps"], final["episodes_done"]) == (steps, steps, 1)
    log_id = channels[LOG_TOPIC]["id"]
    lines = [
        proto_decoder(channels[LOG_TOPIC])(p).message for c, _, p in client.messages if c == log_id
    ]
    assert any("episode 0 ended: truncated" in line for line in lines), lines
    scene_id = channels[SCENE_TOPIC]["id"]
    scenes = [
        proto_decoder(channels[SCENE_TOPIC])(p) for c, _, p in client.messages if c == scene_id
    ]
    assert scenes, "no scene: the MuJoCo env's privileged state has the bodies"
    robot = scenes[-1].entities[0]
    assert robot.frame_id == "world" and len(robot.spheres) == len(robot.lines[0].points) >= 6

    assert live["dropped"] == 0 and live["handled"] + live["coalesced"] == live["events"]
    assert live["clients_seen"] == 1
    # the same channels into the recorded episode, next to the (untouched) rosbag2
    from mcap.reader import make_reader

    run_dir = Path(report["trace_paths"][0])
    assert live["mcap_path"] == str(run_dir / MCAP_FILE)
    with open(run_dir / MCAP_FILE, "rb") as f:
        summary = make_reader(f).get_summary()
    topics = {c.topic: c.message_encoding for c in summary.channels.values()}
    assert set(SCHEMAS) <= set(topics)
    by_topic = {
        c.topic: summary.statistics.channel_message_counts[i] for i, c in summary.channels.items()
    }
    assert by_topic[JOINTS_TOPIC] == live["recorded"][JOINTS_TOPIC] == steps + 1
    assert live["recorded"][JOINTS_TOPIC] >= live["sent"][JOINTS_TOPIC] >= len(got)
    layout = json.loads((run_dir / LAYOUT_FILE).read_text())
    text = json.dumps(layout)
    assert JOINTS_TOPIC in text and ACTION_TOPIC in text and "shoulder_pan" in text
    assert Path(report["bag_paths"][0]).is_dir()


def test_a_stalled_client_does_not_slow_the_loop_and_loses_only_its_own_messages(cell):
    steps = 10_000  # enough data to overflow the socket buffers and the SDK's client backlog
    t0 = time.perf_counter()
    base = cell.eval_policy("so101", max_steps=steps, progress=False, trace_dir=None)
    base_s = time.perf_counter() - t0
    assert base["status"] == "success"
    port = free_port()
    # display_hz None: every step of the fast eval goes to the client (no sampling), enough
    # to overflow its backlog
    live_opt = {"port": port, "display_hz": None}
    thread, out = in_thread(lambda: (time.perf_counter(), cell.eval_policy(
        "so101", max_steps=steps, progress=False, trace_dir=None, live=live_opt), time.perf_counter()))  # fmt: skip
    stalled = FoxgloveClient(port, deadline_s=60.0, rcvbuf=4096)  # reads the advertisements only
    channels = stalled.wait_for(set(SCHEMAS), deadline_s=30.0)
    stalled.subscribe([channels[t]["id"] for t in SCHEMAS])
    thread.join(120.0)
    assert not thread.is_alive(), "the eval did not finish with a stalled client"
    start, result, stop = out["result"]
    report = envelope_json(result)
    live = report["episodes"][0]["live"]
    assert report["total_steps"] == steps
    # never slowed: the queue never overflowed and the call's time is the untraced eval's
    # (bound generous for a shared machine; a loop blocked by the client never ends)
    assert live["dropped"] == 0 and live["handled"] == live["events"], live
    assert stop - start < 2.0 * base_s + 3.0, (
        f"{stop - start:.2f} s with a stalled client, {base_s:.2f} s without"
    )
    # the server stopped with the call and freed its port while the client still stalls
    assert port_is_free(port)
    # what the client lost: the SDK dropped its oldest messages; the view's count of what
    # it sent is what the loss is measured against
    stalled.read_until_closed(30.0)
    joints_id = channels[JOINTS_TOPIC]["id"]
    received = sum(1 for c, _, _ in stalled.messages if c == joints_id)
    sent = live["sent"][JOINTS_TOPIC]  # from its subscription on (no other sink: no trace)
    assert 0.5 * steps < sent <= steps + 1, live["sent"]
    assert received < sent, (received, live["sent"])
    stalled.close()


def test_a_fast_eval_reaches_the_client_at_the_display_rate_and_the_mcap_at_every_step(cell):
    steps = 10_000  # ~2 s of a fast (virtual-clock) eval: 5000 sim-seconds per wall second
    port = free_port()
    thread, out = in_thread(lambda: (time.perf_counter(), cell.eval_policy(
        "so101", max_steps=steps, progress=False, bag=False, live=port), time.perf_counter()))  # fmt: skip
    client = FoxgloveClient(port, deadline_s=60.0)
    channels = client.wait_for(set(SCHEMAS), deadline_s=30.0)
    client.subscribe([channels[t]["id"] for t in SCHEMAS])
    client.read_until_closed(60.0)
    thread.join(30.0)
    start, result, stop = out["result"]
    report = envelope_json(result)
    live = report["episodes"][0]["live"]
    # the loop's side kept the latest step of each sampled channel, no backlog, lost nothing
    assert live["dropped"] == 0 and live["coalesced"] > steps, live
    assert live["handled"] + live["coalesced"] == live["events"]
    sent = live["sent"][JOINTS_TOPIC]
    hz = 1 / max(1 / 60.0, 0.02)  # the default display_hz, bounded by the sender's period
    assert 1 <= sent <= hz * (stop - start) + 5, (sent, stop - start)
    joints_id = channels[JOINTS_TOPIC]["id"]
    got = [(t, p) for c, t, p in client.messages if c == joints_id]
    assert len(got) == sent  # a client that keeps up gets every sample sent
    # the MCAP holds every step, the same messages (bytes) the client got among them, and
    # the episode's last step was sent: the latest sample, not one a period old
    from mcap.reader import make_reader

    with open(live["mcap_path"], "rb") as f:
        recorded = {m.log_time: m.data for _, c, m in make_reader(f).iter_messages()
                    if c.topic == JOINTS_TOPIC}  # fmt: skip
    assert len(recorded) == live["recorded"][JOINTS_TOPIC] == steps + 1
    assert all(recorded.get(t) == p for t, p in got), "a client message not in the MCAP"
    assert got[-1][0] == max(recorded)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("yes", "must be True"),
        (-1, "[0, 65535]"),
        (70000, "[0, 65535]"),
        ({"port": 0, "colour": 1}, "unknown keys ['colour']"),
        ({"port": 0, "mcap": "false"}, "['mcap']='false': must be a boolean"),
        ({"port": 0, "image_hz": 0}, "must be a finite number > 0"),
        ({"port": 0, "display_hz": -5}, "['display_hz']=-5: must be a finite number > 0"),
    ],
)
def test_refused_live_values_name_the_parameter(value, needle):
    with pytest.raises(ValueError, match="live") as err:
        live_option("live", value)
    assert needle in str(err.value)


def test_a_taken_port_refuses_the_call_before_anything_starts(cell):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = cell.eval_policy("so101", max_steps=5, progress=False, live=port)
    assert out["status"] == "error"
    text = out["content"][0]["text"]
    assert f"live={port}" in text and "cannot listen" in text, text
    assert cell.list_policies_running()["status"] == "success"


@pytest.mark.parametrize("columns", [(), ("velocity",), ("velocity", "effort"), ("effort",)])
@pytest.mark.parametrize("ns", [0, 5, 10**9, 1_764_000_000_123_456_789])
def test_packed_joint_states_are_the_sdks_own_bytes(columns, ns):
    from foxglove.messages import JointState, JointStates, Timestamp
    from robokernel_ros.live.proto import JointStatesEncoder

    names = ("shoulder_pan", "elbow_flex", "gripper")
    cols = {
        "position": [0.0, -1.25, 3.5],
        "velocity": [1e-9, 0.0, -2.0],
        "effort": [4.0, -0.5, 0.0],
    }
    encode = JointStatesEncoder(names, velocity="velocity" in columns, effort="effort" in columns)
    packed = encode(ns, cols["position"], cols["velocity"], cols["effort"])
    joints = [
        JointState(
            name=n, position=cols["position"][i], **{c: cols[c][i] for c in columns}
        )  # fmt: skip
        for i, n in enumerate(names)
    ]
    assert packed == JointStates(timestamp=Timestamp(*divmod(ns, 10**9)), joints=joints).encode()


def test_frames_holds_interventions_and_operator_actions_reach_their_channels(tmp_path):
    """The translation on its own (no render: MuJoCo cameras are slow on these machines):
    events into an MCAP sink of the channels' Context, read back with the mcap reader."""
    import io as _io

    import foxglove
    import numpy as np
    from mcap.reader import make_reader
    from PIL import Image
    from robokernel_ros.kernel.events import Event
    from robokernel_ros.live.channels import LiveChannels, camera_topic

    ctx = foxglove.Context()
    channels = LiveChannels(ctx, image_hz=10.0)
    path = tmp_path / "t.mcap"
    writer = foxglove.open_mcap(path, context=ctx)
    frame = np.zeros((24, 32, 3), np.uint8)
    frame[:, :16] = 255
    t0 = 1_764_000_000_000_000_000
    events = [Event("episode.start", 0, {"episode": 0, "instruction": "pick", "seed": 1})]
    for step in range(50):  # 1 s at 50 Hz: 10 frames at image_hz=10
        events.append(
            Event("observation", step, {"obs": {}, "images": {"wrist": frame}}, t=step / 50)
        )
        events.append(
            Event("action", step, {"action": {"a": 0.0}, "hold": 10 <= step < 13}, t=step / 50)
        )
    events += [
        Event(
            "safety.intervention", 20, {"guard": "limit", "key": "a", "value": 9.0, "limit": 1.0}
        ),
        Event("operator.stop", 30, {}),
        Event(
            "episode.end", 50, {"outcome": "stopped", "status": "stopped", "steps": 50, "holds": 3}
        ),
    ]
    for event in events:
        channels.publish(event, t0 + round(event.t * 1e9))
    writer.close()
    with open(path, "rb") as f:
        messages = [(c.topic, s.name, m.data) for s, c, m in make_reader(f).iter_messages()]
    frames = [d for t, _, d in messages if t == camera_topic("wrist")]
    assert len(frames) == 10 and {s for t, s, _ in messages if t == camera_topic("wrist")} == {
        "foxglove.CompressedImage"
    }
    decode = proto_decoder_for("foxglove.CompressedImage")
    image = np.asarray(Image.open(_io.BytesIO(decode(frames[0]).data)))
    assert image.shape == (24, 32, 3) and image[:, :12].mean() > 200 and image[:, 20:].mean() < 50
    log = proto_decoder_for("foxglove.Log")
    lines = [log(d).message for t, _, d in messages if t == LOG_TOPIC]
    assert any("step 10: hold" in x for x in lines) and any(
        "resumed after 3 hold step(s)" in x for x in lines
    )
    assert any("shield limit on a: 9.0 -> limit 1.0" in x for x in lines)
    assert any("operator.stop" in x for x in lines) and any(
        "episode 0 ended: stopped" in x for x in lines
    )


def proto_decoder_for(schema_name: str):
    """A decoder built from the SDK's own schema of a foxglove message type."""
    import base64

    import foxglove.messages as fm

    schema = getattr(fm, schema_name.split(".")[1]).get_schema()
    return proto_decoder(
        {"schema": base64.b64encode(schema.data).decode(), "schemaName": schema_name}
    )


def test_the_cli_live_flag_serves_the_eval_and_refuses_a_non_port(capsys):
    from robokernel_ros.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--robot", "so101", "--live", "99999"])
    assert exit_.value.code == 2
    assert "argument --live: '99999': must be a TCP port" in capsys.readouterr().err
    assert (
        main(
            ["eval", "--robot", "so101", "--max-steps", "5", "--no-trace", "--json", "--live", "0"]
        )
        == 0
    )
    out = capsys.readouterr()
    live = json.loads(out.out)["episodes"][0]["live"]
    assert "live view: a free port" in out.err
    assert (
        live["port"] > 0 and live["events"] > 0 and live["mcap_path"] is None
    )  # no client, no trace


def test_the_recorder_follows_a_growing_trace_and_shows_its_saved_frames(tmp_path):
    """live.recorder's EpisodeMcap on a run directory as the trace writer leaves it: lines
    flushed in pieces (a partial last line waits), frames as images/<camera>/*.npy paths
    (one not saved yet holds its observation back until it is)."""
    import numpy as np
    import orjson
    from mcap.reader import make_reader
    from robokernel_ros.live.recorder import EpisodeMcap

    def line(seq, kind, step, data):
        return orjson.dumps({"seq": seq, "kind": kind, "step": step, "t": step / 50,
                             "wall": step / 5000, "data": data}) + b"\n"  # fmt: skip

    joints = {"shoulder_pan": 0.1, "gripper": 0.2}
    lines = [line(0, "episode.start", 0, {"episode": 0, "run_id": "r", "seed": 0})]
    for step in range(3):
        images = {"wrist": f"images/wrist/{step:06d}.npy"} if step == 1 else None
        obs = {"obs": {"joint_positions": joints}, **({"images": images} if images else {})}
        lines += [line(1 + 3 * step, "observation", step, obs),
                  line(2 + 3 * step, "chunk.request", step, {"step": step}),
                  line(3 + 3 * step, "action", step, {"action": {"a": 0.0}})]  # fmt: skip
    text = b"".join(lines)
    (tmp_path / "events.jsonl").write_bytes(text[: len(text) // 2])  # half flushed
    base = 1_764_000_000_000_000_000
    mcap = EpisodeMcap(tmp_path, image_hz=10.0, base_ns=base, progress={"n_steps": 3})
    mcap.follow()
    first = mcap.events
    assert 1 <= first < 7  # complete lines only; the frame of step 1 is not saved yet
    (tmp_path / "events.jsonl").write_bytes(text)
    mcap.follow()
    assert mcap.events == first, "an observation went ahead of its unsaved frame"
    (tmp_path / "images" / "wrist").mkdir(parents=True)
    np.save(tmp_path / "images/wrist/000001.npy", np.full((8, 8, 3), 200, np.uint8))
    stats = mcap.close()
    assert stats["events"] == 7  # every line but the chunk requests
    assert stats["sent"]["/robokernel/joint_states"] == 3 and stats["frames"] == 1
    with open(tmp_path / "foxglove.mcap", "rb") as f:
        messages = [(c.topic, m.log_time) for _, c, m in make_reader(f).iter_messages()]
    assert ("/robokernel/camera/wrist", base + round(1e9 / 50)) in messages
    assert [t for c, t in messages if c == JOINTS_TOPIC] == [
        base + round(s * 1e9 / 50) for s in range(3)
    ]
