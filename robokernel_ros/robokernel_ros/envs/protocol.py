"""SimScene: what an environment, a torque shim and a video recorder need of a scene.

MujocoScene implements it; MujocoEnv, TorqueShim and VideoRecorder depend on this
protocol rather than on the scene module, so the scene can build them without an
import cycle. Every attribute is read, and every method called, with `lock` held
(MujocoEnv.step holds it for its whole step).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import mujoco
import numpy as np

from .entries import ModelIndex, RobotEntry


class SimScene(Protocol):
    lock: threading.RLock
    model: mujoco.MjModel
    data: mujoco.MjData
    generation: int  # bumped by every recompile (and torque shim change): re-bind indices

    @property
    def index(self) -> ModelIndex: ...

    def robots(self) -> list[str]: ...

    def robot(self, name: str) -> RobotEntry: ...

    def torque_shim(self, name: str) -> Any:
        """The robot's installed TorqueShim, or None."""
        ...

    def camera_id(self, camera: str | None) -> int: ...

    def reset(
        self,
        seed: int | None = None,
        *,
        noise: float = 0.0,
        robots: Sequence[str] | None = None,
    ) -> None: ...

    def advance(self, nstep: int) -> None:
        """nstep physics steps (the installed torque shims' PD law before each)."""
        ...

    def render(
        self, camera: str | None = None, width: int = 320, height: int = 240
    ) -> np.ndarray: ...
