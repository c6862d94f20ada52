"""The handle of an in-flight rollout: its state, stop, latched e-stop and operator relay.

    control = RolloutControl(("arm",), "run_policy")
    control.stop("stop_policy")   # the running episode ends "stopped" at its next step
    control.estop()               # ends "estopped" at once; no further episode runs

SimWorkcell keeps one per queued or running call (list_policies_running reads them,
stop_policy sets them); the episode attaches its OperatorChannel so a stop, an e-stop,
a reset confirmation or a verdict reaches the kernel loop.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any

from robokernel_ros.kernel.operator import Latch

from .results import CallResult

#: Why a stop ended an episode, when its stopped_reason says more than "stopped": a
#: Ctrl-C of the process, a cancel of the ROS action that ran it, or the runner node's
#: lifecycle deactivate.
STOP_REASONS = ("interrupted", "cancelled", "deactivated")

_ids = itertools.count(1)


class RolloutControl:
    """One in-flight rollout: what list_policies_running reads and stop_policy sets.

    state: "queued" (registered, its thread not started yet), "running", "finished".
    """

    def __init__(self, robots: Sequence[str], call: str, *, scene: str = "workcell") -> None:
        self.id = next(_ids)
        self.robots = tuple(robots)
        self.call = call
        self.scene = scene
        self.state = "queued"
        self.registered_at = time.monotonic()
        self.thread_ident: int | None = None
        self.episode = 0
        self.step = 0
        self.n_episodes = 1
        self.provider = ""
        self.result: CallResult | None = None  # the finished call's result
        self.done = threading.Event()
        # set once by stop(), never cleared: a plain attribute, read by every step
        self.stop_requested = False
        self._lock = threading.Lock()
        self._operator: Any = None  # the running episode's OperatorChannel
        self._last_operator: Any = None  # the last episode's (a late verdict goes there)
        self._estop = Latch()
        self.stop_reason = ""

    @property
    def estopped(self) -> bool:
        return self._estop.latched

    def stop(self, reason: str = "stopped") -> None:
        with self._lock:
            if not self.stop_requested:
                self.stop_reason = reason
            self.stop_requested = True
            op = self._operator
        if op is not None:
            op.stop(self.stop_reason)

    def estop(self) -> None:
        """E-stop: the running episode ends "estopped" at once, an episode that has not
        attached its operator yet ends so at its first step, and no further episode runs."""
        with self._lock:
            self._estop.latch("rollout estop()")
            op = self._operator
        if op is not None:
            op.estop("rollout estop()")
        self.stop("estop")

    def reset_done(self) -> bool:
        """Confirm the reset the running episode waits for; False when no episode runs."""
        with self._lock:
            op = self._operator
        if op is None:
            return False
        op.reset_done()
        return True

    def verdict(self, outcome: str, note: str = "") -> bool:
        """The operator's verdict on the running episode, or else on the one that just
        ended (its record and trace are updated); False when no episode has run."""
        with self._lock:
            op = self._operator if self._operator is not None else self._last_operator
        if op is None:
            return False
        op.verdict(outcome, note)
        return True

    def takeover(self, verb: str, by: str = "") -> str | None:
        """The running episode's pause / correct / resume (verb), asked by `by`: "" when
        accepted, the kernel's refusal, or None when no episode is running."""
        with self._lock:
            op = self._operator
        if op is None:
            return None
        return str(getattr(op, verb)(by=by))

    def attach_operator(self, operator: Any) -> None:
        with self._lock:
            if self._operator is not None:
                self._last_operator = self._operator
            self._operator = operator
            estopped = self._estop.latched
        if operator is not None and estopped:
            operator.estop("rollout estop()")

    def describe(self) -> dict[str, Any]:
        return {
            "robots": list(self.robots),
            "call": self.call,
            "state": self.state,
            "policy": self.provider,
            "episode": self.episode,
            "n_episodes": self.n_episodes,
            "step": self.step,
            "running_s": time.monotonic() - self.registered_at,
            "stop_requested": self.stop_requested,
            "scene": self.scene,
            "rollout_id": self.id,
        }
