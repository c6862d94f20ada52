"""MujocoEnv: one or more robots of a MujocoScene as a kernel Environment.

Action keys are actuator names: a single robot's own names ("shoulder_pan"), or for a
multi-robot environment "robot/actuator" ("arm/shoulder_pan"). An action sets the
ctrl of the actuators it names; unspecified actuators keep their target, unknown keys
are ignored and reported in info["unknown_keys"]. One step advances the whole scene by
`substeps` physics steps, so that a step lasts 1/control_hz seconds of simulated time
(substeps = round(1 / (control_hz * timestep)); `control_hz` reports the rate actually
run when the timestep does not divide the requested period exactly).

Control classification (EnvSpec.control): "velocity" when every actuator is a velocity
servo; otherwise "absolute" - each action value is the absolute ctrl value of its
actuator: a joint target for position servos, a force/torque for motors (the Panda arm
and the Go2 are torque-driven; see `actuator_kinds`). Nothing is ever "delta".

A robot with a torque shim installed (`MujocoScene.install_torque_shim`) keeps its
motors, but their action values are joint targets: the env reports them as "position"
actuators limited to the joint ranges, `actuator_targets` and `hold_action` give the
targets, and every physics substep runs the shim's PD law (privileged "ctrl" holds the
torques it applied).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import mujoco
import numpy as np

from ..kernel.spec import Action, Capabilities, EnvSpec, Observation, StepResult
from .entries import selector
from .protocol import SimScene

log = logging.getLogger(__name__)

GRIPPER_WORDS = ("grip", "finger", "jaw")


class MujocoEnv:
    """A kernel Environment over robots of a MujocoScene (see the module docstring).

    Observation (plain Python floats):
        {"joint_positions": {joint: q}, "joint_velocities": {joint: qdot},
         "actuator_targets": {action key: ctrl},
         "images": {camera: HxWx3 uint8}}   # only when cameras were given
    Joint keys follow the action-key convention (prefixed for multi-robot envs) and
    cover hinge and slide joints; a floating base is in privileged_state()["robots"].
    """

    def __init__(
        self,
        scene: SimScene,
        robot: str | Sequence[str],
        *,
        control_hz: float = 50.0,
        cameras: Sequence[str] = (),
        image_size: tuple[int, int] = (96, 96),
        reward_fn: Callable[[dict[str, Any]], float] | None = None,
        terminal_fn: Callable[[dict[str, Any]], bool] | None = None,
        reset_noise: float = 0.0,
    ) -> None:
        if isinstance(robot, str):
            names, self._prefixed = [robot], False
        elif isinstance(robot, Sequence) and robot and all(isinstance(r, str) for r in robot):
            names, self._prefixed = list(robot), True
        else:
            raise ValueError(
                f"robot={robot!r}: must be a robot name or a non-empty list of robot names"
            )
        if len(set(names)) != len(names):
            raise ValueError(f"robot={robot!r}: names a robot twice")
        for name in names:
            scene.robot(name)  # ValueError naming the robots
        if (
            isinstance(control_hz, bool)
            or not isinstance(control_hz, int | float)
            or not math.isfinite(control_hz)
            or control_hz <= 0
        ):
            raise ValueError(f"control_hz={control_hz!r}: must be a positive finite number")
        if isinstance(cameras, str) or not isinstance(cameras, Sequence):
            raise ValueError(f"cameras={cameras!r}: must be a list of camera names")
        for cam in cameras:
            if not isinstance(cam, str):
                raise ValueError(f"cameras={cameras!r}: must be a list of camera names")
            scene.camera_id(cam)
        if (
            not isinstance(image_size, Sequence)
            or len(image_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in image_size)
        ):
            raise ValueError(
                f"image_size={image_size!r}: must be (height, width), two positive whole numbers"
            )
        for label, fn in (("reward_fn", reward_fn), ("terminal_fn", terminal_fn)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{label}={fn!r}: must be callable or None")
        if (
            isinstance(reset_noise, bool)
            or not isinstance(reset_noise, int | float)
            or not reset_noise >= 0
        ):
            raise ValueError(f"reset_noise={reset_noise!r}: must be a non-negative number")
        self.scene = scene
        self.robot_names: tuple[str, ...] = tuple(names)
        self.requested_control_hz = float(control_hz)
        self.cameras: tuple[str, ...] = tuple(cameras)
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.reward_fn = reward_fn
        self.terminal_fn = terminal_fn
        self.reset_noise = float(reset_noise)
        self._generation = -1
        with scene.lock:
            self._bind()

    # ------------------------------------------------------------ binding

    def _bind(self) -> None:
        """(Re)compute the index arrays after the scene was (re)compiled."""
        scene = self.scene
        model = scene.model
        index = scene.index
        keys: list[str] = []
        act_ids: list[int] = []
        joint_keys: list[str] = []
        qadr: list[int] = []
        vadr: list[int] = []
        kinds: dict[str, str] = {}
        limits: dict[str, tuple[float, float]] = {}
        shims: list[tuple[Any, np.ndarray]] = []  # (torque shim, its keys' action positions)
        for name in self.robot_names:
            if name not in scene.robots():
                raise RuntimeError(
                    f"robot {name!r} was removed from the scene; make a new environment"
                )
            entry = scene.robot(name)
            key_prefix = f"{name}/" if self._prefixed else ""
            shim = scene.torque_shim(name)
            shimmed = set(shim.actuators) if shim is not None else set()
            for actuator in entry.info.actuators:
                a = index.actuators[entry.full(actuator)]
                key = key_prefix + actuator
                keys.append(key)
                act_ids.append(a)
                kinds[key] = entry.info.actuator_kinds[actuator]
                if actuator in shimmed:  # a joint target, within the joint's range
                    kinds[key] = "position"
                    if actuator in shim.joint_limits:
                        limits[key] = shim.joint_limits[actuator]
                elif model.actuator_ctrllimited[a]:
                    lo, hi = model.actuator_ctrlrange[a]
                    limits[key] = (float(lo), float(hi))
            if shim is not None:
                where = [keys.index(key_prefix + a) for a in shim.actuators]
                shims.append((shim, np.asarray(where, dtype=np.intp)))
            for joint in entry.info.scalar_joints:
                _, _, q, v = index.joints[entry.full(joint)]
                joint_keys.append(key_prefix + joint)
                qadr.append(q)
                vadr.append(v)
        dt = float(model.opt.timestep)
        substeps = round(1.0 / (self.requested_control_hz * dt))
        if substeps < 1 or self.requested_control_hz * dt > 1.0 + 1e-9:
            raise ValueError(
                f"control_hz={self.requested_control_hz!r}: faster than the physics rate "
                f"{1.0 / dt:g} Hz (timestep {dt:g} s); lower it or call set_timestep"
            )
        actual = 1.0 / (substeps * dt)
        if math.isclose(actual, self.requested_control_hz, rel_tol=1e-9):
            actual = self.requested_control_hz
        elif not math.isclose(actual, self.requested_control_hz, rel_tol=0.01):
            log.warning(
                "control_hz=%g is not a whole multiple of the timestep %g s: running %d substeps, %.6g Hz",
                self.requested_control_hz,
                dt,
                substeps,
                actual,
            )
        self.substeps = substeps
        self.control_hz = actual
        self.action_keys: tuple[str, ...] = tuple(keys)
        self.joint_keys: tuple[str, ...] = tuple(joint_keys)
        self.actuator_kinds = kinds
        self._key_to_id = dict(zip(keys, act_ids, strict=True))
        self._id_by_key = tuple(zip(keys, act_ids, strict=True))  # step()'s fast path
        self._all_applied = list(keys)
        self._act_ids = selector(act_ids)
        self._qadr = selector(qadr)
        self._vadr = selector(vadr)
        self._cam_ids = [scene.camera_id(c) for c in self.cameras]
        # privileged_state()'s name lists, fixed for one compiled model (a new robot or
        # object recompiles the scene and bumps its generation, which re-binds).
        self._named_bodies = tuple((i, n) for i, n in enumerate(index.bodies) if i and n)
        roots: list[tuple[str, int]] = []
        for name in scene.robots():
            entry = scene.robot(name)
            body = mujoco.mj_name2id(
                model, mujoco.mjtObj.mjOBJ_BODY, entry.full(entry.info.root_body)
            )
            if body >= 0:
                roots.append((name, body))
        self._robot_roots = tuple(roots)
        self._velocity = np.zeros(6)
        all_velocity = bool(kinds) and all(k == "velocity" for k in kinds.values())
        self.env_spec = EnvSpec(
            action_keys=tuple(keys),
            control="velocity" if all_velocity else "absolute",
            control_hz=actual,
            action_limits=limits,
            gripper_keys=tuple(
                k for k in keys if any(w in k.rsplit("/", 1)[-1].lower() for w in GRIPPER_WORDS)
            ),
            capabilities=Capabilities(
                privileged_state=True, images=bool(self.cameras), sim_time=True
            ),
        )
        self._shims = tuple(shims)
        self._model = model
        self._data = scene.data
        # Views into the MjData buffers, kept so a step does not re-create them.
        self._qpos, self._qvel, self._ctrl = self._data.qpos, self._data.qvel, self._data.ctrl
        self._generation = scene.generation

    def _ensure_bound(self) -> None:
        if self._generation != self.scene.generation:
            self._bind()

    # ------------------------------------------------------------ Environment

    def reset(self, seed: int | None = None) -> Observation:
        """Reset the whole scene (see MujocoScene.reset; `reset_noise` perturbs this env's
        robots' joints from `seed`) and return the first observation."""
        with self.scene.lock:
            self.scene.reset(seed, noise=self.reset_noise, robots=self.robot_names)
            self._ensure_bound()
            return self._observe()

    def step(self, action: Action) -> StepResult:
        with self.scene.lock:
            if self._generation != self.scene.generation:
                self._bind()
            data = self._data
            if self._shims:
                applied, unknown = self._set_shimmed_targets(action)
            elif self._set_targets_fast(action):
                applied, unknown = self._all_applied.copy(), []
            else:
                applied, unknown = self._set_targets(action)
            self.scene.advance(self.substeps)  # with the torque shims' PD law at every substep
            observation = self._observe()
            reward = 0.0
            terminated = False
            if self.reward_fn is not None or self.terminal_fn is not None:
                state = self.privileged_state()
                if self.reward_fn is not None:
                    reward = float(self.reward_fn(state))
                if self.terminal_fn is not None:
                    terminated = bool(self.terminal_fn(state))
            return StepResult(
                observation,
                reward,
                terminated,
                False,
                {"sim_time_s": data.time, "applied_keys": applied, "unknown_keys": unknown},
            )

    def _set_targets_fast(self, action: Any) -> bool:
        """The common case, checked and applied in one pass: a dict naming exactly the
        action keys, each a finite float (what the kernel's shield passes on). False when
        the action needs _set_targets (nothing changed then)."""
        if type(action) is not dict or len(action) != len(self._id_by_key):
            return False
        values = []
        for key, _ in self._id_by_key:
            value = action.get(key)
            if type(value) is not float or value - value != 0.0:  # NaN and inf fail here
                return False
            values.append(value)
        self._ctrl[self._act_ids] = values  # one assignment (a slice or an index array)
        return True

    def _set_targets(self, action: Any) -> tuple[list[str], list[str]]:
        """Apply a mapping of action key -> number: unknown keys are reported, a
        non-finite value refuses the whole action (no target changes)."""
        key_to_id = self._key_to_id
        applied: list[str] = []
        unknown: list[str] = []
        targets: list[tuple[int, float]] = []
        try:
            items = action.items()
        except AttributeError:
            raise ValueError(
                f"action={action!r}: must be a mapping of action key -> number"
            ) from None
        for key, value in items:
            idx = key_to_id.get(key)
            if idx is None:
                unknown.append(key)
                continue
            try:
                v = float(value)
            except (TypeError, ValueError):
                v = math.nan
            if not math.isfinite(v):
                raise ValueError(f"action[{key!r}]={value!r}: must be a finite number")
            targets.append((idx, v))
            applied.append(key)
        ctrl = self._ctrl
        for idx, v in targets:  # all or nothing: a refused action changes no target
            ctrl[idx] = v
        return applied, unknown

    def _set_shimmed_targets(self, action: Any) -> tuple[list[str], list[str]]:
        """_set_targets with torque shims: a shimmed motor's value goes to its shim's
        target, through ctrl (which holds the targets only while the action is applied)."""
        ctrl = self._ctrl
        for shim, _ in self._shims:
            ctrl[shim._ctrl_sel] = shim.target
        try:
            if self._set_targets_fast(action):
                return self._all_applied.copy(), []
            return self._set_targets(action)
        finally:  # a refused action leaves the targets as they were
            for shim, _ in self._shims:
                shim.target[:] = ctrl[shim._ctrl_sel]
                shim.apply(self._data)

    def _targets(self) -> list[float]:
        """The actuator targets in action-key order: ctrl, or a shim's joint targets."""
        values = self._ctrl[self._act_ids]
        if self._shims:
            values = values.copy()
            for shim, where in self._shims:
                values[where] = shim.target
        return values.tolist()

    def hold_action(self, last: Action | None = None) -> dict[str, float]:
        """The current actuator targets (data.ctrl, or a shim's joint targets): applying it
        changes nothing."""
        with self.scene.lock:
            self._ensure_bound()
            return dict(zip(self.action_keys, self._targets(), strict=True))

    def _observe(self) -> dict[str, Any]:
        keys = self.joint_keys
        # zip without strict=: the index arrays were built with their key lists (_bind).
        observation: dict[str, Any] = {
            "joint_positions": dict(zip(keys, self._qpos[self._qadr].tolist())),  # noqa: B905
            "joint_velocities": dict(zip(keys, self._qvel[self._vadr].tolist())),  # noqa: B905
            "actuator_targets": dict(zip(self.action_keys, self._targets())),  # noqa: B905
        }
        if self.cameras:
            height, width = self.image_size
            observation["images"] = {
                name: self.scene.render(name, width=width, height=height) for name in self.cameras
            }
        return observation

    def observe(self) -> Observation:
        """The current observation without stepping."""
        with self.scene.lock:
            self._ensure_bound()
            return self._observe()

    # ------------------------------------------------------------ privileged state

    def privileged_state(self) -> dict[str, Any]:
        """The full simulator state for scorers and predicates (plain Python values):
        qpos, qvel, time, every named body's world pose, the active contacts (geom names
        and distance), and per robot of the scene its base pose and linear velocity."""
        with self.scene.lock:
            self._ensure_bound()
            model, data = self._model, self._data
            xpos = data.xpos.tolist()
            xquat = data.xquat.tolist()
            bodies = {name: {"pos": xpos[i], "quat": xquat[i]} for i, name in self._named_bodies}
            ncon = data.ncon
            contacts: list[dict[str, Any]] = []
            if ncon:
                geoms = self.scene.index.geoms
                contact = data.contact
                contacts = [
                    {"geom1": geoms[a], "geom2": geoms[b], "dist": d}
                    for a, b, d in zip(
                        contact.geom1[:ncon].tolist(),
                        contact.geom2[:ncon].tolist(),
                        contact.dist[:ncon].tolist(),
                        strict=True,
                    )
                ]
            robots: dict[str, dict[str, list[float]]] = {}
            velocity = self._velocity
            body_kind = mujoco.mjtObj.mjOBJ_BODY
            for name, body in self._robot_roots:
                mujoco.mj_objectVelocity(model, data, body_kind, body, velocity, 0)
                robots[name] = {
                    "base_pos": xpos[body],
                    "base_quat": xquat[body],
                    "base_lin_vel": velocity[3:].tolist(),
                    "base_ang_vel": velocity[:3].tolist(),
                }
            return {
                "qpos": data.qpos.tolist(),
                "qvel": data.qvel.tolist(),
                "ctrl": data.ctrl.tolist(),
                "time": float(data.time),
                "bodies": bodies,
                "contacts": contacts,
                "robots": robots,
            }

    def render(self, camera: str | None = None, width: int = 320, height: int = 240) -> np.ndarray:
        return self.scene.render(camera, width=width, height=height)

    def __repr__(self) -> str:
        return (
            f"MujocoEnv(robots={list(self.robot_names)}, control_hz={self.control_hz:g}, "
            f"substeps={self.substeps}, action_keys={len(self.action_keys)}, cameras={list(self.cameras)})"
        )
