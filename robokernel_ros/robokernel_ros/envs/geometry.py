"""Camera pose math: axes from a look-at point, and the quaternion of a pair of axes."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np


def xyaxes_from_lookat(pos: Sequence[float], lookat: Sequence[float]) -> tuple[float, ...]:
    """The camera's x (right) and y (up) axes for a camera at `pos` looking at `lookat`
    (MuJoCo cameras look along their -z axis)."""
    forward = np.asarray(lookat, float) - np.asarray(pos, float)
    norm = np.linalg.norm(forward)
    if norm < 1e-9:
        raise ValueError(f"lookat={tuple(lookat)!r}: must differ from pos={tuple(pos)!r}")
    forward /= norm
    up = np.array([0.0, 0.0, 1.0])
    if abs(float(forward @ up)) > 0.999:
        up = np.array([0.0, 1.0, 0.0])
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    cam_up = np.cross(right, forward)
    return (*right.tolist(), *cam_up.tolist())


def quat_from_xyaxes(xyaxes: Sequence[float]) -> tuple[float, ...]:
    x = np.asarray(xyaxes[:3], float)
    y = np.asarray(xyaxes[3:], float)
    x /= np.linalg.norm(x)
    y = y - (y @ x) * x
    ny = np.linalg.norm(y)
    if ny < 1e-9:
        raise ValueError(f"xyaxes={tuple(xyaxes)!r}: the two axes must not be parallel")
    y /= ny
    z = np.cross(x, y)
    mat = np.column_stack([x, y, z]).reshape(-1)
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, mat)
    return tuple(quat.tolist())


# ---------------------------------------------------------------- the description log
