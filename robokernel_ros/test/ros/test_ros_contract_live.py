"""contract_live.await_matches: `robokernel contract check --live` opens its measuring
window once each subscription has matched the publishers the graph shows, so
`--duration` measures flow, not discovery; a topic with no publisher is not waited for.
Real rclpy, two contexts in this process."""

from __future__ import annotations

import os
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from robokernel_ros.ros.contract_live import await_matches  # noqa: E402
from std_msgs.msg import String  # noqa: E402

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


def test_the_window_waits_for_a_match_and_not_for_a_topic_nobody_publishes() -> None:
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    flowing, unmatchable, absent = (f"/await_{n}_{tag}" for n in ("flowing", "qos", "absent"))
    pub_context, sub_context = rclpy.Context(), rclpy.Context()
    rclpy.init(context=pub_context)
    rclpy.init(context=sub_context)
    publisher_node = rclpy.create_node("await_publisher", context=pub_context)
    node = rclpy.create_node("await_checker", context=sub_context)
    executor = SingleThreadedExecutor(context=sub_context)
    executor.add_node(node)
    try:
        publisher_node.create_publisher(String, flowing, RELIABLE)
        # on the graph, but a best-effort publisher never matches a reliable reader
        publisher_node.create_publisher(String, unmatchable, BEST_EFFORT)
        subs = {
            name: node.create_subscription(String, name, lambda _m: None, RELIABLE)
            for name in (flowing, unmatchable, absent)
        }
        deadline = time.monotonic() + 30
        while node.count_publishers(flowing) < 1 or node.count_publishers(unmatchable) < 1:
            assert time.monotonic() < deadline, "the publishers never showed on the graph"
            executor.spin_once(timeout_sec=0.05)

        assert await_matches(executor, node, [subs[flowing], subs[absent]], 30)
        assert subs[flowing].get_publisher_count() >= 1  # matched before it returned

        t0 = time.monotonic()
        assert await_matches(executor, node, [subs[absent]], 30)  # nobody publishes it
        assert time.monotonic() - t0 < 5.0

        t0 = time.monotonic()
        assert not await_matches(executor, node, [subs[unmatchable]], 0.5)
        assert time.monotonic() - t0 >= 0.5  # it waited its time, then said so
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        publisher_node.destroy_node()
        for context in (sub_context, pub_context):
            rclpy.try_shutdown(context=context)
            context.destroy()
