"""The topic contract: one YAML file that says which topics carry a robot's state, its
cameras, the recorded action and its controllers' commands, and how the streams align.

    from robokernel_ros.contract import load_contract, ContractError
    contract = load_contract("config/contract_so101_leader_follower.yaml")
    contract.state_names, contract.action_names, contract.images, contract.commands

`parse_contract(mapping, origin)` validates everything it can without a bag or a graph and
raises one `ContractError` whose `.problems` holds one line per mistake (the key path such
as `state[1].field`, the topic or joint, and the allowed values). A stream's `type` may be
left out: `resolve_types(contract, {topic: type})` fills it from a bag or the graph and
validates what depends on it. The file's keys are documented in docs/contract.md.
No ROS import; the robot check (`robot:`) reads the packaged model with MuJoCo.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .fields import IMAGE_TYPES, JOINT_TRAJECTORY, TYPES, normalise_type

ALIGN_MODES = ("header", "receive")
COMMAND_KINDS = ("forward_command", "joint_trajectory")
SPLIT_RULES = ("none", "gap", "marker")
TOP_KEYS = (
    "fps",
    "align",
    "robot",
    "state",
    "action",
    "images",
    "command",
    "episodes",
    "teleop",
    "takeover",
)
STREAM_KEYS = ("topic", "type", "field", "names")
TELEOP_KEYS = (*STREAM_KEYS, "command", "stale_s")
TAKEOVER_KEYS = ("topic", "type", "buttons")
BOOL = "std_msgs/msg/Bool"
JOY = "sensor_msgs/msg/Joy"
TAKEOVER_TYPES = (BOOL, JOY)
TAKEOVER_BUTTONS = ("pause", "correct", "resume")
#: how old the teleop source's newest message may be before the loop holds (seconds)
TELEOP_STALE_S = 0.25
IMAGE_KEYS = ("topic", "type")
COMMAND_KEYS = ("name", "topic", "kind", "joints")
EPISODE_KEYS = ("split", "gap_s", "topic")
_CAMERA_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ContractError(ValueError):
    """A contract with mistakes: `.problems` holds one line per mistake."""

    def __init__(self, origin: str, problems: list[str]) -> None:
        self.origin = origin
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"contract {origin}: {len(self.problems)} mistake(s):\n{lines}")


@dataclass(frozen=True)
class Stream:
    """One numeric source: `topic`, its message `type` ("pkg/msg/Name"; None until read
    from a bag or the graph), the `field` selected (None: the type's default or whole
    message), the entry `names` in the contract's order."""

    topic: str
    type: str | None = None
    field: str | None = None
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageStream:
    topic: str
    type: str | None = None  # sensor_msgs/msg/Image | sensor_msgs/msg/CompressedImage


@dataclass(frozen=True)
class Command:
    """One controller's command input: `kind` forward_command (Float64MultiArray of
    `joints`' targets) or joint_trajectory (a JointTrajectory of `joints`)."""

    name: str
    topic: str
    kind: str
    joints: tuple[str, ...]


@dataclass(frozen=True)
class EpisodeSplit:
    """How a long bag becomes episodes: `none` (one episode), `gap` (a new one after
    `gap_s` seconds without a message on the first state topic), `marker` (a new one at
    every message on `topic`)."""

    rule: str = "none"
    gap_s: float | None = None
    topic: str | None = None


@dataclass(frozen=True)
class Teleop:
    """The teleop source (a leader arm's JointState, or any numeric stream) that drives the
    robot while the operator corrects: `stream` (its `names` are action names, the joints
    it commands), `command` (an actuated leader's Float64MultiArray input in the names'
    order, driven to the follower's pose before a takeover; None: a passive leader) and
    `stale_s` (a newest message older than this is no command: the loop holds)."""

    stream: Stream
    command: str | None = None
    stale_s: float = TELEOP_STALE_S


@dataclass(frozen=True)
class Takeover:
    """The pedal or joystick that asks for takeover: `type` std_msgs/msg/Bool (true =
    correct, false = resume) or sensor_msgs/msg/Joy with `buttons` {pause, correct,
    resume} -> button index (a press, the button going from 0 to 1, is the call)."""

    topic: str
    type: str
    buttons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Contract:
    fps: float
    align: str = "header"
    robot: str | None = None
    state: tuple[Stream, ...] = ()
    action: tuple[Stream, ...] = ()
    images: dict[str, ImageStream] = field(default_factory=dict)
    commands: tuple[Command, ...] = ()
    episodes: EpisodeSplit = field(default_factory=EpisodeSplit)
    teleop: Teleop | None = None
    takeover: Takeover | None = None
    origin: str = "<contract>"
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(n for s in self.state for n in stream_names(s))

    @property
    def action_names(self) -> tuple[str, ...]:
        return tuple(n for s in self.action for n in stream_names(s))

    def streams(self) -> list[tuple[str, Stream | ImageStream]]:
        """(role key path, stream) of every topic the contract reads: state[i], action[i],
        images.<camera>, and the marker topic (as a Stream without a type)."""
        out: list[tuple[str, Stream | ImageStream]] = []
        out += [(_key(self.source, "state", i), s) for i, s in enumerate(self.state)]
        out += [(_key(self.source, "action", i), s) for i, s in enumerate(self.action)]
        out += [(f"images.{k}", s) for k, s in self.images.items()]
        if self.episodes.rule == "marker" and self.episodes.topic:
            out.append(("episodes.topic", Stream(self.episodes.topic)))
        return out

    def topics(self) -> list[str]:
        return list(dict.fromkeys(s.topic for _, s in self.streams()))


def stream_names(stream: Stream) -> tuple[str, ...]:
    """The names of the stream's entries: `names`, or for a fixed-layout type the default
    '<topic slug>.<part>.<axis>'. Empty for a stream whose type is not known yet."""
    if stream.names:
        return stream.names
    table = TYPES.get(stream.type or "")
    if table is None or table.by_name:
        return ()
    slug = stream.topic.strip("/").replace("/", "_")
    return tuple(f"{slug}.{n}" for n in table.component_names(stream.field))


def load_contract(path: str | Path) -> Contract:
    """Read and validate a contract YAML file (ContractError: every mistake, one line each;
    a missing or unparsable file is one problem too)."""
    import yaml

    p = Path(path)
    origin = str(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ContractError(origin, [f"file: cannot be read ({exc.strerror or exc})"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ContractError(origin, [f"file: not valid YAML{where}"]) from None
    return parse_contract(data, origin)


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown(where: str, data: Mapping[str, Any], allowed: tuple[str, ...], out: list[str]) -> None:
    for key in data:
        if key not in allowed:
            path = f"{where}.{key}" if where else str(key)
            out.append(
                f"{path}: unknown key{_did_you_mean(str(key), allowed)}; allowed: {list(allowed)}"
            )


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _topic(where: str, value: Any, out: list[str]) -> str | None:
    if not isinstance(value, str) or not value.startswith("/") or value.strip() != value:
        out.append(f"{where}: {value!r} is not a topic name (an absolute name like /joint_states)")
        return None
    return value


def _type(where: str, value: Any, allowed: tuple[str, ...], out: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or normalise_type(value) not in allowed:
        out.append(f"{where}: type {value!r} is not supported; one of {list(allowed)}")
        return None
    return normalise_type(value)


def check_stream_type(where: str, s: Stream, out: list[str]) -> None:
    """The checks that need the stream's type: field valid for it, names where needed."""
    table = TYPES.get(s.type or "")
    if table is None:
        return
    if s.field is not None and s.field not in table.fields:
        out.append(
            f"{where}.field: {s.field!r} is not a field of {s.type} (topic {s.topic}); "
            f"one of {table.field_names}"
        )
        return
    if table.by_name and not s.names:
        out.append(
            f"{where}.names: {s.type} (topic {s.topic}) needs the names of the entries to read, "
            "in order (a non-empty list)"
        )
    if not table.by_name and s.names:
        width = table.width(s.field)
        if len(s.names) != width:
            out.append(
                f"{where}.names: {len(s.names)} names for {s.type}"
                f"{'.' + s.field if s.field else ''} (topic {s.topic}), which has {width} "
                f"entries ({table.component_names(s.field)})"
            )


def _stream(where: str, raw: Any, out: list[str]) -> Stream | None:
    if not isinstance(raw, Mapping):
        out.append(f"{where}: must be a mapping with topic, type, field, names")
        return None
    _unknown(where, raw, STREAM_KEYS, out)
    if "topic" not in raw:
        out.append(f"{where}.topic: missing (every source needs its topic)")
        return None
    topic = _topic(f"{where}.topic", raw["topic"], out)
    mtype = _type(f"{where}.type", raw.get("type"), tuple(TYPES), out)
    fld = raw.get("field")
    if fld is not None and not isinstance(fld, str):
        out.append(f"{where}.field: {fld!r} must be a field name (a string)")
        fld = None
    names_raw = raw.get("names", [])
    if not isinstance(names_raw, list) or not all(isinstance(n, str) and n for n in names_raw):
        out.append(f"{where}.names: {names_raw!r} must be a list of non-empty names")
        names_raw = []
    dups = sorted({n for n in names_raw if names_raw.count(n) > 1})
    if dups:
        out.append(f"{where}.names: {dups} named more than once (topic {topic})")
    if topic is None:
        return None
    s = Stream(topic=topic, type=mtype, field=fld, names=tuple(names_raw))
    if mtype is not None:
        check_stream_type(where, s, out)
    return s


def _sources(role: str, raw: Any, out: list[str], *, required: bool) -> tuple[Stream, ...]:
    if raw is None:
        if required:
            out.append(f"{role}: missing (one source, or a list of sources)")
        return ()
    items = raw if isinstance(raw, list) else [raw]
    if isinstance(raw, list) and not raw:
        out.append(f"{role}: an empty list (give at least one source)")
    streams = []
    for i, item in enumerate(items):
        s = _stream(f"{role}[{i}]" if isinstance(raw, list) else role, item, out)
        if s is not None:
            streams.append(s)
    seen: dict[str, int] = {}
    for s in streams:
        seen[s.topic] = seen.get(s.topic, 0) + 1
    for topic, count in seen.items():
        if count > 1:
            out.append(f"{role}: topic {topic} is listed {count} times (once per role)")
    return tuple(streams)


def _images(raw: Any, out: list[str]) -> dict[str, ImageStream]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        out.append("images: must be a mapping camera -> {topic, type}")
        return {}
    images: dict[str, ImageStream] = {}
    topics: dict[str, str] = {}
    for camera, spec in raw.items():
        where = f"images.{camera}"
        if not isinstance(camera, str) or not _CAMERA_NAME.match(camera):
            out.append(f"{where}: camera name {camera!r} must be letters, digits and _")
            continue
        if isinstance(spec, str):
            spec = {"topic": spec}
        if not isinstance(spec, Mapping):
            out.append(f"{where}: must be a topic or a mapping with topic, type")
            continue
        _unknown(where, spec, IMAGE_KEYS, out)
        if "topic" not in spec:
            out.append(f"{where}.topic: missing")
            continue
        topic = _topic(f"{where}.topic", spec["topic"], out)
        mtype = _type(f"{where}.type", spec.get("type"), IMAGE_TYPES, out)
        if topic is None:
            continue
        if topic in topics:
            out.append(f"{where}.topic: {topic} is also images.{topics[topic]}'s (once per role)")
            continue
        topics[topic] = camera
        images[camera] = ImageStream(topic=topic, type=mtype)
    return images


def _default_commands(action: tuple[Stream, ...]) -> tuple[Command, ...]:
    """One command per action source: its topic, its kind from its type, its names."""
    out = []
    for i, s in enumerate(action):
        names = stream_names(s)
        kind = "joint_trajectory" if s.type == JOINT_TRAJECTORY else "forward_command"
        name = "arm" if len(action) == 1 else (s.topic.strip("/").split("/")[0] or f"cmd{i}")
        out.append(Command(name=name, topic=s.topic, kind=kind, joints=names))
    return tuple(out)


def _commands(raw: Any, action_names: tuple[str, ...], out: list[str]) -> tuple[Command, ...]:
    items = raw if isinstance(raw, list) else [raw]
    commands: list[Command] = []
    seen_names: set[str] = set()
    seen_topics: set[str] = set()
    for i, item in enumerate(items):
        where = f"command[{i}]" if isinstance(raw, list) else "command"
        if not isinstance(item, Mapping):
            out.append(f"{where}: must be a mapping with name, topic, kind, joints")
            continue
        _unknown(where, item, COMMAND_KEYS, out)
        name = item.get("name", "arm" if len(items) == 1 else f"cmd{i}")
        if not isinstance(name, str) or not _CAMERA_NAME.match(name):
            out.append(f"{where}.name: {name!r} must be letters, digits and _")
        elif name in seen_names:
            out.append(f"{where}.name: {name!r} is used by another command")
        seen_names.add(str(name))
        topic = _topic(f"{where}.topic", item.get("topic"), out)
        if topic is not None and topic in seen_topics:
            out.append(f"{where}.topic: {topic} is used by another command")
        kind = item.get("kind")
        if kind not in COMMAND_KINDS:
            out.append(
                f"{where}.kind: {kind!r} is not a command kind; one of {list(COMMAND_KINDS)}"
            )
        joints = item.get("joints")
        if (
            not isinstance(joints, list)
            or not joints
            or not all(isinstance(j, str) and j for j in joints)
        ):
            out.append(f"{where}.joints: {joints!r} must be a non-empty list of joint names")
            joints = []
        else:
            stray = [j for j in joints if j not in action_names]
            if stray and action_names:
                out.append(
                    f"{where}.joints: {stray} are not action names (the action names "
                    f"{list(action_names)})"
                )
            dups = sorted({j for j in joints if joints.count(j) > 1})
            if dups:
                out.append(f"{where}.joints: {dups} listed more than once")
        if topic is not None:
            seen_topics.add(topic)
            commands.append(Command(str(name), topic, str(kind), tuple(joints)))
    return tuple(commands)


def _episodes(raw: Any, out: list[str]) -> EpisodeSplit:
    if raw is None:
        return EpisodeSplit()
    if not isinstance(raw, Mapping):
        out.append("episodes: must be a mapping with split (none | gap | marker), gap_s, topic")
        return EpisodeSplit()
    _unknown("episodes", raw, EPISODE_KEYS, out)
    rule = raw.get("split", "none")
    if rule not in SPLIT_RULES:
        out.append(f"episodes.split: {rule!r} is not a rule; one of {list(SPLIT_RULES)}")
        return EpisodeSplit()
    gap, topic = raw.get("gap_s"), raw.get("topic")
    if rule == "gap" and not (_is_number(gap) and gap > 0):
        out.append(f"episodes.gap_s: {gap!r} must be a number of seconds > 0 (split: gap)")
        gap = None
    if rule == "marker":
        topic = _topic("episodes.topic", topic, out)
    if rule != "gap" and "gap_s" in raw:
        out.append(f"episodes.gap_s: only with split: gap (split is {rule!r})")
    if rule != "marker" and "topic" in raw:
        out.append(f"episodes.topic: only with split: marker (split is {rule!r})")
    return EpisodeSplit(
        rule=rule,
        gap_s=float(gap) if rule == "gap" and gap is not None else None,
        topic=topic if rule == "marker" else None,
    )


def _key(source: Mapping[str, Any] | None, role: str, i: int) -> str:
    """`role[i]` when the file gives the role as a list, `role` for its one mapping."""
    listed = source is None or isinstance(source.get(role), list)
    return f"{role}[{i}]" if listed else role


def _duplicates(
    role: str, streams: tuple[Stream, ...], source: Mapping[str, Any] | None, out: list[str]
) -> None:
    seen: dict[str, str] = {}
    for i, s in enumerate(streams):
        for n in stream_names(s):
            if n in seen and seen[n] != s.topic:
                out.append(
                    f"{_key(source, role, i)}.names: {n!r} is also read from {seen[n]} (every {role} name once)"
                )
            seen.setdefault(n, s.topic)


def robot_joints(robot: str) -> tuple[set[str], set[str]] | None:
    """(actuator names, joint names) of a packaged robot; None when it is not one. Read
    from the model file's XML when it names every joint and actuator itself (no include),
    else from the compiled model (MuJoCo names the unnamed ones)."""
    from ..envs.models import PACKAGED_MODELS, resolve_model

    if robot not in PACKAGED_MODELS:
        return None
    path = resolve_model(robot)
    named = _named_in_xml(path)
    if named is not None:
        return named
    from ..envs.model_info import load_model_info

    info = load_model_info(path)
    return set(info.actuators), set(info.scalar_joints) | set(info.actuators)


def _named_in_xml(path: Path) -> tuple[set[str], set[str]] | None:
    """(actuators, joints) named in an MJCF file, or None when the file includes others or
    leaves a joint or an actuator unnamed (then only the compiled model knows)."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    if root.find(".//include") is not None:
        return None
    joints: set[str] = set()
    actuators: set[str] = set()

    def walk(node: ET.Element) -> bool:
        for child in node:
            if child.tag == "default":
                continue  # class defaults, not elements
            if child.tag == "joint":
                if not child.get("name"):
                    return False
                joints.add(child.get("name", ""))
            if child.tag in ("actuator",):
                for act in child:
                    if not act.get("name"):
                        return False
                    actuators.add(act.get("name", ""))
                continue
            if not walk(child):
                return False
        return True

    if not walk(root) or not actuators:
        return None
    return actuators, joints | actuators


def _robot(c: Contract, out: list[str]) -> None:
    from ..envs.models import PACKAGED_MODELS

    if not isinstance(c.robot, str) or c.robot not in PACKAGED_MODELS:
        out.append(
            f"robot: {c.robot!r} is not a robot this project knows; one of "
            f"{sorted(PACKAGED_MODELS)} (or leave robot out)"
        )
        return
    joints = robot_joints(c.robot)
    assert joints is not None
    actuators, all_joints = joints
    for role, streams, known in (("state", c.state, all_joints), ("action", c.action, actuators)):
        for i, s in enumerate(streams):
            table = TYPES.get(s.type or "")
            if table is not None and not table.by_name:
                continue  # a pose, a wrench...: not joint names
            stray = [n for n in s.names if n not in known]
            if stray:
                out.append(
                    f"{_key(c.source, role, i)}.names: {stray} (topic {s.topic}) are not joints of robot "
                    f"{c.robot} ({sorted(known)})"
                )


def parse_contract(mapping: Any, origin: str = "<contract>") -> Contract:
    """Validate a contract's mapping (as read from YAML) and build the Contract; every
    mistake found is one line of the ContractError raised."""
    out: list[str] = []
    if not isinstance(mapping, Mapping):
        raise ContractError(origin, ["(top level): must be a mapping of fps, state, action, ..."])
    _unknown("", mapping, TOP_KEYS, out)
    fps = mapping.get("fps")
    if fps is None:
        out.append("fps: missing (the frame rate every stream is aligned to, > 0)")
    elif not _is_number(fps) or not fps > 0 or fps != fps or fps == float("inf"):
        out.append(f"fps: {fps!r} must be a number of frames per second > 0")
    align = mapping.get("align", "header")
    if align not in ALIGN_MODES:
        out.append(f"align: {align!r} is not an alignment; one of {list(ALIGN_MODES)}")
    robot = mapping.get("robot")
    state = _sources("state", mapping.get("state"), out, required=True)
    action = _sources("action", mapping.get("action"), out, required=True)
    images = _images(mapping.get("images"), out)
    episodes = _episodes(mapping.get("episodes"), out)
    _duplicates("state", state, mapping, out)
    _duplicates("action", action, mapping, out)
    c = Contract(
        fps=float(fps) if _is_number(fps) else 0.0,
        align=str(align),
        robot=robot,
        state=state,
        action=action,
        images=images,
        episodes=episodes,
        origin=origin,
        source=mapping,
    )
    if "command" in mapping:
        commands = _commands(mapping["command"], c.action_names, out)
    else:
        commands = _default_commands(action)
    c = replace(
        c,
        commands=commands,
        teleop=_teleop(mapping.get("teleop"), c.action_names, out),
        takeover=_takeover(mapping.get("takeover"), out),
    )
    if robot is not None:
        _robot(c, out)
    _distinct_topics(c, out)
    if out:
        raise ContractError(origin, out)
    return c


def _teleop(raw: Any, action_names: tuple[str, ...], out: list[str]) -> Teleop | None:
    """`teleop:` a stream (topic, type, field, names) whose names are action names, plus
    `command` (an actuated leader's input topic) and `stale_s`."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        out.append("teleop: must be a mapping with topic, type, field, names, command, stale_s")
        return None
    _unknown("teleop", raw, TELEOP_KEYS, out)
    stream_keys = {k: v for k, v in raw.items() if k in STREAM_KEYS}
    if "topic" in raw and "type" not in raw:
        out.append(
            "teleop.type: missing (the teleop source is read live and may start after the "
            f"runner: name its type, one of {list(TYPES)})"
        )
    s = _stream("teleop", stream_keys, out) if "topic" in raw else None
    if "topic" not in raw:
        out.append("teleop.topic: missing (the teleop source's topic)")
    if s is not None:
        names = stream_names(s)
        if not names:
            out.append("teleop.names: missing (the action names it commands, in its order)")
        stray = [n for n in names if n not in action_names]
        if stray and action_names:
            out.append(
                f"teleop.names: {stray} (topic {s.topic}) are not action names (the action "
                f"names {list(action_names)})"
            )
    command = raw.get("command")
    if command is not None:
        command = _topic("teleop.command", command, out)
        if command is not None and s is not None and command == s.topic:
            out.append(f"teleop.command: {command} is the teleop source's own topic")
    stale = raw.get("stale_s", TELEOP_STALE_S)
    if not _is_number(stale) or not 0 < stale < float("inf"):
        out.append(f"teleop.stale_s: {stale!r} must be a number of seconds > 0")
        stale = TELEOP_STALE_S
    if s is None:
        return None
    return Teleop(stream=s, command=command, stale_s=float(stale))


def _takeover(raw: Any, out: list[str]) -> Takeover | None:
    """`takeover:` the pedal (std_msgs/msg/Bool) or joystick (sensor_msgs/msg/Joy with
    `buttons`) topic."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        out.append("takeover: must be a mapping with topic, type, buttons")
        return None
    _unknown("takeover", raw, TAKEOVER_KEYS, out)
    topic = _topic("takeover.topic", raw.get("topic"), out)
    kind = raw.get("type")
    if kind is None:
        out.append(f"takeover.type: missing; one of {list(TAKEOVER_TYPES)}")
    kind = _type("takeover.type", kind, TAKEOVER_TYPES, out)
    buttons_raw = raw.get("buttons")
    buttons: dict[str, int] = {}
    if kind == BOOL and buttons_raw is not None:
        out.append(f"takeover.buttons: only with type {JOY} (a {BOOL} pedal has none)")
    elif kind == JOY:
        if not isinstance(buttons_raw, Mapping) or not buttons_raw:
            out.append(
                f"takeover.buttons: {buttons_raw!r} must map some of {list(TAKEOVER_BUTTONS)} "
                f"to a button index (type {JOY})"
            )
        else:
            _unknown("takeover.buttons", buttons_raw, TAKEOVER_BUTTONS, out)
            for name in TAKEOVER_BUTTONS:
                if name not in buttons_raw:
                    continue
                index = buttons_raw[name]
                if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                    out.append(f"takeover.buttons.{name}: {index!r} must be a button index >= 0")
                    continue
                buttons[name] = index
            seen: dict[int, str] = {}
            for name, index in buttons.items():
                if index in seen:
                    out.append(f"takeover.buttons.{name}: button {index} is also {seen[index]}'s")
                seen.setdefault(index, name)
    if topic is None or kind is None:
        return None
    return Takeover(topic=topic, type=kind, buttons=buttons)


def _distinct_topics(c: Contract, out: list[str]) -> None:
    """The teleop and takeover topics are inputs of their own: not a state, camera or
    command topic of the robot."""
    taken = {s.topic: key for key, s in c.streams() if not key.startswith("action")}
    taken.update({cmd.topic: f"command {cmd.name}" for cmd in c.commands})
    for key, topic in (
        ("teleop.topic", c.teleop.stream.topic if c.teleop else None),
        ("teleop.command", c.teleop.command if c.teleop else None),
        ("takeover.topic", c.takeover.topic if c.takeover else None),
    ):
        if topic is not None and topic in taken:
            out.append(f"{key}: {topic} is also {taken[topic]}'s (a topic of its own)")
    if (
        c.teleop is not None
        and c.takeover is not None
        and c.takeover.topic
        in (
            c.teleop.stream.topic,
            c.teleop.command,
        )
    ):
        out.append(f"takeover.topic: {c.takeover.topic} is also the teleop's")


def resolve_types(contract: Contract, types: Mapping[str, str]) -> Contract:
    """The contract with every stream's missing `type` filled from `types` (topic ->
    "pkg/msg/Name", from a bag or the graph) and the given ones checked against it.
    ContractError: a topic not in `types`, a type that differs or is not supported."""
    out: list[str] = []

    def fill(where: str, s: Any, allowed: tuple[str, ...]) -> Any:
        found = types.get(s.topic)
        if found is None:
            out.append(f"{where}.topic: {s.topic} is not there")
            return s
        found = normalise_type(found)
        if s.type is not None and s.type != found:
            out.append(f"{where}.type: the contract says {s.type}, topic {s.topic} carries {found}")
            return s
        if found not in allowed:
            out.append(
                f"{where}: topic {s.topic} carries {found}, which is not supported; "
                f"one of {list(allowed)}"
            )
            return s
        return replace(s, type=found)

    src = contract.source
    state = tuple(
        fill(_key(src, "state", i), s, tuple(TYPES)) for i, s in enumerate(contract.state)
    )
    action = tuple(
        fill(_key(src, "action", i), s, tuple(TYPES)) for i, s in enumerate(contract.action)
    )
    images = {k: fill(f"images.{k}", s, IMAGE_TYPES) for k, s in contract.images.items()}
    for role, streams in (("state", state), ("action", action)):
        for i, s in enumerate(streams):
            check_stream_type(_key(src, role, i), s, out)
    if contract.episodes.rule == "marker" and contract.episodes.topic not in types:
        out.append(f"episodes.topic: {contract.episodes.topic} is not there")
    resolved = replace(contract, state=state, action=action, images=images)
    _duplicates("state", state, src, out)
    _duplicates("action", action, src, out)
    if contract.source is not None and "command" not in contract.source:
        resolved = replace(resolved, commands=_default_commands(action))
    if out:
        raise ContractError(contract.origin, out)
    return resolved


def contract_mapping(contract: Contract) -> dict[str, Any]:
    """The contract as a plain mapping (types resolved), what a run directory keeps."""

    def stream(s: Stream) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": s.topic}
        if s.type:
            d["type"] = s.type
        if s.field:
            d["field"] = s.field
        if s.names:
            d["names"] = list(s.names)
        return d

    out: dict[str, Any] = {"fps": contract.fps, "align": contract.align}
    if contract.robot:
        out["robot"] = contract.robot
    out["state"] = [stream(s) for s in contract.state]
    out["action"] = [stream(s) for s in contract.action]
    if contract.images:
        out["images"] = {
            k: {"topic": s.topic, **({"type": s.type} if s.type else {})}
            for k, s in contract.images.items()
        }
    out["command"] = [
        {"name": c.name, "topic": c.topic, "kind": c.kind, "joints": list(c.joints)}
        for c in contract.commands
    ]
    e = contract.episodes
    out["episodes"] = {"split": e.rule, **({"gap_s": e.gap_s} if e.gap_s else {}),
                       **({"topic": e.topic} if e.topic else {})}  # fmt: skip
    if contract.teleop is not None:
        t = contract.teleop
        out["teleop"] = {**stream(t.stream), "stale_s": t.stale_s}
        if t.command:
            out["teleop"]["command"] = t.command
    if contract.takeover is not None:
        k = contract.takeover
        out["takeover"] = {"topic": k.topic, "type": k.type}
        if k.buttons:
            out["takeover"]["buttons"] = dict(k.buttons)
    return out
