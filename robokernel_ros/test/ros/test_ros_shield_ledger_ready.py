"""ShieldLedger.check_ready: a shield this ledger has never heard is waited for up to
`discovery_s` (DDS discovery of a new runner by a shield takes seconds on a loaded
machine: a full run's eval was refused "no state from the safety shield" after 3 s while
the shield forwarded), one that is heard and does not forward only `wait_s`. Real rclpy:
the shield's ~/state is published from a context of the test's own."""

from __future__ import annotations

import os
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from robokernel_ros.ros.qos import STATUS_QOS  # noqa: E402
from robokernel_ros.ros.requests import Refused  # noqa: E402
from robokernel_ros.ros.shield_ledger import ShieldLedger, ShieldLink  # noqa: E402

from robokernel_interfaces.msg import ShieldState  # noqa: E402


def _contexts(tag: str):
    contexts = [rclpy.Context(), rclpy.Context()]
    for context in contexts:
        rclpy.init(context=context)
    runner = rclpy.create_node(f"ledger_runner_{tag}", context=contexts[0])
    shield = rclpy.create_node(f"ledger_shield_{tag}", context=contexts[1])
    return contexts, runner, shield


def _close(contexts, *nodes) -> None:
    for node in nodes:
        node.destroy_node()
    for context in contexts:
        rclpy.try_shutdown(context=context)
        context.destroy()


def _ledger(runner, topic: str, discovery_s: float) -> ShieldLedger:
    link = ShieldLink("shield", topic, topic + "_commands", lambda: 0)
    return ShieldLedger(runner, [link], discovery_s=discovery_s)


def test_a_shield_never_heard_is_waited_for_through_discovery_then_refused() -> None:
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    topic = f"/ledger_ready_{tag}/state"
    contexts, runner, shield = _contexts(tag)
    ledger = _ledger(runner, topic, discovery_s=30.0)
    try:
        publisher = shield.create_publisher(ShieldState, topic, STATUS_QOS)
        late_s = 3.5  # longer than the 3 s a start used to wait
        timer = threading.Timer(late_s, lambda: publisher.publish(ShieldState(state="active")))
        t0 = time.monotonic()
        timer.start()
        ledger.check_ready()  # default wait_s (3 s): not refused while discovery may run
        assert time.monotonic() - t0 >= late_s
        timer.join()
        # heard, then it stops forwarding: refused after wait_s, not discovery_s
        publisher.publish(ShieldState(state="inactive", reason="deactivated"))
        t0 = time.monotonic()
        with pytest.raises(Refused, match="inactive"):
            ledger.check_ready(wait_s=0.5)
        assert time.monotonic() - t0 < 10.0
    finally:
        ledger.close()
        _close(contexts, runner, shield)


def test_a_shield_nobody_runs_is_refused_after_discovery_s_naming_its_topic() -> None:
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    topic = f"/ledger_absent_{tag}/state"
    contexts, runner, shield = _contexts(tag)
    ledger = _ledger(runner, topic, discovery_s=1.0)
    try:
        t0 = time.monotonic()
        with pytest.raises(Refused, match=f"no state from the safety shield on {topic}"):
            ledger.check_ready(wait_s=0.2)
        assert time.monotonic() - t0 >= 1.0  # discovery_s, not wait_s
    finally:
        ledger.close()
        _close(contexts, runner, shield)
