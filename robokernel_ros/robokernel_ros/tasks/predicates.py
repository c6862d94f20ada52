"""Predicates and dense rewards over the privileged state of a rollout.

A *criterion* (a `stop_when` clause, a benchmark's success/failure clause, or a
`success_fn`) is evaluated after every control step on the predicate context, online
and offline alike (built by `tasks.context`)::

    {**env.privileged_state(),   # qpos, qvel, ctrl, time, bodies, contacts, robots
     "step": int, "robot": str, "episode": int, "obs": <observation>,
     "joints": {joint: position}}

A clause is JSON-friendly so it can cross a ROS service:

    {"predicate": "base_beyond_x", "x": 2.0}            # robot defaults to the rollout's
    {"base_tipped": {"max_tilt_deg": 60}}              # shorthand: one key -> params
    [clause, clause, ...]                              # any of them
    a callable  fn(context) -> bool                    # Python callers

A reward term is {"reward": "base_height", "weight": 1.0, ...params}.
Verdicts are read with bool(), so numpy.bool_ is accepted. A criterion that raises is
fatal for the rollout (see CriterionError): it names the criterion, the episode and the step.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..kernel.observation import goal_in

Context = Mapping[str, Any]


class CriterionError(RuntimeError):
    """A criterion raised: fatal for the rollout on every route."""

    def __init__(self, criterion: str, episode: int, step: int, error: BaseException) -> None:
        self.criterion = criterion
        self.episode = episode
        self.step = step
        self.error = error
        super().__init__(
            f"criterion {criterion!r} raised at episode {episode}, step {step}: {type(error).__name__}: {error}"
        )


# --- helpers over the context ----------------------------------------------------------------


def _robot_state(ctx: Context, robot: str | None) -> Mapping[str, Any]:
    name = robot or ctx.get("robot")
    robots = ctx.get("robots") or {}
    if name not in robots:
        if len(robots) == 1 and robot is None:
            return next(iter(robots.values()))
        raise KeyError(f"robot {name!r} is not in the privileged state (robots: {sorted(robots)})")
    return robots[name]


def _base_pos(ctx: Context, robot: str | None) -> Sequence[float]:
    return _robot_state(ctx, robot)["base_pos"]


def _up_z(quat: Sequence[float]) -> float:
    """z component of the body's z axis in the world frame (1 upright, -1 upside down)."""
    _, x, y, _ = (float(q) for q in quat)
    return 1.0 - 2.0 * (x * x + y * y)


def _tilt_deg(ctx: Context, robot: str | None) -> float:
    up = max(-1.0, min(1.0, _up_z(_robot_state(ctx, robot)["base_quat"])))
    return math.degrees(math.acos(up))


def _body_pos(ctx: Context, body: str) -> Sequence[float]:
    bodies = ctx.get("bodies") or {}
    if body not in bodies:
        raise KeyError(
            f"body {body!r} is not in the privileged state (bodies: {sorted(bodies)[:20]})"
        )
    return bodies[body]["pos"]


def _joint_pos(ctx: Context, joint: str) -> float:
    joints = ctx.get("joints") or {}
    if joint not in joints:
        raise KeyError(f"joint {joint!r} is not observed (joints: {sorted(joints)})")
    return float(joints[joint])


# --- predicates ----------------------------------------------------------------------------


def base_beyond_x(ctx: Context, x: float, robot: str | None = None) -> bool:
    """The robot's base is past x (metres, world frame)."""
    return float(_base_pos(ctx, robot)[0]) > float(x)


def base_below_z(ctx: Context, z: float, robot: str | None = None) -> bool:
    """The robot's base has dropped below height z (a collapse)."""
    return float(_base_pos(ctx, robot)[2]) < float(z)


def base_tipped(ctx: Context, max_tilt_deg: float = 60.0, robot: str | None = None) -> bool:
    """The base is tilted more than max_tilt_deg from upright (a topple)."""
    return _tilt_deg(ctx, robot) > float(max_tilt_deg)


def joint_near_target(ctx: Context, targets: Mapping[str, float], tolerance: float = 0.05) -> bool:
    """Every named joint is within tolerance (rad or m) of its target."""
    return all(abs(_joint_pos(ctx, j) - float(t)) <= float(tolerance) for j, t in targets.items())


def joint_near_goal(ctx: Context, tolerance: float = 0.1) -> bool:
    """Every joint of the episode's goal (the observation's `goal.<joint>` entries, see
    `goals`) is within tolerance of its target; false when the observation has no goal."""
    goal = goal_in(ctx.get("obs") or {})
    return bool(goal) and joint_near_target(ctx, goal, tolerance)


def body_beyond_x(ctx: Context, body: str, x: float) -> bool:
    return float(_body_pos(ctx, body)[0]) > float(x)


def body_above_z(ctx: Context, body: str, z: float) -> bool:
    return float(_body_pos(ctx, body)[2]) > float(z)


def body_near(ctx: Context, body: str, pos: Sequence[float], tolerance: float = 0.05) -> bool:
    p = _body_pos(ctx, body)
    return math.dist([float(v) for v in p], [float(v) for v in pos]) <= float(tolerance)


def sim_time_beyond(ctx: Context, t: float) -> bool:
    return float(ctx.get("time", 0.0)) > float(t)


def step_at_least(ctx: Context, n: int) -> bool:
    """The rollout has taken n control steps."""
    return int(ctx["step"]) >= int(n)


# --- dense rewards -------------------------------------------------------------------------


def base_velocity_tracking(
    ctx: Context,
    target_vx: float = 0.5,
    target_vy: float = 0.0,
    sigma: float = 0.25,
    robot: str | None = None,
) -> float:
    """exp(-|v_xy - target|^2 / sigma): 1 when the base moves at the commanded velocity."""
    v = _robot_state(ctx, robot)["base_lin_vel"]
    err = (float(v[0]) - float(target_vx)) ** 2 + (float(v[1]) - float(target_vy)) ** 2
    return math.exp(-err / float(sigma))


def base_height(
    ctx: Context, target: float = 0.27, sigma: float = 0.05, robot: str | None = None
) -> float:
    """exp(-(z - target)^2 / sigma^2): 1 at the nominal standing height."""
    z = float(_base_pos(ctx, robot)[2])
    return math.exp(-((z - float(target)) ** 2) / float(sigma) ** 2)


def base_orientation(ctx: Context, robot: str | None = None) -> float:
    """Uprightness in [0, 1]: the z component of the base's z axis, floored at 0."""
    return max(0.0, _up_z(_robot_state(ctx, robot)["base_quat"]))


def joint_goal_distance(ctx: Context) -> float:
    """The Euclidean distance (rad) of the goal's joints from their targets; 0 without a goal."""
    goal = goal_in(ctx.get("obs") or {})
    return math.sqrt(sum((_joint_pos(ctx, j) - t) ** 2 for j, t in goal.items()))


PREDICATES: dict[str, Callable[..., bool]] = {
    f.__name__: f
    for f in (
        base_beyond_x,
        base_below_z,
        base_tipped,
        joint_near_target,
        joint_near_goal,
        body_beyond_x,
        body_above_z,
        body_near,
        sim_time_beyond,
        step_at_least,
    )
}
REWARDS: dict[str, Callable[..., float]] = {
    f.__name__: f
    for f in (base_velocity_tracking, base_height, base_orientation, joint_goal_distance)
}


def register_predicate(name: str, fn: Callable[..., bool], *, replace: bool = False) -> None:
    """Add a predicate `fn(ctx, **params) -> bool` usable by name in clauses."""
    if not isinstance(name, str) or not name or not callable(fn):
        raise ValueError(f"register_predicate({name!r}, {fn!r}): needs a name and a callable")
    if name in PREDICATES and not replace:
        raise ValueError(f"predicate {name!r} is already registered (pass replace=True)")
    PREDICATES[name] = fn


def register_reward(name: str, fn: Callable[..., float], *, replace: bool = False) -> None:
    if not isinstance(name, str) or not name or not callable(fn):
        raise ValueError(f"register_reward({name!r}, {fn!r}): needs a name and a callable")
    if name in REWARDS and not replace:
        raise ValueError(f"reward {name!r} is already registered (pass replace=True)")
    REWARDS[name] = fn


# --- compiling clauses ---------------------------------------------------------------------


@dataclass(frozen=True)
class Criterion:
    """A compiled clause: `name` (for messages and stop reasons) and `fn(ctx) -> bool`."""

    name: str
    fn: Callable[[Context], Any]
    spec: Any = None  # the JSON form, None for a callable

    def __call__(self, ctx: Context) -> bool:
        return bool(self.fn(ctx))


def _bind(
    kind: str,
    registry: Mapping[str, Callable[..., Any]],
    name: Any,
    params: Mapping[str, Any],
    where: str,
):
    if name not in registry:
        raise ValueError(f"{where}: unknown {kind} {name!r}; must be one of {sorted(registry)}")
    fn = registry[name]
    try:
        inspect.signature(fn).bind(None, **params)
    except TypeError as exc:
        raise ValueError(
            f"{where}: {kind} {name!r} does not take {dict(params)!r} ({exc})"
        ) from None
    return fn


def _clause_parts(clause: Mapping[str, Any], where: str, key: str) -> tuple[str, dict[str, Any]]:
    if key in clause:
        params = {k: v for k, v in clause.items() if k != key}
        return clause[key], params
    if len(clause) == 1:
        ((name, params),) = clause.items()
        if isinstance(params, Mapping):
            return name, dict(params)
    raise ValueError(
        f"{where}={dict(clause)!r}: a clause is {{'{key}': name, **params}} or {{name: {{params}}}}"
    )


def compile_criteria(name: str, value: Any) -> list[Criterion]:
    """None -> []; a clause, a callable or a list of them -> criteria (any of them fires)."""
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else [value]
    out: list[Criterion] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]" if isinstance(value, list | tuple) else name
        if callable(item) and not isinstance(item, type):
            out.append(Criterion(getattr(item, "__name__", repr(item)), item))
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}={item!r}: must be a predicate clause (dict) or a callable")
        pred, params = _clause_parts(item, where, "predicate")
        fn = _bind("predicate", PREDICATES, pred, params, where)
        label = (
            pred if not params else f"{pred}({', '.join(f'{k}={v!r}' for k, v in params.items())})"
        )
        out.append(
            Criterion(
                label,
                lambda ctx, fn=fn, params=params: fn(ctx, **params),
                {"predicate": pred, **params},
            )
        )
    return out


@dataclass(frozen=True)
class RewardTerm:
    name: str
    weight: float
    fn: Callable[[Context], float]


def compile_rewards(name: str, value: Any) -> list[RewardTerm]:
    """None -> []; a list of {"reward": name, "weight": w, **params} terms."""
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else [value]
    out: list[RewardTerm] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(item, Mapping):
            raise ValueError(
                f"{where}={item!r}: must be a dict like {{'reward': 'base_height', 'weight': 1.0}}"
            )
        params = dict(item)
        weight = params.pop("weight", 1.0)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
        ):
            raise ValueError(f"{where}['weight']={weight!r}: must be a finite number")
        reward, params = _clause_parts(params, where, "reward")
        fn = _bind("reward", REWARDS, reward, params, where)
        out.append(
            RewardTerm(
                reward, float(weight), lambda ctx, fn=fn, params=params: float(fn(ctx, **params))
            )
        )
    return out


def first_true(criteria: Sequence[Criterion], ctx: Context, *, episode: int) -> Criterion | None:
    """The first criterion that holds, or None. One that raises becomes a CriterionError."""
    for criterion in criteria:
        try:
            if criterion(ctx):
                return criterion
        except Exception as exc:
            raise CriterionError(criterion.name, episode, int(ctx.get("step", -1)), exc) from exc
    return None


def total_reward(terms: Sequence[RewardTerm], ctx: Context, *, episode: int) -> float:
    """The weighted sum of the terms. One that raises becomes a CriterionError."""
    total = 0.0
    for term in terms:
        try:
            total += term.weight * term.fn(ctx)
        except Exception as exc:
            raise CriterionError(
                f"reward {term.name}", episode, int(ctx.get("step", -1)), exc
            ) from exc
    return total
