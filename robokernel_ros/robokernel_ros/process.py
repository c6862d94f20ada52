"""Child processes that never outlive whoever started them."""

from __future__ import annotations

import ctypes
import signal
import sys

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
