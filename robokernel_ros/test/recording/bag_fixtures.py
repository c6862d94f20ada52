"""A trivial numpy arm and a deterministic chunking agent, to drive a real EpisodeRunner."""

from __future__ import annotations

from typing import Any

import numpy as np
from robokernel_ros.kernel.spec import Capabilities, EnvSpec, StepResult

JOINTS = ("j0", "j1", "j2")


class NumpyArm:
    """Three joints that move to the commanded absolute targets (first-order lag)."""

    def __init__(
        self, *, control_hz: float = 20.0, steps_to_success: int = 25, images: bool = True
    ) -> None:
        self.env_spec = EnvSpec(
            action_keys=JOINTS,
            control="absolute",
            control_hz=control_hz,
            action_limits={k: (-2.0, 2.0) for k in JOINTS},
            capabilities=Capabilities(privileged_state=True, images=images),
        )
        self.images = images
        self.steps_to_success = steps_to_success
        self.q = np.zeros(3)
        self.n = 0

    def _obs(self) -> dict[str, Any]:
        obs: dict[str, Any] = {
            "joint_positions": {k: float(v) for k, v in zip(JOINTS, self.q, strict=True)},
            "joint_velocities": {k: 0.0 for k in JOINTS},
        }
        if self.images:
            obs["images"] = {"front": np.full((4, 5, 3), self.n % 256, dtype=np.uint8)}
        return obs

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        self.q = np.zeros(3)
        self.n = 0
        return self._obs()

    def step(self, action: Any) -> StepResult:
        target = np.array([float(action[k]) for k in JOINTS])
        self.q = self.q + 0.5 * (target - self.q)
        self.n += 1
        done = self.n >= self.steps_to_success
        return StepResult(self._obs(), reward=1.0 if done else 0.0, terminated=done)

    def privileged_state(self) -> dict[str, Any]:
        return {"time": self.n / self.env_spec.control_hz, "qpos": self.q.tolist()}


class ChunkAgent:
    """Chunks of `horizon` actions computed from the observation only (deterministic)."""

    def __init__(self, horizon: int = 5, step_size: float = 0.05) -> None:
        self.horizon = horizon
        self.step_size = step_size

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        pass

    def get_actions(
        self, observation: Any, instruction: str = "", **kwargs: Any
    ) -> list[dict[str, float]]:
        q = observation["joint_positions"]
        return [
            {k: float(q[k]) + self.step_size * (i + 1) * (j + 1) for j, k in enumerate(JOINTS)}
            for i in range(self.horizon)
        ]

    def act(self, observation: Any, step: int, **kwargs: Any) -> list[dict[str, float]]:
        return self.get_actions(observation)
