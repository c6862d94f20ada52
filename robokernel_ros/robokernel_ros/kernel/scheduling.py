"""The OS scheduling of a wall-clock control loop's thread: real-time priority.

A control loop paced against absolute deadlines is only as punctual as the scheduler
lets it be: at normal priority its thread waits behind every other runnable process of
the machine when its deadline comes (on a loaded 2-core machine, 1-5 ms late now and
then: bench/workcell_timing.py). `realtime_priority(p)` runs the calling thread under
SCHED_FIFO at priority p for the duration of a `with` block, as ros2_control's
controller_manager runs its update loop (its `thread_priority`, 50 by default), and puts
the thread's previous policy back afterwards.

SCHED_RESET_ON_FORK goes with it: a thread or process the loop starts (a trace's image
writer, a policy's worker) runs at normal priority, so a policy's inference (torch's
OpenMP team inherits its creator's policy) never starves the safety shield and the
robot's processes. Where the process may not use real-time scheduling (no CAP_SYS_NICE,
no rtprio in limits.conf), the loop runs at normal priority and a warning says so once
per process. Linux only; elsewhere a no-op with the same warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from .spec import is_int

_log = logging.getLogger(__name__)

MAX_PRIORITY = 99  # SCHED_FIFO's range on Linux is 1..99
_warned = False


def check_priority(name: str, priority: object) -> int:
    """`priority` as an int in 0..99 (0: the normal scheduler); else ValueError naming `name`."""
    if not (is_int(priority) and 0 <= priority <= MAX_PRIORITY):  # type: ignore[operator]
        raise ValueError(
            f"{name}={priority!r}: must be an integer in 0..{MAX_PRIORITY} "
            "(a SCHED_FIFO priority; 0: the normal scheduler)"
        )
    return int(priority)  # type: ignore[call-overload]


@contextlib.contextmanager
def realtime_priority(priority: int) -> Iterator[bool]:
    """Run the calling thread under SCHED_FIFO at `priority` inside the block (0: leave it
    as it is). Yields whether it runs at that priority; never raises for a refusal."""
    if priority <= 0:
        yield False
        return
    fifo = getattr(os, "SCHED_FIFO", None)
    if fifo is None or not hasattr(os, "sched_setscheduler"):
        _warn_once(priority, "this platform has no SCHED_FIFO")
        yield False
        return
    before = os.sched_getscheduler(0)
    before_param = os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, fifo | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except OSError as exc:
        _warn_once(priority, exc.strerror or str(exc))
        yield False
        return
    try:
        yield True
    finally:
        try:
            os.sched_setscheduler(0, before, before_param)
        except OSError:  # lowering one's own priority is always allowed; kept as a guard
            _log.exception("could not restore the control thread's scheduling policy")


def _warn_once(priority: int, why: str) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    _log.warning(
        "the control loop runs at normal priority, not SCHED_FIFO %d (%s): its period then "
        "jitters with the machine's load. Allow real-time scheduling (run with CAP_SYS_NICE, "
        "or give the user an rtprio limit, e.g. '@realtime - rtprio 99' in "
        "/etc/security/limits.conf, as ros2_control asks) or set the priority to 0",
        priority,
        why,
    )
