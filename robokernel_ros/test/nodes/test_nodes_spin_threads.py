"""The node tests' own helpers keep their promises: a spin thread that dies fails the test
(SpunNode, the `ros` fixture's RosClient), entities are destroyed on the spin thread, and
the `processes` fixture removes the Fast DDS shared-memory files of the processes it
killed and no one else's."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from conftest import RosClient  # noqa: E402
from fastdds_files import SHM_PROFILE_ENV  # noqa: E402
from spun_node import SpunNode  # noqa: E402


def _raise_in_callback(spun_node) -> None:
    def boom() -> None:
        raise RuntimeError("a callback failed")

    spun_node.node.create_timer(0.01, boom)


def test_a_spun_node_whose_callback_raises_fails_its_check_and_its_close() -> None:
    spun = SpunNode("dies_in_a_callback")
    try:
        _raise_in_callback(spun)
        deadline = time.monotonic() + 10
        while spun.spinner.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(AssertionError, match="dies_in_a_callback: its spin thread died: "
                           "RuntimeError: a callback failed"):  # fmt: skip
            spun.check()
    finally:
        with pytest.raises(AssertionError, match="spin thread died"):
            spun.close()
    # the node and its context are gone all the same: the module's UDP-socket check
    # (test/conftest.py) fails a participant left alive


def test_run_calls_on_the_spin_thread_and_destroys_there() -> None:
    spun = SpunNode("runs_on_its_thread")
    try:
        ticks: list[int] = []
        timer = spun.run(lambda: spun.node.create_timer(0.01, lambda: ticks.append(1)))
        assert spun.run(threading.current_thread).name == "spin:runs_on_its_thread"
        deadline = time.monotonic() + 10
        while not ticks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ticks, "the timer made on the spin thread never fired"
        assert spun.run(lambda: spun.node.destroy_timer(timer)) is True
        with pytest.raises(ValueError, match="raised on the spin thread"):
            spun.run(lambda: (_ for _ in ()).throw(ValueError("raised on the spin thread")))
        spun.check()  # an exception of a run() call is the caller's, not the thread's death
    finally:
        spun.close()


def test_the_ros_fixture_fails_at_once_when_its_spin_thread_dies() -> None:
    client = RosClient("ros_fixture_dies")
    try:
        client.spinner.run(lambda: _raise_in_callback(client))
        started = time.monotonic()
        with pytest.raises(AssertionError, match="ros_fixture_dies: its spin thread died"):
            client.wait_until(lambda: False, timeout_s=30)
        assert time.monotonic() - started < 10, "it waited out its timeout"
    finally:
        with pytest.raises(AssertionError, match="spin thread died"):
            client.close()


_NODE = """
import sys, time, rclpy
rclpy.init()
node = rclpy.create_node("shm_holder")
node.create_publisher(__import__("std_msgs.msg").msg.String, "/shm_probe", 10)
print("up", flush=True)
time.sleep(600)
"""


def test_processes_removes_the_segments_of_the_processes_it_killed_and_no_others(
    processes,
) -> None:
    stranger = Path(f"/dev/shm/fastdds_robokernel_test_stranger_{os.getpid()}")
    stranger.write_bytes(b"not ours: made by no process of the group")
    try:
        proc = processes.start("shm_holder", [sys.executable, "-c", _NODE], env=SHM_PROFILE_ENV)
        deadline = time.monotonic() + 30
        while not (held := processes.fastdds_files(proc)) and time.monotonic() < deadline:
            assert proc.poll() is None, processes.log(proc)
            time.sleep(0.05)
        segments = {p for p in held if "port" not in Path(p).name}
        assert segments, f"the node holds no Fast DDS segment of its own: {held}"
        processes.kill(proc, signal.SIGKILL)
        assert all(Path(p).exists() for p in segments), "SIGKILL left no segment behind"
        processes.close()  # what the fixture's teardown does (a second close does nothing new)
        assert not [p for p in segments if Path(p).exists()], "the killed node's segments stay"
        assert stranger.exists(), "a segment no process of the group held was removed"
    finally:
        stranger.unlink(missing_ok=True)
