"""What the scene knows about a robot model file: its joints, actuators, options and home.

    info = load_model_info(Path("so101.xml"))     # parsed once per (file, mtime), cached
    info.actuators, info.joints, info.actuator_kinds, info.options

`model_info` names the unnamed joints and actuators of a spec (the names are action keys
and state keys), classifies each actuator (`actuator_kind`) and records the solver
options that differ from MuJoCo's defaults (the scene adopts them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

FREE = int(mujoco.mjtJoint.mjJNT_FREE)
BALL = int(mujoco.mjtJoint.mjJNT_BALL)
SCALAR_JOINTS = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
TRN_JOINT = int(mujoco.mjtTrn.mjTRN_JOINT)
# Solver options a robot model may set and the scene adopts (timestep/gravity excluded).
ADOPTED_OPTIONS = (
    "cone",
    "impratio",
    "integrator",
    "solver",
    "jacobian",
    "iterations",
    "ls_iterations",
    "noslip_iterations",
    "tolerance",
    "ls_tolerance",
    "noslip_tolerance",
    "ccd_iterations",
    "ccd_tolerance",
)
# Every option field the attach step compares; copied parent -> child so it never conflicts.
SYNCED_OPTIONS = (
    *ADOPTED_OPTIONS,
    "timestep",
    "gravity",
    "wind",
    "magnetic",
    "density",
    "viscosity",
    "o_margin",
    "o_solref",
    "o_solimp",
    "o_friction",
    "disableflags",
    "enableflags",
    "disableactuator",
    "sdf_initpoints",
    "sdf_iterations",
    "sleep_tolerance",
)


# ---------------------------------------------------------------- validation helpers


def element_names(model: mujoco.MjModel, obj: mujoco.mjtObj, count: int) -> list[str]:
    return [mujoco.mj_id2name(model, obj, i) or "" for i in range(count)]


# ---------------------------------------------------------------- model information


@dataclass
class ModelInfo:
    """What the scene needs to know about one robot model file (parsed once, cached)."""

    path: Path | None
    spec: mujoco.MjSpec  # pristine: names filled in, keyframes removed; attach a copy
    actuators: tuple[str, ...]
    actuator_kinds: dict[str, str]
    scalar_joints: tuple[str, ...]  # hinge and slide joints, in model order
    home_qpos: dict[str, np.ndarray]  # joint -> its qpos slice in the 'home' keyframe
    home_ctrl: dict[str, float]  # actuator -> ctrl in the 'home' keyframe (when it sets ctrl)
    root_body: str  # the body that stands for the robot's base
    free_root: bool  # the base is free-floating (free joint)
    options: dict[str, Any]  # solver options that differ from MuJoCo's defaults
    bodies: tuple[str, ...]
    cameras: tuple[str, ...]


def actuator_kind(model: mujoco.MjModel, i: int) -> str:
    """'position', 'velocity', 'motor' or 'other' from an actuator's gain and bias.

    position: fixed gain, affine bias with a negative position term (kp * (ctrl - q));
    velocity: fixed gain, affine bias with only a negative velocity term;
    motor:    no bias (ctrl is a force or torque, scaled by the gear);
    other:    anything else (muscles, user dynamics, ...).
    """
    gaintype = int(model.actuator_gaintype[i])
    biastype = int(model.actuator_biastype[i])
    bias = model.actuator_biasprm[i]
    fixed = gaintype == int(mujoco.mjtGain.mjGAIN_FIXED)
    if fixed and biastype == int(mujoco.mjtBias.mjBIAS_NONE):
        return "motor"
    if fixed and biastype == int(mujoco.mjtBias.mjBIAS_AFFINE):
        if bias[1] < 0:
            return "position"
        if bias[1] == 0 and bias[2] < 0:
            return "velocity"
    return "other"


_INFO_CACHE: dict[tuple[str, float], ModelInfo] = {}
_INFO_LOCK = threading.Lock()
DEFAULT_OPTIONS = mujoco.MjSpec().option


def option_value(option: Any, key: str) -> Any:
    value = getattr(option, key)
    return value.copy() if isinstance(value, np.ndarray) else value


def options_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    return a == b


def name_elements(spec: mujoco.MjSpec) -> None:
    taken = {j.name for j in spec.joints if j.name}
    for i, joint in enumerate(spec.joints):
        if joint.name:
            continue
        if joint.type == mujoco.mjtJoint.mjJNT_FREE and "root" not in taken:
            joint.name = "root"
        else:
            candidate, k = f"joint{i}", i
            while candidate in taken:
                k += 1
                candidate = f"joint{k}"
            joint.name = candidate
        taken.add(joint.name)
    taken = {a.name for a in spec.actuators if a.name}
    for i, actuator in enumerate(spec.actuators):
        if not actuator.name:
            candidate, k = f"actuator{i}", i
            while candidate in taken:
                k += 1
                candidate = f"actuator{k}"
            actuator.name = candidate
            taken.add(candidate)


def model_info(spec: mujoco.MjSpec, path: Path | None) -> ModelInfo:
    """Compile `spec` alone (it is modified: names filled in, keyframes removed) and
    read what the scene needs from it."""
    name_elements(spec)
    model = spec.compile()
    actuators = tuple(element_names(model, mujoco.mjtObj.mjOBJ_ACTUATOR, model.nu))
    kinds = {name: actuator_kind(model, i) for i, name in enumerate(actuators)}
    joints = element_names(model, mujoco.mjtObj.mjOBJ_JOINT, model.njnt)
    scalar = tuple(joints[j] for j in range(model.njnt) if int(model.jnt_type[j]) in SCALAR_JOINTS)
    home_qpos: dict[str, np.ndarray] = {}
    home_ctrl: dict[str, float] = {}
    key_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "home")
    if key_id >= 0:
        qpos = model.key_qpos[key_id]
        for j, name in enumerate(joints):
            adr = int(model.jnt_qposadr[j])
            home_qpos[name] = qpos[adr : adr + qpos_width(int(model.jnt_type[j]))].copy()
        key_spec = next((k for k in spec.keys if k.name == "home"), None)
        if key_spec is not None and len(key_spec.ctrl):
            home_ctrl = {name: float(model.key_ctrl[key_id][i]) for i, name in enumerate(actuators)}
    bodies = tuple(element_names(model, mujoco.mjtObj.mjOBJ_BODY, model.nbody))
    free_bodies = [
        int(model.jnt_bodyid[j]) for j in range(model.njnt) if int(model.jnt_type[j]) == FREE
    ]
    top = [b for b in range(1, model.nbody) if model.body_parentid[b] == 0]
    root_id = free_bodies[0] if free_bodies else (top[0] if top else 0)
    options = {
        key: option_value(spec.option, key)
        for key in ADOPTED_OPTIONS
        if not options_equal(getattr(spec.option, key), getattr(DEFAULT_OPTIONS, key))
    }
    for key in list(spec.keys):
        spec.delete(key)
    return ModelInfo(
        path=path,
        spec=spec,
        actuators=actuators,
        actuator_kinds=kinds,
        scalar_joints=scalar,
        home_qpos=home_qpos,
        home_ctrl=home_ctrl,
        root_body=bodies[root_id] if root_id else "",
        free_root=bool(free_bodies) and root_id in free_bodies,
        options=options,
        bodies=tuple(b for b in bodies[1:] if b),
        cameras=tuple(element_names(model, mujoco.mjtObj.mjOBJ_CAMERA, model.ncam)),
    )


def actuated_info(
    info: ModelInfo, kp: float, kv: float, replace_motors: bool
) -> tuple[ModelInfo, list[str]]:
    """A copy of `info` whose spec has position servos on undriven (or motor-driven)
    hinge/slide joints; returns it and the names of the new servos."""
    spec = info.spec.copy()
    model = spec.compile()
    driven: dict[int, list[int]] = {}
    for a in range(model.nu):
        if int(model.actuator_trntype[a]) == TRN_JOINT:
            driven.setdefault(int(model.actuator_trnid[a][0]), []).append(a)
    taken = {a.name for a in spec.actuators}
    added: list[str] = []
    servos: list[tuple[str, str, tuple[float, float] | None]] = []  # name, joint, range
    torque: dict[str, tuple[float, float]] = {}  # a replaced motor's torque range
    for j in range(model.njnt):
        if int(model.jnt_type[j]) not in SCALAR_JOINTS:
            continue
        joint = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j)
        limits = (
            (float(model.jnt_range[j][0]), float(model.jnt_range[j][1]))
            if model.jnt_limited[j]
            else None
        )
        actuators = driven.get(j, [])
        if not actuators and model.nu == 0:
            servo = joint if joint not in taken else f"{joint}_servo"
            taken.add(servo)
            servos.append((servo, joint, limits))
        elif (
            replace_motors and len(actuators) == 1 and actuator_kind(model, actuators[0]) == "motor"
        ):
            a = actuators[0]
            motor = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
            if model.actuator_ctrllimited[a]:
                gear = abs(float(model.actuator_gear[a][0]))
                lo, hi = (float(v) * gear for v in model.actuator_ctrlrange[a])
                torque[motor] = (lo, hi)
            servos.append((motor, joint, limits))
    for servo, joint, limits in servos:
        # a replaced motor is changed in place, so the actuator order (action keys) stays
        actuator = spec.actuator(servo) if servo in taken and spec.actuator(servo) else None
        if actuator is None:
            actuator = spec.add_actuator(
                name=servo, target=joint, trntype=mujoco.mjtTrn.mjTRN_JOINT
            )
        actuator.gear = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        actuator.gaintype = mujoco.mjtGain.mjGAIN_FIXED
        actuator.gainprm = [kp] + [0.0] * 9
        actuator.biastype = mujoco.mjtBias.mjBIAS_AFFINE
        actuator.biasprm = [0.0, -kp, -kv] + [0.0] * 7
        actuator.ctrllimited = (
            mujoco.mjtLimited.mjLIMITED_TRUE if limits else mujoco.mjtLimited.mjLIMITED_FALSE
        )
        if limits:
            actuator.ctrlrange = list(limits)
        if servo in torque:  # the motor's torque limits stay the servo's force limits
            actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            actuator.forcerange = list(torque[servo])
        added.append(servo)
    if not added:
        return info, []
    new = model_info(spec, info.path)
    replaced = set(added)
    new.home_qpos = dict(info.home_qpos)
    new.home_ctrl = {
        k: v for k, v in info.home_ctrl.items() if k not in replaced and k in new.actuators
    }
    return new, added


def load_model_info(path: Path) -> ModelInfo:
    """The (cached) ModelInfo of an MJCF file; ValueError when it does not load."""
    key = (str(path), path.stat().st_mtime)
    with _INFO_LOCK:
        info = _INFO_CACHE.get(key)
    if info is not None:
        return info
    try:
        spec = mujoco.MjSpec.from_file(str(path))
        info = model_info(spec, path)
    except ValueError as exc:
        raise ValueError(f"model={str(path)!r}: MuJoCo cannot load it: {exc}") from exc
    with _INFO_LOCK:
        _INFO_CACHE[key] = info
    return info


def qpos_width(jtype: int) -> int:
    return {FREE: 7, BALL: 4}.get(jtype, 1)


def qvel_width(jtype: int) -> int:
    return {FREE: 6, BALL: 3}.get(jtype, 1)
