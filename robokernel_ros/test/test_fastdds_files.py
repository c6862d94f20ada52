"""fastdds_files.clear_stale_fastdds_ports: before a node test puts its graph on a domain,
the domain's shared-memory ports that no live process holds are removed; a live
participant's ports, and other domains' files, stay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastdds_files import SHM_PROFILE_ENV, clear_stale_fastdds_ports, shm_paths
from robokernel_ros.ros.domain import DOMAIN_GAIN, PORT_BASE, free_domain_id

SHM = Path("/dev/shm")
_PROBE = """
import sys, rclpy
rclpy.init()
node = rclpy.create_node("ports_probe")
print("up", flush=True)
sys.stdin.read()
node.destroy_node()
rclpy.try_shutdown()
"""


def _ports_of(domain: int) -> set[str]:
    low = PORT_BASE + DOMAIN_GAIN * domain
    return {
        p.name
        for p in SHM.glob("*fastdds_port*")
        if any(f"fastdds_port{n}" in p.name for n in range(low, low + DOMAIN_GAIN))
    }


def test_stale_ports_of_the_domain_go_and_a_live_participants_ports_stay() -> None:
    pytest.importorskip("rclpy")
    domain = free_domain_id()
    other = free_domain_id(exclude=[domain])
    low = PORT_BASE + DOMAIN_GAIN * domain
    # What a SIGKILLed participant leaves: a port segment, its lock file, its mutex;
    # ports 200+ of the block are no participant's own (they start at offset 10)
    stale = {f"fastdds_port{low + 201}", f"fastdds_port{low + 201}_el"}
    stale |= {f"sem.fastdds_port{low + 203}_mutex"}
    elsewhere = f"fastdds_port{PORT_BASE + DOMAIN_GAIN * other + 201}"
    for name in (*stale, elsewhere):
        (SHM / name).write_bytes(b"\0" * 32)
    # a participant on the shared-memory profile, in a process of its own (a process
    # reads its Fast DDS profile once)
    probe = subprocess.Popen(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, **SHM_PROFILE_ENV, "ROS_DOMAIN_ID": str(domain)},
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert probe.stdout.readline().strip() == "up"
        live: set[str] = set()
        deadline = time.monotonic() + 30
        while not live and time.monotonic() < deadline:
            live = {Path(p).name for p in shm_paths(probe.pid)} & _ports_of(domain)
            time.sleep(0.05)
        assert live, "the live participant holds no shared-memory port of its domain"
        removed = set(clear_stale_fastdds_ports(domain))
        # (an earlier run's leftovers on this domain may go too)
        assert stale <= removed, removed
        assert not removed & live, "a port file a live participant holds was removed"
        assert live <= _ports_of(domain), "a live participant's port was removed"
        assert (SHM / elsewhere).exists(), "another domain's port was removed"
    finally:
        probe.stdin.close()  # it ends when its stdin does
        probe.wait(timeout=30)
        for name in (*stale, elsewhere):
            (SHM / name).unlink(missing_ok=True)
