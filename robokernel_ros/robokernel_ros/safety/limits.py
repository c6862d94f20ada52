"""Joint limits: ros2_control's joint_limits YAML layout and URDF <limit> tags, merged
to the most restrictive per joint, and the kernel SafetyShield built from them.

No ROS here: the safety_shield node, the policy server's served mode and the CLI load
limits through this module.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from robokernel_ros.kernel import EnvSpec, SafetyShield, build_guards

# ros2_control joint_limits keys (joint_limits/joint_limits_rosparam.hpp).
_LIMIT_FLAGS = {
    "has_position_limits": ("min_position", "max_position"),
    "has_velocity_limits": ("max_velocity",),
    "has_acceleration_limits": ("max_acceleration",),
    "has_deceleration_limits": ("max_deceleration",),
    "has_jerk_limits": ("max_jerk",),
    "has_effort_limits": ("max_effort",),
    "has_soft_limits": ("k_position", "k_velocity", "soft_lower_limit", "soft_upper_limit"),
}
_LIMIT_BOOLS = (*_LIMIT_FLAGS, "angle_wraparound")
LIMIT_KEYS: tuple[str, ...] = (*_LIMIT_BOOLS, *(k for v in _LIMIT_FLAGS.values() for k in v))
#: Keys that are accepted (a ros2_control file carries them) but not enforced here.
NOT_ENFORCED = ("has_jerk_limits", "has_effort_limits", "has_soft_limits", "angle_wraparound")


class MissingLimitsError(ValueError):
    """Joints that no limit source names; `missing` lists them."""

    def __init__(self, missing: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.missing = list(missing)


@dataclass(frozen=True)
class JointLimit:
    """The enforced limits of one joint (None: no limit of that kind)."""

    min_position: float | None = None
    max_position: float | None = None
    max_velocity: float | None = None
    max_acceleration: float | None = None

    def tightest(self, other: JointLimit, joint: str) -> JointLimit:
        """The most restrictive combination of two sources' limits."""

        def pick(a: float | None, b: float | None, f: Any) -> float | None:
            return b if a is None else a if b is None else f(a, b)

        merged = JointLimit(
            pick(self.min_position, other.min_position, max),
            pick(self.max_position, other.max_position, min),
            pick(self.max_velocity, other.max_velocity, min),
            pick(self.max_acceleration, other.max_acceleration, min),
        )
        if (
            merged.min_position is not None
            and merged.max_position is not None
            and merged.min_position > merged.max_position
        ):
            raise ValueError(
                f"joint {joint!r}: the position limits of its sources do not overlap "
                f"([{self.min_position}, {self.max_position}] and "
                f"[{other.min_position}, {other.max_position}])"
            )
        return merged


def _number(where: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}={value!r}: must be a finite number")
    if positive and value <= 0:
        raise ValueError(f"{where}={value!r}: must be > 0")
    return float(value)


def parse_joint_limit(joint: str, entries: Mapping[str, Any], source: str) -> JointLimit:
    """One joint's entry of ros2_control's joint_limits layout -> JointLimit.

    A has_*_limits flag must be a boolean; a value without its flag set true is
    refused (ros2_control would silently ignore it); keys outside the layout are
    refused by name. Jerk, effort and soft limits are accepted and not enforced.
    """
    where = f"{source}: joint_limits.{joint}"
    if not isinstance(entries, Mapping):
        raise ValueError(f"{where}={entries!r}: must be a mapping of limit keys")
    unknown = sorted(str(k) for k in entries if k not in LIMIT_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known keys: {list(LIMIT_KEYS)}")
    for flag in _LIMIT_BOOLS:
        if flag in entries and not isinstance(entries[flag], bool):
            raise ValueError(f"{where}.{flag}={entries[flag]!r}: must be a boolean (true/false)")
    for flag, keys in _LIMIT_FLAGS.items():
        given = [k for k in keys if k in entries]
        if given and flag not in entries:
            raise ValueError(f"{where}.{given[0]} is given without {flag}: true")
        if entries.get(flag) and flag in (
            "has_position_limits",
            "has_velocity_limits",
            "has_acceleration_limits",
            "has_deceleration_limits",
        ):
            missing = [k for k in keys if k not in entries]
            if missing:
                raise ValueError(f"{where}.{flag} is true but {missing[0]} is missing")
    limit = JointLimit()
    if entries.get("has_position_limits"):
        lo = _number(f"{where}.min_position", entries["min_position"])
        hi = _number(f"{where}.max_position", entries["max_position"])
        if lo > hi:
            raise ValueError(f"{where}: min_position={lo} must be <= max_position={hi}")
        limit = replace(limit, min_position=lo, max_position=hi)
    if entries.get("has_velocity_limits"):
        limit = replace(
            limit,
            max_velocity=_number(f"{where}.max_velocity", entries["max_velocity"], positive=True),
        )
    accelerations = []
    if entries.get("has_acceleration_limits"):
        accelerations.append(
            _number(f"{where}.max_acceleration", entries["max_acceleration"], positive=True)
        )
    if entries.get("has_deceleration_limits"):
        # enforced conservatively: a bound on any change of velocity
        accelerations.append(
            _number(f"{where}.max_deceleration", entries["max_deceleration"], positive=True)
        )
    if accelerations:
        limit = replace(limit, max_acceleration=min(accelerations))
    return limit


def parse_joint_limits(section: Any, source: str) -> dict[str, JointLimit]:
    """The `joint_limits` mapping ({joint: {key: value}}) -> {joint: JointLimit}."""
    if not isinstance(section, Mapping):
        raise ValueError(
            f"{source}: joint_limits must be a mapping of joint names, got {section!r}"
        )
    return {str(j): parse_joint_limit(str(j), e, source) for j, e in section.items()}


def load_limits_file(path: str | Path) -> dict[str, JointLimit]:
    """A YAML file in ros2_control's joint_limits layout: a top-level `joint_limits`
    mapping, or the same under `<node>: ros__parameters:` of a ROS 2 parameter file."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"limits_file={str(path)!r}: cannot be read ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"limits_file={str(path)!r}: not valid YAML ({exc})") from exc
    section = None
    if isinstance(document, Mapping):
        if "joint_limits" in document:
            section = document["joint_limits"]
        else:
            for value in document.values():
                params = value.get("ros__parameters") if isinstance(value, Mapping) else None
                if isinstance(params, Mapping) and "joint_limits" in params:
                    section = params["joint_limits"]
                    break
    if section is None:
        raise ValueError(
            f"limits_file={str(path)!r}: no 'joint_limits' mapping at the top level or under "
            "'<node>: ros__parameters:'"
        )
    return parse_joint_limits(section, f"limits_file {path}")


def limits_from_urdf(urdf: str) -> dict[str, JointLimit]:
    """The `<limit>` tags of a URDF: position limits of revolute and prismatic joints,
    velocity limits of every joint that has one (a velocity of 0 means none)."""
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as exc:
        raise ValueError(f"robot_description: not valid XML ({exc})") from exc
    limits: dict[str, JointLimit] = {}
    for joint in root.iter("joint"):
        name, kind, tag = joint.get("name"), joint.get("type"), joint.find("limit")
        if name is None or tag is None or kind not in ("revolute", "prismatic", "continuous"):
            continue
        where = f"robot_description: joint {name!r} <limit>"
        try:
            limit = JointLimit()
            if kind != "continuous":
                lo = _number(f"{where} lower", float(tag.get("lower", "0")))
                hi = _number(f"{where} upper", float(tag.get("upper", "0")))
                if lo > hi:
                    raise ValueError(f"{where}: lower={lo} must be <= upper={hi}")
                limit = replace(limit, min_position=lo, max_position=hi)
            velocity = float(tag.get("velocity", "0"))
            if velocity > 0:
                limit = replace(limit, max_velocity=_number(f"{where} velocity", velocity))
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc) if where in str(exc) else f"{where}: {exc}") from exc
        limits[name] = limit
    return limits


def merge_limits(
    joints: Sequence[str], sources: Sequence[tuple[str, Mapping[str, JointLimit]]]
) -> dict[str, JointLimit]:
    """One JointLimit per joint of `joints`, the most restrictive over all sources.
    A joint that no source names is refused with MissingLimitsError (a typo must not
    leave a joint unguarded); sources whose position limits do not overlap, ValueError."""
    merged: dict[str, JointLimit] = {}
    for _, limits in sources:
        for joint, limit in limits.items():
            if joint in joints:
                merged[joint] = merged[joint].tightest(limit, joint) if joint in merged else limit
    missing = [j for j in joints if j not in merged]
    if missing:
        names = ", ".join(name for name, _ in sources) or "no source given"
        raise MissingLimitsError(
            missing,
            f"joint(s) {missing} have no limits in any source ({names}); every joint needs an "
            "entry in limits_file, joint_limits.<joint>.* or robot_description",
        )
    return merged


def shield_limits(
    limits: Mapping[str, JointLimit], command_interface: str = "position"
) -> tuple[dict[str, tuple[float, float]], dict[str, Any]]:
    """Joint limits as the kernel shield's terms: (action_limits, safety).

    Position interface: action_limits = position limits; safety = velocity and
    acceleration rate limits. Velocity interface: action_limits = +-max_velocity; the
    rate guard bounds the change of velocity by max_acceleration.
    """
    if command_interface == "position":
        action_limits = {
            j: (lim.min_position, lim.max_position)
            for j, lim in limits.items()
            if lim.min_position is not None and lim.max_position is not None
        }
        safety: dict[str, Any] = {}
        velocities = {j: lim.max_velocity for j, lim in limits.items() if lim.max_velocity}
        accelerations = {
            j: lim.max_acceleration for j, lim in limits.items() if lim.max_acceleration
        }
        if velocities:
            safety["max_velocity"] = velocities
        if accelerations:
            safety["max_acceleration"] = accelerations
    else:
        action_limits = {
            j: (-lim.max_velocity, lim.max_velocity)
            for j, lim in limits.items()
            if lim.max_velocity
        }
        accelerations = {
            j: lim.max_acceleration for j, lim in limits.items() if lim.max_acceleration
        }
        safety = {"max_velocity": accelerations} if accelerations else {}
    return action_limits, safety


def build_shield(
    joints: Sequence[str],
    limits: Mapping[str, JointLimit],
    *,
    command_interface: str = "position",
    clip_tolerance: float = 0.05,
    max_step_dt_s: float = 0.05,
) -> SafetyShield:
    """The kernel SafetyShield for commands to `joints` under `limits` (`shield_limits`)."""
    action_limits, safety = shield_limits(limits, command_interface)
    spec = EnvSpec(
        action_keys=tuple(joints),
        control="absolute" if command_interface == "position" else "velocity",
        control_hz=1.0 / max_step_dt_s,
        action_limits=action_limits,
    )
    return SafetyShield(spec, build_guards(safety), clip_tolerance=clip_tolerance)


def format_limit(limit: JointLimit) -> str:
    parts = []
    if limit.min_position is not None:
        parts.append(f"[{limit.min_position:g}, {limit.max_position:g}]")
    if limit.max_velocity is not None:
        parts.append(f"v<={limit.max_velocity:g}")
    if limit.max_acceleration is not None:
        parts.append(f"a<={limit.max_acceleration:g}")
    return " ".join(parts) or "unlimited"
