"""rclpy plumbing below the nodes: this process's private rclpy link, `DirectReader`
(a subscription its caller takes from an rcl wait set, no executor in between) and
`ServerWatch` (a policy server's heartbeat).

    link = acquire_link()           # one context + node + executor thread per process
    reader = DirectReader(link.rx_node, ActionChunk, "/robokernel/action_chunk", CHUNK_QOS)
    messages = reader.take(timeout_s=1.0)
    ...
    reader.close(); release_link()

`reader.take_received(...)` gives each message with `received_at(info)`, its reception
time on the monotonic clock: a check of a source's silence counts when a sample arrived,
not when its taker got round to it. `sent_at(info)` is the same for the time a sample was
published (a command stream's own schedule).

The private link is one rclpy context with a single-threaded executor thread for the
whole process (the runner node included: rclpy's MultiThreadedExecutor delays chunks by
tens of milliseconds in this build), shared by every remote policy and RosRobotEnv and
released with the last. Its `rx_node` is spun by no executor: DirectReaders on it are
taken by their caller.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

from robokernel_interfaces.msg import PolicyServerStatus
from robokernel_ros.ros.qos import STATUS_QOS
from robokernel_ros.ros.wire import DEFAULT_NAMESPACE, LOAD_FAILED, STATUS_TOPIC, join

_log = logging.getLogger(__name__)


class _PrivateLink:
    """One rclpy context + node + executor thread for the process, reference-counted."""

    _lock = threading.Lock()
    _instance: _PrivateLink | None = None
    _refs = 0

    def __init__(self) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        name = f"remote_policy_{secrets.token_hex(3)}"
        # Own names: the process's command-line remaps (a runner's __node:=runner) are
        # not for these nodes.
        self.node = rclpy.create_node(name, context=self.context, use_global_arguments=False)
        # Subscriptions whose messages a caller takes itself (DirectReader): no executor
        # spins this node.
        self.rx_node = rclpy.create_node(
            f"{name}_rx", context=self.context, use_global_arguments=False
        )
        self.readers: weakref.WeakSet[DirectReader] = weakref.WeakSet()
        # It serves the heartbeat and the service client only (chunks are taken by the
        # waiting thread), so one thread is enough; rclpy's MultiThreadedExecutor would
        # add tens of milliseconds to the service round trip in this build.
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="remote-policy-spin", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # A long timeout: each wake-up runs the executor's Python wait-set code, which
        # would take the GIL from a control loop in this process (_close wakes it).
        while not self._stop.is_set() and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=2.0)
            except Exception:  # noqa: BLE001 - shutdown races end the loop
                if not self.context.ok():
                    return
                _log.exception("remote policy executor")

    def _close(self) -> None:
        # Stop spinning and join the thread before shutting the context down: shutting
        # rclpy down under a spinning executor aborts the process in this build.
        self._stop.set()
        self.executor.wake()
        self._thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1.0)
        for reader in list(self.readers):
            reader.close()  # a policy waiting for a chunk returns at once (closed)
        self.node.destroy_node()
        self.rx_node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    @classmethod
    def acquire(cls) -> _PrivateLink:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            cls._refs += 1
            return cls._instance

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._refs = max(0, cls._refs - 1)  # after close_now, a holder's release is a no-op
            if cls._refs > 0 or cls._instance is None:
                return
            instance, cls._instance = cls._instance, None
        instance._close()

    @classmethod
    def close_now(cls) -> None:
        """Close the link whatever policies still hold it (a node shutting down)."""
        with cls._lock:
            instance, cls._instance, cls._refs = cls._instance, None, 0
        if instance is not None:
            instance._close()


class DirectReader:
    """One subscription whose messages the calling thread takes itself, without an executor.

    The subscription is created on a node that no executor spins (so nothing else takes
    its messages) and `take` blocks on an rcl wait set of it and a guard condition that
    `close` triggers. On a latency path this saves the executor's dispatch and the
    hand-over from the executor thread to the waiting one (bench/chunk_roundtrip.py).
    rclpy has no public API for it; this is what `rclpy.wait_for_message` does per call.

    One thread takes at a time: a second caller waits until the first one's take returns.
    An rcl wait set must not be waited on by two threads at once; the act thread of an
    episode that ended while it waited for a chunk and the next episode's act thread did
    so on one remote policy's reader, and the runner died of SIGSEGV (bench/soak.py).
    """

    def __init__(self, node: Any, msg_type: Any, topic: str, qos: Any) -> None:
        self.node = node
        self._sub = node.create_subscription(msg_type, topic, _ignore, qos)
        self._wake = GuardCondition(None, None, context=node.context)
        self._wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, 0, node.context.handle)
        self._closed = False
        self._taking = threading.Lock()  # one taker of the wait set at a time

    @property
    def closed(self) -> bool:
        return self._closed

    def publisher_count(self) -> int:
        """Publishers matched with this reader."""
        return self._sub.get_publisher_count()

    def take(self, timeout_s: float) -> list[Any]:
        """Every message waiting now; if none, the first that arrives within `timeout_s`
        (an empty list once that passes, or when closed). After a wait one message is
        taken and returned at once: the caller answers it without another take first,
        and what came with it is taken by the next call, without waiting."""
        return [msg for msg, _info in self._take(timeout_s)]

    def take_received(self, timeout_s: float) -> list[tuple[Any, float]]:
        """As `take`, each message with its `received_at` time (when it reached this process)."""
        return [(msg, received_at(info)) for msg, info in self._take(timeout_s)]

    def take_sent(self, timeout_s: float) -> list[tuple[Any, float]]:
        """As `take`, each message with its `sent_at` time (when its sender published it)."""
        return [(msg, sent_at(info)) for msg, info in self._take(timeout_s)]

    def take_sent_by(self, timeout_s: float) -> list[tuple[Any, float, str, int]]:
        """As `take_sent`, each message also with its sender (`sender_of`) and its
        publication sequence number (`sequence_of`)."""
        return [
            (msg, sent_at(info), sender_of(info), sequence_of(info))
            for msg, info in self._take(timeout_s)
        ]

    def _take(self, timeout_s: float) -> list[tuple[Any, Any]]:
        sub, handle = self._sub, self._sub.handle
        msg_type, raw = sub.msg_type, sub.raw
        with self._taking:
            if self._closed:  # closed while this caller waited for the reader
                return []
            return self._take_held(handle, msg_type, raw, timeout_s)

    def _take_held(
        self, handle: Any, msg_type: Any, raw: bool, timeout_s: float
    ) -> list[tuple[Any, Any]]:
        """`_take`'s work, holding the reader (`_taking`)."""
        messages: list[tuple[Any, Any]] = []
        waited = False
        with handle, self._wake.handle:
            while not self._closed:
                taken = handle.take_message(msg_type, raw)
                if taken is not None:
                    messages.append(taken)
                    if waited:
                        break
                    continue
                if messages or waited or timeout_s <= 0:
                    break
                ws = self._wait_set
                ws.clear_entities()
                ws.add_subscription(handle)
                ws.add_guard_condition(self._wake.handle)
                ws.wait(int(timeout_s * 1e9))
                waited = True
        return messages

    def close(self, timeout_s: float = 5.0) -> None:
        """Wake a waiting `take` (it returns []), wait until it has left (up to
        `timeout_s`), then destroy the subscription. Destroyed while a take held it, rclpy
        would destroy it in that take's exit, on the taker's thread with the GIL held (a
        runner's e-stop watcher sat there past its 2 s join at shutdown)."""
        if self._closed:
            return
        self._closed = True
        self._wake.trigger()
        left = self._taking.acquire(timeout=timeout_s)
        try:
            self.node.destroy_subscription(self._sub)  # deferred by rclpy while a take holds it
            self._wake.destroy()
        finally:
            if left:
                self._taking.release()


def received_at(info: Any) -> float:
    """When the middleware received a sample (rclpy's MessageInfo `received_timestamp`,
    system clock in ns), on time.monotonic()'s clock; now when the RMW gives none. A taker
    that was busy judges the sample's age by this, not by when it got round to it."""
    return _on_monotonic(info.get("received_timestamp", 0) if info else 0)


def sent_at(info: Any) -> float:
    """When the sender published a sample (MessageInfo `source_timestamp`, stamped by the
    sender's middleware on its system clock), on time.monotonic()'s clock, never later
    than now; now when the RMW gives none. Consecutive samples of one writer are as far
    apart here as they were sent, whenever this process got round to them (a clock
    offset between machines shifts them all alike)."""
    return _on_monotonic(info.get("source_timestamp", 0) if info else 0)


def sender_of(info: Any) -> str:
    """Who published a sample: its writer's GID (MessageInfo `publisher_gid`) in hex, as
    `publisher_gids` names a node's own publishers; '' when the RMW gives none."""
    gid = (info or {}).get("publisher_gid") or {}
    return bytes(gid.get("data", b"")).hex()


def sequence_of(info: Any) -> int:
    """A sample's publication sequence number (MessageInfo `publication_sequence_number`:
    its writer numbers what it writes from 1); 0 when the RMW gives none."""
    return int((info or {}).get("publication_sequence_number") or 0)


def publisher_gids(node: Any, topic: str) -> set[str]:
    """The GIDs (hex) of `node`'s own publishers on `topic` (resolved against the node):
    what a subscriber's `sender_of` gives for their samples."""
    name, namespace = node.get_name(), node.get_namespace()
    return {
        bytes(info.endpoint_gid).hex()
        for info in node.get_publishers_info_by_topic(node.resolve_topic_name(topic))
        if info.node_name == name and info.node_namespace == namespace
    }


def _on_monotonic(stamp_ns: int) -> float:
    """A system-clock stamp (ns; 0: none) as a time.monotonic() reading, at most now."""
    now = time.monotonic()
    if not stamp_ns:
        return now
    return now - max(0.0, (time.time_ns() - stamp_ns) / 1e9)


def _ignore(_msg: Any) -> None:
    """The callback of a DirectReader's subscription (never called: no executor spins it)."""


def acquire_link() -> _PrivateLink:
    """This process's private link (taken with a reference: `release_link()` when done).
    Its `rx_node` is spun by no executor: DirectReaders on it are taken by their caller."""
    return _PrivateLink.acquire()


def release_link() -> None:
    """Drop a reference taken by `acquire_link()` (the last one closes the link)."""
    _PrivateLink.release()


def close_private_link() -> None:
    """Stop this process's remote-policy link (its executor thread and rclpy context),
    so a node hosting remote policies shuts down promptly and cleanly."""
    _PrivateLink.close_now()


@dataclass
class ServerState:
    ready: bool = False
    detail: str = "no heartbeat received yet"
    provider: str = ""
    action_keys: tuple[str, ...] = ()
    chunk_emitting: bool = False
    rtc_supported: bool = False
    chunks_served: int = 0
    received_at: float | None = None  # monotonic


class ServerWatch:
    """Follows a policy server's heartbeat on `<ns>/policy_server/status`."""

    def __init__(self, node: Any, namespace: str, *, stale_after_s: float = 3.0) -> None:
        self.node = node
        self.namespace = namespace
        self.stale_after_s = stale_after_s
        self.state = ServerState()
        self._cond = threading.Condition()
        self._sub = node.create_subscription(
            PolicyServerStatus,
            join(namespace, STATUS_TOPIC),
            self._on_status,
            STATUS_QOS,
            callback_group=ReentrantCallbackGroup(),
        )

    def _on_status(self, msg: Any) -> None:
        with self._cond:
            self.state = ServerState(
                ready=bool(msg.ready),
                detail=msg.detail,
                provider=msg.provider,
                action_keys=tuple(msg.action_keys),
                chunk_emitting=bool(msg.chunk_emitting),
                rtc_supported=bool(msg.rtc_supported),
                chunks_served=int(msg.chunks_served),
                received_at=time.monotonic(),
            )
            self._cond.notify_all()

    def alive(self) -> bool:
        at = self.state.received_at
        return at is not None and time.monotonic() - at <= self.stale_after_s

    def ready(self) -> bool:
        return self.state.ready and self.alive()

    def not_ready_detail(self, timeout_s: float) -> str:
        """What the heartbeat says of a server that has just answered that it is not
        active: the detail of a live heartbeat that agrees (not ready), waited for up to
        `timeout_s`, else ''. A server that answers has a heartbeat, but a replacement's
        reaches this reader seconds after its services answer: meanwhile the heartbeat
        here is the gone instance's, still fresh and saying ready, or already stale."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.alive() or self.state.ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    return ""
                self._cond.wait(timeout=min(left, 0.1))
            return self.state.detail

    def wait_ready(self, timeout_s: float) -> ServerState:
        """Wait for a fresh ready heartbeat; raise RuntimeError naming why the server is not ready."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.ready():
                if self.alive() and LOAD_FAILED in self.state.detail:
                    break  # a failed load never becomes ready: no point in waiting
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=min(left, 0.1))
            if self.ready():
                return self.state
            state = self.state
        topic = join(self.namespace, STATUS_TOPIC)
        if state.received_at is None:
            why = f"no heartbeat on {topic} within {timeout_s:g} s (is the policy_server running on this ROS_DOMAIN_ID?)"
        elif not self.alive():
            why = (
                f"its last heartbeat on {topic} is {time.monotonic() - state.received_at:.1f} s old"
            )
        else:
            why = f"it reports not ready: {state.detail or 'no detail'}"
        raise RuntimeError(
            f"policy server {self.namespace or '/'} ({state.provider or 'unknown provider'}) is not ready: {why}"
        )

    def destroy(self) -> None:
        self.node.destroy_subscription(self._sub)


def check_server_ready(
    node: Any, namespace: str = DEFAULT_NAMESPACE, timeout_s: float = 2.0
) -> ServerState:
    """Raise RuntimeError unless the policy server at `namespace` reports ready within `timeout_s`."""
    watch = ServerWatch(node, namespace)
    try:
        return watch.wait_ready(timeout_s)
    finally:
        watch.destroy()
