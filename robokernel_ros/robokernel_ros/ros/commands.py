"""Controller command messages, built in one place: what a ros2_control controller of each
kind takes.

    msg_type = command_type("forward_command")          # std_msgs/Float64MultiArray
    msg = command_message("joint_trajectory", ["j1"], [0.3], period_s=0.02)
    hold = hold_message("joint_trajectory", ["j1"], [0.3])   # the shield's hold
    values, velocities = command_values("joint_trajectory", ["j1"], msg)   # read one back

- forward_command (forward_command_controller, `<ctrl>/commands`): a
  `std_msgs/Float64MultiArray`, one value per joint in the controller's order;
- joint_trajectory (joint_trajectory_controller, `<ctrl>/joint_trajectory`): a one-point
  `trajectory_msgs/JointTrajectory` reached at `period_s` (the next control tick).

A hold (the safety shield's) is the same command at rest: for a trajectory controller one
point with zero velocities reached at `HOLD_TRAJECTORY_TIME_S`. The kinds are the
contract's (`contract.spec.COMMAND_KINDS`), named `CONTROLLERS` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from robokernel_ros.contract.spec import COMMAND_KINDS as CONTROLLERS

#: time_from_start of the single point of a hold trajectory
HOLD_TRAJECTORY_TIME_S = 0.05


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
    kind: str,
    joints: Sequence[str],
    values: Sequence[float],
    period_s: float,
    velocities: Sequence[float] | None = None,
) -> Any:
    """One command of `values` (in `joints` order) for a controller of `kind` (a
    trajectory point's `velocities` when given)."""
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
            velocities=[] if velocities is None else [float(v) for v in velocities],
            time_from_start=Duration(sec=int(period_s), nanosec=int((period_s % 1.0) * 1e9)),
        )
    ]
    return msg


def hold_message(kind: str, joints: Sequence[str], values: Sequence[float]) -> Any:
    """The hold command at `values` for a controller of `kind` (a trajectory: one point
    at rest, reached at HOLD_TRAJECTORY_TIME_S)."""
    return command_message(
        kind, joints, values, HOLD_TRAJECTORY_TIME_S, velocities=[0.0] * len(values)
    )


def command_values(
    kind: str, joints: Sequence[str], msg: Any
) -> tuple[dict[str, float], dict[str, float] | None] | None:
    """What a command of `kind` tells a controller, by joint: ({joint: position},
    {joint: velocity} or None when the message gives none): a Float64MultiArray's values
    in `joints` order, a JointTrajectory's last point (where it comes to). None when it
    does not name every joint of `joints` once."""
    if kind == "forward_command":
        data = list(msg.data)
        if len(data) != len(joints):
            return None
        return dict(zip(joints, map(float, data), strict=True)), None
    if not msg.points:
        return None
    point = msg.points[-1]
    names = list(msg.joint_names)
    if sorted(names) != sorted(joints) or len(point.positions) != len(names):
        return None
    positions = dict(zip(names, map(float, point.positions), strict=True))
    velocities = (
        dict(zip(names, map(float, point.velocities), strict=True))
        if len(point.velocities) == len(names)
        else None
    )
    return positions, velocities


def clipped_trajectory(msg: Any, points: Sequence[Any]) -> Any:
    """`msg` (a JointTrajectory) with each point that the review changed replaced:
    `points[i]` None keeps point i; else its positions, and its velocities and
    accelerations where not None (safety.review's reviewed points)."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    out = JointTrajectory(header=msg.header, joint_names=msg.joint_names)
    for point, reviewed in zip(msg.points, points, strict=True):
        if reviewed is not None:
            point = JointTrajectoryPoint(
                positions=reviewed.positions,
                velocities=point.velocities if reviewed.velocities is None else reviewed.velocities,
                accelerations=(
                    point.accelerations
                    if reviewed.accelerations is None
                    else reviewed.accelerations
                ),
                effort=point.effort,
                time_from_start=point.time_from_start,
            )
        out.points.append(point)
    return out
