"""The review of one command at the controller boundary, without ROS: what the
safety_shield node forwards, clips or refuses, and the hold it sends instead.

    review = CommandReview(joints, limits, command_interface="position", command_rate_hz=50)
    review.measured[i] = q; review.measured_velocity[i] = v   # from the joint states
    review.seed()                       # the first command is judged from the measured state
    verdict = review.review_array(values, now)       # forward_command: one value per joint
    verdict = review.review_trajectory(names, points)  # joint_trajectory: TrajectoryPoints

The guards are the kernel's (`kernel/shield.py`, built by `safety.limits.build_shield`),
the same the episode loop's in-process shield runs:
  - finite and of the right shape, every joint known: else refused;
  - within [min_position, max_position]: passes; outside by at most clip_tolerance x
    range: clipped; further: refused;
  - max_velocity / max_acceleration rate-limit position commands (a velocity interface:
    +-max_velocity, and max_acceleration bounds its change) relative to the last
    command sent. A forward_command stream is judged over its nominal period, not over
    the arrival of its messages (`safety.command_clock`: the period of
    `command_rate_hz`, or learned from the stream's arrivals; at most max_step_dt_s;
    a stream that really is faster is judged at its real rate);
  - a trajectory is checked point by point, each point against the one before it over
    the difference of their time_from_start (the sender's own schedule), its
    velocities / accelerations fields against max_velocity / max_acceleration. The
    first point is judged against where the controller is commanded to be when the
    trajectory arrives: the trajectory it replaces, sampled at that moment (as a
    joint_trajectory_controller continues from its desired state), while that one is
    executing or ended at most one period (command_rate_hz; else max_step_dt_s) ago (a
    stream's next trajectory, judged as its continuation); else against the measured
    state. A trajectory's times count from its arrival, so a stream's arrival jitter is
    judged as the motion the controller executes. Judging a
    stream of trajectories from the measured state instead would make the robot's
    tracking lag (and gravity's sag) a speed limit on the next command.
A refused command is answered by the hold (`Verdict.values`): the measured position
clamped into the limits, frozen until a command passes (zeros for a velocity interface).
`Finding`s use the guard names of robokernel_interfaces/ShieldIntervention.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from robokernel_ros.kernel import FiniteGuard, Intervention, LimitGuard, run_guards
from robokernel_ros.kernel.shield import GuardContext

from .command_clock import CommandClock
from .limits import JointLimit, build_shield

COMMAND_INTERFACES = ("position", "velocity")

# Kernel guard names -> the guard vocabulary of ShieldIntervention, per command interface.
GUARD_NAMES = {
    "position": {
        "finite": "nonfinite",
        "limits": "position",
        "max_velocity": "velocity",
        "max_acceleration": "acceleration",
    },
    "velocity": {"finite": "nonfinite", "limits": "velocity", "max_velocity": "acceleration"},
}

VerdictAction = Literal["passed", "clipped", "refused"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One intervention, as ShieldIntervention carries it: `guard` clipped or refused
    `joint`'s `value` against `limit` ('' / nan where there is none)."""

    guard: str
    joint: str
    value: float
    limit: float
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class TrajectoryPoint:
    """One point of a JointTrajectory: `t` its time_from_start in seconds; the fields in
    the message's joint_names order (velocities / accelerations may be empty)."""

    t: float
    positions: Sequence[float]
    velocities: Sequence[float] = ()
    accelerations: Sequence[float] = ()


@dataclass(frozen=True, slots=True)
class ReviewedPoint:
    """A point that a guard changed: its positions, and the velocities / accelerations to
    send (None: the point's own)."""

    positions: list[float]
    velocities: list[float] | None
    accelerations: list[float] | None


@dataclass(slots=True)
class Verdict:
    """What to do with one command.

    action: "passed" (send the command as it came), "clipped" (send `values` / `points`)
    or "refused" (send the hold, `values`). findings: every intervention, in order.
    values: forward_command: the clipped command or the hold, in joints order.
    points: joint_trajectory, clipped: per point, the ReviewedPoint or None (unchanged).
    """

    action: VerdictAction
    findings: list[Finding] = field(default_factory=list)
    values: list[float] | None = None
    points: list[ReviewedPoint | None] | None = None

    @property
    def refused(self) -> bool:
        return self.action == "refused"


class CommandReview:
    """Reviews the commands of one stream to one controller (see the module docstring).

    joints: the command arrays' order; limits: {joint: JointLimit} for every joint.
    The measured state (`measured`, `measured_velocity`, in joints order) is the node's
    to fill from its joint states; the review reads it to seed and to hold.
    """

    def __init__(
        self,
        joints: Sequence[str],
        limits: Mapping[str, JointLimit],
        *,
        command_interface: str = "position",
        clip_tolerance: float = 0.05,
        max_step_dt_s: float = 0.05,
        command_rate_hz: float = 0.0,
    ) -> None:
        if command_interface not in COMMAND_INTERFACES:
            raise ValueError(
                f"command_interface={command_interface!r}: must be one of {COMMAND_INTERFACES}"
            )
        if command_rate_hz and 1.0 / command_rate_hz > max_step_dt_s:
            raise ValueError(
                f"command_rate_hz={command_rate_hz:g}: its period {1.0 / command_rate_hz:g} s "
                f"exceeds max_step_dt_s={max_step_dt_s:g} (the longest interval credited to "
                "one command); raise max_step_dt_s or the rate"
            )
        self.joints = list(joints)
        self.n = len(self.joints)
        self.interface = command_interface
        self.max_dt = float(max_step_dt_s)
        self.shield = build_shield(
            self.joints,
            limits,
            command_interface=command_interface,
            clip_tolerance=clip_tolerance,
            max_step_dt_s=max_step_dt_s,
        )
        self.clock = CommandClock(self.max_dt, 1.0 / command_rate_hz if command_rate_hz else None)
        self._index = {j: i for i, j in enumerate(self.joints)}
        self._names = GUARD_NAMES[command_interface]
        self._bounds = [(limits[j].min_position, limits[j].max_position) for j in self.joints]
        # Point-field guards of trajectories: velocities / accelerations within +-limit.
        self._point_guards = {
            "velocities": [
                FiniteGuard(),
                LimitGuard(
                    {
                        j: (-lim.max_velocity, lim.max_velocity)
                        for j, lim in limits.items()
                        if lim.max_velocity
                    },
                    clip_tolerance,
                ),
            ],
            "accelerations": [
                FiniteGuard(),
                LimitGuard(
                    {
                        j: (-lim.max_acceleration, lim.max_acceleration)
                        for j, lim in limits.items()
                        if lim.max_acceleration
                    },
                    clip_tolerance,
                ),
            ],
        }
        self.measured = [math.nan] * self.n
        self.measured_velocity = [0.0] * self.n
        self.seeded = False
        self._hold: list[float] | None = None
        self._executing: _ForwardedTrajectory | None = None

    # -- the reference -----------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the last command: the next one is rate-limited from the measured state."""
        self.seeded = False
        self._hold = None
        self._executing = None

    def seed(
        self,
        positions: Sequence[float] | None = None,
        velocities: Sequence[float] | None = None,
    ) -> None:
        """The rate guards' reference: the measured position (and velocity, when the joint
        states carry it), or the given ones, as if commanded one period (command_rate_hz;
        else max_step_dt_s) before the next command."""
        positions = self.measured if positions is None else positions
        velocities = self.measured_velocity if velocities is None else velocities
        shield = self.shield
        shield.reset()
        joints = self.joints
        self.clock.restart()
        if self.interface == "position":
            dt = self.clock.first_dt
            prev = {j: q - v * dt for j, q, v in zip(joints, positions, velocities, strict=True)}
            shield.record_sent(prev, dt)
            shield.record_sent(dict(zip(joints, positions, strict=True)), dt)
        else:
            shield.record_sent(dict(zip(joints, velocities, strict=True)))
        self.seeded = True

    # -- holds -------------------------------------------------------------------------------

    def hold_values(self) -> list[float]:
        """The hold command: zeros for a velocity interface; else the measured position
        clamped into the limits, frozen until a command passes or `release_hold()`."""
        if self.interface == "velocity":
            return [0.0] * self.n
        if self._hold is None:
            held = []
            for q, (lo, hi) in zip(self.measured, self._bounds, strict=True):
                if lo is not None:
                    q = max(q, lo)
                if hi is not None:
                    q = min(q, hi)
                held.append(q)
            self._hold = held
        return self._hold

    def release_hold(self) -> None:
        """The next hold is taken where the robot is then (an e-stop just latched)."""
        self._hold = None

    def record_hold(self, values: Sequence[float], now: float) -> None:
        """A hold command was sent at `now`, not in answer to a command under review."""
        self._record(values, self.clock.advance(now))

    def _record(self, values: Sequence[float], dt: float) -> None:
        """A hold was sent: the rate guards' reference is the hold, AT REST. (Recorded once,
        as a command `dt` after the last one, it credited the robot with the jump from the
        sender's last command to the measured pose: after a watchdog hold of an arm sagging
        0.037 rad under gravity, +1.87 rad/s, and the acceleration guard then clipped the
        next commands into that phantom motion, away from the hold and the sender.)"""
        hold = dict(zip(self.joints, values, strict=True))
        self.shield.record_sent(hold, dt)
        self.shield.record_sent(hold, dt)  # ... and again: no speed
        self.seeded = True
        self._executing = None  # a hold replaces any trajectory

    def _refused(self, findings: list[Finding], dt: float) -> Verdict:
        hold = self.hold_values()
        self._record(hold, dt)
        return Verdict("refused", findings, hold)

    # -- forward_command ---------------------------------------------------------------------

    def review_array(self, data: Sequence[float], now: float) -> Verdict:
        """One forward_command command (a value per joint, in joints order) arriving at
        `now` (monotonic seconds). Call `seed()` first when not `seeded`."""
        dt = self.clock.advance(now)
        n = self.n
        if len(data) != n:
            return self._refused(
                [
                    Finding(
                        "shape",
                        "",
                        float(len(data)),
                        float(n),
                        "refused",
                        f"{len(data)} values for {n} joints",
                    )
                ],
                dt,
            )
        shield = self.shield
        requested = dict(zip(self.joints, data, strict=True))
        last, dt_before = shield.last, shield.last_dt
        result = shield.review(requested, hold=None, dt=dt, record=False)
        if result.refused:
            return self._refused(self._findings(result.interventions, ""), dt)
        values = result.action
        shield.record_sent(values, dt)
        self._hold = None
        if result.interventions:
            # What a reader of one clip needs to tell a fast sender from a jump: the
            # interval judged, the sender's own, and where the joint was sent before.
            timing = (
                f"clipped (judged over {dt * 1e3:.1f} ms, the one before over "
                f"{dt_before * 1e3:.1f} ms; sent {self.clock.last_interval * 1e3:.1f} ms "
                "after the last command)"
            )
            findings = [
                replace(f, detail=f"{timing}: {last[f.joint]:.4f} -> {requested[f.joint]:.4f}")
                if last is not None and f.joint in requested
                else f
                for f in self._findings(result.interventions, timing)
            ]
            return Verdict("clipped", findings, [values[j] for j in self.joints])
        return Verdict("passed")

    # -- joint_trajectory --------------------------------------------------------------------

    def review_trajectory(
        self,
        names: Sequence[str],
        points: Sequence[TrajectoryPoint],
        now: float | None = None,
    ) -> Verdict:
        """One JointTrajectory arriving at `now` (monotonic seconds): `names` its
        joint_names, `points` in order. Its first point is judged from the trajectory it
        replaces, sampled at `now`, or from the measured state (see the module docstring;
        always the measured state when `now` is None)."""
        names = list(names)
        dt = self.max_dt  # the hold of a refused trajectory: as the seed takes it
        unknown = [j for j in names if j not in self._index]
        if unknown:
            detail = f"joint_names has unknown joint(s) {unknown}"
            return self._refused(
                [Finding("unknown_joint", unknown[0], math.nan, math.nan, "refused", detail)], dt
            )
        n = self.n
        if len(names) != n or len(set(names)) != n:
            detail = f"joint_names {names} must name each of {self.joints} once"
            return self._refused(
                [Finding("shape", "", float(len(names)), float(n), "refused", detail)], dt
            )
        if not points:  # a joint_trajectory_controller stops and holds on an empty one
            self._hold = None
            self._executing = None
            return Verdict("passed")
        shield = self.shield
        executing = self._executing
        self._executing = None
        desired = None
        if executing is not None and now is not None and self.interface == "position":
            desired = executing.sample(now, self.clock.current_period())
        if desired is None:
            self.seed()
            start = list(self.measured)
        else:
            self.seed(*desired)
            start = desired[0]
        clipped: list[Finding] = []
        reviewed: list[ReviewedPoint | None] = []
        t_prev = 0.0
        for k, point in enumerate(points):
            t = point.t
            if not t > t_prev:
                detail = f"point {k}: time_from_start must increase and be > 0"
                return self._refused(
                    [Finding("time_from_start", "", t, t_prev, "refused", detail)], dt
                )
            if len(point.positions) != n:
                detail = f"point {k}: {len(point.positions)} positions for {n} joints"
                return self._refused(
                    [
                        Finding(
                            "shape", "", float(len(point.positions)), float(n), "refused", detail
                        )
                    ],
                    dt,
                )
            result = shield.review(
                dict(zip(names, point.positions, strict=True)), hold=None, dt=t - t_prev
            )
            if result.refused:
                return self._refused(self._findings(result.interventions, f"point {k}"), dt)
            changed = bool(result.interventions)
            clipped.extend(self._findings(result.interventions, "clipped"))
            fields: dict[str, list[float]] = {}
            for field_name, guards in self._point_guards.items():
                values = getattr(point, field_name)
                if len(values) == 0:
                    continue
                if len(values) != n:
                    detail = f"point {k}: {len(values)} {field_name} for {n} joints"
                    return self._refused(
                        [Finding("shape", "", float(len(values)), float(n), "refused", detail)],
                        dt,
                    )
                rename = "velocity" if field_name == "velocities" else "acceleration"
                working = dict(zip(names, values, strict=True))
                found = run_guards(guards, working, GuardContext())
                if found and found[-1].action == "refused":
                    findings = self._findings(found, f"point {k} {field_name}", rename)
                    return self._refused(findings, dt)
                if found:
                    changed = True
                    clipped.extend(self._findings(found, "clipped", rename))
                fields[field_name] = [working[j] for j in names]
            reviewed.append(
                ReviewedPoint(
                    [result.action[j] for j in names],
                    fields.get("velocities"),
                    fields.get("accelerations"),
                )
                if changed
                else None
            )
            t_prev = t
        self._hold = None
        if now is not None:
            sent = []
            for point, changed_point in zip(points, reviewed, strict=True):
                q = point.positions if changed_point is None else changed_point.positions
                by_name = dict(zip(names, q, strict=True))
                sent.append((point.t, [float(by_name[j]) for j in self.joints]))
            self._executing = _ForwardedTrajectory(now, start, sent)
        if clipped:
            return Verdict("clipped", clipped, points=reviewed)
        return Verdict("passed")

    # -- findings ----------------------------------------------------------------------------

    def _findings(
        self, interventions: Sequence[Intervention], detail: str, rename: str | None = None
    ) -> list[Finding]:
        """Kernel interventions in ShieldIntervention's terms. `rename`: the guard name of
        a point field's limit guard (its limits are velocities or accelerations)."""
        names = self._names
        out = []
        for iv in interventions:
            guard = rename if rename is not None and iv.guard == "limits" else iv.guard
            value = iv.value if isinstance(iv.value, float) else math.nan
            limit = iv.limit
            if isinstance(limit, list):  # [lo, hi]: the bound that was crossed
                limit = limit[0] if isinstance(value, float) and value < limit[0] else limit[1]
            if not isinstance(limit, int | float):
                limit = math.nan
            out.append(
                Finding(
                    names.get(guard, guard),
                    iv.key if iv.key != "*" else "",
                    value,
                    float(limit),
                    iv.action,
                    detail,
                )
            )
        return out


@dataclass(frozen=True, slots=True)
class _ForwardedTrajectory:
    """A trajectory the review forwarded: it arrived at `t0` with the controller at
    `start`; `points` are (time_from_start, positions), positions in joints order."""

    t0: float
    start: list[float]
    points: list[tuple[float, list[float]]]

    def sample(self, now: float, grace_s: float) -> tuple[list[float], list[float]] | None:
        """(positions, velocities) commanded at `now`, linear between the points; past the
        last point its position and the last segment's velocity, for at most `grace_s`
        (a stream's next trajectory arrives about when this one ends); None after that
        (the controller holds and the robot's state is the measured one)."""
        elapsed = now - self.t0
        t_prev, q_prev = 0.0, self.start
        for t, q in self.points:
            span = t - t_prev
            velocity = [(b - a) / span for a, b in zip(q_prev, q, strict=True)]
            if elapsed <= t:
                f = max(0.0, elapsed - t_prev)
                return [a + v * f for a, v in zip(q_prev, velocity, strict=True)], velocity
            t_prev, q_prev = t, q
        if elapsed - t_prev > grace_s:
            return None
        return list(q_prev), velocity
