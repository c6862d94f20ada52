"""The SafetyShield: every action an environment (or a controller) receives is reviewed.

A guard is a small object with one rule. It reviews a working action (a dict key ->
float) given a `GuardContext` (the last command sent, the one before it, the hold
action, the seconds between commands) and either clips values in place or refuses
the action; each thing it does is an `Intervention`. The same guards serve the
kernel's in-process shield and the safety_shield ROS node at the controller boundary.

Guards, in the order they run:
  FiniteGuard        "finite"            refuse a value that is not a real, finite number
  LimitGuard         "limits"            outside [lo, hi] by <= clip_tolerance x range: clip;
                                         further: refuse
  DeltaGuard         "max_delta"         |value - last| > max_delta: refuse (a jump)
  VelocityGuard      "max_velocity"      |value - last| / dt > vmax: clip toward last
  AccelerationGuard  "max_acceleration"  |v - v_last| / dt > amax: clip v toward v_last
A refusal stops the review: the shield returns the hold action instead.
After the rate guards the shield keeps every value inside its limits (clipped,
reported as guard "limits"), since extrapolating the last velocity can leave them.

`build_guards(safety)` builds the configurable guards from a dict; `SafetyShield`
always adds the finite and limits guards of its EnvSpec in front of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, ClassVar, Literal

from .spec import EnvSpec

InterventionAction = Literal["clipped", "refused"]

SAFETY_KEYS: tuple[str, ...] = ("clip_tolerance", "max_delta", "max_velocity", "max_acceleration")


@dataclass(frozen=True, slots=True)
class Intervention:
    """One thing a guard did: `guard` clipped or refused `key`'s `value` against `limit`."""

    guard: str
    key: str
    value: Any
    limit: Any
    action: InterventionAction

    def to_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = repr(
                value
            )  # "nan" / "inf": strict JSON has no such numbers, the trace says what came
        elif not isinstance(value, int | float | str | bool | None):
            value = repr(value)
        return {
            "guard": self.guard,
            "key": self.key,
            "value": value,
            "limit": self.limit,
            "action": self.action,
        }


@dataclass(slots=True)  # not frozen: built for every review, and frozen init is slow
class GuardContext:
    """What a guard may compare an action with.

    last: the command sent before this one (None at the start).
    previous: the command sent before `last` (for acceleration).
    hold: what executes when the action is refused.
    dt: seconds between commands (1 / control_hz for the kernel, measured for the node).
    dt_last: seconds between `previous` and `last` (0: the same as dt). With a measured,
      jittery dt the acceleration guard needs both intervals.
    """

    last: Mapping[str, float] | None = None
    previous: Mapping[str, float] | None = None
    hold: Mapping[str, float] | None = None
    dt: float = 0.0
    dt_last: float = 0.0


class Guard:
    """One rule. `review` clips `action` in place and appends to `out`.

    A guard appends a "refused" intervention to refuse; the shield stops there.
    """

    name: ClassVar[str] = "guard"

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


class FiniteGuard(Guard):
    """Refuses a value that is not a real number (bools, strings, None, arrays) or is not finite.

    Accepted numbers (numpy scalars included) are converted to Python floats in place.
    """

    name: ClassVar[str] = "finite"

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        for key, value in action.items():
            if type(value) is float:
                if value - value == 0.0:  # false for nan and +-inf; the fast path
                    continue
            elif _is_number(value):
                number = float(value)
                if math.isfinite(number):
                    action[key] = number
                    continue
            out.append(Intervention(self.name, key, value, "finite number", "refused"))
            return


class LimitGuard(Guard):
    """Keeps values within [lo, hi]: clips when outside by at most tolerance x (hi - lo), else refuses."""

    name: ClassVar[str] = "limits"

    def __init__(
        self, limits: Mapping[str, tuple[float, float]], clip_tolerance: float = 0.05
    ) -> None:
        _check_number("clip_tolerance", clip_tolerance, minimum=0.0)
        self.clip_tolerance = float(clip_tolerance)
        self.limits: dict[str, tuple[float, float, float]] = {}
        for key, bounds in limits.items():
            lo, hi = _check_bounds(f"limits[{key!r}]", bounds)
            self.limits[key] = (lo, hi, self.clip_tolerance * (hi - lo))

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        limits = self.limits
        for key, value in action.items():
            bounds = limits.get(key)
            if bounds is None:
                continue
            lo, hi, slack = bounds
            if value < lo:
                if value < lo - slack:
                    out.append(Intervention(self.name, key, value, [lo, hi], "refused"))
                    return
                action[key] = lo
                out.append(Intervention(self.name, key, value, [lo, hi], "clipped"))
            elif value > hi:
                if value > hi + slack:
                    out.append(Intervention(self.name, key, value, [lo, hi], "refused"))
                    return
                action[key] = hi
                out.append(Intervention(self.name, key, value, [lo, hi], "clipped"))


class _PerKeyGuard(Guard):
    """A guard with one bound for every key, or a bound per key (keys not named are free)."""

    def __init__(self, bound: float | Mapping[str, float], parameter: str) -> None:
        self.default: float | None = None
        self.per_key: dict[str, float] = {}
        if isinstance(bound, Mapping):
            for key, value in bound.items():
                self.per_key[str(key)] = _check_number(
                    f"{parameter}[{key!r}]", value, minimum=0.0, strict=True
                )
        else:
            self.default = _check_number(parameter, bound, minimum=0.0, strict=True)

    def bound(self, key: str) -> float | None:
        return self.per_key.get(key, self.default)


class DeltaGuard(_PerKeyGuard):
    """Refuses a command whose change from the last command exceeds max_delta (per step)."""

    name: ClassVar[str] = "max_delta"

    def __init__(self, max_delta: float | Mapping[str, float]) -> None:
        super().__init__(max_delta, "max_delta")

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        last = ctx.last
        if last is None:
            return
        for key, value in action.items():
            limit = self.bound(key)
            previous = last.get(key)
            if limit is None or previous is None:
                continue
            if abs(value - previous) > limit:
                out.append(Intervention(self.name, key, value, limit, "refused"))
                return


class VelocityGuard(_PerKeyGuard):
    """Rate-limits: |value - last| / dt > max_velocity is clipped to last +- max_velocity * dt."""

    name: ClassVar[str] = "max_velocity"

    def __init__(self, max_velocity: float | Mapping[str, float]) -> None:
        super().__init__(max_velocity, "max_velocity")

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        last, dt = ctx.last, ctx.dt
        if last is None or dt <= 0:
            return
        for key, value in action.items():
            vmax = self.bound(key)
            previous = last.get(key)
            if vmax is None or previous is None:
                continue
            step = vmax * dt
            if value > previous + step:
                action[key] = previous + step
                out.append(Intervention(self.name, key, value, vmax, "clipped"))
            elif value < previous - step:
                action[key] = previous - step
                out.append(Intervention(self.name, key, value, vmax, "clipped"))


class AccelerationGuard(_PerKeyGuard):
    """Rate-limits the change of velocity: v = (value - last) / dt is kept within
    v_last +- max_acceleration * dt, where v_last = (last - previous) / dt."""

    name: ClassVar[str] = "max_acceleration"

    def __init__(self, max_acceleration: float | Mapping[str, float]) -> None:
        super().__init__(max_acceleration, "max_acceleration")

    def review(self, action: dict[str, float], ctx: GuardContext, out: list[Intervention]) -> None:
        last, previous, dt = ctx.last, ctx.previous, ctx.dt
        if last is None or dt <= 0:
            return
        for key, value in action.items():
            amax = self.bound(key)
            p1 = last.get(key)
            if amax is None or p1 is None:
                continue
            p0 = (
                previous.get(key, p1) if previous is not None else p1
            )  # at rest before the first command
            v_last = (p1 - p0) / (ctx.dt_last if ctx.dt_last > 0 else dt)
            velocity = (value - p1) / dt
            dv = amax * dt
            if velocity > v_last + dv:
                action[key] = p1 + (v_last + dv) * dt
                out.append(Intervention(self.name, key, value, amax, "clipped"))
            elif velocity < v_last - dv:
                action[key] = p1 + (v_last - dv) * dt
                out.append(Intervention(self.name, key, value, amax, "clipped"))


def build_guards(safety: Mapping[str, Any] | None) -> list[Guard]:
    """The configurable guards from a safety dict, in review order.

    Keys: max_delta, max_velocity, max_acceleration (a number >= 0 for every key, or
    {key: number}), clip_tolerance (a number >= 0; used by SafetyShield's limit guard,
    not a guard of its own). Unknown keys are refused by name. None -> no extra guards.
    """
    if safety is None:
        return []
    if not isinstance(safety, Mapping):
        raise ValueError(
            f"safety={safety!r}: must be a mapping with keys among {list(SAFETY_KEYS)} or None"
        )
    unknown = sorted(str(k) for k in safety if k not in SAFETY_KEYS)
    if unknown:
        raise ValueError(f"safety: unknown key(s) {unknown}; known keys: {list(SAFETY_KEYS)}")
    if "clip_tolerance" in safety:
        _check_number("safety['clip_tolerance']", safety["clip_tolerance"], minimum=0.0)
    guards: list[Guard] = []
    if safety.get("max_delta") is not None:
        guards.append(DeltaGuard(safety["max_delta"]))
    if safety.get("max_velocity") is not None:
        guards.append(VelocityGuard(safety["max_velocity"]))
    if safety.get("max_acceleration") is not None:
        guards.append(AccelerationGuard(safety["max_acceleration"]))
    return guards


def run_guards(
    guards: Sequence[Guard], action: dict[str, float], ctx: GuardContext
) -> list[Intervention]:
    """Run `guards` over `action` (clipped in place) until one refuses; the interventions."""
    out: list[Intervention] = []
    for guard in guards:
        guard.review(action, ctx, out)
        if out and out[-1].action == "refused":
            break
    return out


@dataclass(slots=True)
class ShieldResult:
    """What the shield decided for one action.

    action: what to execute (the reviewed action, or the hold action when refused).
    interventions: every clip and the refusal, in order.
    refused: the action was refused and `action` is the hold.
    missing_keys: action keys the action lacked (filled from the hold action).
    unknown_keys: keys the action had that the env does not know (dropped).
    """

    action: dict[str, float]
    interventions: list[Intervention] = field(default_factory=list)
    refused: bool = False
    missing_keys: tuple[str, ...] = ()
    unknown_keys: tuple[str, ...] = ()


class SafetyShield:
    """Reviews actions for one environment: keys resolved, then every guard.

    SafetyShield(spec, guards, clip_tolerance=0.05): `guards` (from build_guards) run
    after the always-on FiniteGuard and LimitGuard(spec.action_limits, clip_tolerance).

    The shield remembers the commands it let through (for the rate guards); call
    `reset()` at episode start and `record_sent(action)` for any command sent without
    review (review() records its own result unless record=False).
    """

    def __init__(
        self, spec: EnvSpec, guards: Sequence[Guard] = (), clip_tolerance: float = 0.05
    ) -> None:
        if not isinstance(spec, EnvSpec):
            raise ValueError(f"spec={spec!r}: must be an EnvSpec")
        for guard in guards:
            if not isinstance(guard, Guard):
                raise ValueError(f"guards: {guard!r} is not a Guard")
        self.spec = spec
        self.clip_tolerance = _check_number("clip_tolerance", clip_tolerance, minimum=0.0)
        self.limit_guard = LimitGuard(spec.action_limits, self.clip_tolerance)
        self.guards: list[Guard] = [FiniteGuard(), self.limit_guard, *guards]
        self.default_dt = 1.0 / float(spec.control_hz)
        self._keys = spec.action_keys
        self._key_set = frozenset(spec.action_keys)
        self.last: dict[str, float] | None = None
        self.previous: dict[str, float] | None = None
        self.last_dt = 0.0  # seconds between `previous` and `last` (0: unknown, use dt)
        # The fast path's check: a float inside [lo, hi] (+-inf where a key has no limits)
        # is what FiniteGuard and LimitGuard both pass untouched.
        inf = math.inf
        self._bounds = tuple(
            (key, *spec.action_limits.get(key, (-inf, inf))) for key in spec.action_keys
        )

    def reset(self) -> None:
        self.last = None
        self.previous = None
        self.last_dt = 0.0

    def record_sent(self, action: Mapping[str, float], dt: float = 0.0) -> None:
        """Remember a command that was sent, `dt` seconds after the one before it."""
        self.previous = self.last
        self.last = dict(action)
        self.last_dt = dt

    def review(
        self,
        action: Any,
        *,
        hold: Mapping[str, float] | None = None,
        dt: float | None = None,
        record: bool = True,
    ) -> ShieldResult:
        """Review `action` (anything an agent returned; garbage never raises).

        hold: executed when the action is refused, and the source of missing keys.
        dt: seconds since the last command (default 1 / control_hz).
        """
        step_dt = self.default_dt if dt is None else dt
        working = self._fast_pass(action) if type(action) is dict else None
        if working is not None:
            # Every key present, finite and within limits: only the extra guards remain.
            result = ShieldResult(working, [], False, (), ())
            extra = self.guards[2:]
            if extra:
                ctx = GuardContext(self.last, self.previous, hold, step_dt, self.last_dt)
                result = self._finish(working, run_guards(extra, working, ctx), hold, (), ())
            if record:
                self.previous, self.last, self.last_dt = self.last, result.action, step_dt
            return result
        resolved = None
        if type(action) is dict or isinstance(action, Mapping):
            try:
                resolved = self._resolve_keys(action, hold)
            except Exception:  # a broken Mapping from an agent: refused, never raised
                resolved = None
        if resolved is None:
            refusal = Intervention(
                "type", "*", _short_repr(action), "mapping of key -> number", "refused"
            )
            result = self._refuse(hold, [refusal])
        else:
            working, missing, unknown = resolved
            if missing and (hold is None or any(key not in working for key in missing)):
                refusal = Intervention(
                    "keys", missing[0], None, "value for every action key", "refused"
                )
                result = self._refuse(hold, [refusal], missing, unknown)
            else:
                ctx = GuardContext(self.last, self.previous, hold, step_dt, self.last_dt)
                interventions = run_guards(self.guards, working, ctx)
                result = self._finish(working, interventions, hold, missing, unknown)
        if record:
            self.record_sent(result.action, step_dt)
        return result

    def review_fast(self, action: Any, dt: float | None = None) -> ShieldResult | None:
        """`review(action, dt=dt)` for the common case that needs no hold action: a dict
        naming exactly the action keys, each a finite float within its limits, with no
        guards besides the finite and limit guards. None when the action needs the full
        review (call `review` with a hold action then); nothing is recorded in that case.
        """
        if type(action) is not dict or len(action) != len(self._bounds) or len(self.guards) != 2:
            return None
        working = {}
        for key, lo, hi in self._bounds:  # _fast_pass, inlined: this runs every step
            value = action.get(key)
            if type(value) is float and lo <= value <= hi and value - value == 0.0:
                working[key] = value
            else:
                return None
        self.previous, self.last = self.last, working
        self.last_dt = self.default_dt if dt is None else dt
        return ShieldResult(working, [], False, (), ())

    def _fast_pass(self, action: dict[str, Any]) -> dict[str, float] | None:
        """A copy of `action` when it has exactly the action keys, each a finite float within
        its limits (the common case); None sends it through every guard."""
        if len(action) != len(self._bounds):
            return None
        working = {}
        for key, lo, hi in self._bounds:
            value = action.get(key)
            # NaN fails every comparison; v - v is NaN for +-inf (keys without limits).
            if type(value) is float and lo <= value <= hi and value - value == 0.0:
                working[key] = value
            else:
                return None
        return working

    def _finish(
        self,
        working: dict[str, float],
        interventions: list[Intervention],
        hold: Mapping[str, float] | None,
        missing: tuple[str, ...],
        unknown: tuple[str, ...],
    ) -> ShieldResult:
        if interventions and interventions[-1].action == "refused":
            return self._refuse(hold, interventions, missing, unknown)
        if interventions and len(self.guards) > 2:
            self._contain(working, interventions)
        return ShieldResult(working, interventions, False, missing, unknown)

    def _resolve_keys(
        self, action: Mapping[str, Any], hold: Mapping[str, float] | None
    ) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...]]:
        keys = self._keys
        if len(action) == len(keys):
            try:
                working = {key: action[key] for key in keys}
                return working, (), ()
            except (KeyError, TypeError):
                pass
        working = {}
        missing: list[str] = []
        for key in keys:
            if key in action:
                working[key] = action[key]
            elif hold is not None and key in hold:
                working[key] = hold[key]
                missing.append(key)
            else:
                missing.append(key)
        unknown = tuple(sorted(str(k) for k in action if k not in self._key_set))
        return working, tuple(missing), unknown

    def _contain(self, working: dict[str, float], interventions: list[Intervention]) -> None:
        for key, (lo, hi, _) in self.limit_guard.limits.items():
            value = working.get(key)
            if value is None:
                continue
            if value < lo or value > hi:
                working[key] = min(max(value, lo), hi)
                interventions.append(Intervention(LimitGuard.name, key, value, [lo, hi], "clipped"))

    def _refuse(
        self,
        hold: Mapping[str, float] | None,
        interventions: list[Intervention],
        missing: tuple[str, ...] = (),
        unknown: tuple[str, ...] = (),
    ) -> ShieldResult:
        fallback = (
            dict(hold) if hold is not None else (dict(self.last) if self.last is not None else {})
        )
        return ShieldResult(fallback, interventions, True, missing, unknown)


def make_shield(spec: EnvSpec, safety: Mapping[str, Any] | None) -> SafetyShield:
    """The SafetyShield of a build_guards() config (clip_tolerance: the limit guard's, 0.05)."""
    safety = dict(safety or {})
    return SafetyShield(
        spec, build_guards(safety), clip_tolerance=float(safety.get("clip_tolerance", 0.05))
    )


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_number(
    name: str, value: Any, *, minimum: float | None = None, strict: bool = False
) -> float:
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{name}={value!r}: must be a finite number")
    number = float(value)
    if minimum is not None and (number <= minimum if strict else number < minimum):
        raise ValueError(f"{name}={value!r}: must be {'>' if strict else '>='} {minimum}")
    return number


def _check_bounds(name: str, bounds: Any) -> tuple[float, float]:
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError(f"{name}={bounds!r}: must be a pair (lower, upper)") from None
    lo = _check_number(f"{name}[0]", lo)
    hi = _check_number(f"{name}[1]", hi)
    if lo > hi:
        raise ValueError(f"{name}=({lo}, {hi}): lower must be <= upper")
    return lo, hi
