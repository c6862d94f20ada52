"""The runner's refusal of a remote start names the policy server's own reason, not the
last heartbeat of the instance it replaced: a server that has just answered "not active"
while a still-fresh heartbeat says ready is a replacement whose heartbeat has not reached
the runner yet (a full run's lifecycle test: the refusal quoted the killed server's
"active: serving the mock policy" instead of the new one's failed load), and the same
when the gone instance's heartbeat has already gone stale (another full run's refusal
named no reason at all).

Real DDS: two policy-server heartbeats from two contexts (the killed instance, then its
replacement), the watch on a node spun in this process."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from robokernel_ros.ros.qos import STATUS_QOS  # noqa: E402
from robokernel_ros.ros.transport import ServerWatch  # noqa: E402
from robokernel_ros.ros.wire import STATUS_TOPIC, join  # noqa: E402
from spun_node import SpunNode  # noqa: E402

from robokernel_interfaces.msg import PolicyServerStatus  # noqa: E402

NS = "/rk_server_watch"
FAILED = "loading the scripted policy failed: ValueError: targets must be a list"


@pytest.mark.parametrize("old_goes_stale_first", [False, True])
def test_a_refusal_waits_for_the_replacement_heartbeat_that_agrees(old_goes_stale_first) -> None:
    runner = SpunNode("watching_runner")
    watch = ServerWatch(runner.node, NS, stale_after_s=0.5 if old_goes_stale_first else 3.0)
    topic = join(NS, STATUS_TOPIC)
    old = SpunNode("old_server", spin=False)
    new = None
    try:
        old_pub = old.node.create_publisher(PolicyServerStatus, topic, STATUS_QOS)
        deadline = time.monotonic() + 20
        while not watch.ready() and time.monotonic() < deadline:
            old_pub.publish(PolicyServerStatus(ready=True, detail="active: serving"))
            time.sleep(0.1)
        assert watch.ready(), "the old server's heartbeat never arrived"
        old.close()  # killed: its last heartbeat stays fresh for stale_after_s
        while old_goes_stale_first and watch.alive():  # ... or goes stale before the new one
            time.sleep(0.05)

        new = SpunNode("new_server", spin=False)
        new_pub = new.node.create_publisher(PolicyServerStatus, topic, STATUS_QOS)
        beating = threading.Event()

        def heartbeat() -> None:
            while not beating.wait(0.2):
                new_pub.publish(PolicyServerStatus(ready=False, detail=FAILED))

        beater = threading.Thread(target=heartbeat, daemon=True)
        beater.start()
        try:
            detail = watch.not_ready_detail(10.0)  # the new server said "unconfigured"
        finally:
            beating.set()
            beater.join(timeout=5)
        assert detail == FAILED, detail
    finally:
        runner.close()  # the watch's subscription with its node
        old.close()
        if new is not None:
            new.close()
