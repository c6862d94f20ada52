"""A writer killed with SIGKILL mid-episode leaves a bag readable up to its last flush."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.recording import load_bag_trace, recover_bag
from robokernel_ros.recording.recover import main as recover_main
from rosbags.rosbag2 import Reader

WRITER = r"""
import sys, time
from robokernel_ros.recording import BagMirror
from robokernel_ros.kernel.events import Event
path, storage = sys.argv[1], sys.argv[2]
mirror = BagMirror(path, storage=storage, flush_interval_s=3600)  # flushes only when asked
seq = 0
def pub(kind, step, data):
    global seq
    mirror.write(Event(kind=kind, step=step, data=data, t=step * 0.05, seq=seq, run_id="killed-run"))
    seq += 1
pub("episode.start", 0, {"run_id": "killed-run", "env": {"action_keys": ["a", "b"], "control_hz": 20.0}})
step = 0
while True:
    pub("observation", step, {"obs": {"joint_positions": {"a": step * 0.1, "b": 0.0}}})
    pub("action", step, {"action": {"a": step * 0.1, "b": 0.0}, "hold": False, "reward": 0.0})
    step += 1
    if step % 50 == 0:
        mirror.flush()
        print(f"flushed {seq} {step}", flush=True)
        if step >= 400:
            # written but never flushed: must not appear in the recovered bag
            for _ in range(30):
                pub("action", step, {"action": {"a": -1.0, "b": -1.0}, "hold": True, "reward": 0.0})
            print("unflushed", flush=True)
            time.sleep(600)
"""


def _wait_for(proc, processes, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = processes.log(proc)
        if text in log:
            return log
        if proc.poll() is not None:
            pytest.fail(f"writer exited early ({proc.returncode}):\n{log}")
        time.sleep(0.05)
    pytest.fail(f"writer never printed {text!r}:\n{processes.log(proc)}")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_sigkill_mid_episode_leaves_a_readable_bag(processes, tmp_path: Path, storage: str):
    import sys

    bag = tmp_path / "run" / "bag"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = processes.start("writer", [sys.executable, str(script), str(bag), storage])
    log = _wait_for(proc, processes, "unflushed")
    processes.kill(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    flushed_seq = max(
        int(line.split()[1]) for line in log.splitlines() if line.startswith("flushed")
    )
    assert flushed_seq == 1 + 2 * 400
    assert not (bag / "metadata.yaml").exists(), "the writer never closed the bag"

    report = recover_bag(bag)
    assert not report.complete and not report.episode_ended
    assert report.events == flushed_seq, report.summary()
    assert (report.first_seq, report.last_seq) == (0, flushed_seq - 1)
    assert report.topics["/robokernel/events"] == flushed_seq
    assert report.topics["/robokernel/joint_states"] == 400
    assert report.topics["/robokernel/action"] == 400  # none of the 30 unflushed holds
    assert report.last_kind == "action" and report.last_step == 399
    assert report.notes == []

    # The trace loads from the unclosed bag, marked truncated.
    trace = load_trace(bag)
    assert trace.truncated and trace.meta["run_id"] == "killed-run"
    assert [e.seq for e in trace.events] == list(range(flushed_seq))
    assert not any(e.data.get("hold") for e in trace.of_kind("action"))

    # Repair: a complete bag every rosbag2 reader opens.
    out = tmp_path / "repaired"
    assert recover_main([str(bag), "--repair", str(out), "--json"]) == 0
    with Reader(out) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert counts["/robokernel/events"] == flushed_seq
    repaired = load_bag_trace(out)
    assert not repaired.truncated and repaired.events == trace.events
    assert recover_bag(out).complete


def test_recover_cli_reports_and_refuses(tmp_path: Path, capsys, record_episode):
    run_dir, published = record_episode()
    assert recover_main([str(run_dir / "bag"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["complete"] and report["episode_ended"] and report["events"] == len(published)
    assert recover_main([str(tmp_path / "nothing")]) == 1
    assert "not a rosbag2 folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="repair=.*already exists"):
        recover_bag(run_dir / "bag", repair=run_dir)


def test_a_bag_cut_at_any_byte_recovers_a_prefix_of_the_episode(tmp_path: Path):
    """Cut the file anywhere (a chunk half written): what is read is the whole chunks and the
    complete messages of the chunk the cut goes through, in order (a prefix)."""
    from robokernel_ros.kernel.events import Event
    from robokernel_ros.recording import BagMirror

    bag = tmp_path / "bag"
    mirror = BagMirror(bag, flush_interval_s=3600)
    for seq in range(300):
        mirror.write(
            Event(
                kind="action",
                step=seq,
                data={"action": {"a": float(seq)}},
                t=seq * 0.1,
                seq=seq,
                run_id="r",
            )
        )
        if seq % 20 == 19:
            mirror.flush()
    mirror.close()
    (mcap_file,) = bag.glob("*.mcap")
    data = mcap_file.read_bytes()
    previous = -1
    for fraction in (0.05, 0.2, 0.37, 0.5, 0.73, 0.9):
        cut = tmp_path / f"cut{fraction}"
        cut.mkdir()
        (cut / mcap_file.name).write_bytes(data[: int(len(data) * fraction)])
        report = recover_bag(cut)
        assert not report.complete
        assert report.read_bytes <= report.file_bytes
        if "chunk" in report.stopped:
            assert "complete message(s) of it salvaged" in report.stopped
        assert report.events >= previous
        previous = report.events
        if report.events:
            assert (report.first_seq, report.last_seq) == (0, report.events - 1)
    assert previous > 0
