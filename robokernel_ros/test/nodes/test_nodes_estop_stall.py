"""The e-stop's consumers judge the source's silence by when samples arrived, not by when
their executor got round to them: a stall of the executor (a long callback) is not a
lost source, and a source that really goes silent still latches (fails closed). For the
runner's operator channel and for the safety shield.

Real DDS: a panel node publishing the released heartbeat from its own context, the
consumer on a node of another context in this process, spun by an executor that one
callback blocks for three e-stop timeouts."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from robokernel_ros.ros.operator import RunnerOperator  # noqa: E402
from robokernel_ros.ros.qos import ESTOP_QOS  # noqa: E402
from robokernel_ros.ros.requests import Refused  # noqa: E402
from spun_node import SpunNode  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402

NS = "/rk_estop_stall"
SHIELD_NS = "/rk_estop_stall_shield"
TIMEOUT_S = 0.5
STALL_S = 3 * TIMEOUT_S


def _panel(topic: str) -> SpunNode:
    """The released heartbeat at 10 Hz on `topic` (the estop_panel's period); .silence()
    stops it."""
    spun = SpunNode("stall_panel")
    pub = spun.node.create_publisher(Bool, topic, ESTOP_QOS)
    timer = spun.node.create_timer(0.1, lambda: pub.publish(Bool(data=False)))
    spun.silence = timer.cancel
    return spun


@pytest.fixture
def panel():
    spun = _panel(f"{NS}/estop")
    try:
        yield spun
    finally:
        spun.close()


@pytest.fixture
def runner_side():
    spun = SpunNode("stall_runner", namespace=NS)
    operator = RunnerOperator(
        spun.node,
        scene=lambda: None,
        call=lambda *_args: {"status": "success", "content": []},
        required=True,
        timeout_s=TIMEOUT_S,
        shield_clear_fault="",
        callback_group=None,
    )
    try:
        yield spun, operator
    finally:
        operator.destroy()
        spun.close()


def _stall_executor(node, seconds: float) -> threading.Event:
    """One callback that blocks the node's executor for `seconds`; the event is set after it."""
    done = threading.Event()
    timer = None

    def block() -> None:
        timer.cancel()
        time.sleep(seconds)
        done.set()

    timer = node.create_timer(0.01, block)
    return done


def test_an_executor_stall_is_not_a_lost_source_and_a_silent_source_still_latches(
    panel, runner_side
) -> None:
    spun, operator = runner_side
    operator.check_start()  # the panel is live and released (waits for discovery)

    stalled = _stall_executor(spun.node, STALL_S)
    assert stalled.wait(STALL_S + 10), "the stalling callback never ran"
    time.sleep(2 * TIMEOUT_S)  # the watch has judged the time after the stall too
    operator.check_start()  # not latched: the samples kept arriving during the stall

    panel.silence()
    deadline = time.monotonic() + TIMEOUT_S + 5.0
    while time.monotonic() < deadline:
        try:
            operator.check_start()
        except Refused as exc:
            assert "latched" in str(exc) or "lost" in str(exc), exc
            break
        time.sleep(0.05)
    else:
        pytest.fail("a silent e-stop source did not latch the runner")


def test_the_shield_after_an_executor_stall_is_not_latched_and_a_silent_source_latches() -> None:
    from rclpy.parameter import Parameter
    from robokernel_ros.nodes.safety_shield import SafetyShieldNode
    from robokernel_ros.safety.estop import LOST

    panel = _panel(f"{SHIELD_NS}/estop")  # the shield's default input: the panel's <ns>/estop
    spun = SpunNode(
        "safety_shield",
        SHIELD_NS,
        node_class=SafetyShieldNode,
        parameter_overrides=[
            Parameter("joints", value=["j1"]),
            Parameter("estop_timeout_s", value=TIMEOUT_S),
        ],
    )
    circuit = spun.node._estop
    try:
        deadline = time.monotonic() + 20.0
        while not circuit.live(time.monotonic()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert circuit.live(time.monotonic()), circuit.reason(time.monotonic())

        stalled = _stall_executor(spun.node, STALL_S)
        assert stalled.wait(STALL_S + 10), "the stalling callback never ran"
        time.sleep(2 * TIMEOUT_S)  # the liveness tick has run after the stall
        assert not circuit.latched, f"latched by {circuit.latched_by} after an executor stall"

        panel.silence()
        deadline = time.monotonic() + TIMEOUT_S + 5.0
        while not circuit.latched and time.monotonic() < deadline:
            time.sleep(0.05)
        assert circuit.latched_by == LOST, circuit.latched_by or "not latched"
    finally:
        spun.close()
        panel.close()
