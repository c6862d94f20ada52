"""A MuJoCo scene: named robots, objects and cameras composed into one model.

The scene keeps a description (robots with their model files and poses, objects,
cameras, gravity, timestep) and compiles it into one `mujoco.MjModel` with MjSpec:
each robot's MJCF is attached under its own name prefix (robot "arm" -> actuator
"arm/shoulder_pan", joint "arm/elbow_flex", body "arm/base"). Every mutation
recompiles the model (about 0.1 s; meshes are parsed once and cached by MuJoCo) and
carries the state over by name: joints and actuators that exist in both models keep
their qpos/qvel/ctrl, the clock keeps running, and a newly added robot starts at its
'home' keyframe when its model has one.

Changes to the source models, applied to the copy the scene attaches:
- unnamed joints are named (a free joint "root", others "joint<i>") and unnamed
  actuators "actuator<i>", so that every action key and every state entry has a name;
- keyframes are removed from the composed model; the scene applies each robot's own
  'home' keyframe itself (at its pose in the scene) on add and on reset;
- a robot's solver options that differ from MuJoCo's defaults (cone, impratio,
  integrator, iterations, ...) are adopted by the scene (the last robot added wins on
  a conflict, with a warning); the timestep and gravity stay the scene's.

`lock` (an RLock) is held by every mutation, reset, render and by MujocoEnv.step.

This module holds the description, the robots, the whole-scene calls and the recompile
that carries the state over; the objects and added cameras (scene_objects) and the
torque-shim calls (scene_torque) are mixins of MujocoScene in their own modules, on the
same lock and the same recompile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from . import checks
from .compose import apply_home, carry_state, compose, hold_position_actuators
from .description import described
from .entries import CameraEntry, ModelIndex, ObjectEntry, RobotEntry
from .env import MujocoEnv
from .model_info import (
    ModelInfo,
    actuated_info,
    load_model_info,
    model_info,
)
from .models import resolve_model
from .render import RendererCache, RenderQuality
from .scene_objects import ObjectsAndCameras
from .scene_torque import TorqueShimCalls
from .torque import TorqueShim, torque_motors

log = logging.getLogger(__name__)

DEFAULT_TIMESTEP = 0.002
DEFAULT_GRAVITY = (0.0, 0.0, -9.81)


# ---------------------------------------------------------------- the scene


class MujocoScene(TorqueShimCalls, ObjectsAndCameras):
    """Robots, objects and cameras in one MuJoCo model. See the module docstring."""

    def __init__(
        self,
        *,
        timestep: float = DEFAULT_TIMESTEP,
        gravity: Sequence[float] = DEFAULT_GRAVITY,
        render_quality: RenderQuality = "fast",
    ) -> None:
        """An empty scene (floor, light). `render_quality`: "fast" (no multisampling,
        shadows or reflections; much faster on a software renderer) or "full"."""
        self.lock = threading.RLock()
        self._timestep = checks.finite("timestep", timestep, positive=True)
        self._gravity = checks.vector("gravity", gravity, 3)
        self._base: ModelInfo | None = None  # a loaded scene file replacing the default world
        self._base_path: Path | None = None
        self._robots: dict[str, RobotEntry] = {}
        self._objects: dict[str, ObjectEntry] = {}
        self._cameras: dict[str, CameraEntry] = {}
        self._offscreen = (640, 480)
        self._renderers = RendererCache(render_quality)
        # Bumped on every recompile and timestep change: envs rebind their indices and
        # substeps on change. _compiled counts recompiles only (render contexts follow it).
        self.generation = 0
        self._compiled = 0
        self.model: mujoco.MjModel
        self.data: mujoco.MjData
        self._index: ModelIndex
        self._mutation_guard: Callable[[str], None] | None = None
        self._init_args = {
            "timestep": timestep,
            "gravity": gravity,
            "render_quality": render_quality,
        }
        self._description: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._describing = 0
        self._shims: dict[str, TorqueShim] = {}  # robot -> its installed torque shim
        with self.lock:
            self._rebuild(new_robots=())

    # ------------------------------------------------------------ description

    def description(self) -> dict[str, Any]:
        """What rebuilds this scene in another process (a Ray worker): the constructor's
        arguments and every public mutation made so far (add_robot, add_object,
        add_camera, actuate_robot, load_scene, ...), in order. Plain data (picklable).
        The state (qpos, time) is not part of it: a rollout resets the scene anyway."""
        with self.lock:
            return {"init": dict(self._init_args), "calls": list(self._description)}

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> MujocoScene:
        """A new scene built by replaying `description()` of another one."""
        scene = cls(**description["init"])
        for name, args, kwargs in description["calls"]:
            getattr(scene, name)(*args, **kwargs)
        return scene

    # ------------------------------------------------------------ hooks

    def set_mutation_guard(self, guard: Callable[[str], None] | None) -> None:
        """Install a callable that is called with the operation name before every
        mutation (and reset) and may raise to refuse it; the rollout API uses it to refuse
        scene changes while a rollout drives the scene. None removes it."""
        if guard is not None and not callable(guard):
            raise ValueError(f"guard={guard!r}: must be callable or None")
        self._mutation_guard = guard

    def _check(self, operation: str) -> None:
        guard = self._mutation_guard
        if guard is not None:
            guard(operation)

    # ------------------------------------------------------------ robots

    @described
    def add_robot(
        self,
        name: str,
        model: str | PathLike[str],
        *,
        pos: Sequence[float] = (0.0, 0.0, 0.0),
        quat: Sequence[float] = (1.0, 0.0, 0.0, 0.0),
    ) -> None:
        """Attach a robot model (packaged name or MJCF path) under the prefix "<name>/"."""
        name = checks.entity_name("name", name)
        position = checks.vector("pos", pos, 3)
        orientation = checks.quat("quat", quat)
        path = resolve_model(model)
        self._check("add_robot")  # refuse before the (slow, first-time) model parse
        info = load_model_info(path)  # outside the lock: a rollout keeps stepping meanwhile
        with self.lock:
            self._check("add_robot")
            if name in self._robots:
                raise ValueError(
                    f"name={name!r}: a robot with this name is already in the scene ({self.robots()})"
                )
            entry = RobotEntry(name, info, f"{name}/", position, orientation)  # type: ignore[arg-type]
            self._robots[name] = entry
            try:
                self._rebuild(new_robots=(name,))
            except Exception:
                del self._robots[name]  # the model was not swapped: nothing else to undo
                raise
            log.info("added robot %r (%s) at %s", name, path, position)

    @described
    def remove_robot(self, name: str) -> None:
        with self.lock:
            self._check("remove_robot")
            if name not in self._robots:
                raise ValueError(f"name={name!r}: no such robot (robots: {self.robots()})")
            entry = self._robots.pop(name)
            try:
                self._rebuild(new_robots=())
            except Exception:
                self._robots[name] = entry
                raise

    @described
    def actuate_robot(
        self,
        name: str,
        *,
        kp: float = 100.0,
        kv: float = 10.0,
        replace_motors: bool = False,
    ) -> list[str]:
        """Position servos (gain `kp`, damping `kv`; ctrlrange = the joint range when
        limited) for a robot. A model without any actuator gets one on every hinge/slide
        joint, named after the joint. With `replace_motors=True`, torque motors that drive
        one joint are replaced by servos of the same name, so the action keys stay and
        their values become joint targets (a torque-driven Panda or Go2 then holds its
        pose under gravity); other actuators (the Panda's gripper tendon) are kept. The
        new servos hold the current joint positions. Returns their names."""
        gain = checks.finite("kp", kp, positive=True)
        damping = checks.finite("kv", kv, nonnegative=True)
        if not isinstance(replace_motors, bool):
            raise ValueError(
                f"replace_motors={replace_motors!r}: must be a boolean (True or False)"
            )
        self._check("actuate_robot")
        with self.lock:
            self._check("actuate_robot")
            entry = self.robot(name)
            if entry.info.path is None or not entry.prefix:
                raise ValueError(
                    f"name={name!r}: the robot of a loaded scene file cannot be re-actuated"
                )
            info, added = actuated_info(entry.info, gain, damping, replace_motors)
            if not added:
                return []
            previous = entry.info
            entry.info = info
            try:
                self._rebuild(new_robots=())
            except Exception:
                entry.info = previous
                raise
            hold_position_actuators(
                self.model, self.data, self._index, entry, home_ctrl=False, only=added
            )
            mujoco.mj_forward(self.model, self.data)
            log.info("robot %r: position servos on %s", name, added)
            return added

    def robots(self) -> list[str]:
        return list(self._robots)

    def robot(self, name: str) -> RobotEntry:
        entry = self._robots.get(name)
        if entry is None:
            raise ValueError(f"robot_name={name!r}: no such robot (robots: {self.robots()})")
        return entry

    def robot_action_keys(self, name: str) -> tuple[str, ...]:
        """The robot's actuator names, without the robot prefix."""
        return self.robot(name).info.actuators

    def robot_joint_names(self, name: str) -> tuple[str, ...]:
        """The robot's hinge and slide joints, without the prefix (a free-floating base is
        reported as the base pose in privileged state, not as a joint)."""
        return self.robot(name).info.scalar_joints

    def robot_actuator_kinds(self, name: str) -> dict[str, str]:
        """{actuator: 'position' | 'velocity' | 'motor' | 'other'} (see actuator_kind)."""
        return dict(self.robot(name).info.actuator_kinds)

    def advance(self, nstep: int) -> None:
        """nstep physics steps; an installed torque shim writes its motors' ctrl before each
        (the caller holds `lock`; step() is the checked, locking form)."""
        shims = self._shims
        if not shims:
            mujoco.mj_step(self.model, self.data, nstep)
            return
        model, data = self.model, self.data
        active = list(shims.values())
        for _ in range(nstep):
            for shim in active:
                shim.apply(data)
            mujoco.mj_step(model, data)

    # ------------------------------------------------------------ whole scene

    @described
    def load_scene(self, path: str | PathLike[str], *, robot: str | None = None) -> None:
        """Replace everything (robots, objects, cameras, the default floor and light) with
        an MJCF file. Its content becomes the scene's unnamed base; with `robot="name"` its
        actuators and joints are also exposed as a robot of that name (without a prefix:
        the file's own names are the action keys). Robots, objects and cameras can be
        added on top afterwards. Gravity and timestep are taken from the file."""
        if robot is not None:
            robot = checks.entity_name("robot", robot)
        file = resolve_model(path, param="path")
        with self.lock:
            self._check("load_scene")
            try:
                spec = mujoco.MjSpec.from_file(str(file))
                info = model_info(spec, file)
            except ValueError as exc:
                raise ValueError(f"path={str(file)!r}: MuJoCo cannot load it: {exc}") from exc
            saved = (
                self._base,
                self._base_path,
                self._robots,
                self._objects,
                self._cameras,
                self._timestep,
                self._gravity,
            )
            self._base, self._base_path = info, file
            self._robots, self._objects, self._cameras = {}, {}, {}
            if robot is not None:
                self._robots[robot] = RobotEntry(
                    robot, info, "", (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)
                )
            self._timestep = float(info.spec.option.timestep)
            self._gravity = tuple(float(g) for g in info.spec.option.gravity)  # type: ignore[assignment]
            try:
                self._rebuild(new_robots=tuple(self._robots), fresh=True)
            except Exception:
                (
                    self._base,
                    self._base_path,
                    self._robots,
                    self._objects,
                    self._cameras,
                    self._timestep,
                    self._gravity,
                ) = saved
                raise

    @described
    def clear(self) -> None:
        """Back to the empty default scene (floor and light)."""
        with self.lock:
            self._check("clear")
            self._base, self._base_path = None, None
            self._robots, self._objects, self._cameras = {}, {}, {}
            self._rebuild(new_robots=(), fresh=True)

    @described
    def set_gravity(self, gravity: Sequence[float]) -> None:
        g = checks.vector("gravity", gravity, 3)
        with self.lock:
            self._check("set_gravity")
            self._gravity = g  # type: ignore[assignment]
            self.model.opt.gravity[:] = g

    @property
    def gravity(self) -> tuple[float, float, float]:
        return tuple(float(v) for v in self.model.opt.gravity)  # type: ignore[return-value]

    @described
    def set_timestep(self, timestep: float) -> None:
        """Change the physics timestep; environments recompute their substeps (their
        control rate stays as requested where the new timestep allows)."""
        dt = checks.finite("timestep", timestep, positive=True)
        with self.lock:
            self._check("set_timestep")
            self._timestep = dt
            self.model.opt.timestep = dt
            self.generation += 1

    @property
    def timestep(self) -> float:
        return float(self.model.opt.timestep)

    def reset(
        self, seed: int | None = None, *, noise: float = 0.0, robots: Sequence[str] | None = None
    ) -> None:
        """Reset the state: time 0, robots at their 'home' keyframe (else the model's
        reference pose), objects at their set poses, position actuators holding the
        current joint positions. With `noise` > 0, the hinge/slide joints of `robots`
        (default: all) get uniform noise in [-noise, noise] from `seed` (clipped to the
        joint ranges); without noise the reset is deterministic and `seed` changes nothing."""
        amount = checks.finite("noise", noise, nonnegative=True)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise ValueError(f"seed={seed!r}: must be an integer or None")
        with self.lock:
            self._check("reset")
            names = list(self._robots) if robots is None else list(robots)
            for name in names:
                self.robot(name)
            model, data = self.model, self.data
            mujoco.mj_resetData(model, data)
            self._apply_base_home()
            for entry in self._robots.values():
                self._apply_home(entry)
            for obj in self._objects.values():
                self._place_object(obj)
            if amount > 0:
                rng = np.random.default_rng(seed)
                for name in names:
                    entry = self._robots[name]
                    for joint in entry.info.scalar_joints:
                        _, j, qadr, _ = self._index.joints[entry.full(joint)]
                        value = data.qpos[qadr] + rng.uniform(-amount, amount)
                        if model.jnt_limited[j]:
                            lo, hi = model.jnt_range[j]
                            value = min(max(value, lo), hi)
                        data.qpos[qadr] = value
                    hold_position_actuators(
                        self.model, self.data, self._index, entry, home_ctrl=False
                    )
            for shim in self._shims.values():  # a shimmed robot holds its reset pose
                shim.hold(data)
                shim.apply(data)
            mujoco.mj_forward(model, data)

    def step(self, nstep: int = 1) -> None:
        """Advance the whole scene by `nstep` physics steps (no actions)."""
        if isinstance(nstep, bool) or not isinstance(nstep, int) or nstep < 1:
            raise ValueError(f"nstep={nstep!r}: must be a positive whole number")
        with self.lock:
            self.advance(nstep)

    # ------------------------------------------------------------ rendering

    def render(self, camera: str | None = None, width: int = 320, height: int = 240) -> np.ndarray:
        """An RGB image (height x width x 3, uint8) of the current state from a named
        camera, or MuJoCo's free camera for None. Offscreen (EGL or OSMesa); raises
        RenderingUnavailable naming MUJOCO_GL and how to install a backend."""
        for label, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{label}={value!r}: must be a positive whole number of pixels")
            if value > 8192:
                raise ValueError(f"{label}={value!r}: must be at most 8192 pixels")
        with self.lock:
            cam = self.camera_id(camera)
            return self._renderers.render(
                self.model, self.data, self._compiled, cam, int(width), int(height)
            )

    def close(self) -> None:
        """Free the renderers (the model and data are kept)."""
        self._renderers.close()

    # ------------------------------------------------------------ environments

    def make_env(
        self,
        robot: str | Sequence[str],
        *,
        control_hz: float = 50.0,
        cameras: Sequence[str] = (),
        image_size: tuple[int, int] = (96, 96),
        reward_fn: Callable[[dict[str, Any]], float] | None = None,
        terminal_fn: Callable[[dict[str, Any]], bool] | None = None,
        reset_noise: float = 0.0,
    ) -> MujocoEnv:
        """A kernel Environment driving one robot (str: action keys are its actuator
        names) or several (a list: keys "robot/actuator"). See MujocoEnv."""
        return MujocoEnv(
            self,
            robot,
            control_hz=control_hz,
            cameras=cameras,
            image_size=image_size,
            reward_fn=reward_fn,
            terminal_fn=terminal_fn,
            reset_noise=reset_noise,
        )

    # ------------------------------------------------------------ internals

    @property
    def index(self) -> ModelIndex:
        return self._index

    def to_xml(self) -> str:
        """The composed scene as MJCF (for inspection)."""
        with self.lock:
            return self._compose().to_xml()

    def _compose(self) -> mujoco.MjSpec:
        return compose(self._base, self._robots.values(), self._objects.values(),
                       self._cameras.values(), timestep=self._timestep, gravity=self._gravity,
                       offscreen=self._offscreen)  # fmt: skip

    def _rebuild(self, *, new_robots: Iterable[str], fresh: bool = False) -> None:
        """Compile the description and carry the state over by name."""
        spec = self._compose()
        try:
            model = spec.compile()
        except ValueError as exc:
            raise ValueError(f"the scene does not compile: {exc}") from exc
        data = mujoco.MjData(model)
        index = ModelIndex.of(model)
        old = None if fresh else getattr(self, "data", None)
        if old is not None:
            carry_state(self.model, old, self._index, model, data, index)
        self.model, self.data, self._index = model, data, index
        self.generation += 1
        self._compiled += 1
        for robot, shim in list(self._shims.items()):
            motors = torque_motors(self, self._robots[robot]) if robot in self._robots else {}
            if any(motors.get(j) != a for j, a in zip(shim.joints, shim.actuators, strict=True)):
                del self._shims[robot]  # its robot or its motors are gone
                log.warning("robot %r: torque shim removed (its motors changed)", robot)
            else:
                shim.bind(self)
        if fresh:
            self._apply_base_home()
        for name in new_robots:
            self._apply_home(self._robots[name])
        mujoco.mj_forward(model, data)

    def _apply_base_home(self) -> None:
        """A loaded scene file's own 'home' keyframe, when no robot stands for the file."""
        if self._base is not None and all(e.prefix for e in self._robots.values()):
            self._apply_home(RobotEntry("", self._base, "", (0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0)))

    def _apply_home(self, entry: RobotEntry) -> None:
        """Put a robot in its 'home' keyframe pose (if any) and set its actuator targets."""
        apply_home(self.model, self.data, self._index, entry)
