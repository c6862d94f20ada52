"""Benchmark specs: a scene, a horizon, success/failure predicates and a dense reward.

A spec is a JSON-friendly dict::

    {"name": "go2_walk_forward",
     "description": "...",
     "robot": {"name": "go2", "model": "go2", "pos": [0, 0, 0]},   # model: packaged name or MJCF path
     "objects": [...],            # optional, forwarded to MujocoScene.add_object(**obj)
     "instruction": "walk forward",
     "control_frequency": 50.0,
     "max_steps": 500,            # the horizon (a spec= eval takes it from here)
     "success": [clause, ...],    # any of them ends the episode as a success
     "failure": [clause, ...],    # any of them ends it as a failure (checked first)
     "reward": [{"reward": name, "weight": w, ...params}, ...],
     "goal": {"joints": {joint: [lo, hi]}}}   # optional: a random target per episode (goals.py)

`BenchmarkRegistry` is per workcell: importing the library registers nothing;
`register_builtin_benchmarks()` opts in to the shipped ones.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from ..kernel.domains import positive_int, positive_number
from . import predicates
from .goals import validate_goal

SPEC_KEYS = frozenset(
    {
        "name",
        "description",
        "robot",
        "objects",
        "instruction",
        "control_frequency",
        "max_steps",
        "success",
        "failure",
        "reward",
        "seed",
        "goal",
    }
)

GO2_WALK_FORWARD: dict[str, Any] = {
    "name": "go2_walk_forward",
    "description": (
        "Walk the Unitree Go2's base past x = 2 m; a topple (base tilted > 60 deg) or a height "
        "collapse (base below 0.15 m) fails the episode. Dense reward: forward velocity tracking "
        "(0.5 m/s) + standing height + uprightness."
    ),
    "robot": {"name": "go2", "model": "go2"},
    "instruction": "walk forward",
    "control_frequency": 50.0,
    "max_steps": 500,
    "success": [{"predicate": "base_beyond_x", "x": 2.0}],
    "failure": [
        {"predicate": "base_tipped", "max_tilt_deg": 60.0},
        {"predicate": "base_below_z", "z": 0.15},
    ],
    "reward": [
        {"reward": "base_velocity_tracking", "weight": 1.0, "target_vx": 0.5, "sigma": 0.25},
        {"reward": "base_height", "weight": 0.5, "target": 0.27, "sigma": 0.05},
        {"reward": "base_orientation", "weight": 0.5},
    ],
}

SO101_REACH_RANDOM: dict[str, Any] = {
    "name": "so101_reach_random",
    "description": (
        "Bring the SO-101's shoulder_pan, shoulder_lift and elbow_flex within 0.1 rad of a "
        "target drawn from the episode's seed and shown in the observation (goal.<joint>); "
        "3 s at 25 Hz. Reward: minus the distance to the target (rad), every step."
    ),
    "robot": {"name": "arm", "model": "so101"},
    "instruction": "reach the goal",
    "control_frequency": 25.0,
    "max_steps": 75,
    "goal": {
        "joints": {
            "shoulder_pan": [-1.2, 1.2],
            "shoulder_lift": [-1.0, 0.5],
            "elbow_flex": [-1.0, 1.0],
        }
    },
    "success": [{"predicate": "joint_near_goal", "tolerance": 0.1}],
    "reward": [{"reward": "joint_goal_distance", "weight": -1.0}],
}

_BUILTINS: tuple[dict[str, Any], ...] = (GO2_WALK_FORWARD, SO101_REACH_RANDOM)


def builtin_benchmark_specs() -> dict[str, dict[str, Any]]:
    """The shipped specs, as copies to fork."""
    return {spec["name"]: copy.deepcopy(spec) for spec in _BUILTINS}


def validate_spec(spec: Any, *, name: str = "spec") -> dict[str, Any]:
    """Check a spec and return a normalised copy (raises ValueError naming the field)."""
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{name}={spec!r}: must be a benchmark spec dict or a registered benchmark name"
        )
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ValueError(f"{name}: unknown keys {unknown}; a spec has {sorted(SPEC_KEYS)}")
    out = copy.deepcopy(dict(spec))
    bench = out.get("name")
    if not isinstance(bench, str) or not bench:
        raise ValueError(f"{name}['name']={bench!r}: must be a non-empty string")
    robot = out.get("robot")
    if not isinstance(robot, Mapping) or not isinstance(robot.get("model"), str):
        raise ValueError(
            f"{name}['robot']={robot!r}: must be a dict with a 'model' (packaged name or MJCF path)"
        )
    robot = dict(robot)
    robot.setdefault("name", "robot")
    if not isinstance(robot["name"], str) or not robot["name"]:
        raise ValueError(f"{name}['robot']['name']={robot['name']!r}: must be a non-empty string")
    out["robot"] = robot
    objects = out.setdefault("objects", [])
    if not isinstance(objects, list) or not all(isinstance(o, Mapping) for o in objects):
        raise ValueError(f"{name}['objects']={objects!r}: must be a list of dicts")
    out.setdefault("instruction", "")
    if not isinstance(out["instruction"], str):
        raise ValueError(f"{name}['instruction']={out['instruction']!r}: must be a string")
    out.setdefault("description", "")
    out["control_frequency"] = positive_number(
        f"{name}['control_frequency']", out.get("control_frequency", 50.0)
    )
    out["max_steps"] = positive_int(f"{name}['max_steps']", out.get("max_steps", 300))
    for key in ("success", "failure"):
        predicates.compile_criteria(f"{name}[{key!r}]", out.get(key))
    predicates.compile_rewards(f"{name}['reward']", out.get("reward"))
    if out.get("goal") is not None:
        out["goal"] = validate_goal(f"{name}['goal']", out["goal"])
    if not out.get("success") and not out.get("failure"):
        raise ValueError(f"{name}: a benchmark needs at least one success or failure clause")
    return out


class BenchmarkRegistry:
    """Named benchmark specs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, dict[str, Any]] = {}

    def register(self, spec: Mapping[str, Any], *, replace: bool = False) -> str:
        checked = validate_spec(spec)
        with self._lock:
            if checked["name"] in self._specs and not replace:
                raise ValueError(
                    f"benchmark {checked['name']!r} is already registered (pass replace=True)"
                )
            self._specs[checked["name"]] = checked
        return checked["name"]

    def register_builtins(self) -> list[str]:
        return [self.register(spec, replace=True) for spec in builtin_benchmark_specs().values()]

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._specs)

    def get(self, name: str) -> dict[str, Any]:
        with self._lock:
            if name not in self._specs:
                hint = (
                    "" if self._specs else " (none registered: call register_builtin_benchmarks())"
                )
                raise ValueError(
                    f"spec={name!r}: no such benchmark; registered: {sorted(self._specs)}{hint}"
                )
            return copy.deepcopy(self._specs[name])

    def resolve(self, spec: Any) -> dict[str, Any]:
        """A registered name or a spec dict -> a validated spec."""
        if isinstance(spec, str):
            return self.get(spec)
        return validate_spec(spec)

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "name": s["name"],
                    "description": s["description"],
                    "robot_model": s["robot"]["model"],
                    "max_steps": s["max_steps"],
                    "control_frequency": s["control_frequency"],
                }
                for s in (self._specs[n] for n in sorted(self._specs))
            ]
