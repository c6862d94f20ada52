"""Joint limits: the files robots ship, merged to the most restrictive per joint, with
the source of every limit, and the kernel SafetyShield built from them.

Sources read:
  - YAML in ros2_control's joint_limits layout (`load_limits_file`): `joint_limits:` at
    the top, under `robot_description_planning:` (MoveIt), or either of those under
    `<node>: ros__parameters:` of a ROS 2 parameter file (namespaces nested above it
    too); the `!degrees` / `!radians` tags of Universal Robots' and MoveIt's files.
  - URDF (`urdf_limit_sources`): `<limit>` (position, velocity, effort),
    `<safety_controller soft_lower_limit soft_upper_limit>` (tightens the position
    limits, as ros2_control does) and `<ros2_control>` blocks' command-interface
    `min` / `max` params. Transmissions and fixed joints carry no limits.
Enforced: position, velocity, acceleration (deceleration as an acceleration bound).
Effort is read and reported, not enforced (the shield commands positions or
velocities). A jerk limit switched on is refused: the kernel's rate guards see the
last two commands, and a jerk bound needs three.

No ROS here: the safety_shield node, the policy server's served mode and the
`robokernel limits` command load limits through this module.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
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
#: Keys a flag set true needs (k_position / k_velocity shape ros2_control's soft-limit
#: dynamics; only the soft bounds are used here).
_REQUIRED = {
    "has_position_limits": ("min_position", "max_position"),
    "has_velocity_limits": ("max_velocity",),
    "has_acceleration_limits": ("max_acceleration",),
    "has_deceleration_limits": ("max_deceleration",),
    "has_effort_limits": ("max_effort",),
    "has_soft_limits": ("soft_lower_limit", "soft_upper_limit"),
}
_LIMIT_BOOLS = (*_LIMIT_FLAGS, "angle_wraparound")
LIMIT_KEYS: tuple[str, ...] = (*_LIMIT_BOOLS, *(k for v in _LIMIT_FLAGS.values() for k in v))
#: Keys that are accepted (a ros2_control file carries them) but not enforced here.
NOT_ENFORCED = ("angle_wraparound",)
JERK_REFUSED = (
    "the shield's rate guards bound velocity and acceleration, not jerk (they see the last "
    "two commands; a jerk bound needs three); set has_jerk_limits: false to use this file "
    "without a jerk limit"
)


class MissingLimitsError(ValueError):
    """Joints that no limit source names; `missing` lists them."""

    def __init__(self, missing: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.missing = list(missing)


@dataclass(frozen=True)
class JointLimit:
    """The limits of one joint (None: no limit of that kind). max_effort is reported,
    not enforced."""

    min_position: float | None = None
    max_position: float | None = None
    max_velocity: float | None = None
    max_acceleration: float | None = None
    max_effort: float | None = None

    def tightest(self, other: JointLimit, joint: str) -> JointLimit:
        """The most restrictive combination of two sources' limits."""
        return SourcedLimit.of(self, "").tighten(other, "", joint).limit


LIMIT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JointLimit))


@dataclass(frozen=True)
class SourcedLimit:
    """A joint's merged limit and, for each field of it that is set, the source that
    set it (the earlier source on a tie)."""

    limit: JointLimit
    sources: Mapping[str, str]

    @classmethod
    def of(cls, limit: JointLimit, source: str) -> SourcedLimit:
        return cls(limit, {k: source for k in LIMIT_FIELDS if getattr(limit, k) is not None})

    def tighten(self, other: JointLimit, source: str, joint: str) -> SourcedLimit:
        """The most restrictive of this and `other` (from `source`), field by field;
        ValueError when the position ranges do not overlap."""
        values = {k: getattr(self.limit, k) for k in LIMIT_FIELDS}
        sources = dict(self.sources)
        for key in LIMIT_FIELDS:
            new = getattr(other, key)
            old = values[key]
            if new is None:
                continue
            if old is None or (new > old if key == "min_position" else new < old):
                values[key], sources[key] = new, source
        merged = JointLimit(**values)
        lo, hi = merged.min_position, merged.max_position
        if lo is not None and hi is not None and lo > hi:
            mine = _joined(self.sources, ("min_position", "max_position"))
            raise ValueError(
                f"joint {joint!r}: the position limits of its sources do not overlap "
                f"([{self.limit.min_position}, {self.limit.max_position}]"
                + (f" from {mine}" if mine else "")
                + f" and [{other.min_position}, {other.max_position}]"
                + (f" from {source})" if source else ")")
            )
        return SourcedLimit(merged, sources)


def _joined(sources: Mapping[str, str], keys: Iterable[str]) -> str:
    return " + ".join(dict.fromkeys(sources[k] for k in keys if sources.get(k)))


def _number(where: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}={value!r}: must be a finite number")
    if positive and value <= 0:
        raise ValueError(f"{where}={value!r}: must be > 0")
    return float(value)


# --- ros2_control joint_limits YAML ------------------------------------------------------------


def parse_joint_limit(joint: str, entries: Mapping[str, Any], source: str) -> JointLimit:
    """One joint's entry of ros2_control's joint_limits layout -> JointLimit.

    A has_* flag must be a boolean; a value whose flag is absent is refused
    (ros2_control would silently ignore it); a flag set false switches its limit off
    whatever the value next to it; keys outside the layout are refused by name. Soft
    limits (has_soft_limits) tighten the position limits; has_jerk_limits: true is
    refused (JERK_REFUSED); effort is read (reported, not enforced).
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
        missing = [k for k in _REQUIRED.get(flag, ()) if k not in entries]
        if entries.get(flag) and missing:
            raise ValueError(f"{where}.{flag} is true but {missing[0]} is missing")
    if entries.get("has_jerk_limits"):
        raise ValueError(
            f"{where}.has_jerk_limits is true (max_jerk={entries.get('max_jerk')!r}): "
            + JERK_REFUSED
        )
    limit = JointLimit()
    if entries.get("has_position_limits"):
        lo = _number(f"{where}.min_position", entries["min_position"])
        hi = _number(f"{where}.max_position", entries["max_position"])
        if lo > hi:
            raise ValueError(f"{where}: min_position={lo} must be <= max_position={hi}")
        limit = replace(limit, min_position=lo, max_position=hi)
    if entries.get("has_soft_limits"):  # soft limits tighten the hard ones
        soft_lo = _number(f"{where}.soft_lower_limit", entries["soft_lower_limit"])
        soft_hi = _number(f"{where}.soft_upper_limit", entries["soft_upper_limit"])
        if soft_lo > soft_hi:
            raise ValueError(
                f"{where}: soft_lower_limit={soft_lo} must be <= soft_upper_limit={soft_hi}"
            )
        lo, hi = soft_lo, soft_hi
        if limit.min_position is not None and limit.max_position is not None:
            lo, hi = max(lo, limit.min_position), min(hi, limit.max_position)
            if lo > hi:
                raise ValueError(
                    f"{where}: the soft limits [{soft_lo:g}, {soft_hi:g}] lie outside the "
                    f"position limits [{limit.min_position:g}, {limit.max_position:g}]"
                )
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
    if entries.get("has_effort_limits"):
        limit = replace(
            limit, max_effort=_number(f"{where}.max_effort", entries["max_effort"], positive=True)
        )
    return limit


def parse_joint_limits(section: Any, source: str) -> dict[str, JointLimit]:
    """The `joint_limits` mapping ({joint: {key: value}}) -> {joint: JointLimit}."""
    if not isinstance(section, Mapping):
        raise ValueError(
            f"{source}: joint_limits must be a mapping of joint names, got {section!r}"
        )
    return {str(j): parse_joint_limit(str(j), e, source) for j, e in section.items()}


class _LimitsLoader(yaml.SafeLoader):
    """yaml's SafeLoader plus the angle tags of UR's and MoveIt's files:
    `!degrees 180.0` (converted to radians) and `!radians 3.14159`."""


def _angle(loader: yaml.SafeLoader, node: yaml.Node, degrees: bool) -> float:
    text = loader.construct_scalar(node)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.tag} {text!r}: must be a number", node.start_mark
        ) from None
    return math.radians(value) if degrees else value


_LimitsLoader.add_constructor("!degrees", lambda loader, node: _angle(loader, node, True))
_LimitsLoader.add_constructor("!radians", lambda loader, node: _angle(loader, node, False))


_LAYOUTS = (("joint_limits",), ("robot_description_planning", "joint_limits"))
_ABSENT = object()


def _layout(document: Any) -> Any:
    """The joint_limits mapping of `document` in one of _LAYOUTS, or _ABSENT."""
    for keys in _LAYOUTS:
        value = document
        for key in keys:
            value = value.get(key, _ABSENT) if isinstance(value, Mapping) else _ABSENT
        if value is not _ABSENT:
            return value
    return _ABSENT


def _find_joint_limits(document: Any, depth: int = 0) -> Any:
    """The joint_limits mapping at the top of `document`, or under the
    `ros__parameters` of a node (namespaces above it allowed); _ABSENT when none."""
    found = _layout(document) if depth == 0 else _ABSENT
    if found is not _ABSENT or not isinstance(document, Mapping) or depth > 3:
        return found
    for value in document.values():
        if isinstance(value, Mapping):
            if "ros__parameters" in value:
                found = _layout(value["ros__parameters"])
            else:
                found = _find_joint_limits(value, depth + 1)
            if found is not _ABSENT:
                return found
    return _ABSENT


def load_limits_file(path: str | Path) -> dict[str, JointLimit]:
    """A YAML file of joint limits in ros2_control's layout: `joint_limits` at the top
    level or under `robot_description_planning` (MoveIt), or either under
    `<node>: ros__parameters:` of a ROS 2 parameter file; `!degrees` / `!radians` tags
    read. ValueError naming the file and the key when refused."""
    path = Path(path)
    try:
        document = yaml.load(path.read_text(), Loader=_LimitsLoader)  # noqa: S506 (safe loader)
    except OSError as exc:
        raise ValueError(f"limits_file={str(path)!r}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"limits_file={str(path)!r}: not a text file ({exc})") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"limits_file={str(path)!r}: not valid YAML ({exc})") from exc
    section = _find_joint_limits(document)
    if section is _ABSENT:
        raise ValueError(
            f"limits_file={str(path)!r}: no 'joint_limits' mapping at the top level, under "
            "'robot_description_planning:' or under '<node>: ros__parameters:'"
        )
    return parse_joint_limits(section, f"limits_file {path}")


# --- URDF ----------------------------------------------------------------------------------------

#: ros2_control command interfaces whose min/max bound a JointLimit field.
_INTERFACE_FIELDS = {
    "velocity": "max_velocity",
    "acceleration": "max_acceleration",
    "effort": "max_effort",
}


def _float(text: str | None, where: str) -> float | None:
    """A URDF number (an attribute or a param's text): None when absent."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(
            f"{where}={text!r}: must be a finite number (a xacro file must be expanded first)"
        ) from None
    return _number(where, value)


def urdf_limit_sources(
    urdf: str, name: str = "robot_description"
) -> list[tuple[str, dict[str, JointLimit]]]:
    """The limits a URDF gives, one source per kind of tag (the ones present):
    `<name> <limit>`, `<name> <safety_controller>`, `<name> <ros2_control>`.

    <limit>: position limits of revolute and prismatic joints, velocity and effort of
    every joint that has them (0 means none). <safety_controller>: soft_lower_limit and
    soft_upper_limit (both or neither) bound the position of revolute and prismatic
    joints. <ros2_control> joint command interfaces: position min and max bound the
    position;
    velocity, acceleration and effort min/max the magnitude (the smaller of -min, max).
    """
    try:
        root = ET.fromstring(urdf)
    except ET.ParseError as exc:
        raise ValueError(f"{name}: not valid XML ({exc})") from exc
    tags: dict[str, JointLimit] = {}
    soft: dict[str, JointLimit] = {}
    for joint in root.findall("joint"):  # not the <joint>s of transmissions or ros2_control
        jname, kind = joint.get("name"), joint.get("type")
        if jname is None or kind not in ("revolute", "prismatic", "continuous"):
            continue
        tag = joint.find("limit")
        if tag is not None:
            where = f"{name}: joint {jname!r} <limit>"
            limit = JointLimit()
            if kind != "continuous":
                lo = _float(tag.get("lower", "0"), f"{where} lower")
                hi = _float(tag.get("upper", "0"), f"{where} upper")
                if lo > hi:
                    raise ValueError(f"{where}: lower={lo} must be <= upper={hi}")
                limit = replace(limit, min_position=lo, max_position=hi)
            velocity = _float(tag.get("velocity"), f"{where} velocity")
            effort = _float(tag.get("effort"), f"{where} effort")
            if velocity is not None and velocity > 0:
                limit = replace(limit, max_velocity=velocity)
            if effort is not None and effort > 0:
                limit = replace(limit, max_effort=effort)
            tags[jname] = limit
        safety = joint.find("safety_controller")
        if safety is not None and kind != "continuous":
            where = f"{name}: joint {jname!r} <safety_controller>"
            lo = _float(safety.get("soft_lower_limit"), f"{where} soft_lower_limit")
            hi = _float(safety.get("soft_upper_limit"), f"{where} soft_upper_limit")
            if (lo is None) != (hi is None):  # urdfdom would read the missing one as 0
                raise ValueError(f"{where}: soft_lower_limit and soft_upper_limit go together")
            if lo is not None and hi is not None:
                if lo > hi:
                    raise ValueError(
                        f"{where}: soft_lower_limit={lo} must be <= soft_upper_limit={hi}"
                    )
                soft[jname] = JointLimit(min_position=lo, max_position=hi)
    control: dict[str, JointLimit] = {}
    for block in root.iter("ros2_control"):
        for joint in block.findall("joint"):
            jname = joint.get("name")
            if jname is None:
                continue
            limit = control.get(jname, JointLimit())
            for interface in joint.findall("command_interface"):
                kind = interface.get("name")
                where = f"{name}: <ros2_control> joint {jname!r} command_interface {kind!r}"
                bounds = {
                    key: _float(param.text or "", f"{where} param {key}")
                    for param in interface.findall("param")
                    if (key := param.get("name")) in ("min", "max")
                }
                lo, hi = bounds.get("min"), bounds.get("max")
                if lo is not None and hi is not None and lo > hi:
                    raise ValueError(f"{where}: min={lo} must be <= max={hi}")
                if kind == "position" and bounds:
                    if lo is None or hi is None:  # a one-sided range is no range to enforce
                        raise ValueError(f"{where}: min and max go together")
                    limit = limit.tightest(JointLimit(lo, hi), jname)
                elif kind in _INTERFACE_FIELDS and bounds:
                    magnitude = min(b for b in (None if lo is None else -lo, hi) if b is not None)
                    if magnitude <= 0:
                        raise ValueError(
                            f"{where}: min={lo}, max={hi} must bound a magnitude (min < 0 < max)"
                        )
                    field = _INTERFACE_FIELDS[kind]
                    limit = limit.tightest(JointLimit(**{field: magnitude}), jname)
            if limit != JointLimit():
                control[jname] = limit
    sources = [
        (f"{name} <limit>", tags),
        (f"{name} <safety_controller>", soft),
        (f"{name} <ros2_control>", control),
    ]
    return [(source, limits) for source, limits in sources if limits]


def limits_from_urdf(urdf: str, name: str = "robot_description") -> dict[str, JointLimit]:
    """Every joint's limits from a URDF: its sources (`urdf_limit_sources`) merged."""
    return {
        j: s.limit for j, s in merge_limit_sources(None, urdf_limit_sources(urdf, name)).items()
    }


def load_limit_sources(
    path: str | Path, name: str | None = None
) -> list[tuple[str, dict[str, JointLimit]]]:
    """The limit sources of one file: a URDF (`.urdf` / `.xml`, or text that starts with
    `<`; one source per kind of tag, `<name> <limit>` ...) or a joint_limits YAML file
    (one source, `<name>`); `name` defaults to the path. ValueError naming the file
    when refused."""
    path = Path(path)
    name = str(path) if name is None else name
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{str(path)!r}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{str(path)!r}: not a text file ({exc})") from exc
    if path.suffix in (".urdf", ".xml") or text.lstrip().startswith("<"):
        try:
            return urdf_limit_sources(text, name)
        except ValueError as exc:
            raise ValueError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from exc
    return [(name, load_limits_file(path))]


# --- merge and the kernel shield --------------------------------------------------------------


def merge_limit_sources(
    joints: Sequence[str] | None, sources: Sequence[tuple[str, Mapping[str, JointLimit]]]
) -> dict[str, SourcedLimit]:
    """One SourcedLimit per joint of `joints` (None: every joint a source names), the
    most restrictive over all sources, each limit with the source that set it.
    A joint of `joints` that no source names is refused with MissingLimitsError (a typo
    must not leave a joint unguarded); sources whose position limits do not overlap,
    ValueError."""
    wanted = None if joints is None else set(joints)
    merged: dict[str, SourcedLimit] = {}
    for source, limits in sources:
        for joint, limit in limits.items():
            if wanted is not None and joint not in wanted:
                continue
            have = merged.get(joint)
            merged[joint] = (
                SourcedLimit.of(limit, source)
                if have is None
                else have.tighten(limit, source, joint)
            )
    if joints is None:
        return merged
    missing = [j for j in joints if j not in merged]
    if missing:
        names = ", ".join(name for name, _ in sources) or "no source given"
        raise MissingLimitsError(
            missing,
            f"joint(s) {missing} have no limits in any source ({names}); every joint needs an "
            "entry in limits_file, joint_limits.<joint>.* or robot_description",
        )
    return {j: merged[j] for j in joints}


def merge_limits(
    joints: Sequence[str], sources: Sequence[tuple[str, Mapping[str, JointLimit]]]
) -> dict[str, JointLimit]:
    """`merge_limit_sources` without the sources: {joint: JointLimit} in `joints` order."""
    return {j: s.limit for j, s in merge_limit_sources(joints, sources).items()}


def describe_limit(joint: str, sourced: SourcedLimit) -> str:
    """One line: the joint's limits, each with the source that set it."""
    limit, sources = sourced.limit, sourced.sources
    parts = []
    if limit.min_position is not None or limit.max_position is not None:
        lo = "-inf" if limit.min_position is None else f"{limit.min_position:g}"
        hi = "inf" if limit.max_position is None else f"{limit.max_position:g}"
        parts.append(
            f"position [{lo}, {hi}] ({_joined(sources, ('min_position', 'max_position'))})"
        )
    for key, label in (("max_velocity", "velocity"), ("max_acceleration", "acceleration")):
        if getattr(limit, key) is not None:
            parts.append(f"{label} <= {getattr(limit, key):g} ({sources[key]})")
    if limit.max_effort is not None:
        parts.append(f"effort <= {limit.max_effort:g} ({sources['max_effort']}; not enforced)")
    return f"{joint}: " + (", ".join(parts) or "unlimited")


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
