"""Per-episode random goals: a benchmark's target, drawn from the episode's seed, shown
to the policy in its observation.

A spec's `goal` names joints and the interval each target is drawn from::

    "goal": {"joints": {"shoulder_pan": [-1.0, 1.0], "elbow_flex": [-0.8, 0.9]}}

At every reset (`GoalEnv.reset(seed)`) one target per joint is drawn uniformly from
its interval with `numpy.random.default_rng(seed)`: the same seed gives the same goal,
so an evaluation on held-out seeds sees goals no collected episode had. Every
observation then carries the targets as top-level numbers `goal.<joint>` (radians, or
the joint's unit): the policy reads them, the trace records them, and an export writes
them as `observation.environment_state`. The `joint_near_goal` predicate scores them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..kernel.observation import GOAL_PREFIX

__all__ = ["GoalEnv", "draw_goal", "validate_goal", "with_goal"]


def validate_goal(where: str, value: Any) -> dict[str, Any]:
    """A spec's `goal` -> {"joints": {joint: [lo, hi]}} (ValueError naming the field)."""
    if not isinstance(value, Mapping) or set(value) != {"joints"}:
        raise ValueError(
            f"{where}={value!r}: must be {{'joints': {{joint: [low, high]}}}} (the targets' intervals)"
        )
    joints = value["joints"]
    if not isinstance(joints, Mapping) or not joints:
        raise ValueError(f"{where}['joints']={joints!r}: must name at least one joint")
    out: dict[str, list[float]] = {}
    for joint, interval in joints.items():
        ok = (
            isinstance(joint, str)
            and joint
            and isinstance(interval, list | tuple)
            and len(interval) == 2
            and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in interval
            )
            and interval[0] <= interval[1]
        )
        if not ok:
            raise ValueError(
                f"{where}['joints'][{joint!r}]={interval!r}: must be [low, high], finite numbers, low <= high"
            )
        out[joint] = [float(interval[0]), float(interval[1])]
    return {"joints": out}


def draw_goal(goal: Mapping[str, Any], seed: int | None) -> dict[str, float]:
    """The targets of one episode, {joint: value}, from its seed (None: fresh entropy)."""
    rng = np.random.default_rng(seed)
    return {j: float(rng.uniform(lo, hi)) for j, (lo, hi) in goal["joints"].items()}


class GoalEnv:
    """An environment whose every observation carries the episode's goal (see the module
    docstring); everything else is the wrapped environment's."""

    def __init__(self, env: Any, goal: Mapping[str, Any]) -> None:
        self.env = env
        self.goal_spec = validate_goal("goal", goal)
        joints = set(getattr(env, "joint_keys", ()) or ())
        unknown = sorted(set(self.goal_spec["joints"]) - joints) if joints else []
        if unknown:
            raise ValueError(
                f"goal['joints']: {unknown} are not joints of the robot ({sorted(joints)})"
            )
        self.goal: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def _with_goal(self, observation: Any) -> Any:
        if isinstance(observation, dict):
            observation.update({GOAL_PREFIX + j: v for j, v in self.goal.items()})
        return observation

    def reset(self, seed: int | None = None) -> Any:
        self.goal = draw_goal(self.goal_spec, seed)
        return self._with_goal(self.env.reset(seed=seed))

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        self._with_goal(result.observation)
        return result

    def observe(self) -> Any:
        return self._with_goal(self.env.observe())


def with_goal(env: Any, benchmark: Mapping[str, Any] | None) -> Any:
    """The env of a rollout: wrapped in a GoalEnv when its benchmark declares a goal."""
    if benchmark is None or not benchmark.get("goal"):
        return env
    return GoalEnv(env, benchmark["goal"])
