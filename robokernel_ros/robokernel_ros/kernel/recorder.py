"""Shared bookkeeping of one episode: events with seq/t/wall, the trace writer, counters,
the record and its end summary, the error record of a failure, the checks of the parts.

Both the driven EpisodeRunner and the served ServedSession record through this, so
their events and run directories are the same.
"""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from . import events as ev
from .events import Event, EventBus
from .operator import OperatorChannel
from .shield import Intervention, ShieldResult
from .spec import EnvSpec, is_int
from .trace import RunWriter, TraceStore, snapshot

_ARRAY, _NUMPY_SCALAR = np.ndarray, np.generic  # read per observation value: no lookups

# error categories (EpisodeRecord.error["category"]; "kernel_error" for a kernel bug)
POLICY_ERROR = "policy_error"
POLICY_TIMEOUT = "policy_timeout"
ENV_ERROR = "env_error"
TELEOP_ERROR = "teleop_error"  # the runner's teleop source raised (docs/operator.md)


class EpisodeOutcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    TRUNCATED = "truncated"  # the env truncated, or max_steps was reached
    STOPPED = "stopped"  # operator stop()
    ESTOPPED = "estopped"  # operator estop() (latched)
    WATCHDOG = "watchdog"  # max_hold_steps consecutive holds
    ERROR = "error"  # policy error, policy timeout or env error


# Outcomes an operator verdict may turn into success or failure (safety and
# infrastructure outcomes stay what they were; the verdict is still kept).
VERDICT_OVERRIDABLE = frozenset(
    {
        EpisodeOutcome.SUCCESS,
        EpisodeOutcome.FAILURE,
        EpisodeOutcome.TRUNCATED,
        EpisodeOutcome.STOPPED,
    }
)


def apply_verdict(
    outcome: EpisodeOutcome, status: str, verdict: Mapping[str, Any] | None
) -> tuple[EpisodeOutcome, str]:
    """The outcome and status an operator verdict leaves: the verdict's outcome, with the
    status "<outcome>: operator verdict (<note>)", when one was given and `outcome` is
    VERDICT_OVERRIDABLE; else `outcome` and `status` as they were. The driven loop, a
    verdict given right after its episode and the served session all end through this."""
    if verdict is None or outcome not in VERDICT_OVERRIDABLE:
        return outcome, status
    outcome = EpisodeOutcome(verdict["outcome"])
    note = verdict["note"]
    return outcome, f"{outcome.value}: operator verdict" + (f" ({note})" if note else "")


@dataclass
class CompatReport:
    """How well the agent's actions matched the env's action keys.

    actions: agent actions reviewed; resolved: those naming exactly the action keys.
    missing_keys / unknown_keys: keys filled from the hold action / dropped, each
    with how many actions it affected in missing_counts / unknown_counts.
    """

    actions: int = 0
    resolved: int = 0
    missing_counts: Counter[str] = field(default_factory=Counter)
    unknown_counts: Counter[str] = field(default_factory=Counter)

    @property
    def missing_keys(self) -> list[str]:
        return sorted(self.missing_counts)

    @property
    def unknown_keys(self) -> list[str]:
        return sorted(self.unknown_counts)

    @property
    def action_resolution_rate(self) -> float:
        return self.resolved / self.actions if self.actions else 1.0

    def count(self, result: ShieldResult, mapping: bool) -> None:
        self.actions += 1
        if not mapping:
            return
        if result.missing_keys:
            self.missing_counts.update(result.missing_keys)
        if result.unknown_keys:
            self.unknown_counts.update(result.unknown_keys)
        if not result.missing_keys and not result.unknown_keys:
            self.resolved += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "missing_keys": self.missing_keys,
            "unknown_keys": self.unknown_keys,
            "action_resolution_rate": self.action_resolution_rate,
            "actions": self.actions,
            "resolved": self.resolved,
            "missing_counts": dict(self.missing_counts),
            "unknown_counts": dict(self.unknown_counts),
        }


@dataclass
class Execution:
    """What the loop executed, counted once a step's command has gone to the env (a step
    whose env.step raised, or that an e-stop ended after its review, executed nothing).

    exact: policy actions (not holds) naming exactly the action keys, as the fast review
        passes them; other: the rest of the executed policy actions (each also handed to
        the runner's `count_action`, for a caller that tallies their keys).
    holds: hold actions executed (an operator stop's hold included).
    operator: steps whose command the operator decided (paused or correcting: the
        teleop source's command or a hold, docs/operator.md); not counted above.
    seam_hits / seam_blocks: chunk merges after the first with no hold executed since the
        previous merge / with at least one (the robot held: the chunk came late).
    """

    exact: int = 0
    other: int = 0
    holds: int = 0
    operator: int = 0
    seam_hits: int = 0
    seam_blocks: int = 0

    @property
    def actions(self) -> int:
        return self.exact + self.other


@dataclass
class EpisodeRecord:
    """The summary of one episode (the trace holds the rest); `execution` is None for a
    served session, whose caller executes its actions."""

    outcome: EpisodeOutcome
    safety_interventions: int
    events: int
    compat: CompatReport
    holds: int = 0
    chunks: int = 0
    verdict: dict[str, Any] | None = None
    status: str = ""
    steps: int = 0
    trace_path: Path | None = None
    run_id: str = ""
    total_reward: float = 0.0
    elapsed_s: float = 0.0
    error: dict[str, Any] | None = None  # category, type, message, traceback
    execution: Execution | None = None
    # With a teleop source: interventions, intervention_steps, first_intervention_step
    # (None when the operator never took over); None without one (docs/operator.md).
    takeover: dict[str, Any] | None = None

    @property
    def success(self) -> bool:
        return self.outcome == EpisodeOutcome.SUCCESS


def episode_summary(record: EpisodeRecord) -> dict[str, Any]:
    """The episode.end event's data (and the summary merged into meta.json)."""
    return {
        "outcome": record.outcome.value,
        "status": record.status,
        "steps": record.steps,
        "holds": record.holds,
        "chunks": record.chunks,
        "safety_interventions": record.safety_interventions,
        "compat": record.compat.to_dict(),
        "verdict": record.verdict,
        "total_reward": record.total_reward,
        "elapsed_s": record.elapsed_s,
        "events": record.events,
    } | ({} if record.takeover is None else {"takeover": record.takeover})


def error_info(
    category: str, exc: BaseException | None, message: str | None = None
) -> dict[str, Any]:
    """EpisodeRecord.error of a failure: its category, the exception's type, message and
    traceback (a timeout has no exception: type TimeoutError, `message` given)."""
    if exc is None:
        return {
            "category": category,
            "type": "TimeoutError",
            "message": message or "",
            "traceback": "",
        }
    return {
        "category": category,
        "type": type(exc).__name__,
        "message": message or str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


class EpisodeOver(Exception):  # noqa: N818 - control flow, never leaves the kernel
    """Ends an episode early with an outcome (raised by an Episode's steps; the loop, or
    the served session, turns it into the episode's outcome)."""

    def __init__(
        self, outcome: EpisodeOutcome, status: str, error: dict[str, Any] | None = None
    ) -> None:
        super().__init__(status)
        self.outcome = outcome
        self.status = status
        self.error = error

    @classmethod
    def failure(cls, category: str, exc: BaseException, where: str = "") -> EpisodeOver:
        """An `error` outcome for an exception of the policy or the env (`where`: the call)."""
        call = f"{where}: " if where else ""
        return cls(
            EpisodeOutcome.ERROR,
            f"error: {category}: {call}{type(exc).__name__}: {exc}",
            error_info(category, exc),
        )


def check_episode_parts(
    agent: Any,
    trace: Any,
    bus: Any,
    safety: Any,
    image_every: Any,
    operator: Any,
) -> None:
    """The constructor checks the EpisodeRunner and the ServedSession share (ValueError
    naming the parameter and its domain)."""
    for name in ("reset", "act"):
        if not callable(getattr(agent, name, None)):
            raise ValueError(f"agent={type(agent).__name__}: has no {name}() method")
    if trace is not None and not isinstance(trace, TraceStore):
        raise ValueError(f"trace={trace!r}: must be a TraceStore or None")
    if bus is not None and not isinstance(bus, EventBus):
        raise ValueError(f"bus={bus!r}: must be an EventBus or None")
    if safety is not None and not isinstance(safety, Mapping):
        raise ValueError(f"safety={safety!r}: must be a mapping or None")
    if not (is_int(image_every) and image_every >= 0):
        raise ValueError(f"image_every={image_every!r}: must be an integer >= 0 (0: no images)")
    if operator is not None and not isinstance(operator, OperatorChannel):
        raise ValueError(f"operator={operator!r}: must be an OperatorChannel or None")


def env_description(spec: EnvSpec) -> dict[str, Any]:
    return {
        "action_keys": list(spec.action_keys),
        "control": spec.control,
        "control_hz": spec.control_hz,
        "action_limits": {k: [float(lo), float(hi)] for k, (lo, hi) in spec.action_limits.items()},
        "gripper_keys": list(spec.gripper_keys),
    }


class EpisodeRecorder:
    """Publishes one episode's events (seq, t, wall, run_id filled in) and writes its trace.

    The trace's writer is fed here, first, not through the bus: while the bus has no
    subscribers a traced event goes to the writer as its fields (RunWriter.write_fields,
    the same line) without an Event object; `traced or bus.subscriber_count` says
    whether anyone records an event at all (the loop builds none otherwise).
    """

    def __init__(self, bus: EventBus, trace: TraceStore | None, *, image_every: int = 1) -> None:
        self.bus = bus
        self.trace = trace
        self.image_every = image_every
        self.writer: RunWriter | None = None
        self.traced = False  # a writer is open: every event is recorded
        self.run_id = ""
        self.seq = 0
        self.t = 0.0  # the episode clock of the step being recorded
        self.t0 = time.monotonic()
        self.safety_interventions = 0
        self.compat = CompatReport()
        self._last_frames: dict[Any, Any] = {}  # the camera frames recorded last
        self._deferred: list[Event] | None = None  # events held until deliver()

    def start(self, data: dict[str, Any]) -> None:
        self.t0 = time.monotonic()
        if self.trace is not None:
            self.writer = self.trace.open_run()
            self.run_id = self.writer.run_id
            self.traced = True
        data = {"run_id": self.run_id, **data}
        self.emit(ev.EPISODE_START, 0, data)

    @property
    def trace_path(self) -> Path | None:
        return self.writer.path if self.writer is not None else None

    def emit(self, kind: str, step: int, data: dict[str, Any], at: float | None = None) -> None:
        """Record and publish (or hold, see defer) one event, stamped `wall`: now, or `at`
        (a time.monotonic() reading) for an event that happened before it is emitted."""
        seq = self.seq
        self.seq = seq + 1
        listeners = self.bus.subscriber_count
        if listeners or self.traced:
            wall = (time.monotonic() if at is None else at) - self.t0
            if self._deferred is not None:
                self._deferred.append(Event(kind, step, data, self.t, wall, seq, self.run_id))
            elif listeners:
                self._deliver(Event(kind, step, data, self.t, wall, seq, self.run_id))
            else:  # the trace alone: no Event to build
                self.writer.write_fields(seq, kind, step, self.t, wall, data)  # type: ignore[union-attr]

    @property
    def events_at_end(self) -> int:
        """The episode's events once episode.end is emitted (the record's `events`)."""
        return self.seq + 1

    def count_exact(self) -> None:
        """Count a policy action the shield's fast review passed: exactly the action keys."""
        compat = self.compat
        compat.actions += 1
        compat.resolved += 1

    def count_reviewed(self, result: ShieldResult, proposed: Any) -> None:
        """Count a policy action after the shield's full review (`result`)."""
        if result.missing_keys or result.unknown_keys or result.refused:
            self.compat.count(result, type(proposed) is dict or isinstance(proposed, Mapping))
        else:
            self.count_exact()

    def skip(self, count: int = 1) -> None:
        """Count `count` events that nobody records (no trace, no subscriber): the loop
        builds none, and seq numbers do not depend on who listens."""
        self.seq += count

    def _deliver(self, event: Event) -> None:
        writer = self.writer
        if writer is not None:
            writer.write(event)
        self.bus.publish(event)

    def defer(self) -> None:
        """Hold the events emitted from now on (stamped as they are emitted) until
        `deliver()`: a wall-clock step's events before its command reach the subscribers
        (the trace, the bag, ROS) right after the command, in their order, so that their
        work does not delay it."""
        if self._deferred is None:
            self._deferred = []

    def deliver(self) -> None:
        """Publish the held events, in order, and stop holding; a no-op when none are held."""
        deferred = self._deferred
        self._deferred = None
        if deferred:
            for event in deferred:
                self._deliver(event)

    def observation(self, step: int, observation: Any) -> None:
        """Publish the observation event: data["obs"] is a one-level snapshot (`snapshot`):
        top-level numpy values become lists, nested containers are shared with the env's
        observation and encoded as they are; images go in data["images"] on image steps,
        unless every frame is the read-only array recorded last (an env whose cameras are
        slower than its loop, like a ROS robot's, hands out each frame once read-only:
        recorded once, the exporters repeat it as they do between image_every steps)."""
        if not (self.traced or self.bus.subscriber_count):
            self.skip()  # counted all the same, so seq numbers do not depend on listeners
            return
        images = None
        if type(observation) is dict or isinstance(observation, Mapping):
            obs = {}
            for k, v in observation.items():
                if k == "images":
                    continue
                if type(v) is _ARRAY or isinstance(v, _NUMPY_SCALAR):
                    v = v.tolist()
                obs[k if type(k) is str else str(k)] = v
            if self.image_every and step % self.image_every == 0:
                images = observation.get("images")
                if images and self._seen_frames(images):
                    images = None
        else:
            obs = snapshot(observation)
        data: dict[str, Any] = {"obs": obs}
        if images:
            data["images"] = dict(images)
        self.emit(ev.OBSERVATION, step, data)

    def _seen_frames(self, images: Any) -> bool:
        """True when `images` holds exactly the read-only arrays recorded last (then not
        recorded again); else they become the last recorded ones."""
        if type(images) is not dict and not isinstance(images, Mapping):
            return False
        last = self._last_frames
        if len(last) == len(images) and all(
            last.get(k) is v and type(v) is np.ndarray and not v.flags.writeable
            for k, v in images.items()
        ):
            return True
        self._last_frames = dict(images)
        return False

    def interventions(self, step: int, interventions: Sequence[Intervention]) -> None:
        for iv in interventions:
            self.safety_interventions += 1
            self.emit(ev.SAFETY_INTERVENTION, step, {"step": step, **iv.to_dict()})

    def end(self, summary: dict[str, Any], step: int) -> None:
        self.deliver()
        try:
            self.emit(ev.EPISODE_END, step, summary)
        finally:
            self.close()

    def close(self) -> None:
        self.traced = False
        if self.writer is not None:
            self.writer.close()
