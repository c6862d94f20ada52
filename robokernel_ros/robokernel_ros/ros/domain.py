"""A DDS domain that no process on this host uses: the ROS_DOMAIN_ID of a test run, of a
test's own graph, of a bench.

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(free_domain_id())

Every DDS participant binds its UDP ports inside its domain's block of the RTPS
well-known ports (7400 + 250·d to 7400 + 250·d + 249, the default port base and domain
gain, which Fast DDS and ROS 2 keep): a domain none of whose ports is bound on this host
has no participant here. `free_domain_id` reads the bound UDP ports from /proc/net (no
socket is opened) and returns the first domain of 1..101 whose block is unbound, from
`start` on (default: one derived from the process id, so two runs that ask at the same
moment start at different places). Domains stop at 101: higher ones' ports reach into
Linux's ephemeral port range, where any program's socket may sit.

A choice, not a reservation: a process that asks again before its first participant
binds can get the same domain. No ROS import: usable before rclpy is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PORT_BASE = 7400
DOMAIN_GAIN = 250
MIN_DOMAIN = 1  # 0 is every ROS 2 install's default: left to the user's own nodes
MAX_DOMAIN = 101


def bound_udp_ports() -> set[int]:
    """The local ports of every UDP socket on this host (IPv4 and IPv6)."""
    ports: set[int] = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and ":" in fields[1]:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def domain_in_use(domain: int, ports: Iterable[int] | None = None) -> bool:
    """Whether a UDP port of `domain`'s block is bound on this host (`ports`: the bound
    ports, read now when None)."""
    low = PORT_BASE + DOMAIN_GAIN * int(domain)
    bound = bound_udp_ports() if ports is None else ports
    return any(low <= port < low + DOMAIN_GAIN for port in bound)


def free_domain_id(start: int | None = None, exclude: Iterable[int] = ()) -> int:
    """The first domain of 1..101, from `start` on (wrapping), that no process on this
    host uses and that is not in `exclude`; RuntimeError when every one is taken."""
    span = MAX_DOMAIN - MIN_DOMAIN + 1
    if start is None:
        start = MIN_DOMAIN + os.getpid() % span
    if not (MIN_DOMAIN <= int(start) <= MAX_DOMAIN):
        raise ValueError(f"start={start!r}: must be a domain in [{MIN_DOMAIN}, {MAX_DOMAIN}]")
    skip = {int(d) for d in exclude}
    ports = bound_udp_ports()
    for i in range(span):
        domain = MIN_DOMAIN + (int(start) - MIN_DOMAIN + i) % span
        if domain not in skip and not domain_in_use(domain, ports):
            return domain
    raise RuntimeError(
        f"every DDS domain {MIN_DOMAIN}..{MAX_DOMAIN} is in use on this host "
        "(or excluded): set ROS_DOMAIN_ID yourself"
    )
