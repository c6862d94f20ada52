"""A tiny numpy environment and a scripted agent: for tests, benchmarks and examples.

PointEnv: n joints that go where they are told (absolute control: position = command;
delta: position += command; velocity: position += command / control_hz), reward = minus
the distance to a goal, terminated when within `tolerance` of it. It reports its own
clock (info["sim_time_s"]) and can offer images and privileged state.

ScriptedAgent: act() returns a chunk built by a function of (observation, step, index),
and remembers every call (step, the RTC keyword arguments) for inspection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .spec import Capabilities, Control, EnvSpec, StepResult


class PointEnv:
    def __init__(
        self,
        n: int = 2,
        *,
        control: Control = "absolute",
        control_hz: float = 50.0,
        limit: float = 1.0,
        goal: Sequence[float] | None = None,
        tolerance: float = 0.0,
        image_shape: tuple[int, int] | None = None,
        privileged: bool = False,
        gripper: bool = False,
        sim_dt: float | None = None,
    ) -> None:
        keys = tuple(f"j{i}" for i in range(n)) + (("gripper",) if gripper else ())
        self.env_spec = EnvSpec(
            action_keys=keys,
            control=control,
            control_hz=control_hz,
            action_limits={k: (-limit, limit) for k in keys},
            gripper_keys=("gripper",) if gripper else (),
            capabilities=Capabilities(
                privileged_state=privileged, images=image_shape is not None, sim_time=True
            ),
        )
        self.keys = keys
        self.goal = np.asarray(goal if goal is not None else [0.5] * len(keys), dtype=float)
        self.tolerance = tolerance
        self.image_shape = image_shape
        self.sim_dt = sim_dt if sim_dt is not None else 1.0 / control_hz
        self.position = np.zeros(len(keys))
        self.sim_time = 0.0
        self.steps = 0
        self.received: list[dict[str, float]] = []  # every action the env was given
        self.rng = np.random.default_rng(0)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        self.rng = np.random.default_rng(seed)
        self.position = self.rng.uniform(-0.1, 0.1, len(self.keys))
        self.sim_time = 0.0
        self.steps = 0
        self.received = []
        return self._observation()

    def _observation(self) -> dict[str, Any]:
        obs: dict[str, Any] = {"state": self.position.copy()}
        for key, value in zip(self.keys, self.position, strict=True):
            obs[key] = float(value)
        if self.image_shape is not None:
            h, w = self.image_shape
            obs["images"] = {"front": np.full((h, w, 3), self.steps % 256, dtype=np.uint8)}
        return obs

    def step(self, action: Mapping[str, float]) -> StepResult:
        self.received.append(dict(action))
        command = np.array([action[k] for k in self.keys], dtype=float)
        control = self.env_spec.control
        if control == "absolute":
            self.position = command
        elif control == "delta":
            self.position = self.position + command
        else:
            self.position = self.position + command / self.env_spec.control_hz
        self.steps += 1
        self.sim_time += self.sim_dt
        distance = float(np.linalg.norm(self.position - self.goal))
        done = self.tolerance > 0 and distance <= self.tolerance
        return StepResult(
            self._observation(),
            -distance,
            done,
            False,
            {"sim_time_s": self.sim_time, "success": done},
        )

    def privileged_state(self) -> dict[str, Any]:
        return {"position": self.position.tolist(), "goal": self.goal.tolist()}


ActionFn = Callable[[Any, int, int], Any]


class ScriptedAgent:
    """act() returns [fn(observation, step, i) for i in range(chunk_size)], after `delay_s`."""

    def __init__(
        self, fn: ActionFn, chunk_size: int = 1, *, delay_s: float = 0.0, supports_rtc: bool = False
    ) -> None:
        self.fn = fn
        self.chunk_size = chunk_size
        self.delay_s = delay_s
        self.supports_rtc = supports_rtc
        self.calls: list[tuple[int, dict[str, Any]]] = []
        self.resets: list[dict[str, Any]] = []
        self.ended: list[Any] = []

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.resets.append({"instruction": instruction, "seed": seed})
        self.calls = []

    def act(self, observation: Any, step: int, **rtc: Any) -> list[Any]:
        self.calls.append((step, rtc))
        if self.delay_s:
            time.sleep(self.delay_s)
        return [self.fn(observation, step, i) for i in range(self.chunk_size)]

    def on_episode_end(self, record: Any) -> None:
        self.ended.append(record)
