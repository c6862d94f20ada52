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

Thread model: the episode loop that calls `observe`/`step` takes the joint states and
camera frames itself. Its subscriptions are `DirectReader`s (ros/transport.py) on this
process's private link's rx node, which no executor spins: each `observe`/`step` takes
what has arrived since the last one, without waiting, so no executor's Python spin code
runs per joint-state message and competes with the loop for the GIL. Commands are
published by the loop thread itself on the owner's node (the runner's; its remaps
apply), and topic names are resolved against that node's namespace and remaps.

Pacing: one clock, `pacer` (kernel.timing.Pacer, absolute deadlines t0 + k/control_hz).
The kernel's wall-clock loop waits on it; `step` only guards it (`Pacer.guard`), so a
caller that does not pace (a replay, a fast-mode rollout) is still held to the robot's
rate, and a paced loop is not slept a second time. `control_priority` (0: normal) is the
pacer's: the kernel's wall-clock loop runs under SCHED_FIFO at it (kernel.scheduling).
`step` publishes the command before it takes the joint states and frames of the next
observation, so their take is not work between the tick and the command.

The node is lent by its owner (the runner); the environment only creates and destroys
its own readers and publisher. Nothing here is MuJoCo.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState

from robokernel_interfaces.msg import ShieldState
from robokernel_ros.kernel import Capabilities, EnvSpec, StepResult
from robokernel_ros.kernel.motion import step_toward
from robokernel_ros.kernel.scheduling import check_priority
from robokernel_ros.kernel.timing import Pacer
from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS, STATUS_READER_QOS
from robokernel_ros.ros.transport import (
    DirectReader,
    acquire_link,
    publisher_gids,
    release_link,
)
from robokernel_ros.ros.wire import image_from_msg, is_compressed_topic

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
        discovery_timeout_s: float = 15.0,
        reset_positions: Mapping[str, float] | None = None,
        reset_tolerance: float = 0.05,
        reset_timeout_s: float = 10.0,
        motion_limits: Mapping[str, tuple[float | None, float | None]] | None = None,
        reset_speed_scale: float = 0.5,
        requires_reset_confirmation: bool = False,
        pace: bool = True,
        control_priority: int = 0,
        shield_state_topic: str = "",
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
        unknown = sorted(set(motion_limits or {}) - set(joints))
        if unknown:
            raise ValueError(f"motion_limits names joints that are not in joints: {unknown}")
        if not (
            isinstance(discovery_timeout_s, int | float)
            and math.isfinite(discovery_timeout_s)
            and discovery_timeout_s >= 0
        ):
            raise ValueError(
                f"discovery_timeout_s={discovery_timeout_s!r}: must be a finite number >= 0"
            )
        if not (0.0 < reset_speed_scale <= 1.0):
            raise ValueError(f"reset_speed_scale={reset_speed_scale!r}: must be in (0, 1]")
        self.node = node
        self.joints = tuple(joints)
        self.controller = controller
        self.command_topic = command_topic
        self.shield_state_topic = shield_state_topic
        self.joint_states_topic = joint_states_topic
        self.control_hz = float(control_hz)
        self.state_timeout_s = float(state_timeout_s)
        self.discovery_timeout_s = float(discovery_timeout_s)
        self.reset_positions = dict(reset_positions or {})
        self.reset_tolerance = float(reset_tolerance)
        self.reset_timeout_s = float(reset_timeout_s)
        # Who may end a reset early (the rollout sets it while its reset runs: its stop,
        # cancel, deactivate, e-stop): called at each reset tick; a non-empty reason ends
        # the reset there, before its next command (RuntimeError naming it).
        self.reset_interrupt: Any = None
        self.motion_limits = dict(motion_limits or {})
        self.reset_speed_scale = float(reset_speed_scale)
        self.pace = bool(pace)
        self.pacer = Pacer(
            1.0 / self.control_hz, priority=check_priority("control_priority", control_priority)
        )
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
        self._take_lock = threading.Lock()  # one thread takes from the readers at a time
        self._positions: dict[str, float] = {}
        self._velocities: dict[str, float] = {}
        self._state_at: float | None = None  # monotonic time the last joint state was taken
        self._consumer_seen = False  # the command publisher has been matched once
        self._frames: dict[str, Any] = {}  # camera: the latest message, converted on observe
        self._images: dict[str, Any] = {}  # camera: the latest frame as an array
        self._target: dict[str, float] | None = None
        self._previous_target: dict[str, float] | None = None  # the command before _target
        self.commands_sent = 0
        self._link = acquire_link()
        rx = self._link.rx_node
        self._joint_reader = DirectReader(
            rx, JointState, node.resolve_topic_name(joint_states_topic), SENSOR_QOS
        )
        self._camera_readers = {
            name: DirectReader(
                rx,
                CompressedImage if is_compressed_topic(topic) else Image,
                node.resolve_topic_name(topic),
                SENSOR_QOS,
            )
            for name, topic in cameras.items()
        }
        self._shield_reader = (
            DirectReader(
                rx, ShieldState, node.resolve_topic_name(shield_state_topic), STATUS_READER_QOS
            )
            if shield_state_topic
            else None
        )
        for reader in (self._joint_reader, *self._camera_readers.values(), self._shield_reader):
            if reader is not None:
                self._link.readers.add(reader)  # closed with the link at shutdown
        if controller == "forward_command":
            from std_msgs.msg import Float64MultiArray

            self._pub = node.create_publisher(Float64MultiArray, command_topic, COMMAND_QOS)
        else:
            from trajectory_msgs.msg import JointTrajectory

            self._pub = node.create_publisher(JointTrajectory, command_topic, COMMAND_QOS)

    # readers -----------------------------------------------------------------------------------

    def _take(self, timeout_s: float = 0.0) -> None:
        """Take every joint state and frame that has arrived (waiting up to `timeout_s` for
        a joint state when none has): the calling thread's own rcl take, no executor."""
        if not self._take_lock.acquire(blocking=timeout_s > 0):
            return  # another thread is taking right now: what it takes is as fresh
        try:
            states = self._joint_reader.take(timeout_s)
            frames = {name: r.take(0.0) for name, r in self._camera_readers.items()}
        finally:
            self._take_lock.release()
        with self._lock:
            for msg in states:
                for i, name in enumerate(msg.name):
                    if i < len(msg.position):
                        self._positions[name] = float(msg.position[i])
                    if i < len(msg.velocity):
                        self._velocities[name] = float(msg.velocity[i])
            if states and all(j in self._positions for j in self.joints):
                self._state_at = time.monotonic()
            for name, msgs in frames.items():
                if msgs:
                    self._frames[name] = msgs[-1]

    def _convert_frames(self) -> None:
        """The latest frame of each camera as an array (a compressed one decoded here)."""
        with self._lock:
            fresh, self._frames = self._frames, {}
        for name, msg in fresh.items():
            try:
                image = image_from_msg(msg)
            except ValueError as exc:
                self.node.get_logger().warn(f"camera {name}: {exc}", throttle_duration_sec=5.0)
                continue
            # Read-only: the same frame, handed out until a newer one arrives, is then
            # recorded once by the kernel (and nobody can change it in place).
            image.flags.writeable = False
            with self._lock:
                self._images[name] = image

    # Environment --------------------------------------------------------------------------------

    def observe(self) -> dict[str, Any]:
        self._take()
        if self._camera_readers:
            self._convert_frames()
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

    def wait_for_consumer(self) -> None:
        """Return once commands published now reach their consumer, waiting up to
        discovery_timeout_s the first time; RuntimeError naming the topic otherwise.
        Commands are volatile: what is published before DDS has paired both ends is
        lost, and the episode would command a robot that does not move (full test runs
        saw 0.5-0.9 s of it, then the shield judging the first command that arrived as
        a jump from where the robot stood).

        The publisher's matched count says only that it found a reader, not that the
        reader found it (full test runs measured 0.7-0.9 s between the two). So with
        `shield_state_topic` the shield confirms: the pose the next command would start
        from (the last command, else the measured pose) is sent once a period until the
        shield's ~/state names this publisher as the sender of the last command it
        read. Without one (a controller with no shield) the match is all there is."""
        if self._consumer_seen:
            return
        deadline = time.monotonic() + self.discovery_timeout_s
        # rclpy has no wait for a match: poll the publisher's matched count
        while self._pub.get_subscription_count() == 0:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"no subscriber on {self.command_topic} within {self.discovery_timeout_s:g} s "
                    "(is the safety_shield or the controller running, on this ROS_DOMAIN_ID?)"
                )
            time.sleep(0.005)
        if self._shield_reader is not None:
            self._confirm_with_shield(deadline)
        self._consumer_seen = True

    def _confirm_with_shield(self, deadline: float) -> None:
        mine = publisher_gids(self.node, self.command_topic)
        pose = self.hold_action(None)  # fixed: a sagging measured pose would make a motion
        last_state = None
        # On the pacer's ticks: the command after the last one of these goes out a period
        # later (a restarted schedule starts no earlier), as the shield's rate guards expect.
        self.pacer.restart()
        while True:
            self.pacer.wait()
            self._publish(pose)
            # (a publisher appears in its own node's graph when created; asked again if not)
            mine = mine or publisher_gids(self.node, self.command_topic)
            next_tick = self.pacer.deadline() or time.monotonic()
            for state in self._shield_reader.take(
                max(0.0, min(next_tick, deadline) - time.monotonic())
            ):
                if state.command_sender in mine:
                    return
                last_state = state
            if time.monotonic() >= deadline:
                seen = (
                    f"its last state: {last_state.state}"
                    + (f" ({last_state.reason})" if last_state.reason else "")
                    + f", last sender {last_state.command_sender or 'none'}"
                    if last_state is not None
                    else "no state from it at all: is the safety_shield running, on this "
                    "ROS_DOMAIN_ID? shield_state_topic '' when a controller takes the commands"
                )
                raise RuntimeError(
                    f"the safety shield ({self.shield_state_topic}) did not confirm a command "
                    f"from this process on {self.command_topic} within "
                    f"{self.discovery_timeout_s:g} s ({seen})"
                )

    def wait_for_state(self) -> None:
        """Return once a joint state at most state_timeout_s old has been taken. Until the
        first one this env ever took, wait up to discovery_timeout_s: a robot that started
        after this process is discovered by DDS seconds later on a loaded machine (another
        node having heard it proves nothing about this reader's pairing); after that,
        state_timeout_s (a stream that stopped). RuntimeError naming the topic otherwise."""
        if self._state_at is None:
            timeout = max(self.state_timeout_s, self.discovery_timeout_s)
        else:
            timeout = self.state_timeout_s
        deadline = time.monotonic() + timeout
        self._take()
        while self.joint_state_age_s() > self.state_timeout_s:
            left = deadline - time.monotonic()
            if left <= 0:
                with self._lock:
                    seen = sorted(self._positions)
                missing = [j for j in self.joints if j not in seen]
                raise RuntimeError(
                    f"no joint state for {list(self.joints)} on {self.joint_states_topic} within {timeout:g} s"
                    + (f" (joints never seen: {missing})" if missing else " (the stream stopped)")
                )
            self._take(left)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Bring the robot to reset_positions (none: start where it is) and return the
        first observation. The command ramps from the last one sent (or the measured
        pose) to the reset pose within motion_limits x reset_speed_scale, braking from
        the speed it had, so the shield has nothing to clip; then it holds the pose
        until every joint is within reset_tolerance. A joint without motion limits
        gets the reset pose at once (the shield's rate guards then ramp it)."""
        self.wait_for_state()
        self.wait_for_consumer()
        if self.reset_positions:
            target = {j: self.reset_positions.get(j, self._positions[j]) for j in self.joints}
            deadline = time.monotonic() + self.reset_timeout_s
            self.pacer.restart()
            for command in self._ramp(target):
                self._wait_tick(deadline, target)
                self._publish(command)
            while True:
                self._take()
                with self._lock:
                    error = max(abs(self._positions[j] - target[j]) for j in self.joints)
                if error <= self.reset_tolerance:
                    break
                self._wait_tick(deadline, target, error)
                self._publish(target)
        else:
            with self._lock:
                self._target = {j: self._positions[j] for j in self.joints}
                self._previous_target = None
        # The episode's step 0 (its observation, first request and command) comes a
        # period after the reset's last command, where the next tick would have been.
        self.pacer.settle()
        self.pacer.restart()  # the episode's first command starts the schedule
        return self.observe()

    def _ramp(self, target: Mapping[str, float]) -> Iterator[dict[str, float]]:
        """The commands from the last one sent to `target`, one per control period."""
        with self._lock:
            last, before = self._target, self._previous_target
            command = dict(last or {j: self._positions[j] for j in self.joints})
        # the speed the command had: its last change (from rest without two commands)
        speed = {j: last[j] - before[j] if last and before else 0.0 for j in self.joints}
        period = 1.0 / self.control_hz
        scale = self.reset_speed_scale
        bounds = {}
        for j in self.joints:
            vmax, amax = self.motion_limits.get(j, (None, None))
            if vmax is not None:
                bounds[j] = (
                    vmax * scale * period,
                    None if amax is None else amax * scale * period * period,
                )
        while any(command[j] != target[j] or speed[j] for j in self.joints):
            for j in self.joints:
                if j not in bounds:
                    command[j], speed[j] = target[j], 0.0
                    continue
                max_step, max_accel = bounds[j]
                command[j], speed[j] = step_toward(
                    command[j], speed[j], target[j], max_step=max_step, max_accel=max_accel
                )
            yield dict(command)

    def _wait_tick(
        self, deadline: float, target: Mapping[str, float], error: float | None = None
    ) -> None:
        if time.monotonic() > deadline:
            if error is None:
                with self._lock:
                    error = max(abs(self._positions[j] - target[j]) for j in self.joints)
            raise RuntimeError(
                f"reset: the robot did not reach reset_positions within {self.reset_timeout_s:g} s "
                f"(largest error {error:.3f} > tolerance {self.reset_tolerance:g}); the commands "
                f"went out on {self.command_topic}: a safety shield holding them (its e-stop "
                "latched: see its ~/state) or a controller not following keeps the robot still"
            )
        self.pacer.wait()
        interrupt = self.reset_interrupt
        why = interrupt() if interrupt is not None else ""
        if why:
            raise RuntimeError(f"reset: ended by the operator's {why} before reset_positions")

    def step(self, action: Mapping[str, float]) -> StepResult:
        if self.pace:
            # Never faster than the robot's rate, whoever drives the loop: after the
            # kernel's wall clock waited on this pacer this returns at once.
            self.pacer.guard()
        # The command first, then the joint states and frames (observe takes them): their
        # take is not work between the tick and the command. The age is of the states taken
        # last (the previous step's observation), taken afresh before it ends the episode.
        age = self.joint_state_age_s()
        if age > self.state_timeout_s:
            self._take()
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
            self._previous_target = self._target
            self._target = dict(target)
            self.commands_sent += 1

    def close(self) -> None:
        readers = [self._joint_reader, *self._camera_readers.values(), self._shield_reader]
        self._camera_readers = {}
        for reader in readers:
            if reader is not None:
                reader.close()
        self.node.destroy_publisher(self._pub)
        if self._link is not None:
            self._link = None
            release_link()


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
