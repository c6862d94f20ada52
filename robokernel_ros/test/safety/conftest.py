"""Fixtures of the safety tests: the shield tests' harness (test/nodes/shield_harness.py)
for the test that starts a shield against each fixture file."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nodes"))


@pytest.fixture
def peer() -> Iterator[object]:
    """The test process as one real ROS node, in its own rclpy context."""
    from shield_harness import Peer

    p = Peer()
    try:
        yield p
    finally:
        p.close()
