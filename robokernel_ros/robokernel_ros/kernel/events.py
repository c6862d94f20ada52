"""Typed events and a synchronous event bus.

Every observable thing in an episode is an `Event`. The trace is the persisted event
stream, so the trace writer, live dashboards, online critics and the rosbag mirror all
subscribe to the same `EventBus`.

Event kinds (the `kind` string) and what their `data` holds are listed below as
constants; the module docstring of `robokernel_ros.kernel.runner` describes when each
is emitted.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger(__name__)

EPISODE_START = "episode.start"  # run_id, env, timing, instruction, seed, agent, started_at, **meta
OBSERVATION = "observation"  # obs (JSON-able), images {camera: array} on image steps
PRIVILEGED = "privileged"  # state (the env's privileged_state())
CHUNK_REQUEST = "chunk.request"  # step, request_id
CHUNK_MERGE = (
    "chunk.merge"  # obs_step, arrival_step, dropped, kept, inference_s, request_id, keys, actions
)
ACTION = "action"  # step, action, hold, reward, terminated, truncated
# ... and, when the runner has a teleop source: intervention (bool: the operator, not the
# policy, decided this step's command); while intervening: mode ("paused"/"correcting");
# while correcting: human_action (the teleop command, None: none fresh) and policy_action
# (the policy's shadow action, not executed; None: its queue was empty)
SAFETY_INTERVENTION = "safety.intervention"  # step, guard, key, value, limit, action
OPERATOR_STOP = "operator.stop"
OPERATOR_ESTOP = "operator.estop"
OPERATOR_CLEAR_FAULT = "operator.clear_fault"
OPERATOR_RESET_DONE = "operator.reset_done"
OPERATOR_VERDICT = "operator.verdict"
OPERATOR_PAUSE = "operator.pause"  # by (when given)
OPERATOR_CORRECT = "operator.correct"  # by (when given)
OPERATOR_RESUME = "operator.resume"  # by (when given)
INTERVENTION_START = "intervention.start"  # step, mode, by, teleop
INTERVENTION_MODE = "intervention.mode"  # step, mode, by (paused <-> correcting inside one)
INTERVENTION_END = "intervention.end"  # step, start_step, steps, duration_s, by
ERROR = "error"  # category, type, message, traceback
EPISODE_END = "episode.end"  # outcome, status, steps, holds, chunks, safety_interventions, ...

EVENT_KINDS: tuple[str, ...] = (
    EPISODE_START,
    OBSERVATION,
    PRIVILEGED,
    CHUNK_REQUEST,
    CHUNK_MERGE,
    ACTION,
    SAFETY_INTERVENTION,
    OPERATOR_STOP,
    OPERATOR_ESTOP,
    OPERATOR_CLEAR_FAULT,
    OPERATOR_RESET_DONE,
    OPERATOR_VERDICT,
    OPERATOR_PAUSE,
    OPERATOR_CORRECT,
    OPERATOR_RESUME,
    INTERVENTION_START,
    INTERVENTION_MODE,
    INTERVENTION_END,
    ERROR,
    EPISODE_END,
)


@dataclass(slots=True)
class Event:
    """One observable thing in an episode.

    kind: one of EVENT_KINDS (others are allowed for extensions).
    step: the control step the event belongs to.
    data: the kind's payload (JSON-serialisable except image arrays).
    t: episode clock in seconds: the env's sim time when it reports one
       (StepResult.info["sim_time_s"]), else step / control_hz.
    wall: monotonic seconds since the episode started.
    seq: 0, 1, 2, ... within the episode.
    run_id: the run directory name of the episode ("" when nothing is recorded).
    line: the event's events.jsonl line (bytes), cached by `kernel.trace.event_line`
       so the trace writer and the rosbag mirror encode it once; not compared.
    """

    kind: str
    step: int
    data: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0
    wall: float = 0.0
    seq: int = 0
    run_id: str = ""
    line: bytes | None = field(default=None, compare=False, repr=False)


Callback = Callable[[Event], Any]


class EventBus:
    """A synchronous publish/subscribe bus.

    `publish` calls every matching subscriber in subscription order, in the
    publisher's thread, before it returns. A subscriber that raises is logged and
    skipped: it never ends the episode. Subscribing and unsubscribing are thread-safe
    (copy on write), so publishing takes no lock.

    `forward_to(parent)` passes every event on to another bus as well (before this
    bus's own subscribers), as subscribing `parent.publish` would, but only while the
    parent has listeners: an episode's bus forwards to a long-lived one that observers
    may join at any time, and costs nothing per event while none has.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (callback, kinds or None); replaced wholesale on every change.
        self._subscribers: tuple[tuple[Callback, frozenset[str] | None], ...] = ()
        self._parents: tuple[EventBus, ...] = ()  # forwarded to (held: they outlive us)
        self._children: list[weakref.ref[EventBus]] = []  # buses forwarding to this one
        # Own subscribers plus the parents that have listeners: whether publishing reaches
        # anyone. An attribute, not a property: the loop reads it every step.
        self.subscriber_count = 0

    def subscribe(
        self, callback: Callback, kinds: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Call `callback(event)` for every published event (only `kinds` when given).

        Returns a callable that unsubscribes; calling it twice is harmless.
        """
        if not callable(callback):
            raise ValueError(f"callback={callback!r}: must be callable")
        if isinstance(kinds, str):
            kinds = (kinds,)
        kind_set = None if kinds is None else frozenset(kinds)
        entry = (callback, kind_set)
        with self._lock:
            self._subscribers = (*self._subscribers, entry)
        self._recount()

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not entry)
            self._recount()

        return unsubscribe

    def forward_to(self, parent: EventBus) -> Callable[[], None]:
        """Publish every event on `parent` too, first, while it has listeners. Returns a
        callable that stops forwarding (calling it twice is harmless)."""
        if not isinstance(parent, EventBus) or parent is self or self in parent._ancestors():
            raise ValueError(
                f"parent={parent!r}: must be another EventBus, not one that forwards here"
            )
        me = weakref.ref(self)
        with parent._lock:
            parent._children = [c for c in parent._children if c() is not None] + [me]
        with self._lock:
            self._parents = (*self._parents, parent)
        self._recount()

        def stop() -> None:
            with parent._lock:
                parent._children = [c for c in parent._children if c is not me and c() is not None]
            with self._lock:
                self._parents = tuple(p for p in self._parents if p is not parent)
            self._recount()

        return stop

    def _ancestors(self) -> set[EventBus]:
        """The buses this one forwards to, directly or through others."""
        found: set[EventBus] = set()
        todo = list(self._parents)
        while todo:
            bus = todo.pop()
            if bus not in found:
                found.add(bus)
                todo.extend(bus._parents)
        return found

    def _recount(self) -> None:
        """Update subscriber_count, and the counts of the buses forwarding to this one when
        whether it has listeners changed (a child's count reads it: no lock is nested)."""
        with self._lock:
            before = self.subscriber_count
            self.subscriber_count = len(self._subscribers) + sum(
                1 for p in self._parents if p.subscriber_count
            )
            alive = [(ref, ref()) for ref in self._children]
            self._children = [ref for ref, child in alive if child is not None]  # pruned
            children = [child for _, child in alive if child is not None]
        if bool(before) != bool(self.subscriber_count):
            for child in children:
                child._recount()

    def publish(self, event: Event) -> None:
        for parent in self._parents:
            if parent.subscriber_count:
                parent.publish(event)
        for callback, kinds in self._subscribers:
            if kinds is not None and event.kind not in kinds:
                continue
            try:
                callback(event)
            except Exception:
                _log.exception(
                    "event subscriber %r raised on %s (step %d); ignored",
                    callback,
                    event.kind,
                    event.step,
                )
