"""The `scripted` provider: completes a task by reaching a sequence of joint targets.

A waypoint is a dict {action_key: target} (or a list, positional over the robot's
action keys). The policy moves its command toward the current waypoint by at most
`max_delta` per step, watches the observed joint positions, and moves on once every
joint of the waypoint has been within `tolerance` for `settle_steps` steps. It is
closed-loop on the observation, so it needs position actuators (SO-101). An episode's
command starts at the observation's `actuator_targets` (the robot's current command)
where it has them, else at the measured joint positions.

The task exposes its success criterion: `is_success(context)` is true once every
waypoint has been reached in order and the robot is at the last one, so
`eval_policy` scores a success rate without a success_fn.

policy_config:
  targets         list of waypoints (required)
  tolerance       per joint, in the joint's unit (default 0.05)
  settle_steps    steps to stay within tolerance before moving on (default 3)
  max_delta       largest command change per step (default 0.05)
  max_accel       largest change of that per-step change, per step (default: none): the
                  command speeds up and brakes smoothly, so a shield with acceleration
                  limits has nothing to clip (0.008 at 50 Hz is 20 rad/s^2)
  joint_map       {action_key: joint_name} when they differ (default: the same name)
  execution_horizon  actions per chunk (default 1: closed loop)
  latency_s       seconds every get_actions sleeps before it answers (simulated
                  inference, default 0; the mock's option): on a policy_server it is
                  real inference time that the workcell's wall clock sees, as
                  bench/fidelity.py injects it

The `scripted_goal` provider is the expert of a benchmark with a per-episode goal
(`tasks/goals.py`): its one waypoint is the observation's `goal.<joint>` entries,
read at every call; it takes the same keys but `targets`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from robokernel_ros.kernel.motion import step_toward
from robokernel_ros.kernel.observation import goal_in, observed_joint_positions
from robokernel_ros.policies.base import Action, Policy, register_provider

_CONFIG_KEYS = frozenset(
    {
        "targets",
        "tolerance",
        "settle_steps",
        "max_delta",
        "max_accel",
        "joint_map",
        "execution_horizon",
        "latency_s",
        "seed",
    }  # fmt: skip
)


def _positive(config: Mapping[str, Any], key: str) -> None:
    if key in config:
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"policy_config[{key!r}]={v!r}: must be a positive finite number")


class ScriptedPolicy(Policy):
    provider = "scripted"
    supports_rtc = True  # continues the queued actions (see the module docstring)

    def __init__(
        self,
        *,
        targets: Sequence[Mapping[str, float] | Sequence[float]],
        tolerance: float = 0.05,
        settle_steps: int = 3,
        max_delta: float = 0.05,
        max_accel: float | None = None,
        joint_map: Mapping[str, str] | None = None,
        execution_horizon: int = 1,
        latency_s: float = 0.0,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        self.preflight({"targets": targets, "tolerance": tolerance, "settle_steps": settle_steps,
                        "max_delta": max_delta, "joint_map": joint_map or {},
                        **({"max_accel": max_accel} if max_accel is not None else {}),
                        "execution_horizon": execution_horizon, "latency_s": latency_s})  # fmt: skip
        self._raw_targets = [dict(t) if isinstance(t, Mapping) else list(t) for t in targets]
        self.tolerance = float(tolerance)
        self.settle_steps = int(settle_steps)
        self.max_delta = float(max_delta)
        self.max_accel = None if max_accel is None else float(max_accel)
        self.joint_map = dict(joint_map or {})
        self.execution_horizon = int(execution_horizon)
        self.latency_s = float(latency_s)
        self.waypoints: list[dict[str, float]] = []
        self.index = 0
        self.settled = 0
        self.completed = False
        self._command: dict[str, float] = {}
        self._velocity: dict[str, float] = {}  # the last per-step change of each command

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config: unknown keys {unknown} for provider 'scripted'; known: {sorted(_CONFIG_KEYS)}"
            )
        targets = config.get("targets")
        if not isinstance(targets, list | tuple) or not targets:
            raise ValueError(
                f"policy_config['targets']={targets!r}: must be a non-empty list of waypoints "
                "({action_key: value} dicts or lists over the robot's action keys)"
            )
        for i, waypoint in enumerate(targets):
            values = waypoint.values() if isinstance(waypoint, Mapping) else waypoint
            if isinstance(waypoint, str) or not isinstance(values, Sequence | type({}.values())):
                raise ValueError(
                    f"policy_config['targets'][{i}]={waypoint!r}: must be a dict or a list of numbers"
                )
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    raise ValueError(
                        f"policy_config['targets'][{i}]={waypoint!r}: values must be finite numbers"
                    )
            if not values:
                raise ValueError(
                    f"policy_config['targets'][{i}]: a waypoint names at least one joint"
                )
        for key in ("tolerance", "max_delta", "max_accel"):
            _positive(config, key)
        latency = config.get("latency_s", 0.0)
        if (
            isinstance(latency, bool)
            or not isinstance(latency, int | float)
            or not math.isfinite(latency)
            or latency < 0
        ):
            raise ValueError(f"policy_config['latency_s']={latency!r}: must be finite seconds >= 0")
        for key in ("settle_steps", "execution_horizon"):
            v = config.get(key, 1)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"policy_config[{key!r}]={v!r}: must be a positive whole number")
        joint_map = config.get("joint_map") or {}
        if not isinstance(joint_map, Mapping) or not all(
            isinstance(v, str) for v in joint_map.values()
        ):
            raise ValueError(
                f"policy_config['joint_map']={joint_map!r}: must map action keys to joint names"
            )

    def set_robot_state_keys(self, action_keys: Sequence[str]) -> None:
        super().set_robot_state_keys(action_keys)
        waypoints = []
        for i, raw in enumerate(self._raw_targets):
            if isinstance(raw, dict):
                unknown = sorted(set(raw) - set(self.action_keys))
                if unknown:
                    raise ValueError(
                        f"policy_config['targets'][{i}]: keys {unknown} are not action keys of the robot "
                        f"({list(self.action_keys)})"
                    )
                waypoints.append({k: float(v) for k, v in raw.items()})
            else:
                if len(raw) > len(self.action_keys):
                    raise ValueError(
                        f"policy_config['targets'][{i}]: {len(raw)} values for {len(self.action_keys)} action keys"
                    )
                waypoints.append({k: float(v) for k, v in zip(self.action_keys, raw, strict=False)})
        self.waypoints = waypoints

    def joint_of(self, key: str) -> str:
        return self.joint_map.get(key, key)

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.index = 0
        self.settled = 0
        self.completed = False
        self._command = {}
        self._velocity = {}

    def _near(self, joints: Mapping[str, float], waypoint: Mapping[str, float]) -> bool:
        for key, target in waypoint.items():
            joint = self.joint_of(key)
            if joint not in joints:
                self.missing_state_keys_used = True
                return False
            if abs(joints[joint] - target) > self.tolerance:
                return False
        return True

    def _advance(self, joints: Mapping[str, float]) -> None:
        if self._near(joints, self.waypoints[self.index]):
            self.settled += 1
        else:
            self.settled = 0
        if self.settled >= self.settle_steps:
            if self.index == len(self.waypoints) - 1:
                self.completed = True
            else:
                self.index += 1
                self.settled = 0

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        if not self.waypoints:
            raise RuntimeError(
                "scripted policy: set_robot_state_keys was not called (no action keys bound)"
            )
        if self.latency_s:
            time.sleep(self.latency_s)
        joints = observed_joint_positions(observation)
        # An episode's command starts where the robot's is (its actuator target), not
        # where the joint sags below it under gravity: a first step from the measured
        # pose would be a jump that a shield's acceleration bound clips.
        targets = observation.get("actuator_targets") or {}
        for key in self.action_keys:
            if key not in self._command:
                lo, hi = self.action_limits.get(key, (0.0, 0.0))
                start = targets.get(key, joints.get(self.joint_of(key), (lo + hi) / 2.0))
                self._command[key] = float(start)
        self._advance(joints)
        target = self.waypoints[self.index]
        chunk: list[Action] = []
        queued = kwargs.get("queued_actions") or ()
        for i, action in enumerate(list(queued)[: self.execution_horizon - 1]):
            values = {k: float(action[k]) for k in self.action_keys if k in action}
            if i:  # the speed between two queued actions (the first one's is not known)
                for key, value in values.items():
                    self._velocity[key] = value - self._command.get(key, value)
            self._command.update(values)
            chunk.append(dict(self._command))
        while len(chunk) < self.execution_horizon:
            for key in self.action_keys:
                goal = target.get(key)
                if goal is None and not self._velocity.get(key):
                    continue  # not part of this waypoint and at rest
                self._move(key, goal)
            chunk.append(dict(self._command))
        return chunk

    def _move(self, key: str, goal: float | None) -> None:
        """One step of the command toward `goal` (None: brake to rest): no faster than
        max_delta, no sudden change of speed beyond max_accel, stopping at the goal."""
        self._command[key], self._velocity[key] = step_toward(
            self._command[key],
            self._velocity.get(key, 0.0),
            goal,
            max_step=self.max_delta,
            max_accel=self.max_accel,
        )

    # --- the task's criterion ------------------------------------------------------------

    def is_success(self, context: Mapping[str, Any]) -> bool:
        """Every waypoint reached in order, and the robot within tolerance of the last one."""
        if self.index < len(self.waypoints) - 1:
            return False
        joints = context.get("joints") or {}
        return bool(self.waypoints) and self._near(joints, self.waypoints[-1]) and self.settled >= 1


class GoalReachPolicy(ScriptedPolicy):
    """The scripted policy whose one waypoint is the observed goal (see the module docstring)."""

    provider = "scripted_goal"
    _NO_TARGETS: list[list[float]] = [[0.0]]  # the parent's placeholder, replaced per call

    def __init__(self, **config: Any) -> None:
        self.preflight(config)
        super().__init__(targets=self._NO_TARGETS, **config)

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        if "targets" in config and config["targets"] is not cls._NO_TARGETS:
            raise ValueError(
                f"policy_config['targets']={config['targets']!r}: provider 'scripted_goal' "
                "reads its target from the observation's goal.<joint> entries"
            )
        super().preflight({**config, "targets": cls._NO_TARGETS})

    def set_robot_state_keys(self, action_keys: Sequence[str]) -> None:
        Policy.set_robot_state_keys(self, action_keys)

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        goal = goal_in(observation)
        by_joint = {self.joint_of(k): k for k in self.action_keys}
        unknown = sorted(set(goal) - set(by_joint))
        if not goal or unknown:
            raise ValueError(
                f"scripted_goal: the observation's goal {sorted(goal)} names no action key of "
                f"the robot ({list(self.action_keys)}); it needs goal.<joint> entries"
            )
        waypoint = {by_joint[j]: v for j, v in goal.items()}
        if self.waypoints != [waypoint]:  # a new goal (a new episode): start over
            self.waypoints, self.index, self.settled, self.completed = [waypoint], 0, 0, False
        return super().get_actions(observation, instruction, **kwargs)


register_provider("scripted", ScriptedPolicy, replace=True)
register_provider("scripted_goal", GoalReachPolicy, replace=True)
