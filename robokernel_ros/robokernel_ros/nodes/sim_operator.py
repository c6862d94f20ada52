"""sim_operator: a simulated operator for a runner, over ROS (issue #40): it plays the
leader arm from the scripted expert and presses the takeover pedal when the robot leaves
the expert's tube (rollout.takeover: TubeRule and SimulatedOperator, the one rule).

    python -m robokernel_ros.nodes.sim_operator --ros-args -r __ns:=/robokernel \\
        -p contract_file:=config/contract_so101_arm_gripper.yaml \\
        -p expert_config_json:='{"targets": [{"shoulder_pan": 0.6}], "max_delta": 0.02}'

Parameters:
  contract_file       the runner's contract: its `teleop:` (where the leader's JointState
                      goes), `takeover:` (the pedal or joystick it presses) and the
                      follower's JointState state source (what the rule reads); required
  expert_provider     scripted | scripted_goal (policies.scripted; default scripted)
  expert_config_json  the expert's policy_config (a JSON object; scripted needs targets)
  radius, back_radius, back_steps
                      the TubeRule: take over beyond `radius` (rad), hand back after
                      `back_steps` steps within `back_radius` (0 = radius / 2)
  rate_hz             ticks per second (0 = the contract's fps)
  events_topic        the runner's KernelEvent topic (default `events`, relative)

Each tick of an episode (the runner's events say when one runs) publishes the expert's
command on the teleop topic and the rule's decision on the takeover topic
(ros.sim_operator). Nothing here commands the robot: the runner does, through its shield.
A parameter outside its domain ends the process with status 2, naming it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rclpy.node import Node

from robokernel_ros.ros.node import exit_main, run_node
from robokernel_ros.ros.params import ParameterError, declare

EXPERTS = ("scripted", "scripted_goal")


class SimOperatorNode(Node):
    """See the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("sim_operator", **kwargs)
        from robokernel_ros.contract import ContractError, load_contract
        from robokernel_ros.policies.base import PolicyAgent, create_policy
        from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule
        from robokernel_ros.ros.sim_operator import SimOperatorLoop

        contract_file = declare(self, "contract_file", "", "the runner's topic contract (required)")
        provider = declare(self, "expert_provider", "scripted", "the expert", choices=EXPERTS)
        config_json = declare(self, "expert_config_json", "{}", "the expert's policy_config (JSON)")
        radius = declare(self, "radius", 0.15, "take over beyond this (rad)", min_value=0.0,
                         min_exclusive=True)  # fmt: skip
        back_radius = declare(self, "back_radius", 0.0, "hand back within this (0: radius/2)",
                              min_value=0.0)  # fmt: skip
        back_steps = declare(self, "back_steps", 10, "steps within back_radius", min_value=1)
        rate = declare(self, "rate_hz", 0.0, "ticks per second (0: the contract's fps)",
                       min_value=0.0, max_value=1000.0)  # fmt: skip
        events_topic = declare(self, "events_topic", "events", "the runner's events")
        if not contract_file:
            raise ParameterError("contract_file", contract_file, "required: the runner's contract")
        try:
            contract = load_contract(contract_file)
        except ContractError as exc:
            raise ParameterError("contract_file", contract_file, "; ".join(exc.problems)) from None
        try:
            config = json.loads(config_json)
        except ValueError:
            config = None
        if not isinstance(config, dict):
            raise ParameterError("expert_config_json", config_json, "must be a JSON object")
        try:
            rule = TubeRule(radius=radius, back_radius=back_radius or None, back_steps=back_steps)
        except ValueError as exc:
            raise ParameterError("back_radius", back_radius, str(exc)) from None
        try:
            policy = create_policy(provider, **config)
        except (TypeError, ValueError) as exc:
            raise ParameterError("expert_config_json", config_json, str(exc)) from None
        if contract.teleop is not None:
            policy.set_robot_state_keys(list(contract.teleop.stream.names))
        try:
            self.loop = SimOperatorLoop(
                self,
                contract,
                SimulatedOperator(PolicyAgent(policy), rule),
                events_topic=events_topic,
            )
        except ValueError as exc:
            raise ParameterError("contract_file", contract_file, str(exc)) from None
        hz = rate or contract.fps
        self.create_timer(1.0 / hz, self.loop.tick)
        self.get_logger().info(
            f"simulated operator: the {provider} expert on {contract.teleop.stream.topic}, "
            f"takeover on {contract.takeover.topic} (tube {rule.radius:g}, back within "
            f"{rule.back_radius:g} for {rule.back_steps} steps), {hz:g} Hz"
        )


def main(args: Sequence[str] | None = None) -> int:
    return run_node(SimOperatorNode, args=args)


if __name__ == "__main__":
    exit_main(main)
