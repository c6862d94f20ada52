"""The workcell's operator channel: e-stop, clear_fault, reset_done, verdict, takeover
(pause / correct / resume) (thread-safe, for a UI or the ROS runner node), over the
rollouts in flight of a SimWorkcell.

estop() latches the workcell's e-stop: running episodes end "estopped" and every rollout
call is refused until clear_fault(); reset_done() and verdict() reach the running
episodes (a verdict with none running reaches the episode that ended last).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from robokernel_ros.kernel.operator import Latch

from .control import RolloutControl
from .results import envelope, error_envelope


class OperatorChannel:
    """SimWorkcell's operator calls; they read its in-flight population under its lock."""

    _lock: threading.RLock
    _inflight: dict[int, RolloutControl]
    _last: dict[str, dict[str, Any]]
    _last_control: dict[str, RolloutControl]
    _estop: Latch

    @property
    def estopped(self) -> bool:
        """Whether the workcell's e-stop is latched (estop() until clear_fault())."""
        return self._estop.latched

    def estop(self) -> dict[str, Any]:
        """Latch the e-stop: every in-flight rollout's episode ends "estopped" at once (one
        still queued or building its policy ends so at its first step) and runs no further
        episode; every rollout call is refused, naming clear_fault(), until clear_fault()."""
        with self._lock:
            self._estop.latch("workcell estop()")
            controls = list(self._inflight.values())
        for c in controls:
            c.estop()
        robots = sorted({r for c in controls for r in c.robots})
        text = "e-stop latched; " + (
            f"estopping {', '.join(repr(r) for r in robots)}"
            if robots
            else "no rollout was running"
        )
        return envelope(
            "success",
            text + "; call clear_fault() to release it",
            {"estopped": True, "robots": robots, "rollout_ids": [c.id for c in controls]},
        )

    def clear_fault(self, wait_s: float = 10.0) -> dict[str, Any]:
        """Release the latched e-stop: rollouts may start again.

        A rollout the e-stop ended is still in flight while it closes its trace, bag and
        policy; this waits (at most `wait_s`) until each has, so that a start right after
        this answer finds its robot free instead of "already running"."""
        with self._lock:
            ending = [c for c in self._inflight.values() if c.estopped]
        deadline = time.monotonic() + wait_s
        for c in ending:
            c.done.wait(max(0.0, deadline - time.monotonic()))
        was = self._estop.clear()
        text = "e-stop cleared" if was else "no e-stop was latched"
        closing = sorted({r for c in ending if not c.done.is_set() for r in c.robots})
        if closing:
            text += f"; still closing the e-stopped rollout on {', '.join(map(repr, closing))}"
        return envelope(
            "success", text, {"estopped": False, "was_estopped": was, "closing": closing}
        )

    def _operator_targets(self, robot_name: Any, param: str = "robot_name") -> list[RolloutControl]:
        if robot_name is not None and not isinstance(robot_name, str):
            raise ValueError(
                f"{param}={robot_name!r}: must be a robot name, or None / '' for every rollout"
            )
        with self._lock:
            return [c for c in self._inflight.values() if not robot_name or robot_name in c.robots]

    def reset_done(self, robot_name: str | None = None) -> dict[str, Any]:
        """Confirm the reset that the running episode on `robot_name` (None / "": every
        running rollout) waits for. An error when no episode is running there."""
        try:
            controls = self._operator_targets(robot_name)
        except ValueError as exc:
            return error_envelope(str(exc))
        confirmed = [c for c in controls if c.reset_done()]
        robots = sorted({r for c in confirmed for r in c.robots})
        if not robots:
            where = f"on {robot_name!r}" if robot_name else "on this workcell"
            return error_envelope(
                f"reset_done: no episode is running {where}: no reset to confirm",
                {"confirmed": []},
            )
        return envelope(
            "success",
            f"reset confirmed for {', '.join(repr(r) for r in robots)}",
            {"confirmed": robots},
        )

    def verdict(
        self, outcome: str, note: str = "", robot_name: str | None = None
    ) -> dict[str, Any]:
        """The operator's verdict ("success" or "failure") on the running episode on
        `robot_name` (None / "": every running rollout), or, when none runs, on the episode
        that ended last there (its record and trace are updated)."""
        from robokernel_ros.kernel.operator import VERDICT_OUTCOMES

        outcome = getattr(outcome, "value", outcome)
        if outcome not in VERDICT_OUTCOMES:
            return error_envelope(f"outcome={outcome!r}: must be one of {list(VERDICT_OUTCOMES)}")
        if not isinstance(note, str):
            return error_envelope(f"note={note!r}: must be a string")
        try:
            controls = self._operator_targets(robot_name)
        except ValueError as exc:
            return error_envelope(str(exc))
        if not controls:
            with self._lock:
                last = [
                    (self._last[robot]["finished_at"], control)
                    for robot, control in self._last_control.items()
                    if not robot_name or robot == robot_name
                ]
            if last:
                controls = [max(last, key=lambda entry: entry[0])[1]]
        given = [c for c in controls if c.verdict(outcome, note)]
        robots = sorted({r for c in given for r in c.robots})
        if not robots:
            where = f"on {robot_name!r}" if robot_name else "on this workcell"
            return error_envelope(
                f"verdict: no episode has run {where}: nothing to judge", {"judged": []}
            )
        return envelope(
            "success",
            f"verdict {outcome} recorded for {', '.join(repr(r) for r in robots)}",
            {"judged": robots, "outcome": outcome, "note": note},
        )

    def pause(self, robot_name: str | None = None, by: str = "") -> dict[str, Any]:
        """Hold the robot of the running episode on `robot_name` (None / "": every running
        rollout); the kernel's refusal (no teleop source, the e-stop latched) or "no
        episode is running" is the error envelope's text."""
        return self._takeover("pause", robot_name, by)

    def correct(self, robot_name: str | None = None, by: str = "") -> dict[str, Any]:
        """Give the running episode's robot to its teleop source (through the handover
        limiter and the shield; the policy keeps inferring in the shadow)."""
        return self._takeover("correct", robot_name, by)

    def resume(self, robot_name: str | None = None, by: str = "") -> dict[str, Any]:
        """Give the robot back to the policy (its queue flushed, re-queried from the
        current observation)."""
        return self._takeover("resume", robot_name, by)

    def _takeover(self, verb: str, robot_name: Any, by: Any) -> dict[str, Any]:
        if not isinstance(by, str):
            return error_envelope(f"by={by!r}: must be a string")
        try:
            controls = self._operator_targets(robot_name)
        except ValueError as exc:
            return error_envelope(str(exc))
        answers = [(c, c.takeover(verb, by)) for c in controls]
        answers = [(c, a) for c, a in answers if a is not None]
        if not answers:
            where = f"on {robot_name!r}" if robot_name else "on this workcell"
            return error_envelope(f"{verb} refused: no episode is running {where}", {"robots": []})
        refused = [a for _, a in answers if a]
        robots = sorted({r for c, a in answers if not a for r in c.robots})
        if refused:
            return error_envelope("; ".join(dict.fromkeys(refused)), {"robots": robots})
        return envelope(
            "success",
            f"{verb}: {', '.join(repr(r) for r in robots)}" + (f" (by {by})" if by else ""),
            {"robots": robots, "verb": verb},
        )
