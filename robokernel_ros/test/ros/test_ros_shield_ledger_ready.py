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
from robokernel_ros.ros.transport import publisher_gids  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402

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


def test_commands_lost_before_the_episode_are_in_no_episode_by_sequence_number() -> None:
    """The accounts rest on the writer's sequence numbers (ShieldState.sender_last_seq):
    the handshake's commands that the shield never read (a volatile reader drops what a
    writer sent before the reader knew it) are in no episode, and the episode's own are
    confirmed exactly; a shield that has not counted the episode's last command leaves
    the report unconfirmed, saying how many it read. Real rclpy: the shield's ~/state is
    published from a context of the test's own, naming the runner's command writer."""
    tag = f"{os.getpid()}_{time.monotonic_ns()}"
    topic = f"/ledger_lost_{tag}/state"
    contexts, runner, shield = _contexts(tag)
    sent = [0]
    link = ShieldLink("shield", topic, topic + "_commands", lambda: sent[0])
    ledger = ShieldLedger(runner, [link], confirm_timeout_s=3.0)
    commands = runner.create_publisher(Float64MultiArray, topic + "_commands", 10)
    try:
        (writer,) = publisher_gids(runner, topic + "_commands")
        states = shield.create_publisher(ShieldState, topic, STATUS_QOS)

        def state(read: int, last_seq: int) -> None:
            states.publish(ShieldState(state="active", command_sender=writer, sender_read=read,
                                       sender_passed=read, sender_last_seq=last_seq))  # fmt: skip

        sent[0] = 30  # the handshake's; the shield has counted up to number 25 so far
        state(read=8, last_seq=25)
        ledger.check_ready(wait_s=20)
        # It reads the rest (10 of the 30 in all: 20 were lost) half a second later:
        # begin waits for the outcome of command 30, not for 30 reads (never to come).
        timer = threading.Timer(0.5, lambda: state(read=10, last_seq=30))
        t0 = time.monotonic()
        timer.start()
        ledger.begin()
        waited = time.monotonic() - t0
        timer.join()
        assert 0.5 <= waited < 2.5, waited  # not confirm_timeout_s (3 s)
        sent[0] = 50  # the episode's 20
        state(read=30, last_seq=50)
        counts = ledger.settle()["shield"]
        assert counts["commands_sent"] == 20 and counts["read"] == 20, counts
        assert counts["confirmed"] and counts["passed"] == 20, counts
        # the next episode: the shield read 15 of its 50 commands, counted up to number 95
        ledger.begin()
        sent[0] = 100
        state(read=45, last_seq=95)
        t0 = time.monotonic()
        counts = ledger.settle()["shield"]
        assert time.monotonic() - t0 >= 3.0  # it waited confirm_timeout_s for the rest
        assert counts["commands_sent"] == 50 and counts["read"] == 15, counts
        assert not counts["confirmed"], counts
    finally:
        runner.destroy_publisher(commands)
        ledger.close()
        _close(contexts, runner, shield)
