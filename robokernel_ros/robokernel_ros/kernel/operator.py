"""The operator channel (thread-safe stop, latched e-stop, reset confirmation, verdicts,
takeover: pause / correct / resume) and the one latch type every e-stop of the project
is (`Latch`).

Any thread (a ROS service callback, a UI, a test) calls the methods; the episode loop
reads the flags at every step boundary and publishes an `operator.*` event for each
call it sees during an episode.

    latch = Latch()
    latch.latch("estop topic: pressed")     # True: it was clear; who/why/when are kept
    latch.latched, latch.by, latch.at       # True, "estop topic: pressed", time.time()
    latch.clear()                           # True: it was latched
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

VERDICT_OUTCOMES = ("success", "failure")
AUTONOMOUS, PAUSED, CORRECTING = "autonomous", "paused", "correcting"
MODES = (AUTONOMOUS, PAUSED, CORRECTING)


class Latch:
    """A latched fault (an e-stop): set by latch(), held until clear(). Thread-safe.

    latched: whether it is set (a plain read, cheap enough for a per-step check).
    by: who or what latched it ("" when clear); why: the reason given with it ("" when
    none); at: when (time.time(), None when clear). A latch() while latched keeps the
    first latch's by/why/at: the fault that stopped things is the one reported.
    """

    __slots__ = ("_at", "_by", "_latched", "_lock", "_why")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latched = False
        self._by = ""
        self._why = ""
        self._at: float | None = None

    def latch(self, by: str = "", why: str = "") -> bool:
        """Latch; True when it was clear before (this call latched it)."""
        with self._lock:
            if self._latched:
                return False
            self._by, self._why, self._at = str(by), str(why), time.time()
            self._latched = True
            return True

    def clear(self) -> bool:
        """Release; True when it was latched."""
        with self._lock:
            was = self._latched
            self._latched = False
            self._by, self._why, self._at = "", "", None
            return was

    @property
    def latched(self) -> bool:
        return self._latched

    @property
    def by(self) -> str:
        return self._by

    @property
    def why(self) -> str:
        return self._why

    @property
    def at(self) -> float | None:
        return self._at

    def __repr__(self) -> str:
        if not self._latched:
            return "Latch(clear)"
        return f"Latch(latched by {self._by!r}" + (f": {self._why}" if self._why else "") + ")"


class OperatorChannel:
    """Operator input for an EpisodeRunner (or ServedSession).

    stop(): end the episode at the next step boundary (outcome "stopped"; the hold
        action executes last).
    estop(by="operator", why=""): end it at once (outcome "estopped") and latch: later
        runs return at once until clear_fault(). The latch (`estop_latch`, a Latch) keeps
        who latched it, why and when.
    clear_fault(): release the latched e-stop.
    reset_done(): confirm the workcell was reset (when the env requires confirmation).
    verdict(outcome, note=""): "success" or "failure" from the operator; decides the
        outcome of the current episode, or of the one that just ended.

    Takeover (docs/operator.md): `mode` is "autonomous" (the policy drives), "paused"
    (the robot holds) or "correcting" (the runner's teleop source drives, through the
    handover limiter and the shield; the policy keeps inferring in the shadow).
    pause(by=""), correct(by=""), resume(by=""): each returns "" when accepted (also
    when the mode already is the one asked for: nothing changes then) or a one-line
    refusal that says why: no teleop source attached to the runner (pause and correct),
    no episode running, the e-stop latched (pause and correct). A refused call changes
    nothing. The loop sees the mode at its next step boundary; every episode starts
    autonomous and the mode returns to autonomous when it ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._estop = Latch()
        self._stop_requested = False
        self.stop_reason = ""  # the first stop's reason ("" when none was given)
        self._reset_confirmed = threading.Event()
        self._wake = threading.Event()  # set on every call: interrupts the loop's waits
        self._verdict: dict[str, Any] | None = None
        self._notices: list[tuple[str, dict[str, Any]]] = []
        self.has_notices = False  # read without the lock by the loop (a cheap per-step check)
        self._late_verdict: Callable[[dict[str, Any]], None] | None = None
        self._mode = AUTONOMOUS
        self.mode_by = ""  # who asked for the current mode ("" when none said)
        self.mode_changes = 0  # counts accepted mode changes (the loop compares it)
        self.teleop_name: str | None = None  # the attached teleop source (None: none)
        self._in_episode = False

    # -- operator side ---------------------------------------------------------------
    def stop(self, reason: str = "") -> None:
        """End the episode at the next step boundary; `reason` (e.g. "interrupted") goes
        into the operator.stop event and the episode's status."""
        with self._lock:
            if not self._stop_requested:
                self.stop_reason = str(reason)
            self._stop_requested = True
            self._notice("operator.stop", {"reason": str(reason)} if reason else {})

    def estop(self, by: str = "operator", why: str = "") -> None:
        with self._lock:
            self._estop.latch(by, why)
            self._notice("operator.estop", {})

    def clear_fault(self) -> None:
        with self._lock:
            self._estop.clear()
            self._notice("operator.clear_fault", {})

    def reset_done(self) -> None:
        with self._lock:
            self._reset_confirmed.set()
            self._notice("operator.reset_done", {})

    def verdict(self, outcome: str, note: str = "") -> None:
        outcome = getattr(outcome, "value", outcome)
        if outcome not in VERDICT_OUTCOMES:
            raise ValueError(f"outcome={outcome!r}: must be one of {list(VERDICT_OUTCOMES)}")
        if not isinstance(note, str):
            raise ValueError(f"note={note!r}: must be a string")
        data = {"outcome": outcome, "note": note, "at": time.time()}
        with self._lock:
            late = self._late_verdict
            if late is None:
                self._verdict = data
                self._notice("operator.verdict", data)
        if late is not None:
            late(data)

    def pause(self, by: str = "") -> str:
        """Hold the robot (the policy stops driving); "" or the refusal."""
        return self._set_mode(PAUSED, "pause", by)

    def correct(self, by: str = "") -> str:
        """Give the robot to the teleop source; "" or the refusal."""
        return self._set_mode(CORRECTING, "correct", by)

    def resume(self, by: str = "") -> str:
        """Give the robot back to the policy (its queue flushed, re-queried from the
        current observation); "" or the refusal."""
        return self._set_mode(AUTONOMOUS, "resume", by)

    def _set_mode(self, mode: str, verb: str, by: str) -> str:
        by = str(by)
        with self._lock:
            if mode != AUTONOMOUS and self.teleop_name is None:
                return (
                    f"{verb} refused: no teleop source is attached to the runner "
                    "(EpisodeRunner(teleop=...), or the contract's teleop channel)"
                )
            if not self._in_episode:
                return f"{verb} refused: no episode is running"
            if mode != AUTONOMOUS and self._estop.latched:
                return (
                    f"{verb} refused: the e-stop is latched ({self._estop.by}); clear_fault() first"
                )
            if mode == self._mode:
                return ""
            self._mode = mode
            self.mode_by = by
            self.mode_changes += 1
            self._notice(f"operator.{verb}", {"by": by} if by else {})
            return ""

    @property
    def mode(self) -> str:
        """ "autonomous", "paused" or "correcting"."""
        return self._mode

    def attach_teleop(self, name: str | None) -> None:
        """Name the teleop source the runner drives with while correcting (None: none;
        pause and correct are then refused). Detaching while correcting pauses: the robot
        holds until resume() (it fails closed: the policy is not handed the robot unasked)."""
        with self._lock:
            self.teleop_name = None if name is None else str(name)
            if name is None and self._mode == CORRECTING:
                self._mode = PAUSED
                self.mode_by = "teleop source detached"
                self.mode_changes += 1

    @property
    def estopped(self) -> bool:
        return self._estop.latched

    @property
    def estop_latch(self) -> Latch:
        """The e-stop's Latch (read it: estop() and clear_fault() are the ways to change it)."""
        return self._estop

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    # -- loop side -------------------------------------------------------------------
    def _notice(self, kind: str, data: dict[str, Any]) -> None:
        self._notices.append((kind, data))
        self.has_notices = True
        self._wake.set()

    def take_notices(self) -> list[tuple[str, dict[str, Any]]]:
        """The operator calls since the last take, oldest first."""
        with self._lock:
            notices, self._notices = self._notices, []
            self.has_notices = False
            return notices

    def begin_episode(self, continued: bool = False) -> None:
        """Forget the previous episode's stop, verdict and notices (the e-stop stays latched).
        continued=True (a sentry rotation: the same run goes on in a new episode): forget
        only the verdict; a stop, the notices not yet published and the mode carry on."""
        with self._lock:
            if continued:
                self._verdict = None
                self._late_verdict = None
                self._in_episode = True
                return
            self._stop_requested = False
            self.stop_reason = ""
            self._verdict = None
            self._notices = []
            self.has_notices = False
            self._late_verdict = None
            self._wake.clear()
            self._mode = AUTONOMOUS
            self.mode_by = ""
            self._in_episode = True

    def end_episode(self) -> None:
        """The episode ended: the mode returns to autonomous; pause/correct/resume are
        refused until the next begin_episode()."""
        with self._lock:
            self._in_episode = False
            self._mode = AUTONOMOUS
            self.mode_by = ""

    def take_verdict(self) -> dict[str, Any] | None:
        with self._lock:
            return self._verdict

    def set_late_verdict_handler(self, handler: Callable[[dict[str, Any]], None] | None) -> None:
        """Where a verdict given after the episode ended goes (the runner updates its record)."""
        with self._lock:
            self._late_verdict = handler

    def clear_reset_confirmation(self) -> None:
        self._reset_confirmed.clear()

    def wait_reset_done(self, timeout_s: float | None = None) -> bool:
        """Wait for reset_done(); returns early (False) on stop or e-stop, or at the timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._reset_confirmed.is_set():
            if self._estop.latched or self._stop_requested:
                return False
            remaining = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if remaining <= 0:
                return False
            self._wake.wait(remaining)
            self._wake.clear()
        return True

    def wait(self, timeout_s: float) -> None:
        """Sleep up to timeout_s, waking early when the operator calls anything."""
        if self._wake.wait(timeout_s):
            self._wake.clear()
