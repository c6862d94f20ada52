"""The interval a command stream's rate guards judge each command over, without ROS.

    clock = CommandClock(max_dt=0.05, period=0.02)   # period None: learned from the stream
    clock.restart()                                  # the next command starts a schedule
    dt = clock.advance(now)                          # a command sent at `now`: its interval

A controller's command source runs on a schedule (t0 + k * T, the runner's
`control_frequency`); its commands reach the shield with the jitter of DDS and of
executors. ros2_control's joint_limits judge velocity and acceleration over the
controller's period, not over the arrival of messages: a command that arrives 3 ms late
followed by one on time is not a speed change. So the velocity and acceleration guards
here judge each command over the advance of a schedule clock `s` that follows the
sender's schedule instead of the command clock `t`:

    s_k  = min(s_{k-1} + T, t_k + T)     dt_k = s_k - s_{k-1}  (at least MIN_DT_S)
    s_k  = t_k - T, dt_k = T               when t_k - T > s_{k-1} + T (more than a period late)

A stream whose arrivals jitter by up to a period around its schedule is credited exactly
T per command, so the guards judge the sender's own steps: a smooth policy within the
limits is not clipped because its messages arrived unevenly. A command later than that
(the sender stalled or paused) is judged as one period too, which is less time than it
took (stricter), and the schedule resumes one period behind its arrival: the commands
that catch up after a stall (the runner's loop makes a late step up with the next ones,
or restarts its schedule) are judged on that schedule.

Fail closed: a command is never credited more than T, and the schedule clock never runs
more than one period (for a learned period, the longest it has judged with) ahead of the
arrival clock, so the time credited to a stream is at most its real span plus one
period. A stream that really is faster than T (bursts, every command twice) is judged
at its real rate, its arrival intervals, once that one period is used up; a stream
slower than T is judged over T, as if its steps took one period (give the shield the
sender's rate, or 0 to learn it). No interval below MIN_DT_S is credited: a guard that
saw dt = 0 would judge nothing.

`t`: the shield node gives each command the time its sender published it (the sample's
source timestamp, `ros.transport.sent_at`), not the time the node got round to it: a
burst of deliveries after a stall of the shield's own process or of the transport is not
a faster sender, and a stream gets the same verdicts however late the shield read it.
What is left is the sender's own jitter (a late step, made up by the next one).

T: `period` (the shield's `command_rate_hz`), or, when None, the stream's own: the mean
of the middle half of its last WINDOW arrival intervals (each at most max_dt). Jitter
cancels in a mean, and the middle half leaves out the stalls; a real change of rate
moves it within WINDOW / 2 commands.
"""

from __future__ import annotations

import collections
import math

#: Arrival intervals the learned period is taken from (long: the period it judges with
#: must not move with each command's jitter, or the guards would read that as speed).
WINDOW = 64
#: Arrivals between two renewals of the learned period (sorting WINDOW costs microseconds).
UPDATE_EVERY = 8
#: The shortest interval credited to one command (a guard given dt <= 0 would pass anything).
MIN_DT_S = 1e-5


class CommandClock:
    """The schedule clock of one command stream (see the module docstring)."""

    def __init__(self, max_dt: float, period: float | None = None) -> None:
        if not (isinstance(max_dt, int | float) and math.isfinite(max_dt) and max_dt > 0):
            raise ValueError(f"max_dt={max_dt!r}: must be a finite number > 0")
        if period is not None and not (
            isinstance(period, int | float) and math.isfinite(period) and 0 < period <= max_dt
        ):
            raise ValueError(f"period={period!r}: must be a number in (0, max_dt={max_dt}] or None")
        self.max_dt = float(max_dt)
        self.period = None if period is None else float(period)
        self._intervals: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._learned = self.max_dt  # the learned period, renewed every UPDATE_EVERY
        self._since_update = 0
        self._schedule: float | None = None  # s of the last command
        self._arrival = 0.0  # t of the last command
        self.last_dt = self.max_dt
        self.last_interval = math.nan  # the last command's time after the one before

    @property
    def first_dt(self) -> float:
        """The interval of a schedule's first command (its reference, the measured state,
        is taken as commanded this long before it): the nominal period, else max_dt."""
        return self.max_dt if self.period is None else self.period

    def restart(self) -> None:
        """Forget the stream: the next command starts a new schedule (`first_dt`)."""
        self._intervals.clear()
        self._learned = self.max_dt
        self._since_update = 0
        self._schedule = None

    def current_period(self) -> float:
        """T: the nominal period, else the stream's own (max_dt before any interval)."""
        if self.period is not None:
            return self.period
        return self._learned

    def advance(self, now: float) -> float:
        """A command is sent at `now` (monotonic seconds): the interval it is judged over.
        A `now` before the last one (a sender's stamp older than the shield's own hold)
        counts as the last one."""
        schedule, arrival = self._schedule, self._arrival
        now = max(now, arrival)
        self._arrival = now
        self.last_interval = now - arrival if schedule is not None else math.nan
        if schedule is None:
            self._schedule = now
            self.last_dt = self.first_dt
            return self.last_dt
        intervals = self._intervals
        intervals.append(min(now - arrival, self.max_dt))
        if self.period is None:
            self._since_update += 1
            if self._since_update >= UPDATE_EVERY or len(intervals) < WINDOW:
                self._since_update = 0
                n = len(intervals)
                middle = sorted(intervals)[n // 4 : n - n // 4]  # the interquartile mean
                self._learned = max(sum(middle) / len(middle), MIN_DT_S)
        period = self.current_period()
        if schedule + period < now - period:
            # More than a period behind the schedule: the sender stalled or paused. Judged
            # as one period (less than it took: stricter); the schedule resumes one period
            # behind this arrival, so the sender's catching up (the runner's loop makes up
            # a late step with the next ones) is not read as speed either.
            dt, target = period, now - period
        else:  # on the schedule, or ahead of the arrivals by at most one period
            target = min(schedule + period, now + period)
            dt = target - schedule
            if dt < MIN_DT_S:
                dt = MIN_DT_S
                target = schedule + dt
        self._schedule = target
        self.last_dt = dt
        return dt
