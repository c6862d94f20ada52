"""Controller command messages, built in one place: what a ros2_control controller of each
kind takes.

    msg_type = command_type("forward_command")          # std_msgs/Float64MultiArray
    msg = command_message("joint_trajectory", ["j1"], [0.3], period_s=0.02)

- forward_command (forward_command_controller, `<ctrl>/commands`): a
  `std_msgs/Float64MultiArray`, one value per joint in the controller's order;
- joint_trajectory (joint_trajectory_controller, `<ctrl>/joint_trajectory`): a one-point
  `trajectory_msgs/JointTrajectory` reached at `period_s` (the next control tick).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CONTROLLERS = ("forward_command", "joint_trajectory")


def command_type(kind: str) -> Any:
    """The message class a controller of `kind` subscribes to."""
    if kind == "forward_command":
        from std_msgs.msg import Float64MultiArray

        return Float64MultiArray
    if kind == "joint_trajectory":
        from trajectory_msgs.msg import JointTrajectory

        return JointTrajectory
    raise ValueError(f"controller kind {kind!r}: must be one of {list(CONTROLLERS)}")


def command_message(
    kind: str, joints: Sequence[str], values: Sequence[float], period_s: float
) -> Any:
    """One command of `values` (in `joints` order) for a controller of `kind`."""
    values = [float(v) for v in values]
    if kind == "forward_command":
        from std_msgs.msg import Float64MultiArray

        return Float64MultiArray(data=values)
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    msg = JointTrajectory(joint_names=list(joints))
    msg.points = [
        JointTrajectoryPoint(
            positions=values,
            time_from_start=Duration(sec=int(period_s), nanosec=int((period_s % 1.0) * 1e9)),
        )
    ]
    return msg
