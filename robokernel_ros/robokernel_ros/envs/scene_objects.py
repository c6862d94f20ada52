"""The scene's objects and added cameras: adding, moving and removing them, and where they are.

Each mutation holds the scene's lock, passes its mutation guard, is recorded in its
description (envs.description) and recompiles the model (objects and cameras are part
of the composed MJCF); move_object moves in place, without a recompile."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import mujoco

from . import checks
from .description import described
from .entries import SHAPES, CameraEntry, ModelIndex, ObjectEntry
from .geometry import quat_from_xyaxes, xyaxes_from_lookat


class ObjectsAndCameras:
    """MujocoScene's object and camera calls, on its lock, entries and compiled model."""

    lock: threading.RLock
    model: mujoco.MjModel
    data: mujoco.MjData
    _index: ModelIndex
    _objects: dict[str, ObjectEntry]
    _cameras: dict[str, CameraEntry]
    _check: Callable[[str], None]
    _rebuild: Callable[..., None]

    # -- objects

    @described
    def add_object(
        self,
        name: str,
        *,
        shape: str = "box",
        size: Sequence[float] | None = None,
        pos: Sequence[float] = (0.0, 0.0, 0.1),
        quat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
        rgba: Sequence[float] = (0.85, 0.3, 0.2, 1.0),
        mass: float = 0.1,
        free: bool = True,
    ) -> None:
        """A rigid object: `shape` one of box, sphere, cylinder, capsule, ellipsoid, with
        MuJoCo's half-sizes (box: 3, sphere: 1, cylinder/capsule: radius + half-length,
        ellipsoid: 3). `free=True` gives it a free joint named after it; `free=False` fixes
        it to the world."""
        name = checks.entity_name("name", name)
        if shape not in SHAPES:
            raise ValueError(f"shape={shape!r}: must be one of {', '.join(SHAPES)}")
        _, n, default = SHAPES[shape]
        dims = default if size is None else checks.vector("size", size, n, positive=True)
        position = checks.vector("pos", pos, 3)
        orientation = checks.quat("quat", quat)
        color = checks.vector("rgba", rgba, 4)
        if not all(0.0 <= c <= 1.0 for c in color):
            raise ValueError(f"rgba={rgba!r}: must be 4 numbers in [0, 1]")
        weight = checks.finite("mass", mass, positive=True)
        if not isinstance(free, bool):
            raise ValueError(f"free={free!r}: must be a boolean (True or False)")
        with self.lock:
            self._check("add_object")
            if name in self._objects:
                raise ValueError(
                    f"name={name!r}: an object with this name is already in the scene ({self.objects()})"
                )
            taken = set(self._index.bodies) | set(self._index.joints) | set(self._index.geoms)
            if name in taken:
                raise ValueError(f"name={name!r}: already names a body, joint or geom of the scene")
            entry = ObjectEntry(name, shape, dims, position, orientation, color, weight, free)  # type: ignore[arg-type]
            self._objects[name] = entry
            try:
                self._rebuild(new_robots=())
            except Exception:
                del self._objects[name]
                raise

    @described
    def remove_object(self, name: str) -> None:
        with self.lock:
            self._check("remove_object")
            if name not in self._objects:
                raise ValueError(f"name={name!r}: no such object (objects: {self.objects()})")
            del self._objects[name]
            self._rebuild(new_robots=())

    @described
    def move_object(
        self, name: str, pos: Sequence[float], quat: Sequence[float] | None = None
    ) -> None:
        """Move an object now (velocity zeroed) and make that its pose on reset. No recompile."""
        position = checks.vector("pos", pos, 3)
        with self.lock:
            self._check("move_object")
            entry = self._objects.get(name)
            if entry is None:
                raise ValueError(f"name={name!r}: no such object (objects: {self.objects()})")
            orientation = entry.quat if quat is None else checks.quat("quat", quat)
            entry.pos, entry.quat = position, orientation  # type: ignore[assignment]
            self._place_object(entry)
            mujoco.mj_forward(self.model, self.data)

    def objects(self) -> list[str]:
        return list(self._objects)

    def object_pose(self, name: str) -> tuple[list[float], list[float]]:
        """The object's current (pos, quat) in the world."""
        with self.lock:
            if name not in self._objects:
                raise ValueError(f"name={name!r}: no such object (objects: {self.objects()})")
            body = self.model.body(name).id
            return self.data.xpos[body].tolist(), self.data.xquat[body].tolist()

    def _place_object(self, entry: ObjectEntry) -> None:
        model, data = self.model, self.data
        if entry.free:
            _, _, qadr, vadr = self._index.joints[entry.name]
            data.qpos[qadr : qadr + 3] = entry.pos
            data.qpos[qadr + 3 : qadr + 7] = entry.quat
            data.qvel[vadr : vadr + 6] = 0.0
        else:
            body = model.body(entry.name).id
            model.body_pos[body] = entry.pos
            model.body_quat[body] = entry.quat

    # -- cameras

    @described
    def add_camera(
        self,
        name: str,
        *,
        pos: Sequence[float],
        lookat: Sequence[float] | None = None,
        xyaxes: Sequence[float] | None = None,
        fovy: float = 45.0,
    ) -> None:
        """A fixed camera at `pos`, aimed at `lookat` (default the origin) or oriented by
        `xyaxes` (its right and up axes, as in MJCF); `fovy` in degrees."""
        name = checks.entity_name("name", name)
        position = checks.vector("pos", pos, 3)
        if lookat is not None and xyaxes is not None:
            raise ValueError("lookat and xyaxes: give one of them, not both")
        if xyaxes is not None:
            axes = checks.vector("xyaxes", xyaxes, 6)
            quat_from_xyaxes(axes)  # refuses parallel axes
        else:
            target = checks.vector("lookat", (0.0, 0.0, 0.0) if lookat is None else lookat, 3)
            axes = xyaxes_from_lookat(position, target)
        angle = checks.finite("fovy", fovy, positive=True)
        if not angle < 180.0:
            raise ValueError(f"fovy={fovy!r}: must be in (0, 180) degrees")
        with self.lock:
            self._check("add_camera")
            if name in self._cameras or name in self._index.cameras:
                raise ValueError(
                    f"name={name!r}: a camera with this name is already in the scene ({self.cameras()})"
                )
            self._cameras[name] = CameraEntry(name, position, axes, angle)  # type: ignore[arg-type]
            try:
                self._rebuild(new_robots=())
            except Exception:
                del self._cameras[name]
                raise

    @described
    def remove_camera(self, name: str) -> None:
        with self.lock:
            self._check("remove_camera")
            if name not in self._cameras:
                owner = (
                    "it belongs to a robot or the loaded scene; "
                    if name in self._index.cameras
                    else ""
                )
                raise ValueError(
                    f"name={name!r}: not a camera added with add_camera ({owner}added cameras: {list(self._cameras)})"
                )
            del self._cameras[name]
            self._rebuild(new_robots=())

    def cameras(self) -> list[str]:
        """Every named camera of the compiled model: added ones first, then the cameras of
        robots ("arm/wrist_cam") and of a loaded scene file."""
        added = list(self._cameras)
        return added + [c for c in self._index.cameras if c not in self._cameras]

    def camera_id(self, camera: str | None) -> int:
        """The model id of a named camera; None (or "free") is MuJoCo's free camera (-1)."""
        if camera is None or camera == "free":
            return -1
        cam = self._index.cameras.get(camera) if isinstance(camera, str) else None
        if cam is None:
            raise ValueError(
                f"camera={camera!r}: no such camera (cameras: {self.cameras()}, or None for the free camera)"
            )
        return cam
