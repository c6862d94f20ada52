"""The native threads of a process that wait on a lock: what a node test's failure report
adds to the Python stacks when a node stops answering (no ROS import).

A DDS participant's own threads (Fast DDS's event, receive, async-send and shared-memory
watchdog threads) have no Python frames: a faulthandler dump shows only the Python side.
`blocked_threads(pid)` attaches gdb (when the machine has it) and returns, compactly, the
threads whose innermost frames wait on a mutex or a read-write lock (`pthread_mutex_lock`, ...)
rather than on their usual condition variable, socket or semaphore: one line per thread,
its name and innermost functions, and a count of the others. An empty string when gdb is
missing or the attach fails: a diagnosis, never a test's outcome."""

from __future__ import annotations

import re
import shutil
import subprocess

_THREAD = re.compile(r'^Thread \d+ \(Thread 0x[0-9a-f]+ \(LWP (\d+)\) "([^"]*)"\)')
_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(.+?) \(")
_LOCK_WAIT = ("lll_lock_wait", "lll_clocklock", "pthread_mutex_lock", "pthread_mutex_timedlock",
              "pthread_mutex_clocklock", "pthread_rwlock_")  # fmt: skip
_SHOWN_FRAMES = 8


def _short(function: str) -> str:
    """A frame's function without its template arguments and namespaces' noise."""
    depth, out = 0, []
    for ch in function:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    name = "".join(out).replace("eprosima::fastdds::", "").replace("rmw_fastrtps_shared_cpp::", "")
    return name.strip()


def blocked_threads(pid: int, timeout_s: float = 20.0) -> str:
    """The threads of process `pid` that wait on a mutex (module docstring)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return ""
    try:
        out = subprocess.run(
            [gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
             "-ex", "thread apply all bt 20"],
            capture_output=True, text=True, timeout=timeout_s, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    threads: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        head = _THREAD.match(line)
        if head:
            threads.append((head.group(2), []))
            continue
        frame = _FRAME.match(line)
        if frame and threads:
            threads[-1][1].append(_short(frame.group(1)))
    if not threads:
        return ""
    blocked = [
        (name, frames)
        for name, frames in threads
        if any(wait in f for f in frames[:4] for wait in _LOCK_WAIT)
    ]
    lines = [f'  "{name}": ' + " < ".join(frames[:_SHOWN_FRAMES]) for name, frames in blocked]
    lines.append(f"  ({len(blocked)} of {len(threads)} native threads wait on a mutex)")
    return "\n".join(lines)
