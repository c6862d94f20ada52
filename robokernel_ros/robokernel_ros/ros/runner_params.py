"""The runner node's parameters, described once (ros.params): name, type, default, domain
and doc; `ros2 param describe` shows them.

    params = declare_params(node, RunnerParams)   # ParameterError naming a refused one
    params.check()                                # the checks across parameters
    estop_required = declare_estop_required(node, params)

`estop_required`'s default depends on `env` (true for env=ros: a robot fails closed on
its e-stop source; false for env=sim), so it is declared after the others, from the
`ESTOP_REQUIRED` description.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rclpy.node import Node

from .params import Param, ParameterError, param

ENVS = ("sim", "ros")
CONTROLLERS = ("forward_command", "joint_trajectory")


@dataclass(frozen=True)
class RunnerParams:
    """The runner's parameters, as declared (see each one's doc)."""

    autostart: bool = param(False, "configure and activate without a lifecycle manager")
    env: str = param("sim", "environment: sim (MuJoCo in-process) or ros", choices=ENVS)
    robot: str = param("so101", "sim: a packaged model name or an MJCF path")
    robot_name: str = param("arm", "the robot's name in service calls")
    trace_dir: str = param("runs", "folder of run directories and bags ('' = none)")
    control_frequency: float = param(
        50.0,
        "ros: the robot's control rate (Hz)",
        min_value=0.0,
        min_exclusive=True,
        max_value=10000.0,
    )
    joints: tuple[str, ...] = param((), "ros: joint names, the command order", array_type=str)
    joint_states_topic: str = param("/joint_states", "ros: measured joints")
    command_topic: str = param(
        "safety_shield/commands", "ros: where commands go (the shield's input topic)"
    )
    controller: str = param("forward_command", "ros: command message type", choices=CONTROLLERS)
    camera_names: tuple[str, ...] = param((), "ros: camera names", array_type=str)
    camera_topics: tuple[str, ...] = param(
        (),
        "ros: one Image topic per camera name (CompressedImage when it ends in /compressed)",
        array_type=str,
    )
    reset_positions: tuple[float, ...] = param(
        (),
        "ros: joint targets at reset, one per joint ([] = start where the robot is)",
        array_type=float,
    )
    limits_file: str = param(
        "",
        "ros: joint limits (ros2_control's layout, the shield's file): the reset ramps "
        "within them ('' = the reset pose is commanded at once)",
    )
    control_priority: int = param(
        0,
        "ros: the SCHED_FIFO priority of the episode loop's thread while it drives the "
        "robot (0 = the normal scheduler; 50 is ros2_control's thread_priority; without "
        "permission to use it the loop runs at normal priority and the log says so)",
        min_value=0,
        max_value=99,
    )
    state_timeout_s: float = param(
        2.0,
        "ros: joint states older than this end the episode",
        min_value=0.0,
        min_exclusive=True,
    )
    shield_clear_fault_service: str = param(
        "safety_shield/clear_fault", "the shield's clear_fault service ('' = no shield)"
    )
    shield_state_topic: str = param(
        "safety_shield/state",
        "ros: the shield's ~/state, which confirms that the runner's commands reach it "
        "before the first reset moves the robot ('' = no shield: a controller takes the "
        "commands, and the publisher's match is all there is)",
    )
    contract_file: str = param(
        "",
        "ros: a topic contract (state sources, cameras, one command per controller) "
        "instead of joints/joint_states_topic/command_topic/controller/camera_* "
        "(ros.workcell_contract; '' = those parameters)",
    )
    shields: tuple[str, ...] = param(
        (),
        "ros, contract_file: the safety_shield node of each contract command, in "
        "order ('' = none; [] = safety_shield for one command, <name>_shield for several)",
        array_type=str,
    )
    server_ready_timeout_s: float = param(
        10.0,
        "how long a call with policy_provider remote waits for a ready policy server",
        min_value=0.0,
        min_exclusive=True,
    )
    follow_tolerance: float = param(
        0.3,
        "ros: an episode ends error when a joint stays further than this from its "
        "commanded target (rad, or the joint's unit) for follow_timeout_s: the robot does "
        "not follow (0 = not checked)",
        min_value=0.0,
    )
    follow_timeout_s: float = param(
        1.0,
        "ros: how long a joint may stay beyond follow_tolerance",
        min_value=0.0,
        min_exclusive=True,
    )
    publish_events: bool = param(True, "publish kernel events on events")
    estop_timeout_s: float = param(
        0.5,
        "estop_required: the e-stop source is lost (latched) when silent this long",
        min_value=0.0,
        min_exclusive=True,
        max_value=60.0,
    )
    foxglove_port: int = param(
        -1,
        "a live Foxglove WebSocket view of every episode on this port (-1: none, 0: any free port)",
        min_value=-1,
        max_value=65535,
    )

    def check(self) -> None:
        """The checks across parameters (each one alone was checked when declared)."""
        if len(self.camera_names) != len(self.camera_topics):
            raise ParameterError(
                "camera_topics",
                list(self.camera_topics),
                f"must have one topic per camera name ({len(self.camera_names)} names)",
            )
        if self.env != "ros":
            return
        if not self.joints and not self.contract_file:
            raise ParameterError("joints", list(self.joints), "env=ros needs the joint names")
        if (
            not self.contract_file
            and self.reset_positions
            and len(self.reset_positions) != len(self.joints)
        ):
            raise ParameterError(
                "reset_positions",
                list(self.reset_positions),
                f"must be [] or one value per joint ({len(self.joints)})",
            )


#: estop_required: declared after `env`, whose value gives its default.
ESTOP_REQUIRED = Param(
    "estop_required",
    False,
    "rollouts start only while the estop source is live and released, and latch when it "
    "goes silent (default: true for env=ros, false for env=sim)",
)


def declare_estop_required(node: Node, params: RunnerParams) -> bool:
    """Declare estop_required with its default for `params.env` (a robot fails closed)."""
    return dataclasses.replace(ESTOP_REQUIRED, default=params.env == "ros").declare(node)
