"""Helpers of the shield tests: the test process is one real ROS node (its own rclpy
context, an executor spinning in a thread), the shield and sim_robot run as real
processes started with the `processes` fixture."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from robokernel_ros.ros.qos import COMMAND_QOS, ESTOP_QOS, EVENT_QOS, STATUS_QOS
from sensor_msgs.msg import JointState
from spun_node import Spinner, close_context
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from robokernel_interfaces.msg import ShieldIntervention, ShieldState

CONFIG = Path(__file__).resolve().parents[2] / "config"
SO101_LIMITS = CONFIG / "joint_limits_so101.yaml"
SO101_JOINTS = [
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
]
SHIELD = "robokernel_ros.nodes.safety_shield"


def shield_args(
    name: str, *params: str, joints: list[str] = SO101_JOINTS, limits: Path | None = SO101_LIMITS
) -> list[str]:
    """A shield named `name` at the root namespace. Its e-stop input is its own `~/estop`
    (`/<name>/estop`, Peer.estop_source) unless `params` set `estop_topic`: the tests run
    several shields in one domain, each with a source of its own; the default (`estop`,
    the panel's `<ns>/estop`) would make every root-namespace shield hear one `/estop`."""
    args = ["--ros-args", "-r", f"__node:={name}", "-p", f"joints:=[{','.join(joints)}]"]
    if limits is not None:
        args += ["-p", f"limits_file:={limits}"]
    if not any(p.startswith("estop_topic:=") for p in params):
        args += ["-p", "estop_topic:=~/estop"]
    for p in params:
        args += ["-p", p]
    return args


class Peer:
    """The test's own node: publishers, recorders, service calls, lifecycle calls.

    Spun by a spun_node.Spinner: a spin thread that dies fails the test (at the next wait
    of a helper here, at the latest at close()). Service clients stay for the peer's life
    (one per service name) and entities are created and destroyed on the spin thread: a
    client or timer destroyed from the test thread while the executor waits on it can end
    the spin thread (the race ros/lifecycle.py describes), which left the joint-state timer
    silent and replies unanswered, unreported."""

    def __init__(self) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = Node("shield_test_peer", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = Spinner(self.executor, "shield_test_peer")
        self._clients: dict[tuple[Any, str], Any] = {}
        self._js_timer = None
        self._closed = False

    def check(self) -> None:
        """AssertionError when the peer's spin thread died."""
        self.spinner.check()

    def close(self) -> None:
        """Stop the spin thread (checked), destroy the node, shut the context down and
        destroy it; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.spinner.stop()
        finally:
            if not self.spinner.alive:  # else destroying the node races the executor
                close_context(self.node, self.context)

    # -- topics --
    def record(
        self, msg_type: Any, topic: str, qos: Any = COMMAND_QOS, *, sent_times: bool = False
    ) -> list[tuple[float, Any]]:
        """(time, message) of each message on `topic`, in arrival order: the time it
        arrived here (time.monotonic()), or with `sent_times` the time its publisher sent
        it (transport.sent_at: its source timestamp on this clock), which a repaired or
        late delivery does not move."""
        from robokernel_ros.ros.transport import sent_at

        out: list[tuple[float, Any]] = []

        def on_message(message: Any, info: Any) -> None:
            out.append((sent_at(info) if sent_times else time.monotonic(), message))

        self.spinner.run(lambda: self.node.create_subscription(msg_type, topic, on_message, qos))
        return out

    def record_commands(self, topic: str = "/forward_position_controller/commands"):
        return self.record(Float64MultiArray, topic)

    def record_trajectories(self, topic: str = "/joint_trajectory_controller/joint_trajectory"):
        return self.record(JointTrajectory, topic)

    def record_interventions(self, shield: str) -> list[tuple[float, ShieldIntervention]]:
        return self.record(ShieldIntervention, f"/{shield}/interventions", EVENT_QOS)

    def record_states(self, shield: str) -> list[tuple[float, ShieldState]]:
        return self.record(ShieldState, f"/{shield}/state", STATUS_QOS)

    def publisher(self, msg_type: Any, topic: str, qos: Any = COMMAND_QOS):
        return self.node.create_publisher(msg_type, topic, qos)

    def estop_publisher(self, shield: str):
        return self.node.create_publisher(Bool, f"/{shield}/estop", ESTOP_QOS)

    def estop_source(self, shield: str, pressed: bool = False, period: float = 0.1):
        """A released (or pressed) heartbeat on the shield's own ~/estop (shield_args sets
        it), as estop_panel sends."""
        return self.spinner.run(
            lambda: EstopSource(self.node, f"/{shield}/estop", pressed, period, self.spinner)
        )

    def publish_joint_states(
        self,
        names: list[str],
        positions: list[float],
        rate_hz: float = 50.0,
        topic: str = "/joint_states",
    ) -> None:
        pub = self.node.create_publisher(JointState, topic, COMMAND_QOS)

        def tick() -> None:
            msg = JointState()
            msg.header.stamp = self.node.get_clock().now().to_msg()
            msg.name = list(names)
            msg.position = [float(p) for p in positions]
            pub.publish(msg)

        self._js_timer = self.spinner.run(lambda: self.node.create_timer(1.0 / rate_hz, tick))

    def wait_for_subscribers(self, pub: Any, count: int = 1, timeout: float = 20.0) -> None:
        wait_until(
            lambda: pub.get_subscription_count() >= count,
            timeout,
            f"{pub.topic_name}: no subscriber",
            self,
        )

    # -- services --
    def call(self, srv_type: Any, name: str, request: Any = None, timeout: float = 20.0) -> Any:
        client = self._clients.get((srv_type, name))
        if client is None:
            client = self._clients[(srv_type, name)] = self.spinner.run(
                lambda: self.node.create_client(srv_type, name)
            )
        if not client.wait_for_service(timeout_sec=timeout):
            self.check()
            raise AssertionError(f"service {name} did not appear within {timeout} s")
        future = client.call_async(request if request is not None else srv_type.Request())
        try:
            wait_until(future.done, timeout, f"service {name}: no reply", self)
        except AssertionError:
            future.cancel()
            raise
        return future.result()

    def trigger(self, name: str) -> Trigger.Response:
        return self.call(Trigger, name)

    def change_state(self, shield: str, transition: int) -> bool:
        req = ChangeState.Request()
        req.transition.id = transition
        return self.call(ChangeState, f"/{shield}/change_state", req).success

    def lifecycle_state(self, shield: str) -> str:
        return self.call(GetState, f"/{shield}/get_state").current_state.label

    def configure_activate(self, shield: str) -> None:
        assert self.change_state(shield, Transition.TRANSITION_CONFIGURE)
        assert self.change_state(shield, Transition.TRANSITION_ACTIVATE)


class EstopSource:
    """An e-stop source in the test's node: its state every `period`, at once on a change.
    Created and stopped on the peer's spin thread (`spinner`)."""

    def __init__(
        self, node: Node, topic: str, pressed: bool, period: float, spinner: Spinner
    ) -> None:
        self.node = node
        self.spinner = spinner
        self.pressed = pressed
        self.pub = node.create_publisher(Bool, topic, ESTOP_QOS)
        self.timer = node.create_timer(period, self._beat)
        self._beat()

    def _beat(self) -> None:
        self.pub.publish(Bool(data=self.pressed))

    def press(self) -> None:
        self.pressed = True
        self._beat()

    def release(self) -> None:
        self.pressed = False
        self._beat()

    def stop(self) -> None:
        """Publish no more (the source's node stays): the timer and the publisher are
        destroyed on the spin thread, between two spins."""

        def destroy() -> None:
            self.node.destroy_timer(self.timer)
            self.node.destroy_publisher(self.pub)

        self.spinner.run(destroy)


def clear_fault(peer: Peer, shield: str, timeout: float = 10.0) -> Trigger.Response:
    """~/clear_fault, repeated while the shield refuses it only because the source is not
    live yet or was pressed less than estop_timeout_s ago; any other refusal fails."""
    deadline = time.monotonic() + timeout
    while True:
        reply = peer.trigger(f"/{shield}/clear_fault")
        if reply.success:
            return reply
        waiting = "pressed sample arrived" in reply.message or "e-stop source" in reply.message
        assert waiting, reply.message
        assert time.monotonic() < deadline, f"clear_fault still refused: {reply.message}"
        time.sleep(0.05)


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str = "condition", peer: Any = None
) -> None:
    """Poll `predicate` until true; AssertionError after `timeout` s, or at once when
    `peer`'s spin thread died (nothing it should deliver will come)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if peer is not None:
            peer.check()
        time.sleep(0.01)
    if peer is not None:
        peer.check()
    raise AssertionError(f"timed out after {timeout} s waiting for: {what}")


def latest_state(states: list[tuple[float, ShieldState]]) -> ShieldState | None:
    return states[-1][1] if states else None


def wait_state(
    states: list,
    predicate: Callable[[ShieldState], bool],
    timeout: float = 20.0,
    what: str = "shield state",
) -> ShieldState:
    wait_until(lambda: states and predicate(states[-1][1]), timeout, what)
    return states[-1][1]


def is_hold(values: Any, hold: list[float], tol: float = 1e-9) -> bool:
    return len(values) == len(hold) and all(
        abs(a - b) <= tol for a, b in zip(values, hold, strict=True)
    )


def finite(values: Any) -> bool:
    return all(math.isfinite(v) for v in values)
