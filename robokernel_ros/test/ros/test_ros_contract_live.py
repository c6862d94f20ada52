"""contract_live.await_matches: `robokernel contract check --live` opens its measuring
window once each subscription has matched the publishers the graph shows and each
required stream has sent a first message, so `--duration` measures flow, not
discovery; a topic with no publisher is not waited for.
Real rclpy, two contexts in this process."""

from __future__ import annotations

import os
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from robokernel_ros.ros.contract_live import (  # noqa: E402
    StreamReport,
    await_first_messages,
    await_matches,
)
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


def test_the_window_waits_for_a_first_message_after_the_match() -> None:
    """A matched reader gets nothing until the writer sends (and, under load, until the
    writer has learned of the reader): the wait ends at the first message, and a stream
    that stays silent is False after its time."""
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    late, silent = f"/first_late_{tag}", f"/first_silent_{tag}"
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("first_checker", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        reports = {name: StreamReport(name, name) for name in (late, silent)}
        for name, report in reports.items():
            node.create_subscription(String, name, report.on_message, RELIABLE)
        publisher = node.create_publisher(String, late, RELIABLE)
        node.create_publisher(String, silent, RELIABLE)  # there, never sends
        sent_at: list[float] = []

        def send_once() -> None:
            if not sent_at:
                sent_at.append(time.monotonic())
                publisher.publish(String(data="first"))

        node.create_timer(0.5, send_once)
        t0 = time.monotonic()
        assert await_first_messages(executor, [reports[late]], 30)
        assert sent_at and sent_at[0] - t0 >= 0.4  # it waited for the message, not less
        assert reports[late].messages == 1

        t0 = time.monotonic()
        assert not await_first_messages(executor, [reports[silent]], 0.5)
        assert time.monotonic() - t0 >= 0.5
        reports[late].restart()
        assert reports[late].messages == 0 and reports[late].first_stamp_ns is None
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        context.destroy()
