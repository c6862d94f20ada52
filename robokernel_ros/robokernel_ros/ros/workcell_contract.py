"""The runner's robot parameters as a topic contract and the ROS env's configuration.

    config = runner_env_config(node, params)   # the runner node and its RunnerParams

With `contract_file` the contract describes the robot: its state sources and cameras are
observed, each of its `commands` (one per controller) is published through the
safety_shield node named at the same index of `shields` (default: `safety_shield` for a
one-command contract, `<command name>_shield` for several; '' = that controller takes
the commands directly). A stream whose `type` the file leaves out is found on the graph
(ros.contract_live), waiting up to `discovery_s`.

Without it, today's parameters are the one-source, one-controller case, built as a
contract too (so both go through `RosEnvConfig.from_contract`): one JointState source
(`joint_states_topic`, `joints`), the cameras (`camera_names`, `camera_topics`), one
command of kind `controller` over `joints`, published on `command_topic` and confirmed
on `shield_state_topic` ('' = no shield).

A mistake is a `ParameterError` naming the parameter (a contract's: `contract_file` with
every line of the ContractError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robokernel_ros.ros.env_config import JOINT_STATE, RosEnvConfig, ShieldRoute
from robokernel_ros.ros.params import ParameterError

if TYPE_CHECKING:
    from rclpy.node import Node

    from robokernel_ros.ros.runner_params import RunnerParams

#: how long configure waits for the graph to show an untyped stream's topic
TYPE_DISCOVERY_S = 10.0


def legacy_contract(node: Node, params: RunnerParams) -> Any:
    """Today's runner parameters as a contract (see the module docstring)."""
    from robokernel_ros.contract import ContractError, parse_contract

    joints = list(params.joints)

    def resolve(parameter: str, topic: str) -> str:  # the contract's topics are absolute
        try:
            return node.resolve_topic_name(topic)
        except Exception as exc:  # noqa: BLE001 - rclpy's InvalidTopicNameException and kin
            raise ParameterError(parameter, topic, f"not a valid topic name ({exc})") from None

    stream = {
        "topic": resolve("joint_states_topic", params.joint_states_topic),
        "type": JOINT_STATE,
        "field": "position",
        "names": joints,
    }
    mapping = {
        "fps": float(params.control_frequency),
        "state": stream,
        "action": {**stream},
        "images": {
            name: {"topic": resolve("camera_topics", topic)}
            for name, topic in zip(params.camera_names, params.camera_topics, strict=True)
        },
        "command": {
            "name": "arm",
            "topic": resolve("command_topic", params.command_topic),
            "kind": params.controller,
            "joints": joints,
        },
    }
    try:
        return parse_contract(mapping, "runner parameters")
    except ContractError as exc:
        first = exc.problems[0]
        name, value = (
            ("camera_names", list(params.camera_names))
            if first.startswith("images")
            else ("command_topic", params.command_topic)
            if first.startswith("command.topic")
            else ("joints", joints)
        )
        raise ParameterError(name, value, "; ".join(exc.problems)) from None


def load_runner_contract(node: Node, params: RunnerParams) -> Any:
    """The contract of `contract_file`, its untyped streams resolved on the graph."""
    from robokernel_ros.contract import ContractError, load_contract
    from robokernel_ros.ros.contract_live import resolve_on_graph

    try:
        contract = load_contract(params.contract_file)
        return resolve_on_graph(node, contract, TYPE_DISCOVERY_S, roles=("state", "images"))
    except ContractError as exc:
        raise ParameterError(
            "contract_file", params.contract_file, "; ".join(exc.problems)
        ) from None


def default_shields(contract: Any) -> list[str]:
    """`safety_shield` for one command, `<command name>_shield` for several."""
    commands = list(contract.commands)
    if len(commands) == 1:
        return ["safety_shield"]
    return [f"{c.name}_shield" for c in commands]


def runner_env_config(node: Node, params: RunnerParams, **options: Any) -> RosEnvConfig:
    """The RosEnvConfig of the runner `node`'s parameters `params` (module docstring).
    `options`: further RosEnvConfig fields."""
    if params.contract_file:
        contract = load_runner_contract(node, params)
        shields = list(params.shields) or default_shields(contract)
        if len(shields) != len(contract.commands):
            raise ParameterError(
                "shields",
                list(params.shields),
                f"must name one shield node (or '') per command of the contract "
                f"({[c.name for c in contract.commands]})",
            )
        routes = [
            ShieldRoute.named(s, c.kind) if s else None
            for s, c in zip(shields, contract.commands, strict=True)
        ]
    else:
        contract = legacy_contract(node, params)
        routes = [
            ShieldRoute(
                params.shield_state_topic.rstrip("/").rsplit("/", 1)[0],
                params.command_topic,
                params.shield_state_topic,
                params.shield_clear_fault_service,
            )
            if params.shield_state_topic
            else None
        ]
    joints = [j for c in contract.commands for j in c.joints]
    if params.reset_positions and len(params.reset_positions) != len(joints):
        raise ParameterError(
            "reset_positions",
            list(params.reset_positions),
            f"must be [] or one value per commanded joint ({len(joints)}: {joints})",
        )
    motion_limits = None
    if params.limits_file:
        from robokernel_ros.safety.limits import load_limits_file

        try:
            limits = load_limits_file(params.limits_file)
        except ValueError as exc:
            raise ParameterError("limits_file", params.limits_file, str(exc)) from None
        motion_limits = {
            j: (limits[j].max_velocity, limits[j].max_acceleration) for j in joints if j in limits
        }
    try:
        return RosEnvConfig.from_contract(
            contract,
            shield_routes=routes,
            control_hz=params.control_frequency,
            state_timeout_s=params.state_timeout_s,
            control_priority=params.control_priority,
            motion_limits=motion_limits or {},
            reset_positions=dict(zip(joints, params.reset_positions, strict=True))
            if params.reset_positions
            else {},
            **options,
        )
    except ValueError as exc:
        name = "contract_file" if params.contract_file else "joints"
        raise ParameterError(name, params.contract_file or list(params.joints), str(exc)) from None
