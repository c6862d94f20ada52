"""Helpers shared by the lerobot provider tests (imported by module name)."""

from __future__ import annotations

from typing import Any

import numpy as np

SO101 = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def so101_observation(
    image_size: tuple[int, int] | None = (64, 64), *, camera: str = "front", seed: int = 0
) -> dict[str, Any]:
    """An observation in the envs' layout (joint values distinct so a mis-binding shows)."""
    rng = np.random.default_rng(seed)
    obs: dict[str, Any] = {
        "joint_positions": {j: 0.1 * (i + 1) for i, j in enumerate(SO101)},
        "joint_velocities": {j: -0.01 * (i + 1) for i, j in enumerate(SO101)},
        "actuator_targets": {j: 0.05 * (i + 1) for i, j in enumerate(SO101)},
    }
    if image_size is not None:
        h, w = image_size
        obs["images"] = {camera: rng.integers(0, 255, (h, w, 3), dtype=np.uint8)}
    return obs
