"""The Fast DDS files in /dev/shm of the processes a test starts, and of a test's DDS
domain: which a process holds, and removing those nobody holds any more.

Fast DDS's shared-memory transport keeps segments (`fastdds_<random id>`), port
segments (`fastdds_port<N>`), their lock files (`_el`) and port mutexes
(`sem.fastdds_port<N>_mutex`) in /dev/shm; a process killed with SIGKILL cannot remove
its own. No ROS import."""

from __future__ import annotations

import os
from pathlib import Path

from robokernel_ros.demo import config_dir
from robokernel_ros.ros.domain import DOMAIN_GAIN, PORT_BASE

#: A participant on the opt-in shared-memory profile (config/fastdds_shm.xml): the
#: workcell's default (fastdds_localhost.xml) uses no shared memory, so a test of the
#: cleanup below starts its participants with these variables.
SHM_PROFILE_ENV = {
    "FASTDDS_DEFAULT_PROFILES_FILE": str(config_dir() / "fastdds_shm.xml"),
    "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
}


def shm_paths(pid: int | str) -> set[str]:
    """The /dev/shm files process `pid` has open (fds) or mapped (maps)."""
    proc_dir = Path("/proc") / str(pid)
    paths: set[str] = set()
    try:
        for fd in (proc_dir / "fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                paths.add(target)
    except OSError:
        pass
    try:
        for line in (proc_dir / "maps").read_text().splitlines():
            if "/dev/shm/" in line:
                paths.add(line.split(maxsplit=5)[-1])
    except (OSError, IndexError):
        pass
    return paths


def fastdds_files(pids: set[int]) -> set[str]:
    """The Fast DDS files (segments, port segments, their lock and semaphore files) that
    `pids` hold. Fast DDS names a segment by a random id, not by its creator: the only
    record of whose it is, is which process holds it, read while that process lives."""
    return {
        path
        for pid in pids
        for path in shm_paths(pid)
        if Path(path).name.startswith(("fastdds_", "sem.fastdds_"))
    }


def remove_fastdds_segments(files: set[str]) -> None:
    """Remove those of `files` (Fast DDS files in /dev/shm that a test's processes held
    before their signals) that no live process holds now: a process killed with SIGKILL
    leaves its segments behind (Fast DDS cleans its own on a normal exit). A file another
    process holds (a port segment every participant on the host shares) stays; a lock
    file (`_el`) goes with its segment."""
    if not files:
        return
    held = held_shm_paths()
    for path in sorted(files - held):
        Path(path).unlink(missing_ok=True)
        if not path.endswith("_el"):
            lock = Path(path + "_el")
            if str(lock) not in held:
                lock.unlink(missing_ok=True)


def held_shm_paths() -> set[str]:
    """The /dev/shm files that any live process on the host has open or mapped."""
    held: set[str] = set()
    for proc_dir in Path("/proc").glob("[0-9]*"):
        held |= shm_paths(proc_dir.name)
    return held


def clear_stale_fastdds_ports(domain: int) -> list[str]:
    """Remove the Fast DDS shared-memory port files of DDS domain `domain` that no live
    process holds; returns the names removed. For a domain on which no participant runs
    (ros.domain.free_domain_id's check), before a test puts its graph there.

    A port is a participant's SHM inbox, named by its RTPS port number (7400 + 250·domain
    + offset, the UDP formula) and shared by every process that writes to it. One left by
    a process killed in an earlier test on this domain keeps that process registered as a
    listener; Fast DDS reuses such a port when its health check passes (no listener was
    waiting) and replaces it when the check fails, while processes that opened the old
    one keep writing there (eProsima/Fast-DDS PR #4737): either way a node of the new test
    may miss what is sent to it (suspected in node tests whose client never heard an
    active node, with domains reused within a run). With the files gone, the first
    participant on the port creates a fresh one."""
    low = PORT_BASE + DOMAIN_GAIN * int(domain)
    block = range(low, low + DOMAIN_GAIN)
    stale: list[Path] = []
    for path in Path("/dev/shm").glob("*fastdds_port*"):
        digits = path.name.split("fastdds_port", 1)[1].split("_", 1)[0]
        if digits.isdigit() and int(digits) in block:
            stale.append(path)
    if not stale:
        return []
    held = held_shm_paths()
    removed = []
    for path in stale:
        if str(path) not in held:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return sorted(removed)
