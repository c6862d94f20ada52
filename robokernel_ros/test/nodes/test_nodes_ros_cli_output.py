"""`robokernel ros` output (issue #36, item 12): a cancelled call prints its report on
stdout, as a completed one does (the error line on stderr), and exits 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from native_stacks import blocked_threads  # noqa: E402
from robokernel_ros.ros.client import WorkcellClient  # noqa: E402

NS = "/rk_cli_output"
PACED = '{"fast_mode": false, "control_frequency": 50.0}'


def test_a_cancelled_call_prints_its_report_on_stdout_and_exits_130(sim_runner, processes):
    runner, trace_dir = sim_runner(NS)
    with WorkcellClient(NS, server_timeout_s=60.0) as cell:
        assert cell.list_policies_running().ok, processes.log(runner)
    started = (signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, []))
    cli = subprocess.Popen(
        [sys.executable, "-m", "robokernel_ros.cli", "ros", "eval_policy", "robot_name=arm",
         "n_episodes=3", "max_steps=5000", f"extra={PACED}", "--namespace", NS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )  # fmt: skip
    try:
        # the first episode is running once its run directory holds events
        deadline = time.monotonic() + 60
        while not any(trace_dir.glob("*/events.jsonl")):
            assert time.monotonic() < deadline and cli.poll() is None, processes.log(runner)
            time.sleep(0.1)
        cli.send_signal(signal.SIGINT)
        try:
            out, err = cli.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            masks = _signal_masks(cli.pid)  # which of its threads block or ignore SIGINT
            native = blocked_threads(cli.pid)  # its DDS threads, which have no Python frames
            cli.send_signal(signal.SIGABRT)  # its threads' stacks, on stderr
            out, err = cli.communicate(timeout=10)
            raise AssertionError(
                f"no exit within 60 s of SIGINT (this test's thread at its start: {started}); "
                f"its threads' signal masks:\n{masks}\nits native threads waiting on a mutex:"
                f"\n{native}\nits stacks:\n{err}"
            ) from None
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(timeout=10)
    assert cli.returncode == 130, (out, err)
    assert "cancelled" in err, err
    # the report of what ran: on stdout, as for a completed call
    assert "stopped_reason" in out or "cancelled" in out, (out, err)
    assert "Traceback" not in err, err


def _signal_masks(pid: int) -> str:
    """Each thread's name and pending/blocked/ignored signal masks (/proc)."""
    lines = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue
        keys = ("Name", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
        lines.append(" ".join(f"{k}={fields.get(k, '?').strip()}" for k in keys))
    return "\n".join(lines)
