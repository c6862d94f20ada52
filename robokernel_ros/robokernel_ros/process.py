"""Child processes that never outlive whoever started them."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for subprocess.Popen: the child gets SIGKILL when its parent dies.

    A demo or test run that crashes, or is ended by a timeout, would otherwise leave
    its nodes running (reparented to init), still on the run's ROS_DOMAIN_ID. Linux
    only; elsewhere a no-op. The signal follows the *thread* that started the child,
    so start long-lived children from a thread that lives as long as they should.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def stop_process_groups(procs: Iterable[subprocess.Popen], grace_s: float = 8.0) -> list[int]:
    """SIGINT the process group of every child started with start_new_session=True (a
    node's shutdown path runs), SIGKILL what is left after `grace_s`; returns the pids
    that had to be killed."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    killed = []
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=5)
            killed.append(p.pid)
    return killed
