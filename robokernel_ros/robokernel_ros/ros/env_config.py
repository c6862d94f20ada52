"""The ROS robot environment's typed configuration: what it observes, which controllers it
commands and through which shield, and how it resets. Validated where it is built.

    config = RosEnvConfig.from_contract(contract, shields=["safety_shield", "gripper_shield"],
                                        control_hz=50.0)
    config = RosEnvConfig.single(joints=["j1"], command_topic="/robokernel/safety_shield/commands")

A topic contract (robokernel_ros.contract) describes the robot: its state sources, cameras
and controllers (`commands`). The configuration adds the workcell's wiring: each
controller's commands go through a safety_shield node of its own (`ShieldRoute`: the
env publishes on the shield's input, confirms on its `~/state` that its commands arrive,
and the runner's clear_fault calls its `~/clear_fault`); the shield forwards to the
controller's topic that the contract names. A controller without a shield ('') is
commanded on its own topic directly.

`single(...)` is today's one-source, one-controller case (the runner's `joints`,
`joint_states_topic`, `command_topic`, `controller`, camera and shield parameters):
one JointState source, one controller whose commands go to `command_topic`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from robokernel_ros.ros.commands import CONTROLLERS

JOINT_STATE = "sensor_msgs/msg/JointState"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
#: the shield's input topic per controller kind (ros/shield_config.py's DEFAULT_INPUT)
SHIELD_INPUT = {"forward_command": "commands", "joint_trajectory": "joint_trajectory"}


def full_type_name(name: str) -> str:
    """`pkg/Type` or `pkg/msg/Type` as `pkg/msg/Type` ('' stays '')."""
    parts = name.split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    return name


def message_class(type_name: str) -> Any:
    """The rclpy message class of `pkg/msg/Type`; ValueError naming it when not installed."""
    import importlib

    parts = full_type_name(type_name).split("/")
    if len(parts) != 3 or parts[1] != "msg" or not all(parts):
        raise ValueError(f"message type {type_name!r}: must be pkg/msg/Type")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    except (ImportError, AttributeError):
        raise ValueError(
            f"message type {type_name!r} is not installed here (its Python package {parts[0]})"
        ) from None


@dataclass(frozen=True)
class StateSource:
    """One source of the observation. A JointState source (of position or velocity) fills
    `joint_positions` and `joint_velocities` by joint name (`names`: the joints it must
    report); any other (and a JointState's effort) is read by the contract's field
    extraction (`stream`) into top-level numbers named by the stream's names, as
    import-bag writes them. `type` '' = not known yet (resolve it on the graph first)."""

    topic: str
    type: str = JOINT_STATE
    names: tuple[str, ...] = ()
    stream: Any = None  # the contract's Stream (for fields.extract); None for JointState
    field: str | None = None

    @property
    def is_joint_state(self) -> bool:
        return full_type_name(self.type) == JOINT_STATE and self.field != "effort"


@dataclass(frozen=True)
class ShieldRoute:
    """A safety_shield node between the env and one controller."""

    name: str  # the node's name, relative to the runner's namespace (or absolute)
    input_topic: str
    state_topic: str
    clear_fault_service: str

    @classmethod
    def named(cls, name: str, kind: str) -> ShieldRoute:
        """The shield called `name` with its default names (`<name>/commands` or
        `<name>/joint_trajectory`, `<name>/state`, `<name>/clear_fault`)."""
        base = name.rstrip("/")
        return cls(name, f"{base}/{SHIELD_INPUT[kind]}", f"{base}/state", f"{base}/clear_fault")


@dataclass(frozen=True)
class ControllerRoute:
    """One controller the env commands: its joints (the order of its command arrays),
    its kind, the controller's own topic, and the shield in between (None: commanded
    directly, no confirmation)."""

    joints: tuple[str, ...]
    kind: str = "forward_command"
    controller_topic: str = ""
    shield: ShieldRoute | None = None

    @property
    def topic(self) -> str:
        """Where the env publishes: the shield's input, else the controller's topic."""
        return self.shield.input_topic if self.shield is not None else self.controller_topic

    @property
    def shield_state_topic(self) -> str:
        return self.shield.state_topic if self.shield is not None else ""


@dataclass(frozen=True)
class RosEnvConfig:
    """See the module docstring. Every check is made here, naming the field."""

    controllers: tuple[ControllerRoute, ...]
    state: tuple[StateSource, ...] = (StateSource("/joint_states"),)
    cameras: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # name: (topic, type)
    control_hz: float = 50.0
    action_limits: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    state_timeout_s: float = 2.0
    discovery_timeout_s: float = 15.0
    reset_positions: Mapping[str, float] = field(default_factory=dict)
    reset_tolerance: float = 0.05
    reset_timeout_s: float = 10.0
    motion_limits: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    reset_speed_scale: float = 0.5
    requires_reset_confirmation: bool = False
    pace: bool = True
    control_priority: int = 0

    def __post_init__(self) -> None:
        for name in ("cameras", "action_limits", "reset_positions", "motion_limits"):
            object.__setattr__(self, name, dict(getattr(self, name) or {}))  # None: none
        object.__setattr__(self, "controllers", tuple(self.controllers))
        object.__setattr__(self, "state", tuple(self.state))
        if not self.controllers:
            raise ValueError("controllers: at least one controller must take the commands")
        joints = self.joints
        if not joints or not all(isinstance(j, str) and j for j in joints):
            raise ValueError(f"joints={list(joints)!r}: must be a non-empty list of joint names")
        if len(set(joints)) != len(joints):
            raise ValueError(
                f"joints={list(joints)!r}: names must be unique (a joint belongs to one controller)"
            )
        for c in self.controllers:
            if c.kind not in CONTROLLERS:
                raise ValueError(f"controller={c.kind!r}: must be one of {list(CONTROLLERS)}")
            if not c.topic:
                raise ValueError(f"controller of {list(c.joints)}: no command topic")
        if not self.state:
            raise ValueError("state: at least one state source is needed")
        if not any(s.is_joint_state or not s.type for s in self.state):
            raise ValueError(
                "state: a sensor_msgs/JointState source must report the commanded joints "
                f"{list(joints)} (the reset and the hold start from them)"
            )
        hz = self.control_hz
        if not (isinstance(hz, int | float) and math.isfinite(hz) and hz > 0):
            raise ValueError(f"control_hz={hz!r}: must be a positive finite number")
        unknown = sorted(set(self.reset_positions) - set(joints))
        if unknown:
            raise ValueError(f"reset_positions names joints that are not in joints: {unknown}")
        unknown = sorted(set(self.motion_limits) - set(joints))
        if unknown:
            raise ValueError(f"motion_limits names joints that are not in joints: {unknown}")
        d = self.discovery_timeout_s
        if not (isinstance(d, int | float) and math.isfinite(d) and d >= 0):
            raise ValueError(f"discovery_timeout_s={d!r}: must be a finite number >= 0")
        if not (0.0 < self.reset_speed_scale <= 1.0):
            raise ValueError(f"reset_speed_scale={self.reset_speed_scale!r}: must be in (0, 1]")

    @property
    def joints(self) -> tuple[str, ...]:
        """The action keys: every controller's joints, controller after controller."""
        return tuple(j for c in self.controllers for j in c.joints)

    @property
    def shields(self) -> tuple[ShieldRoute, ...]:
        return tuple(c.shield for c in self.controllers if c.shield is not None)

    # builders ------------------------------------------------------------------------------

    @classmethod
    def single(
        cls,
        *,
        joints: Sequence[str],
        command_topic: str,
        controller: str = "forward_command",
        joint_states_topic: str = "/joint_states",
        camera_topics: Mapping[str, str] | None = None,
        shield_state_topic: str = "",
        shield_clear_fault_service: str = "",
        **options: Any,
    ) -> RosEnvConfig:
        """The one-source, one-controller case: commands on `command_topic` (a shield's
        input when `shield_state_topic` names its ~/state)."""
        shield = (
            ShieldRoute(
                shield_state_topic.rsplit("/", 1)[0] if "/" in shield_state_topic else "",
                command_topic,
                shield_state_topic,
                shield_clear_fault_service,
            )
            if shield_state_topic
            else None
        )
        route = ControllerRoute(
            tuple(joints),
            controller,
            "" if shield else command_topic,
            shield,
        )
        cameras = {n: (t, _image_type(t)) for n, t in (camera_topics or {}).items()}
        return cls(
            controllers=(route,),
            state=(StateSource(joint_states_topic, JOINT_STATE, tuple(route.joints)),),
            cameras=cameras,
            **options,
        )

    @classmethod
    def from_contract(
        cls,
        contract: Any,
        *,
        shields: Sequence[str] | None = None,
        shield_routes: Sequence[ShieldRoute | None] | None = None,
        **options: Any,
    ) -> RosEnvConfig:
        """The configuration of a robot that `contract` describes: its state sources and
        cameras observed, one controller per entry of its `commands`, each behind the
        shield node named at the same index of `shields` ('' = none), or the route at
        that index of `shield_routes` (None = none); neither: no shields."""
        commands = list(contract.commands)
        if shield_routes is None:
            if shields is not None and len(shields) != len(commands):
                raise ValueError(
                    f"shields={list(shields)!r}: must name one shield node (or '') per command "
                    f"of the contract ({len(commands)}: {[c.topic for c in commands]})"
                )
            shield_routes = [
                ShieldRoute.named(s, c.kind) if s else None
                for s, c in zip(shields or [""] * len(commands), commands, strict=True)
            ]
        elif len(shield_routes) != len(commands):
            raise ValueError(
                f"shield_routes: {len(shield_routes)} for {len(commands)} commands of the contract"
            )
        routes = tuple(
            ControllerRoute(tuple(c.joints), c.kind, c.topic, route)
            for c, route in zip(commands, shield_routes, strict=True)
        )
        state = tuple(_state_source(s) for s in _sources(contract.state))
        cameras = {
            name: (image.topic, full_type_name(image.type or "") or _image_type(image.topic))
            for name, image in dict(contract.images or {}).items()
        }
        return cls(controllers=routes, state=state, cameras=cameras, **options)


def _sources(state: Any) -> list[Any]:
    if state is None:
        return []
    if isinstance(state, list | tuple):
        return list(state)
    return [state]


def _state_source(stream: Any) -> StateSource:
    type_name = full_type_name(getattr(stream, "type", None) or "")
    names = tuple(getattr(stream, "names", None) or ())
    field = getattr(stream, "field", None)
    by_joint = type_name == JOINT_STATE and field != "effort"
    return StateSource(stream.topic, type_name, names, None if by_joint else stream, field)


def _image_type(topic: str) -> str:
    from robokernel_ros.ros.wire import is_compressed_topic

    return COMPRESSED_IMAGE if is_compressed_topic(topic) else IMAGE
