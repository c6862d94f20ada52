"""Compiling a scene description into one MuJoCo model, and what carries over between models.

    spec = compose(base, robots, objects, cameras, timestep=0.002, gravity=(0, 0, -9.81),
                   offscreen=(640, 480))
    carry_state(old_model, old_data, old_index, model, data, index)   # by name
    apply_home(model, data, index, entry)        # a robot's 'home' keyframe, at its pose
    hold_position_actuators(model, data, index, entry, home_ctrl=False)

Each robot's MJCF is attached under its name prefix; its solver options that differ from
MuJoCo's defaults are adopted (the last robot wins, with a warning); the timestep and
gravity stay the scene's. State carries over by name: joints of the same type keep
qpos/qvel, actuators keep ctrl (and activation).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

import mujoco
import numpy as np

from .entries import SHAPES, CameraEntry, ModelIndex, ObjectEntry, RobotEntry
from .geometry import quat_from_xyaxes
from .model_info import (
    DEFAULT_OPTIONS,
    FREE,
    SCALAR_JOINTS,
    SYNCED_OPTIONS,
    TRN_JOINT,
    ModelInfo,
    option_value,
    options_equal,
    qpos_width,
    qvel_width,
)

log = logging.getLogger(__name__)


def world_spec(base: ModelInfo | None) -> mujoco.MjSpec:
    """The world the robots are attached to: a loaded scene file's own, else a floor,
    a light and a sky."""
    if base is not None:
        return base.spec.copy()
    spec = mujoco.MjSpec()
    spec.modelname = "robokernel_scene"
    spec.add_texture(
        name="grid",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.25, 0.3, 0.35],
        rgb2=[0.35, 0.4, 0.45],
        width=256,
        height=256,
    )
    spec.add_texture(
        name="sky",
        type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
        rgb1=[0.55, 0.7, 0.85],
        rgb2=[0.1, 0.1, 0.15],
        width=128,
        height=128,
    )
    spec.add_material(name="floor", textures=["", "grid"], texrepeat=[8, 8], reflectance=0.1)
    spec.worldbody.add_geom(
        name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], material="floor"
    )
    spec.worldbody.add_light(
        name="light", pos=[0, 0, 4], dir=[0, 0, -1], diffuse=[0.8, 0.8, 0.8], castshadow=False
    )
    return spec


def compose(base: ModelInfo | None, robots: Iterable[RobotEntry], objects: Iterable[ObjectEntry],
            cameras: Iterable[CameraEntry], *, timestep: float, gravity: Sequence[float],
            offscreen: tuple[int, int]) -> mujoco.MjSpec:  # fmt: skip
    """The scene's MjSpec: the world, each robot attached under its prefix (its solver
    options adopted), the objects and the cameras."""
    robots = list(robots)
    world = world_spec(base)
    for entry in robots:
        if not entry.prefix:
            continue  # the loaded scene's robot is the base itself
        for key, value in entry.info.options.items():
            current = getattr(world.option, key)
            if not options_equal(current, getattr(DEFAULT_OPTIONS, key)) and not options_equal(
                current, value
            ):
                log.warning(
                    "robot %r sets option %s=%r; the scene had %r",
                    entry.name,
                    key,
                    value,
                    current,
                )
            setattr(world.option, key, value)
    world.option.timestep = timestep
    world.option.gravity = list(gravity)
    vis = world.visual.global_
    vis.offwidth = max(vis.offwidth, offscreen[0])
    vis.offheight = max(vis.offheight, offscreen[1])
    for entry in robots:
        if not entry.prefix:
            continue
        child = entry.info.spec.copy()
        for key in SYNCED_OPTIONS:
            setattr(child.option, key, option_value(world.option, key))
        frame = world.worldbody.add_frame(pos=list(entry.pos), quat=list(entry.quat))
        world.attach(child, prefix=entry.prefix, frame=frame)
    for obj in objects:
        gtype, _, _ = SHAPES[obj.shape]
        body = world.worldbody.add_body(name=obj.name, pos=list(obj.pos), quat=list(obj.quat))
        if obj.free:
            body.add_freejoint(name=obj.name)
        size = list(obj.size) + [0.0] * (3 - len(obj.size))
        body.add_geom(name=obj.name, type=gtype, size=size, rgba=list(obj.rgba), mass=obj.mass)
    for cam in cameras:
        world.worldbody.add_camera(
            name=cam.name,
            pos=list(cam.pos),
            quat=list(quat_from_xyaxes(cam.xyaxes)),
            fovy=cam.fovy,
        )
    return world


def carry_state(
    old_model: mujoco.MjModel,
    old: mujoco.MjData,
    old_index: ModelIndex,
    model: mujoco.MjModel,
    data: mujoco.MjData,
    index: ModelIndex,
) -> None:
    """Carry the state of the old model over to the new one by name: the clock, the qpos
    and qvel of joints of the same type, the ctrl and activation of actuators."""
    data.time = old.time
    for name, (jtype, _, qadr, vadr) in index.joints.items():
        prev = old_index.joints.get(name)
        if prev is None or prev[0] != jtype:
            continue
        nq, nv = qpos_width(jtype), qvel_width(jtype)
        data.qpos[qadr : qadr + nq] = old.qpos[prev[2] : prev[2] + nq]
        data.qvel[vadr : vadr + nv] = old.qvel[prev[3] : prev[3] + nv]
    for name, a in index.actuators.items():
        prev_a = old_index.actuators.get(name)
        if prev_a is None:
            continue
        data.ctrl[a] = old.ctrl[prev_a]
        if (
            model.actuator_actnum[a]
            and model.actuator_actnum[a] == old_model.actuator_actnum[prev_a]
        ):
            n, adr, padr = (
                model.actuator_actnum[a],
                model.actuator_actadr[a],
                old_model.actuator_actadr[prev_a],
            )
            data.act[adr : adr + n] = old.act[padr : padr + n]


def apply_home(
    model: mujoco.MjModel, data: mujoco.MjData, index: ModelIndex, entry: RobotEntry
) -> None:
    """Put a robot in its 'home' keyframe pose (if any) and set its actuator targets."""
    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(entry.quat))
    rot = rot.reshape(3, 3)
    for joint, qpos in entry.info.home_qpos.items():
        found = index.joints.get(entry.full(joint))
        if found is None:
            continue
        jtype, _, qadr, vadr = found
        if jtype == FREE and entry.prefix:
            value = qpos.copy()
            value[:3] = np.asarray(entry.pos) + rot @ qpos[:3]
            quat = np.zeros(4)
            mujoco.mju_mulQuat(quat, np.asarray(entry.quat), qpos[3:7])
            value[3:7] = quat
            data.qpos[qadr : qadr + 7] = value
        else:
            data.qpos[qadr : qadr + len(qpos)] = qpos
        data.qvel[vadr : vadr + qvel_width(jtype)] = 0.0
    hold_position_actuators(model, data, index, entry, home_ctrl=True)


def hold_position_actuators(model: mujoco.MjModel, data: mujoco.MjData, index: ModelIndex, entry: RobotEntry, *,
                            home_ctrl: bool, only: Iterable[str] | None = None) -> None:  # fmt: skip
    """Set the robot's ctrl: the keyframe's ctrl where it has one, else position servos
    on a joint target that joint's current position (so the robot holds its pose)."""
    for name in entry.info.actuators if only is None else only:
        a = index.actuators.get(entry.full(name))
        if a is None:
            continue
        if home_ctrl and name in entry.info.home_ctrl:
            data.ctrl[a] = entry.info.home_ctrl[name]
            continue
        if (
            entry.info.actuator_kinds.get(name) == "position"
            and int(model.actuator_trntype[a]) == TRN_JOINT
            and model.actuator_biasprm[a][0] == 0
            and math.isclose(
                model.actuator_gainprm[a][0], -model.actuator_biasprm[a][1], rel_tol=1e-9
            )
        ):
            joint = int(model.actuator_trnid[a][0])
            if int(model.jnt_type[joint]) in SCALAR_JOINTS:
                target = float(data.qpos[model.jnt_qposadr[joint]]) * float(
                    model.actuator_gear[a][0]
                )
                if model.actuator_ctrllimited[a]:
                    lo, hi = model.actuator_ctrlrange[a]
                    target = min(max(target, lo), hi)
                data.ctrl[a] = target
