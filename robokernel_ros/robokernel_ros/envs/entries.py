"""The scene's description entries (robots, objects, cameras) and the name index of a compiled model."""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from .model_info import ModelInfo, element_names

SHAPES: dict[str, tuple[mujoco.mjtGeom, int, tuple[float, ...]]] = {
    # shape: (geom type, number of size values, default size) - MuJoCo's half-sizes
    "box": (mujoco.mjtGeom.mjGEOM_BOX, 3, (0.025, 0.025, 0.025)),
    "sphere": (mujoco.mjtGeom.mjGEOM_SPHERE, 1, (0.025,)),
    "cylinder": (mujoco.mjtGeom.mjGEOM_CYLINDER, 2, (0.025, 0.04)),
    "capsule": (mujoco.mjtGeom.mjGEOM_CAPSULE, 2, (0.02, 0.04)),
    "ellipsoid": (mujoco.mjtGeom.mjGEOM_ELLIPSOID, 3, (0.03, 0.02, 0.02)),
}


@dataclass
class RobotEntry:
    name: str
    info: ModelInfo
    prefix: str  # "arm/"; "" for the robot of a loaded scene file
    pos: tuple[float, float, float]
    quat: tuple[float, float, float, float]

    def full(self, name: str) -> str:
        return self.prefix + name


@dataclass
class ObjectEntry:
    name: str
    shape: str
    size: tuple[float, ...]
    pos: tuple[float, float, float]
    quat: tuple[float, float, float, float]
    rgba: tuple[float, float, float, float]
    mass: float
    free: bool


@dataclass
class CameraEntry:
    name: str
    pos: tuple[float, float, float]
    xyaxes: tuple[float, ...]
    fovy: float


@dataclass
class ModelIndex:
    """Name lookups of one compiled model."""

    joints: dict[str, tuple[int, int, int, int]] = field(
        default_factory=dict
    )  # name -> type, id, qadr, vadr
    actuators: dict[str, int] = field(default_factory=dict)
    bodies: list[str] = field(default_factory=list)
    geoms: list[str] = field(default_factory=list)
    cameras: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, model: mujoco.MjModel) -> ModelIndex:
        index = cls()
        for j, name in enumerate(element_names(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)):
            if name:
                index.joints[name] = (
                    int(model.jnt_type[j]),
                    j,
                    int(model.jnt_qposadr[j]),
                    int(model.jnt_dofadr[j]),
                )
        for a, name in enumerate(element_names(model, mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu)):
            if name:
                index.actuators[name] = a
        index.bodies = element_names(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody)
        index.geoms = [
            n or f"geom{i}"
            for i, n in enumerate(element_names(model, mujoco.mjtObj.mjOBJ_GEOM, model.ngeom))
        ]
        for c, name in enumerate(element_names(model, mujoco.mjtObj.mjOBJ_CAMERA, model.ncam)):
            if name:
                index.cameras[name] = c
        return index


def selector(indices: list[int]) -> slice | np.ndarray:
    """A slice when the indices are one contiguous run (cheaper to apply), else an index array."""
    if indices and indices == list(range(indices[0], indices[0] + len(indices))):
        return slice(indices[0], indices[0] + len(indices))
    return np.asarray(indices, dtype=np.intp)
