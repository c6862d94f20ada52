"""The safety_shield node's parameters, described once, and its configuration resolved from
them at configure: the topics, the joint limits merged from every source and the command
review built on them.

    params = declare_params(node, ShieldParams)           # in __init__: domain checked
    declare_joint_limits(node, params.joints)             # joint_limits.<joint>.<key>
    config = resolve_shield_config(node, params)          # at configure: ParameterError

Limit sources (`safety.limits`): a `limits_file` in the joint_limits layout of
ros2_control, MoveIt or UR; `joint_limits.<joint>.*` parameters; the URDF of
`robot_description` and/or of `robot_description_topic` (its latched sample, waited for up
to `robot_description_wait_s`, else configure is refused: nothing is forwarded without
limits). Where several give a limit for one joint the most restrictive wins. Every refusal
is a `ParameterError` naming the parameter and its domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.wait_for_message import wait_for_message
from std_msgs.msg import String

from robokernel_ros.ros.commands import CONTROLLERS
from robokernel_ros.ros.node import EXECUTORS
from robokernel_ros.ros.params import ParameterError, param
from robokernel_ros.ros.qos import LATCHED_QOS
from robokernel_ros.safety.limits import (
    LIMIT_KEYS,
    NOT_ENFORCED,
    JointLimit,
    MissingLimitsError,
    SourcedLimit,
    load_limits_file,
    merge_limit_sources,
    parse_joint_limits,
    urdf_limit_sources,
)
from robokernel_ros.safety.review import COMMAND_INTERFACES, CommandReview

#: the controller's command topic when `output_topic` is ''
DEFAULT_OUTPUT = {
    "forward_command": "/forward_position_controller/commands",
    "joint_trajectory": "/joint_trajectory_controller/joint_trajectory",
}
#: the sources' topic when `input_topic` is ''
DEFAULT_INPUT = {"forward_command": "~/commands", "joint_trajectory": "~/joint_trajectory"}


@dataclass(frozen=True)
class ShieldParams:
    """The shield's parameters (besides `joint_limits.<joint>.<key>`), as declared."""

    joints: tuple[str, ...] = param(
        (), "joint names, the order of the command arrays", array_type=str
    )
    controller: str = param(
        "forward_command",
        "kind of controller in front of which the shield sits",
        choices=CONTROLLERS,
    )
    input_topic: str = param(
        "", "topic the command sources publish to ('' = ~/commands or ~/joint_trajectory)"
    )
    output_topic: str = param(
        "",
        "the controller's command topic ('' = /forward_position_controller/commands "
        "or /joint_trajectory_controller/joint_trajectory)",
    )
    joint_states_topic: str = param("/joint_states", "measured joint positions")
    command_timeout_s: float = param(
        0.5,
        "no valid command for this long -> one hold command",
        min_value=0.0,
        min_exclusive=True,
    )
    limits_file: str = param("", "joint_limits YAML file (ros2_control, MoveIt or UR layout)")
    robot_description: str = param(
        "", "URDF whose <limit>, <safety_controller> and <ros2_control> limits are also used"
    )
    robot_description_topic: str = param(
        "",
        "topic with the URDF (std_msgs/String, transient_local, as robot_state_publisher "
        "publishes /robot_description); configure waits for it ('' = not read)",
    )
    robot_description_wait_s: float = param(
        10.0,
        "longest configure waits for the URDF on robot_description_topic",
        min_value=0.0,
        min_exclusive=True,
    )
    command_interface: str = param(
        "position", "what the controller's commands are", choices=COMMAND_INTERFACES
    )
    clip_tolerance: float = param(
        0.05,
        "a value outside its limit by at most this x range is clipped, further refused",
        min_value=0.0,
        max_value=1.0,
    )
    max_step_dt_s: float = param(
        0.05,
        "longest interval credited to one step by the velocity/acceleration limits",
        min_value=0.0,
        min_exclusive=True,
    )
    command_rate_hz: float = param(
        0.0,
        "nominal rate of the command stream (the sender's control rate): the velocity and "
        "acceleration limits judge each command over its period, not its arrival "
        "interval (0 = learned from the stream's arrival intervals)",
        min_value=0.0,
    )
    state_period_s: float = param(
        0.5,
        "period of ~/state besides publishing on change",
        min_value=0.0,
        min_exclusive=True,
    )
    autostart: bool = param(False, "configure and activate without a lifecycle manager")
    latch_file: str = param("", "file that keeps the e-stop latch across restarts ('' = none)")
    estop_required: bool = param(
        True,
        "forward only while a live e-stop source (estop_topic) says released (a normally-closed "
        "circuit); false: forward unless pressed, and after estop_wait_s with no source",
    )
    estop_timeout_s: float = param(
        0.5,
        "estop_required: the source is lost (the e-stop latches) when silent this long",
        min_value=0.0,
        min_exclusive=True,
        max_value=60.0,
    )
    estop_wait_s: float = param(
        1.0,
        "estop_required false: after start, forward nothing until an estop_topic sample "
        "arrived or this long passed (time for a latched e-stop to be delivered by DDS)",
        min_value=0.0,
        max_value=60.0,
    )
    estop_topic: str = param(
        "estop",
        "the e-stop source's topic (std_msgs/Bool, true = pressed); relative names are in "
        "the node's namespace: 'estop' (the default) is <ns>/estop, the estop_panel's "
        "and the runner's; '~/estop' is this shield's own",
    )
    executor: str = param("events", "rclpy executor", choices=EXECUTORS)


@dataclass(frozen=True)
class ShieldConfig:
    """What configure resolved: the topics, each joint's limit with its source, the review."""

    joints: tuple[str, ...]
    controller: str
    command_interface: str
    input_topic: str
    output_topic: str
    joint_states_topic: str
    command_timeout_s: float
    limit_sources: Mapping[str, SourcedLimit]
    review: CommandReview
    #: limit keys given for some joint that the shield does not enforce
    not_enforced: tuple[str, ...] = ()

    @property
    def limits(self) -> dict[str, JointLimit]:
        return {j: s.limit for j, s in self.limit_sources.items()}


def declare_joint_limits(node: Node, joints: tuple[str, ...]) -> None:
    """ros2_control's `joint_limits.<joint>.<key>` parameters, for the joints named (any
    type: the limits parser names a wrong one)."""
    for joint in joints:
        for key in LIMIT_KEYS:
            node.declare_parameter(
                f"joint_limits.{joint}.{key}",
                None,
                ParameterDescriptor(
                    dynamic_typing=True,
                    read_only=True,
                    description=f"ros2_control joint limit {key}",
                ),
            )


def resolve_shield_config(node: Node, params: ShieldParams) -> ShieldConfig:
    """Validate the parameters together and load the limits; ParameterError when refused
    (the node's joint_limits.* parameters are read from `node`, the URDF topic waited for)."""
    joints = params.joints
    if not joints:
        raise ParameterError("joints", list(joints), "must name at least one joint")
    if len(set(joints)) != len(joints) or not all(joints):
        raise ParameterError("joints", list(joints), "must be distinct, non-empty names")
    input_topic = params.input_topic or DEFAULT_INPUT[params.controller]
    output_topic = params.output_topic or DEFAULT_OUTPUT[params.controller]
    if input_topic == output_topic:
        raise ParameterError("output_topic", output_topic, "must differ from input_topic")
    sources, direct = _limit_sources(node, params)
    try:
        limit_sources = merge_limit_sources(list(joints), sources)
    except MissingLimitsError as exc:
        raise ParameterError("joints", list(joints), str(exc)) from exc
    except ValueError as exc:
        raise ParameterError("joint_limits", "<merged>", str(exc)) from exc
    try:
        review = CommandReview(
            list(joints),
            {j: s.limit for j, s in limit_sources.items()},
            command_interface=params.command_interface,
            clip_tolerance=params.clip_tolerance,
            max_step_dt_s=params.max_step_dt_s,
            command_rate_hz=params.command_rate_hz,
        )
    except ValueError as exc:
        name, _, domain = str(exc).partition(": ")  # "command_rate_hz=...: <domain>"
        if name.startswith("command_rate_hz="):
            raise ParameterError("command_rate_hz", params.command_rate_hz, domain) from exc
        raise ParameterError("joint_limits", "<merged>", str(exc)) from exc
    not_enforced = sorted({k for j in joints for k in NOT_ENFORCED if direct.get(j, {}).get(k)})
    return ShieldConfig(
        joints=tuple(joints),
        controller=params.controller,
        command_interface=params.command_interface,
        input_topic=input_topic,
        output_topic=output_topic,
        joint_states_topic=params.joint_states_topic,
        command_timeout_s=params.command_timeout_s,
        limit_sources=limit_sources,
        review=review,
        not_enforced=tuple(not_enforced),
    )


def _limit_sources(
    node: Node, params: ShieldParams
) -> tuple[list[tuple[str, Mapping[str, JointLimit]]], dict[str, dict[str, Any]]]:
    """Every source's limits (the URDFs, the limits file, the joint_limits.* parameters),
    and the joint_limits.* parameters given; ParameterError naming the one refused."""
    sources: list[tuple[str, Mapping[str, JointLimit]]] = []
    if params.robot_description:
        try:
            sources.extend(urdf_limit_sources(params.robot_description))
        except ValueError as exc:
            raise ParameterError("robot_description", "<urdf>", str(exc)) from exc
    if params.robot_description_topic:
        sources.extend(
            _urdf_from_topic(node, params.robot_description_topic, params.robot_description_wait_s)
        )
    if params.limits_file:
        try:
            sources.append(("limits_file", load_limits_file(params.limits_file)))
        except ValueError as exc:
            raise ParameterError("limits_file", params.limits_file, str(exc)) from exc
    direct: dict[str, dict[str, Any]] = {}
    for joint in params.joints:
        for key in LIMIT_KEYS:
            value = node.get_parameter(f"joint_limits.{joint}.{key}").value
            if value is not None:
                direct.setdefault(joint, {})[key] = value
    if direct:
        try:
            sources.append(("joint_limits parameters", parse_joint_limits(direct, "parameters")))
        except ValueError as exc:
            raise ParameterError("joint_limits", direct, str(exc)) from exc
    return sources, direct


def _urdf_from_topic(node: Node, topic: str, wait_s: float) -> list[tuple[str, Any]]:
    """The limit sources of the URDF on `topic` (its latched sample); ParameterError when
    none arrives within wait_s: configure fails, nothing is forwarded."""
    received, msg = wait_for_message(
        String, node, topic, qos_profile=LATCHED_QOS, time_to_wait=wait_s
    )
    if not received:
        raise ParameterError(
            "robot_description_topic",
            topic,
            f"no URDF received within robot_description_wait_s={wait_s} s (a publisher "
            "such as robot_state_publisher must publish it reliable + transient_local)",
        )
    try:
        return urdf_limit_sources(msg.data, f"{topic} topic")
    except ValueError as exc:
        raise ParameterError("robot_description_topic", topic, str(exc)) from exc
