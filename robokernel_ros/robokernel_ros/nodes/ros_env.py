"""The ROS robot environment: a kernel Environment over `/joint_states`, camera topics and
the command topic the safety_shield guards.

    env = RosRobotEnv(node, joints=["j1", "j2"], command_topic="/robokernel/shield/commands",
                      control_hz=50.0)

Observations have the MuJoCo environments' layout (`joint_positions`,
`joint_velocities` keyed by joint name, `images` keyed by camera name), so a policy
runs on either unchanged. Actions are absolute joint position targets keyed by joint
name; `step` publishes one command (a `std_msgs/Float64MultiArray` in `joints` order for
a forward_command_controller, or a one-point `trajectory_msgs/JointTrajectory` for a
joint_trajectory_controller) and returns at once with the latest observation: on a real
robot the kernel's realtime wall-clock mode paces the loop. A joint that an action does
not name keeps its last target. The shield on the command topic has the last word.

The node is lent by its owner (the runner), which spins it; the environment only
creates and destroys its own subscriptions and publisher. Nothing here is MuJoCo.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState

from robokernel_ros.kernel import Capabilities, EnvSpec, StepResult
from robokernel_ros.nodes._common import COMMAND_QOS, SENSOR_QOS
from robokernel_ros.policies.remote import image_from_msg, is_compressed_topic

CONTROLLERS = ("forward_command", "joint_trajectory")


class RosRobotEnv:
    """A robot behind ros2_control (or the sim_robot node), seen as a kernel Environment."""

    def __init__(
        self,
        node: Node,
        *,
        joints: Sequence[str],
        command_topic: str,
        controller: str = "forward_command",
        joint_states_topic: str = "/joint_states",
        camera_topics: Mapping[str, str] | None = None,
        control_hz: float = 50.0,
        action_limits: Mapping[str, tuple[float, float]] | None = None,
        state_timeout_s: float = 2.0,
        reset_positions: Mapping[str, float] | None = None,
        reset_tolerance: float = 0.05,
        reset_timeout_s: float = 10.0,
        requires_reset_confirmation: bool = False,
        pace: bool = True,
    ) -> None:
        joints = list(joints)
        if not joints or not all(isinstance(j, str) and j for j in joints):
            raise ValueError(f"joints={joints!r}: must be a non-empty list of joint names")
        if len(set(joints)) != len(joints):
            raise ValueError(f"joints={joints!r}: names must be unique")
        if controller not in CONTROLLERS:
            raise ValueError(f"controller={controller!r}: must be one of {list(CONTROLLERS)}")
        if not (
            isinstance(control_hz, int | float) and math.isfinite(control_hz) and control_hz > 0
        ):
            raise ValueError(f"control_hz={control_hz!r}: must be a positive finite number")
        unknown = sorted(set(reset_positions or {}) - set(joints))
        if unknown:
            raise ValueError(f"reset_positions names joints that are not in joints: {unknown}")
        self.node = node
        self.joints = tuple(joints)
        self.controller = controller
        self.command_topic = command_topic
        self.joint_states_topic = joint_states_topic
        self.control_hz = float(control_hz)
        self.state_timeout_s = float(state_timeout_s)
        self.reset_positions = dict(reset_positions or {})
        self.reset_tolerance = float(reset_tolerance)
        self.reset_timeout_s = float(reset_timeout_s)
        self.pace = bool(pace)
        self._last_step: float | None = None
        cameras = dict(camera_topics or {})
        self.env_spec = EnvSpec(
            action_keys=self.joints,
            control="absolute",
            control_hz=self.control_hz,
            action_limits=dict(action_limits or {}),
            capabilities=Capabilities(
                images=bool(cameras), requires_reset_confirmation=bool(requires_reset_confirmation)
            ),
        )
        self._lock = threading.Lock()
        self._state_event = threading.Event()
        self._positions: dict[str, float] = {}
        self._velocities: dict[str, float] = {}
        self._state_at: float | None = None  # monotonic receipt time of the last joint state
        self._images: dict[str, Any] = {}
        self._target: dict[str, float] | None = None
        self.commands_sent = 0
        group = ReentrantCallbackGroup()
        self._subs = [
            node.create_subscription(
                JointState,
                joint_states_topic,
                self._on_joint_state,
                SENSOR_QOS,
                callback_group=group,
            )
        ]
        for name, topic in cameras.items():
            self._subs.append(
                node.create_subscription(
                    CompressedImage if is_compressed_topic(topic) else Image,
                    topic,
                    lambda msg, n=name: self._on_image(n, msg),
                    SENSOR_QOS,
                    callback_group=group,
                )
            )
        if controller == "forward_command":
            from std_msgs.msg import Float64MultiArray

            self._pub = node.create_publisher(Float64MultiArray, command_topic, COMMAND_QOS)
        else:
            from trajectory_msgs.msg import JointTrajectory

            self._pub = node.create_publisher(JointTrajectory, command_topic, COMMAND_QOS)

    # subscriptions ---------------------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        with self._lock:
            for i, name in enumerate(msg.name):
                if i < len(msg.position):
                    self._positions[name] = float(msg.position[i])
                if i < len(msg.velocity):
                    self._velocities[name] = float(msg.velocity[i])
            if all(j in self._positions for j in self.joints):
                self._state_at = time.monotonic()
                self._state_event.set()

    def _on_image(self, name: str, msg: Image | CompressedImage) -> None:
        try:
            image = image_from_msg(msg)  # a compressed frame is decoded here
        except ValueError as exc:
            self.node.get_logger().warn(f"camera {name}: {exc}", throttle_duration_sec=5.0)
            return
        with self._lock:
            self._images[name] = image

    # Environment --------------------------------------------------------------------------------

    def observe(self) -> dict[str, Any]:
        with self._lock:
            obs: dict[str, Any] = {
                "joint_positions": {
                    j: self._positions[j] for j in self.joints if j in self._positions
                },
                "joint_velocities": {j: self._velocities.get(j, 0.0) for j in self.joints},
            }
            if self._target is not None:
                obs["actuator_targets"] = dict(self._target)
            if self.env_spec.capabilities.images:
                obs["images"] = dict(self._images)
        return obs

    def joint_state_age_s(self) -> float:
        at = self._state_at
        return math.inf if at is None else time.monotonic() - at

    def wait_for_state(self, timeout_s: float | None = None) -> None:
        timeout = self.state_timeout_s if timeout_s is None else timeout_s
        if not self._state_event.wait(timeout) or self.joint_state_age_s() > timeout:
            with self._lock:
                seen = sorted(self._positions)
            missing = [j for j in self.joints if j not in seen]
            raise RuntimeError(
                f"no joint state for {list(self.joints)} on {self.joint_states_topic} within {timeout:g} s"
                + (f" (joints never seen: {missing})" if missing else " (the stream stopped)")
            )

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        self.wait_for_state()
        if self.reset_positions:
            target = {j: self.reset_positions.get(j, self._positions[j]) for j in self.joints}
            deadline = time.monotonic() + self.reset_timeout_s
            period = 1.0 / self.control_hz
            while True:
                self._publish(target)
                self._last_step = time.monotonic()  # the first step keeps a period after it
                with self._lock:
                    error = max(abs(self._positions[j] - target[j]) for j in self.joints)
                if error <= self.reset_tolerance:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"reset: the robot did not reach reset_positions within {self.reset_timeout_s:g} s "
                        f"(largest error {error:.3f} > tolerance {self.reset_tolerance:g})"
                    )
                time.sleep(period)
        else:
            with self._lock:
                self._target = {j: self._positions[j] for j in self.joints}
        return self.observe()

    def step(self, action: Mapping[str, float]) -> StepResult:
        if self.pace:
            # At least one control period between two commands, whoever paces the loop:
            # a loop already ticking at control_hz waits ~0 here, an unpaced one is held
            # to the robot's rate (a real robot's time cannot run faster).
            now = time.monotonic()
            if self._last_step is not None:
                wait = self._last_step + 1.0 / self.control_hz - now
                if wait > 0:
                    time.sleep(wait)
            self._last_step = time.monotonic()
        age = self.joint_state_age_s()
        if age > self.state_timeout_s:
            raise RuntimeError(
                f"joint states on {self.joint_states_topic} are {age:.2f} s old "
                f"(state_timeout_s={self.state_timeout_s:g}): the robot is not reporting"
            )
        with self._lock:
            base = self._target or {j: self._positions[j] for j in self.joints}
            target = {j: float(action[j]) if j in action else base[j] for j in self.joints}
        self._publish(target)
        return StepResult(observation=self.observe(), info={"joint_state_age_s": age})

    def hold_action(self, last: Mapping[str, float] | None) -> dict[str, float]:
        with self._lock:
            if self._target is not None:
                return dict(self._target)
            return {j: self._positions[j] for j in self.joints if j in self._positions}

    def _publish(self, target: Mapping[str, float]) -> None:
        values = [float(target[j]) for j in self.joints]
        if self.controller == "forward_command":
            from std_msgs.msg import Float64MultiArray

            msg = Float64MultiArray(data=values)
        else:
            from builtin_interfaces.msg import Duration
            from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

            period = 1.0 / self.control_hz
            msg = JointTrajectory(joint_names=list(self.joints))
            msg.points = [
                JointTrajectoryPoint(
                    positions=values,
                    time_from_start=Duration(sec=int(period), nanosec=int((period % 1.0) * 1e9)),
                )
            ]
        self._pub.publish(msg)
        with self._lock:
            self._target = dict(target)
            self.commands_sent += 1

    def close(self) -> None:
        for sub in self._subs:
            self.node.destroy_subscription(sub)
        self._subs = []
        self.node.destroy_publisher(self._pub)


class RosScene:
    """The scene protocol the rollout API's PolicyRunner drives, over one ROS robot.

    It names one robot whose action keys and joints are the robot's joints; `make_env`
    hands out the RosRobotEnv (its control rate is the robot's: a rollout asking for
    another rate is refused). There is nothing to render: video is refused.
    """

    def __init__(self, name: str, env: RosRobotEnv) -> None:
        self.name = name
        self.env = env
        self.mutation_guard: Any = None

    def set_mutation_guard(self, guard: Any) -> None:
        """The workcell's guard (a ROS robot has no scene mutations to refuse)."""
        self.mutation_guard = guard

    def robots(self) -> list[str]:
        return [self.name]

    def _check(self, robot: Any) -> None:
        if robot != self.name:
            raise ValueError(f"robot_name={robot!r}: this ROS workcell drives only {self.name!r}")

    def make_env(self, robot: Any, control_hz: float | None = None) -> RosRobotEnv:
        self._check(robot)
        if control_hz is not None and abs(float(control_hz) - self.env.control_hz) > 1e-9:
            raise ValueError(
                f"control_frequency={control_hz!r}: the ROS robot {self.name!r} runs at "
                f"{self.env.control_hz:g} Hz (the runner's control_frequency parameter)"
            )
        return self.env

    def robot_joint_names(self, robot: str) -> list[str]:
        self._check(robot)
        return list(self.env.joints)

    def robot_action_keys(self, robot: str) -> list[str]:
        self._check(robot)
        return list(self.env.joints)

    def cameras(self) -> list[str]:
        return sorted(self.env.observe().get("images", {}))

    def close(self) -> None:
        """The environment's subscriptions and publisher belong to the runner's node: kept."""

    def render(self, camera: Any = None, width: int = 0, height: int = 0) -> Any:
        raise ValueError(
            "video: a ROS workcell has no renderer (record its camera topics with the bag)"
        )
