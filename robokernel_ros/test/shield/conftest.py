"""Fixtures of the shield tests (helpers in shield_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from shield_harness import Peer


@pytest.fixture
def peer() -> Iterator[Peer]:
    """The test process as one real ROS node, in its own rclpy context."""
    p = Peer()
    try:
        yield p
    finally:
        p.close()
