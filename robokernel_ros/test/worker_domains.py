"""The DDS domains this test process may take: all of 1..101 in a serial run; under
pytest-xdist (`-n N`), worker k of N takes only the domains d with (d - 1) % N == k.

free_domain_id returns a domain nobody has bound yet: a choice, not a reservation. Two
workers that chose at the same moment (each a test's own graph, whose processes bind
their ports a second or two later) could get the same domain and meet each other's
nodes; disjoint shares cannot. Benches and other runs on the host are kept off by
free_domain_id's check of the bound ports, as before. No ROS import."""

from __future__ import annotations

import os
from collections.abc import Iterable

from robokernel_ros.ros.domain import MAX_DOMAIN, MIN_DOMAIN, free_domain_id


def _worker() -> tuple[int, int]:
    """(this worker's index, the number of workers); (0, 1) outside pytest-xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not name.startswith("gw") or count <= 1:
        return 0, 1
    return int(name[2:]) % count, count


def other_workers_domains() -> list[int]:
    """The domains of 1..101 that belong to the other xdist workers (none in a serial run)."""
    index, count = _worker()
    return [d for d in range(MIN_DOMAIN, MAX_DOMAIN + 1) if (d - MIN_DOMAIN) % count != index]


def worker_domain(start: int | None = None, exclude: Iterable[int] = ()) -> int:
    """free_domain_id within this worker's share of 1..101 (all of it in a serial run)."""
    return free_domain_id(start, exclude=[*exclude, *other_workers_domains()])
