"""free_domain_id: a DDS domain no participant on this host uses (the test runs', the
tests' own graphs' and the benches' ROS_DOMAIN_ID)."""

from __future__ import annotations

import socket

import pytest
from robokernel_ros.ros.domain import (
    DOMAIN_GAIN,
    PORT_BASE,
    domain_in_use,
    free_domain_id,
)


def _bind_in(domain: int) -> socket.socket:
    """A UDP socket on a port of `domain`'s block (as a participant's would be)."""
    low = PORT_BASE + DOMAIN_GAIN * domain
    for port in range(low + 100, low + DOMAIN_GAIN):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind(("127.0.0.1", port))
            return sock
        except OSError:
            sock.close()
    raise AssertionError(f"no free port in domain {domain}'s block")


def test_a_domain_with_a_bound_port_is_in_use_and_skipped() -> None:
    start = free_domain_id()
    sock = _bind_in(start)
    try:
        assert domain_in_use(start)
        chosen = free_domain_id(start)
        assert chosen != start and not domain_in_use(chosen)
    finally:
        sock.close()
    assert free_domain_id(start) == start, "a domain whose socket closed is free again"


def test_a_live_participant_makes_its_domain_in_use() -> None:
    rclpy = pytest.importorskip("rclpy")
    domain = free_domain_id()
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("domain_probe", context=context)
    try:
        assert domain_in_use(domain)
        assert free_domain_id(domain) != domain
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        context.destroy()


def test_excluded_domains_and_a_start_outside_the_range() -> None:
    start = free_domain_id()
    assert free_domain_id(start, exclude=[start]) != start
    with pytest.raises(ValueError, match=r"start=0: must be a domain in \[1, 101\]"):
        free_domain_id(0)
