"""The torque shim: a PD law at every physics substep in front of a robot's torque motors.

Installed on a robot of a MujocoScene (`MujocoScene.install_torque_shim`), its torque
motors stay motors, and the values an environment's action gives them become joint
position targets q*: before every `mj_step` the shim writes

    ctrl = clip((kp (q* - q) - kd qdot) / (gear * gain), lo, hi)

where [lo, hi] is the motor's ctrlrange intersected with its forcerange (in ctrl
units), so the torque never leaves the motor's limits. The model is not changed:
removing the shim leaves the motors as they were, with ctrl read as torque again.

The law is vectorised over the robot's motors with preallocated buffers (a few numpy
calls per substep); slices replace index arrays when the addresses are contiguous.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mujoco
import numpy as np

from .entries import selector
from .model_info import SCALAR_JOINTS, TRN_JOINT

if TYPE_CHECKING:
    from .entries import RobotEntry
    from .protocol import SimScene


@dataclass(frozen=True)
class Gains:
    kp: float
    kd: float

    def to_dict(self) -> dict[str, float]:
        return {"kp": self.kp, "kd": self.kd}


def torque_motors(scene: SimScene, entry: RobotEntry) -> dict[str, str]:
    """{joint: motor actuator} of the robot's torque motors that each drive one hinge or
    slide joint alone (names without the robot prefix), in actuator order."""
    model, index = scene.model, scene.index
    by_joint: dict[int, list[str]] = {}
    for actuator in entry.info.actuators:
        a = index.actuators.get(entry.full(actuator))
        if a is not None and int(model.actuator_trntype[a]) == TRN_JOINT:
            by_joint.setdefault(int(model.actuator_trnid[a][0]), []).append(actuator)
    out: dict[str, str] = {}
    for joint_id, actuators in by_joint.items():
        if len(actuators) != 1 or entry.info.actuator_kinds.get(actuators[0]) != "motor":
            continue
        if int(model.jnt_type[joint_id]) not in SCALAR_JOINTS:
            continue
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint_id) or ""
        if name.startswith(entry.prefix):
            out[name[len(entry.prefix) :]] = actuators[0]
    order = {a: i for i, a in enumerate(entry.info.actuators)}
    return dict(sorted(out.items(), key=lambda item: order[item[1]]))


def _positive(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float | np.integer | np.floating)
        or not math.isfinite(float(value))
        or float(value) <= 0
    ):
        raise ValueError(f"{name}={value!r}: must be a positive finite number")
    return float(value)


def check_gains(param: str, gains: Any, joints: Mapping[str, str], robot: str) -> dict[str, Gains]:
    """Validate {joint: {"kp": kp, "kd": kd}} (or (kp, kd) pairs) against the robot's
    torque-motor joints; `param` is the parameter name the messages use."""
    if not isinstance(gains, Mapping):
        raise ValueError(
            f"{param}={gains!r}: must be a dict {{joint: {{'kp': ..., 'kd': ...}}}}, "
            f"got {type(gains).__name__}"
        )
    out: dict[str, Gains] = {}
    for joint, entry in gains.items():
        if joint not in joints:
            raise ValueError(
                f"{param}[{joint!r}]: not a joint of robot {robot!r} driven by a torque motor "
                f"(joints: {list(joints)})"
            )
        where = f"{param}[{joint!r}]"
        if isinstance(entry, Mapping):
            unknown = sorted(str(k) for k in entry if k not in ("kp", "kd"))
            if unknown or "kp" not in entry or "kd" not in entry:
                raise ValueError(
                    f"{where}={dict(entry)!r}: must be {{'kp': kp, 'kd': kd}}, two positive finite numbers"
                )
            kp, kd = entry["kp"], entry["kd"]
        elif isinstance(entry, tuple | list) and len(entry) == 2:
            kp, kd = entry
        else:
            raise ValueError(
                f"{where}={entry!r}: must be {{'kp': kp, 'kd': kd}}, two positive finite numbers"
            )
        out[joint] = Gains(_positive(f"{where}['kp']", kp), _positive(f"{where}['kd']", kd))
    return out


class TorqueShim:
    """The PD law of one robot's torque motors (see the module docstring).

    `target` holds the joint targets, one per motor in `actuators` order; `bind` maps
    the shim onto a (re)compiled model by name, `hold` sets the targets to the current
    joint positions, `apply` writes the motors' ctrl for the next physics step.
    """

    def __init__(self, robot: str, motors: Mapping[str, str], gains: Mapping[str, Gains]) -> None:
        self.robot = robot
        self.joints: tuple[str, ...] = tuple(motors)
        self.actuators: tuple[str, ...] = tuple(motors.values())
        self.gains = {j: gains[j] for j in self.joints}
        self.kp = np.array([gains[j].kp for j in self.joints])
        self.kd = np.array([gains[j].kd for j in self.joints])
        n = len(self.joints)
        self.target = np.zeros(n)
        self.joint_limits: dict[str, tuple[float, float]] = {}  # actuator -> joint range
        self._err = np.zeros(n)
        self._damp = np.zeros(n)

    def bind(self, scene: SimScene) -> None:
        """Resolve the addresses, the torque bounds and the joint ranges in the scene's model."""
        model, index = scene.model, scene.index
        entry = scene.robot(self.robot)
        acts, qadr, vadr, scale, lo, hi = [], [], [], [], [], []
        limits: dict[str, tuple[float, float]] = {}
        for joint, actuator in zip(self.joints, self.actuators, strict=True):
            a = index.actuators[entry.full(actuator)]
            _, j, q, v = index.joints[entry.full(joint)]
            s = float(model.actuator_gear[a][0]) * float(model.actuator_gainprm[a][0])
            if s == 0.0:
                raise ValueError(
                    f"robot {self.robot!r}: motor {actuator!r} has a zero gear or gain; "
                    "the shim cannot turn a torque into its ctrl"
                )
            bounds = [-math.inf, math.inf]
            if model.actuator_ctrllimited[a]:
                bounds = [
                    float(model.actuator_ctrlrange[a][0]),
                    float(model.actuator_ctrlrange[a][1]),
                ]
            if model.actuator_forcelimited[a]:
                gain = float(model.actuator_gainprm[a][0])
                f = sorted(float(x) / gain for x in model.actuator_forcerange[a])
                bounds = [max(bounds[0], f[0]), min(bounds[1], f[1])]
            acts.append(a)
            qadr.append(q)
            vadr.append(v)
            scale.append(s)
            lo.append(bounds[0])
            hi.append(bounds[1])
            if model.jnt_limited[j]:
                limits[actuator] = (float(model.jnt_range[j][0]), float(model.jnt_range[j][1]))
        self._ctrl_sel = selector(acts)
        self._qpos_sel = selector(qadr)
        self._qvel_sel = selector(vadr)
        # kp / scale and kd / scale: the law lands in ctrl units in one pass
        self._kp = self.kp / np.asarray(scale)
        self._kd = self.kd / np.asarray(scale)
        self._lo, self._hi = np.asarray(lo), np.asarray(hi)
        self.joint_limits = limits
        data = scene.data
        contiguous = all(
            isinstance(x, slice) for x in (self._ctrl_sel, self._qpos_sel, self._qvel_sel)
        )
        # views into this MjData (a recompile makes a new one and binds again)
        self._views = (
            (data.qpos[self._qpos_sel], data.qvel[self._qvel_sel], data.ctrl[self._ctrl_sel], data)
            if contiguous
            else None
        )

    def hold(self, data: mujoco.MjData) -> None:
        """Targets = the current joint positions (the robot holds its pose)."""
        self.target[:] = data.qpos[self._qpos_sel]

    def apply(self, data: mujoco.MjData) -> None:
        """Write the motors' ctrl from the PD law on the current state (about 2 us for the
        Go2's 12 motors: six ufuncs with positional out=, min/max rather than np.clip)."""
        err, damp = self._err, self._damp
        views = self._views
        if views is not None and views[3] is data:
            q, qdot, ctrl = views[0], views[1], views[2]
        else:
            q, qdot, ctrl = data.qpos[self._qpos_sel], data.qvel[self._qvel_sel], None
        np.subtract(self.target, q, err)
        np.multiply(err, self._kp, err)
        np.multiply(qdot, self._kd, damp)
        np.subtract(err, damp, err)
        np.minimum(err, self._hi, err)
        if ctrl is not None:
            np.maximum(err, self._lo, ctrl)
        else:
            np.maximum(err, self._lo, err)
            data.ctrl[self._ctrl_sel] = err

    def describe(self) -> dict[str, Any]:
        """What the trace records: the robot, its shimmed joints with their motor and gains."""
        return {
            "robot": self.robot,
            "law": "ctrl = clip(kp (q* - q) - kd qdot, motor limits) at every physics step",
            "joints": {
                j: {"actuator": a, **self.gains[j].to_dict()}
                for j, a in zip(self.joints, self.actuators, strict=True)
            },
        }
