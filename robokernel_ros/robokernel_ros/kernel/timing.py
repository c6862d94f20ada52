"""How policy time relates to robot time: the `Timing` of an episode.

sync (default): the world waits for every policy call; a chunk is requested when the
  queue is empty and its first `execution_steps` actions run (all when None).
realtime: the robot keeps moving while the policy thinks. A chunk is requested when at
  most `refill_steps` actions remain and none is in flight; an empty queue executes the
  hold action; `max_hold_steps` consecutive holds end the episode (outcome "watchdog").
  The aligned merge follows the robot's progress along its plans, not the clock: a chunk
  computed from the observation of step s that arrives at step t has its first k actions
  dropped, k the policy actions (not holds) executed at steps s..t-1, and the rest
  replace the queue. While the robot executed queued actions all along, k = t - s (the
  actions whose time has passed); while it held, it did not move, so the chunk resumes
  where it stopped: the episode's first chunk, or one that arrives after the queue ran
  empty, drops nothing, and one whose queue ran dry after k < t - s actions drops k.
  Dropping t - s there would make the first command jump several plan increments from
  rest. This is LeRobot async inference's rule: its RobotClient advances `latest_action`
  only when it executes an action, and `_aggregate_action_queues` skips the incoming
  actions whose timestep is not after it (lerobot/async_inference/robot_client.py; its
  observation carries the last executed action's timestep, so it skips that chunk row
  too, where a kernel chunk's row 0 is the action for step s). RTC policies are told the
  queue at the request and `delay_steps` (the expected latency in steps, unchanged by
  this rule): the k dropped actions are that queue's first k, the ones RTC guides the
  chunk's first rows to, and when the queue runs dry first the chunk resumes after them.
  clock="virtual": the latency (fixed by `latency_s`, else measured around act) becomes
    d = floor(latency x control_hz) + 1 steps that run before the merge (`delay_steps`):
    deterministic. The merge is at the first step boundary strictly after the chunk
    came back, as on the wall clock, where a step asks for a chunk only after it has
    looked for one that arrived: the chunk of step s merges at s + 1 at the earliest,
    and one that takes exactly k periods misses the k-th boundary (bench/fidelity.py
    measures this against the ROS workcell).
  clock="wall": act runs in a worker thread and the loop ticks at control_hz on a
    monotonic clock; the arrival step is measured.
In sync mode clock="wall" paces the loop at control_hz too (the world still waits).

A wall-clock loop is paced by one `Pacer`: absolute deadlines t0 + k x period on the
monotonic clock, so a late step does not push the later ones (no drift); more than a
period late restarts the schedule a period from now rather than catching up with a
burst of commands. An environment for a real robot may own the pacer (`env.pacer`): the
kernel then waits on the env's, and the env's own guard against an unpaced caller
(`Pacer.guard`) sees the schedule kept and does not sleep a second time.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .scheduling import check_priority
from .spec import is_int

TimingMode = Literal["sync", "realtime"]
TimingClock = Literal["virtual", "wall"]

# 0.1 s at 50 Hz is 5 whole periods (merged 6 steps later), not 4 and a bit: float error
# in latency x rate is forgiven.
DELAY_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Timing:
    mode: TimingMode = "sync"
    clock: TimingClock = "virtual"
    execution_steps: int | None = None
    refill_steps: int = 0
    latency_s: float | None = None
    max_hold_steps: int = 50

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "realtime"):
            raise ValueError(f"mode={self.mode!r}: must be 'sync' or 'realtime'")
        if self.clock not in ("virtual", "wall"):
            raise ValueError(f"clock={self.clock!r}: must be 'virtual' or 'wall'")
        if self.execution_steps is not None and not (
            is_int(self.execution_steps) and self.execution_steps >= 1
        ):
            raise ValueError(
                f"execution_steps={self.execution_steps!r}: must be an integer >= 1 or None"
            )
        if not (is_int(self.refill_steps) and self.refill_steps >= 0):
            raise ValueError(f"refill_steps={self.refill_steps!r}: must be an integer >= 0")
        latency_ok = self.latency_s is None or (
            isinstance(self.latency_s, int | float)
            and not isinstance(self.latency_s, bool)
            and math.isfinite(self.latency_s)
            and self.latency_s >= 0
        )
        if not latency_ok:
            raise ValueError(f"latency_s={self.latency_s!r}: must be a finite number >= 0 or None")
        if not (is_int(self.max_hold_steps) and self.max_hold_steps >= 1):
            raise ValueError(f"max_hold_steps={self.max_hold_steps!r}: must be an integer >= 1")

    @property
    def realtime(self) -> bool:
        return self.mode == "realtime"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def delay_steps(latency_s: float, control_hz: float) -> int:
    """Steps from a chunk's request to its merge when the policy computes for `latency_s`
    seconds: the first step boundary strictly after it (floor(latency x rate) + 1, so at
    least 1; see the module docstring)."""
    return max(0, math.floor(latency_s * control_hz + DELAY_TOLERANCE)) + 1


class Pacer:
    """One wall clock for a control loop: absolute deadlines t0 + k x period.

    `wait()` ends a tick: it sleeps until the next deadline (not at all when that has
    passed); a tick more than a period late restarts the schedule so that the next
    deadline is a period from now. The first `wait()` or `guard()` after `restart()`
    starts the schedule at that moment, but never sooner than a period after the last
    tick of the schedule before: a restart (a reset's last command, then the episode's
    first) does not put two ticks closer than a period. `guard()` is for the one who
    sends the commands (an env's step): when nobody called `wait()` since the last
    command (an unpaced caller), it waits itself, so commands never go out faster than
    the schedule; after a `wait()` it returns at once. Not thread-safe: one loop drives
    it.

    Why the floor: a position controller applies each command when it arrives, so two
    commands a few milliseconds apart (a reset's last, then the episode's first, before
    the floor) are a step of one period's motion in that time; and `settle()` lets a
    reset wait for the floor before the episode's first observation, so that the first
    chunk request is not made a period before the first command (bench/fidelity.py saw
    that as one hold fewer at 30 ms than the virtual clock).
    """

    def __init__(self, period_s: float, *, priority: int = 0) -> None:
        if not (
            isinstance(period_s, int | float)
            and not isinstance(period_s, bool)
            and math.isfinite(period_s)
            and period_s > 0
        ):
            raise ValueError(f"period_s={period_s!r}: must be a positive finite number")
        self.period = float(period_s)
        # The SCHED_FIFO priority of the thread of a loop paced by this clock (0: normal):
        # the kernel's wall-clock loop runs under it (kernel.scheduling).
        self.priority = check_priority("priority", priority)
        self.restarts = 0  # schedules restarted after a tick more than a period late
        self._last_tick: float | None = None  # when the last tick began (monotonic)
        self.restart()

    def restart(self) -> None:
        """Forget the schedule: the next wait() or guard() starts a new one."""
        self._t0: float | None = None
        self._k = 0
        self._waited = False

    def deadline(self) -> float | None:
        """The monotonic time of the next tick (None before the schedule starts)."""
        return None if self._t0 is None else self._t0 + self._k * self.period

    def settle(self) -> None:
        """Sleep until a period after the last tick, the earliest a restarted schedule may
        start (a reset after its last command: the episode's first observation, chunk
        request and command then all come at that moment, as its step 0 would on the
        schedule; else the first command would wait and its request would not)."""
        if self._last_tick is not None:
            remaining = self._last_tick + self.period - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)

    def _start(self) -> None:
        """Start a schedule with a tick now, or a period after the last tick if later."""
        now = time.monotonic()
        if self._last_tick is not None and now < self._last_tick + self.period:
            time.sleep(self._last_tick + self.period - now)
            now = self._last_tick + self.period
        self._t0, self._k = now, 0
        self._last_tick = now

    def wait(self) -> float:
        """Sleep until the next deadline; return how late the tick was (s, <= 0: on time)."""
        now = time.monotonic()
        if self._t0 is None:  # its first tick is a period from now: after the last one
            self._t0, self._k = now, 0
        self._k += 1
        self._waited = True
        deadline = self._t0 + self._k * self.period
        remaining = deadline - now
        if remaining > 0:
            time.sleep(remaining)
            self._last_tick = deadline
        elif remaining < -self.period:
            self._t0 = now + self.period - self._k * self.period
            self.restarts += 1
            time.sleep(self.period)
            self._last_tick = now + self.period
        else:
            self._last_tick = now
        return -remaining

    def guard(self) -> None:
        """Before a command: keep the schedule when nobody waited since the last one."""
        if self._waited:
            self._waited = False
            return
        if self._t0 is None:
            self._start()
            return
        self.wait()
        self._waited = False
