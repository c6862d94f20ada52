"""The rollout's bag is written by a pooled writer process (recording.writer_process): the same
bag as the in-process mirror, reused children, and nothing lost when either side dies."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.recording import load_bag_trace, mirror_trace, recover_bag
from robokernel_ros.recording import writer_process as wp
from robokernel_ros.rollout import SimWorkcell, envelope_json
from rosbags.rosbag2 import Reader


def _counts(bag: Path) -> dict[str, int]:
    with Reader(bag) as reader:
        return {c.topic: c.msgcount for c in reader.connections}


def test_the_process_written_bag_is_the_in_process_mirror_of_the_run(tmp_path: Path):
    cell = SimWorkcell(trace_dir=tmp_path / "runs")
    cell.add_robot("arm", "so101")
    out = cell.eval_policy("arm", n_episodes=2, max_steps=60, seed=3, progress=False)
    report = envelope_json(out)
    assert out["status"] == "success", out
    for episode in report["episodes"]:
        bag, run_dir = Path(episode["bag_path"]), Path(episode["trace_path"])
        assert bag == run_dir / "bag" and (bag / "metadata.yaml").is_file()
        from_process = load_bag_trace(bag)
        from_run_dir = load_trace(run_dir)
        assert not from_process.truncated
        assert from_process.events == from_run_dir.events
        # topic for topic what the in-process mirror writes from the same run directory
        inline = mirror_trace(run_dir, tmp_path / f"inline-{run_dir.name}")
        assert _counts(bag) == _counts(inline)
        assert _counts(bag)["/robokernel/joint_states"] == 61  # 60 steps + the final one
    cell.close()


def test_children_are_reused_across_episodes_and_calls(tmp_path: Path):
    wp.shutdown_pool()
    first = wp.ProcessBagMirror(tmp_path / "a")
    pid = first._child.proc.pid
    first.close()
    second = wp.ProcessBagMirror(tmp_path / "b")
    assert second._child.proc.pid == pid  # the idle child, not a new start
    third = wp.ProcessBagMirror(tmp_path / "c")  # a parallel episode: a child of its own
    assert third._child.proc.pid != pid
    second.close()
    third.close()
    wp.shutdown_pool()
    assert not wp._idle


def test_a_dead_writer_ends_the_mirror_not_the_episode(tmp_path: Path, caplog):
    wp.shutdown_pool()
    cell = SimWorkcell(trace_dir=tmp_path / "runs")
    cell.add_robot("arm", "so101")
    killed: list[int] = []

    def kill_the_writer(event):  # an observer: every kernel event of the episode
        if event.kind == "action" and event.step == 100 and not killed:
            killed.extend(_writer_pids())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    out = cell.run_policy(
        "arm", policy_provider="mock", n_steps=400, seed=0, observer=kill_the_writer
    )
    assert killed, "no writer process was running during the episode"
    assert out["status"] == "success", out  # the episode went on without its bag
    result = envelope_json(out)
    assert result["steps_advanced"] == 400
    assert "bag mirror" in caplog.text and "stopped" in caplog.text
    # the run directory is complete; the bag holds what the child flushed before it died
    assert len(load_trace(result["trace_path"]).of_kind("action")) == 400
    cell.close()


def _writer_pids() -> list[int]:
    me = os.getpid()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"robokernel_ros.recording.writer_process" in cmdline:
            pids.append(int(entry.name))
    return pids


EPISODE = r"""
import sys, time
from robokernel_ros.rollout import SimWorkcell
cell = SimWorkcell(trace_dir=sys.argv[1])
cell.add_robot("arm", "so101")
seen = {}
def progress(event):
    # "step 300" once step 300's events are surely sent: the mirror sends every event
    # within send_interval_s (0.1 s) while the loop runs, so 0.3 s of further steps.
    if event.kind == "action" and event.step == 300:
        seen["t"] = time.monotonic()
    elif event.kind == "action" and "t" in seen and time.monotonic() - seen["t"] >= 0.3:
        del seen["t"]
        print("step 300", flush=True)
cell.run_policy("arm", policy_provider="mock", n_steps=10**7, seed=0, observer=progress)
"""


def test_sigkill_of_the_episode_process_still_closes_its_bag(processes, tmp_path: Path):
    """The child reads the pipe to its end: the bag gets its metadata.yaml and holds every
    event the killed process had sent (at most send_interval_s old)."""
    script = tmp_path / "episode.py"
    script.write_text(EPISODE)
    runs = tmp_path / "runs"
    proc = processes.start("episode", [sys.executable, str(script), str(runs)])
    deadline = time.monotonic() + 120
    while "step 300" not in processes.log(proc):
        assert proc.poll() is None, processes.log(proc)
        assert time.monotonic() < deadline, processes.log(proc)
        time.sleep(0.05)
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    deadline = time.monotonic() + 30
    while (run_dir / "events.jsonl").stat().st_size == 0:  # its first flush (every 0.5 s)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the episode's process only, not its group
    proc.wait(timeout=10)
    bag = run_dir / "bag"
    deadline = time.monotonic() + 30
    while not (bag / "metadata.yaml").exists():  # the orphaned child finishing
        assert time.monotonic() < deadline, "the writer never closed the bag"
        time.sleep(0.05)
    processes.kill(proc)  # the rest of its process group (the writer exits by itself)
    report = recover_bag(bag)
    assert report.complete and not report.episode_ended, report.summary()
    bag_trace = load_trace(bag)
    actions = bag_trace.of_kind("action")
    assert len(actions) >= 300
    # the same events as the run directory as far as both got (each lost its own unsent
    # tail: the run directory its file buffer, the bag the last send_interval_s), in order
    run_events = load_trace(run_dir).events
    common = min(len(run_events), len(bag_trace.events))
    assert common > 0 and bag_trace.events[:common] == run_events[:common]
    assert [e.seq for e in bag_trace.events] == list(range(len(bag_trace.events)))


@pytest.mark.parametrize("root", ["", 3])
def test_bad_roots_are_refused(root):
    with pytest.raises(ValueError, match="root="):
        wp.ProcessBagMirror(root)


def test_bad_storage_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="storage='parquet': must be one of mcap, sqlite3"):
        wp.ProcessBagMirror(tmp_path, storage="parquet")


def test_mirror_options_must_travel_as_json(tmp_path: Path):
    with pytest.raises(ValueError, match="mirror_kwargs=.*must be JSON values"):
        wp.ProcessBagMirror(tmp_path, image_loader=print)


def test_mirror_options_reach_the_writer(tmp_path: Path):
    """sqlite3 storage and another topic prefix, through the child."""
    from robokernel_ros.kernel.events import Event, EventBus

    mirror = wp.ProcessBagMirror(tmp_path, storage="sqlite3", prefix="/cell2")
    bus = EventBus()
    mirror.attach(bus)
    bus.publish(Event("episode.start", 0, {"run_id": "r1"}, 0.0, 0.0, 0, "r1"))
    bus.publish(Event("action", 0, {"action": {"a": 1.0}, "hold": False}, 0.02, 0.0, 1, "r1"))
    bus.publish(Event("episode.end", 1, {"outcome": "truncated"}, 0.02, 0.0, 2, "r1"))
    mirror.close()
    assert mirror.last_bag_path == tmp_path / "r1" / "bag"
    assert list(mirror.last_bag_path.glob("*.db3"))
    assert _counts(mirror.last_bag_path) == {"/cell2/events": 3, "/cell2/action": 1}


def test_a_writer_that_is_busy_does_not_hold_up_the_episode(tmp_path: Path):
    """Camera frames sent while the child cannot read (stopped here; busy opening a bag or
    starting in a workcell run, where it held the first step up 0.2-0.3 s) are queued: the
    caller returns at once, and the bag gets every frame once the child reads again."""
    import numpy as np
    from robokernel_ros.kernel.events import Event
    from robokernel_ros.recording.mirror import camera_topic

    wp.shutdown_pool()
    mirror = wp.ProcessBagMirror(tmp_path / "runs")
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    pid = mirror._child.proc.pid
    frame = np.zeros((480, 640, 3), dtype=np.uint8)
    mirror(Event("episode.start", 0, {"run_id": "r1"}, seq=0, run_id="r1"))
    os.kill(pid, signal.SIGSTOP)
    # resumed after 2 s whatever happens: a send that waits for the child fails, not hangs
    resume = threading.Timer(2.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        longest = 0.0
        for step in range(8):  # 8 x 2 frames of 0.9 MB: 15 MB, many times the pipe's 1 MiB
            data = {
                "obs": {"joint_positions": {"a": 0.0}},
                "images": {"front": frame, "wrist": frame},
            }
            started = time.monotonic()
            mirror(Event("observation", step, data, 0.02 * step, 0.02 * step, 1 + step, "r1"))
            longest = max(longest, time.monotonic() - started)
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
    assert longest < 0.1, f"a send waited {longest:.3f} s for the stopped writer"
    mirror(Event("episode.end", 8, {"outcome": "truncated"}, 0.16, 0.16, 9, "r1"))
    mirror.close()
    counts = _counts(tmp_path / "runs" / "r1" / "bag")
    assert counts[camera_topic("front")] == 8 and counts[camera_topic("wrist")] == 8
    wp.shutdown_pool()


def test_camera_frames_reach_the_bag_pixel_for_pixel(tmp_path: Path):
    """Frames travel to the child out of band (pickle protocol 5 buffers, one B frame
    each): every frame read back from the bag equals what was sent, also a strided view
    (pickled in band), a mono8 frame, and an array the env overwrites right after (sent
    while the child is stopped, so the frames wait in this process's queue)."""
    import numpy as np
    from robokernel_ros.kernel.events import Event

    rng = np.random.default_rng(7)
    mirror = wp.ProcessBagMirror(tmp_path / "runs")
    mirror(Event("episode.start", 0, {"run_id": "r1"}, seq=0, run_id="r1"))
    pid = mirror._child.proc.pid
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(5.0, os.kill, (pid, signal.SIGCONT))
    resume.start()
    reused = np.empty((480, 640, 3), dtype=np.uint8)  # one buffer, refilled every step
    sent: dict[str, list[np.ndarray]] = {"front": [], "side": [], "depth": []}
    try:
        for step in range(6):
            reused[:] = rng.integers(0, 256, reused.shape, dtype=np.uint8)
            wide = rng.integers(0, 256, (480, 1280, 3), dtype=np.uint8)
            depth = rng.integers(0, 256, (480, 640), dtype=np.uint8)
            images = {"front": reused, "side": wide[:, ::2], "depth": depth}
            for camera, image in images.items():
                sent[camera].append(np.array(image))
            data = {"obs": {"joint_positions": {"a": 0.0}}, "images": images}
            mirror(Event("observation", step, data, 0.02 * step, 0.02 * step, 1 + step, "r1"))
            reused[:] = 0  # the env reuses its buffer once the step is over
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
    mirror(Event("episode.end", 6, {"outcome": "truncated"}, 0.12, 0.12, 7, "r1"))
    mirror.close()
    trace = load_bag_trace(tmp_path / "runs" / "r1" / "bag")
    for camera, frames in sent.items():
        got = list(trace.iter_frames(camera))
        assert [step for step, _ in got] == list(range(6))
        for (_, frame), expected in zip(got, frames, strict=True):
            assert frame.reshape(expected.shape).tobytes() == expected.tobytes(), camera
