"""run_node's `main_work`: the work runs on the process's main thread while the executor
spins on another (the policy server infers there: ros.policy_host), Ctrl-C interrupts it
and ends the process cleanly, and an rclpy shutdown (SIGTERM) stops it through the
node's `stop_hosting`. Real processes, real rclpy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("rclpy")

PROBE = """
import sys, threading
from rclpy.node import Node
from robokernel_ros.ros.node import run_node

def say(line):  # one write per line: print's separate writes of each word interleave
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

class Probe(Node):
    def __init__(self):
        super().__init__("main_work_probe")
        self.stopped = threading.Event()
        self.create_timer(0.05, lambda: say("spun " + threading.current_thread().name))

    def stop_hosting(self):
        self.stopped.set()

def work(node):
    say("work on " + ("main" if threading.current_thread() is threading.main_thread() else "other"))
    node.stopped.wait()
    say("work stopped")

sys.exit(run_node(Probe, args=[], main_work=work))
"""


def _start() -> subprocess.Popen:
    from worker_domains import worker_domain

    run = int(os.environ.get("ROS_DOMAIN_ID", "0"))
    env = {**os.environ, "ROS_DOMAIN_ID": str(worker_domain(exclude=[run]))}
    return subprocess.Popen(
        [sys.executable, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True, env=env,
    )  # fmt: skip


def _lines_until(proc: subprocess.Popen, prefix: str) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"no line starting {prefix!r}: {lines}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_main_work_runs_on_the_main_thread_and_a_signal_ends_the_process(sig) -> None:
    proc = _start()
    try:
        lines = _lines_until(proc, "work on")
        assert lines[-1] == "work on main", lines
        lines += _lines_until(proc, "spun")  # the executor spins meanwhile, on its own thread
        assert lines[-1] == "spun executor", lines
        t0 = time.monotonic()
        os.killpg(proc.pid, sig)
        rest, _ = proc.communicate(timeout=15)
        assert proc.returncode == 0, (lines, rest)
        assert time.monotonic() - t0 < 5.0, rest
        assert "Traceback" not in rest, rest
        if sig == signal.SIGTERM:  # rclpy shut down: the spinner stopped the main work
            assert "work stopped" in rest, rest
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_sigusr1_dumps_a_nodes_stacks_into_its_log_and_it_goes_on(processes) -> None:
    """What a failed node test reports of its processes (conftest.ProcessGroup.dump_stacks):
    a node's stacks, taken without stopping it; a process with no SIGUSR1 handler is
    not signalled (SIGUSR1 would end it)."""
    from worker_domains import worker_domain

    env = {"ROS_DOMAIN_ID": str(worker_domain(exclude=[int(os.environ["ROS_DOMAIN_ID"])]))}
    node = processes.start("probe", [sys.executable, "-c", PROBE], env=env)
    bystander = processes.start("sleeper", ["sleep", "60"])
    deadline = time.monotonic() + 30
    while "work on main" not in processes.log(node):
        assert node.poll() is None and time.monotonic() < deadline, processes.log(node)
        time.sleep(0.1)
    report = processes.dump_stacks()
    assert node.poll() is None and bystander.poll() is None, report
    log = processes.log(node)
    assert "most recent call first" in log, log
    assert "in work\n" in log or ", in work" in log, log  # the main thread, in its work
    assert "probe.log (running" in report and "sleeper.log (running" in report, report
