"""sim_robot: a MuJoCo robot that stands in for a ros2_control robot.

It publishes `/joint_states` (sensor_msgs/JointState: every hinge/slide joint of the
robot, positions and velocities) at `control_hz` and accepts the topics of the two kinds
of controller a workcell uses:
  - forward_command_controller: std_msgs/Float64MultiArray, one value per joint of the
    controller, written to those actuators (a joint target for position servos);
  - joint_trajectory_controller: trajectory_msgs/JointTrajectory, executed from the
    moment it arrives: positions interpolated linearly from the current targets to the
    first point at its time_from_start, then from point to point; after the last point
    it holds it; an empty trajectory holds the current position. It needs position
    actuators.
Like those controllers it ignores (with a logged error) a command of the wrong size,
with unknown joints, or with non-finite values.

Controllers. By default one of each over every name of `joints`: a forward command on
`forward_command_topic` (/forward_position_controller/commands) and a trajectory on
`trajectory_topic` (/joint_trajectory_controller/joint_trajectory). A robot whose joints
are split over several controllers (an arm and its gripper) names them, ros2_control's
way, in `controllers` with `<name>.kind` (forward_command | joint_trajectory),
`<name>.topic` and `<name>.joints` each:

    controllers: [arm_controller, gripper_controller]
    arm_controller: {kind: forward_command, topic: /arm_controller/commands,
                     joints: [shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll]}
    gripper_controller: {kind: forward_command, topic: /gripper_controller/commands,
                         joints: [gripper]}

or takes them from a topic contract (`contract_file`: its `commands`, one controller
each). A controller's command sets its joints' targets only; the others keep theirs.
The commanded actuators are then every controller's joints (`joints` must be [] or
name the same joints; `initial_positions` follows that order).

Physics runs on the wall clock: a timer ticks at `control_hz` and each tick steps the
simulation by as many control periods as wall time has advanced (at most
`max_catch_up_steps`; beyond that the lost time is dropped and reported).

The robot model comes from robokernel_ros.envs (MujocoScene + MujocoEnv: a packaged
robot name such as "so101" or an MJCF path).

Run: python -m robokernel_ros.nodes.sim_robot --ros-args -p robot:=so101 -p control_hz:=100.0
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from robokernel_ros.ros.commands import CONTROLLERS
from robokernel_ros.ros.node import EXECUTORS, exit_main, run_node
from robokernel_ros.ros.params import ParameterError, declare_params, param
from robokernel_ros.ros.qos import COMMAND_QOS, JOINT_STATE_PUB_QOS


@dataclass
class _Controller:
    """One controller: its joints are `indices` into the node's commanded actuators."""

    name: str
    kind: str
    topic: str
    joints: list[str]
    indices: list[int]
    trajectory: tuple[float, list[float], list[tuple[float, list[float]]]] | None = None


@dataclass(frozen=True)
class SimParams:
    """The node's parameters, as declared (besides the controllers' own)."""

    robot: str = param("so101", "packaged robot name or MJCF file path")
    control_hz: float = param(
        100.0,
        "physics/control rate and /joint_states rate",
        min_value=0.0,
        min_exclusive=True,
        max_value=2000.0,
    )
    joints: tuple[str, ...] = param(
        (), "command order: actuator names ([] = all of them)", array_type=str
    )
    initial_positions: tuple[float, ...] = param(
        (),
        "start targets and joint positions, in `joints` order ([] = model's)",
        array_type=float,
    )
    joint_states_topic: str = param("/joint_states", "where joint states go")
    max_catch_up_steps: int = param(10, "most control periods stepped in one tick", min_value=1)
    executor: str = param("single_threaded", "rclpy executor", choices=EXECUTORS)
    controllers: tuple[str, ...] = param(
        (),
        "controller names, each with <name>.kind, <name>.topic, <name>.joints "
        "([] = one of each kind over `joints`)",
        array_type=str,
    )
    contract_file: str = param(
        "", "a topic contract whose `commands` are the controllers ('' = none)"
    )


@dataclass(frozen=True)
class ControllerParams:
    """One named controller's parameters (`<name>.kind`, `<name>.topic`, `<name>.joints`)."""

    kind: str = param("forward_command", "controller kind", choices=CONTROLLERS)
    topic: str = param("", "the controller's command topic")
    joints: tuple[str, ...] = param((), "the controller's joints", array_type=str)


@dataclass(frozen=True)
class DefaultControllerParams:
    """The topics of the default controllers (no `controllers`, no `contract_file`)."""

    forward_command_topic: str = param(
        "/forward_position_controller/commands",
        "forward_command_controller topic (Float64MultiArray)",
    )
    trajectory_topic: str = param(
        "/joint_trajectory_controller/joint_trajectory",
        "joint_trajectory_controller topic (JointTrajectory)",
    )


class SimRobotNode(Node):
    """See the module docstring."""

    def __init__(self, node_name: str = "sim_robot", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        params = declare_params(self, SimParams)
        self._max_catch_up = params.max_catch_up_steps
        self._load_robot(params)
        self._joints, self._controllers = self._resolve_controllers(params)
        kinds = self._env.actuator_kinds
        self._position_servos = {j: kinds[j] == "position" for j in self._joints}
        self._env.reset(seed=0)
        self._targets = [self._env.hold_action()[j] for j in self._joints]
        initial = list(params.initial_positions)
        if initial:
            if len(initial) != len(self._joints):
                raise ParameterError(
                    "initial_positions",
                    initial,
                    f"must have {len(self._joints)} values (one per joint of {self._joints})",
                )
            self._set_initial(initial)
        self.period = 1.0 / self._env.control_hz
        self._state_names = list(self._env.joint_keys)
        self.steps = 0
        self.dropped_steps = 0
        self.commands = 0
        self.ignored = 0
        self._subscribe(params.joint_states_topic)
        self._t0 = time.monotonic()
        self.create_timer(self.period, self._tick)
        self._publish()
        self.get_logger().info(
            f"robot {params.robot!r}: {len(self._joints)} commanded actuators, controllers "
            + "; ".join(f"{c.name} ({c.kind}) {c.joints} <- {c.topic}" for c in self._controllers)
            + f"; {len(self._state_names)} joints on {params.joint_states_topic} at "
            f"{self._env.control_hz:g} Hz"
        )

    def _load_robot(self, params: SimParams) -> None:
        """The MuJoCo scene with the robot, and its env at control_hz."""
        from robokernel_ros.envs import MujocoScene  # MuJoCo is imported only here

        self._scene = MujocoScene()
        try:
            self._scene.add_robot("robot", params.robot)
        except (ValueError, OSError) as exc:
            raise ParameterError("robot", params.robot, str(exc)) from exc
        try:
            self._env = self._scene.make_env("robot", control_hz=params.control_hz)
        except ValueError as exc:
            raise ParameterError("control_hz", params.control_hz, str(exc)) from exc

    def _resolve_controllers(self, params: SimParams) -> tuple[list[str], list[_Controller]]:
        """The commanded joints (in command order) and the controllers over them."""
        keys = list(self._env.env_spec.action_keys)
        joints = list(params.joints)
        specs = self._controller_specs(params)  # (name, kind, topic, joints); [] = defaults
        if specs:
            union = [j for _, _, _, cj in specs for j in cj]
            if joints and sorted(joints) != sorted(union):
                raise ParameterError(
                    "joints", joints, f"must be [] or the controllers' joints {union}"
                )
            joints = union
        else:
            joints = joints or keys
        unknown = [j for j in joints if j not in keys]
        if unknown or len(set(joints)) != len(joints):
            raise ParameterError(
                "controllers" if specs else "joints",
                joints,
                f"must be distinct actuator names of the robot, among {keys}",
            )
        if not specs:
            defaults = declare_params(self, DefaultControllerParams)
            specs = [
                ("forward_command", "forward_command", defaults.forward_command_topic, joints),
                ("joint_trajectory", "joint_trajectory", defaults.trajectory_topic, joints),
            ]
        index = {j: i for i, j in enumerate(joints)}
        controllers = [
            _Controller(name, kind, topic, list(cj), [index[j] for j in cj])
            for name, kind, topic, cj in specs
        ]
        return joints, controllers

    def _subscribe(self, joint_states_topic: str) -> None:
        """The joint state publisher and each controller's command subscription."""
        self._pub = self.create_publisher(JointState, joint_states_topic, JOINT_STATE_PUB_QOS)
        for c in self._controllers:
            if c.kind == "forward_command":
                self.create_subscription(
                    Float64MultiArray, c.topic, lambda m, c=c: self._on_forward(c, m), COMMAND_QOS
                )
            else:
                self.create_subscription(
                    JointTrajectory, c.topic, lambda m, c=c: self._on_trajectory(c, m), COMMAND_QOS
                )

    def _controller_specs(self, params: SimParams) -> list[tuple[str, str, str, list[str]]]:
        """The controllers named by `controllers` or `contract_file` ([]: the defaults)."""
        names, contract_file = list(params.controllers), params.contract_file
        if names and contract_file:
            raise ParameterError(
                "contract_file", contract_file, "give either controllers or contract_file"
            )
        if contract_file:
            from robokernel_ros.contract import ContractError, load_contract

            try:
                contract = load_contract(contract_file)
            except (ContractError, OSError) as exc:
                raise ParameterError("contract_file", contract_file, str(exc)) from None
            return [
                (getattr(c, "name", "") or f"command{i}", c.kind, c.topic, list(c.joints))
                for i, c in enumerate(contract.commands)
            ]
        if len(set(names)) != len(names) or not all(names):
            raise ParameterError("controllers", names, "must be distinct non-empty names")
        specs = []
        for name in names:
            controller = declare_params(self, ControllerParams, prefix=f"{name}.")
            kind, topic, cj = controller.kind, controller.topic, list(controller.joints)
            if not topic:
                raise ParameterError(f"{name}.topic", topic, "must be a topic name")
            if not cj:
                raise ParameterError(f"{name}.joints", cj, "must name the controller's joints")
            specs.append((name, kind, topic, cj))
        return specs

    def _set_initial(self, values: Sequence[float]) -> None:
        import mujoco

        scene = self._scene
        with scene.lock:
            model, data = scene.model, scene.data
            for joint, value in zip(self._joints, values, strict=True):
                a = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, f"robot/{joint}")
                j = model.actuator_trnid[a, 0]
                if model.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT:
                    data.qpos[model.jnt_qposadr[j]] = value
                data.ctrl[a] = value
            mujoco.mj_forward(model, data)
        self._targets = [float(v) for v in values]

    # -- commands --

    def _ignore(self, controller: _Controller, why: str) -> None:
        self.ignored += 1
        self.get_logger().error(
            f"{controller.name}: command ignored: {why}", throttle_duration_sec=1.0
        )

    def _on_forward(self, c: _Controller, msg: Float64MultiArray) -> None:
        data = list(msg.data)
        if len(data) != len(c.joints):
            self._ignore(c, f"{len(data)} values for {len(c.joints)} joints")
            return
        if not all(math.isfinite(v) for v in data):
            self._ignore(c, "non-finite value")
            return
        self.commands += 1
        self._cancel_trajectories(c)
        targets = list(self._targets)
        for i, value in zip(c.indices, data, strict=True):
            targets[i] = value
        self._targets = targets

    def _on_trajectory(self, c: _Controller, msg: JointTrajectory) -> None:
        if not all(self._position_servos[j] for j in c.joints):
            self._ignore(c, "joint trajectories need position actuators")
            return
        names = list(msg.joint_names)
        if sorted(names) != sorted(c.joints):
            self._ignore(c, f"joint_names {names} must name each of {c.joints} once")
            return
        order = [names.index(j) for j in c.joints]
        points: list[tuple[float, list[float]]] = []
        t_prev = 0.0
        for point in msg.points:
            t = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
            positions = list(point.positions)
            if len(positions) != len(names) or not all(math.isfinite(v) for v in positions):
                self._ignore(c, "a point with the wrong size or a non-finite position")
                return
            if t < t_prev:
                self._ignore(c, "time_from_start goes backwards")
                return
            points.append((t, [positions[k] for k in order]))
            t_prev = t
        self.commands += 1
        self._cancel_trajectories(c)
        if not points:
            observed = self._env.observe()["joint_positions"]
            targets = list(self._targets)
            for i, j in zip(c.indices, c.joints, strict=True):
                targets[i] = observed.get(j, targets[i])
            self._targets = targets
            return
        c.trajectory = (time.monotonic(), [self._targets[i] for i in c.indices], points)

    def _cancel_trajectories(self, c: _Controller) -> None:
        """A command to `c` ends every trajectory over its joints (its own included)."""
        for other in self._controllers:
            if other is c or not set(other.indices).isdisjoint(c.indices):
                other.trajectory = None

    def _sample_trajectory(self, c: _Controller, now: float) -> None:
        start_time, start, points = c.trajectory
        t = now - start_time
        t_prev, q_prev = 0.0, start
        values = list(points[-1][1])
        for t_point, q_point in points:
            if t < t_point:
                s = (t - t_prev) / (t_point - t_prev) if t_point > t_prev else 1.0
                values = [a + s * (b - a) for a, b in zip(q_prev, q_point, strict=True)]
                break
            t_prev, q_prev = t_point, q_point
        else:
            c.trajectory = None
        targets = list(self._targets)
        for i, value in zip(c.indices, values, strict=True):
            targets[i] = value
        self._targets = targets

    # -- physics on the wall clock --

    def _tick(self) -> None:
        now = time.monotonic()
        due = int((now - self._t0) / self.period) - self.steps - self.dropped_steps
        if due <= 0:
            return
        if due > self._max_catch_up:
            self.dropped_steps += due - self._max_catch_up
            self.get_logger().warning(
                f"physics fell behind the wall clock: {due - self._max_catch_up} control periods "
                f"dropped ({self.dropped_steps} in all)",
                throttle_duration_sec=1.0,
            )
            due = self._max_catch_up
        for _ in range(due):
            for c in self._controllers:
                if c.trajectory is not None:
                    self._sample_trajectory(c, now)
            result = self._env.step(dict(zip(self._joints, self._targets, strict=True)))
            self.steps += 1
        self._publish(result.observation)

    def _publish(self, observation: Any = None) -> None:
        if observation is None:
            observation = self._env.observe()
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.name = self._state_names
        positions, velocities = observation["joint_positions"], observation["joint_velocities"]
        msg.position = [positions[n] for n in self._state_names]
        msg.velocity = [velocities[n] for n in self._state_names]
        self._pub.publish(msg)


def main(args: Sequence[str] | None = None) -> int:
    return run_node(SimRobotNode, args=args)


if __name__ == "__main__":
    exit_main(main)
