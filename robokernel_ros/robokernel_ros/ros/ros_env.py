"""The ROS robot environment: a kernel Environment over the state sources and cameras a
topic contract names, commanding each of the robot's controllers through a safety_shield
of its own.

    env = RosRobotEnv(node, RosEnvConfig.from_contract(contract, shields=["arm_shield",
                      "gripper_shield"], control_hz=50.0))
    env = RosRobotEnv(node, joints=["j1", "j2"], command_topic="/robokernel/safety_shield/commands")

The configuration is a `RosEnvConfig` (ros/env_config.py); keyword arguments instead are
its one-source, one-controller case (`RosEnvConfig.single`), today's runner parameters.

Observations have the MuJoCo environments' layout (`joint_positions`,
`joint_velocities` keyed by joint name, `images` keyed by camera name), so a policy
runs on either unchanged. Every sensor_msgs/JointState source fills the joint entries
(the joints each names, and every commanded joint must be reported by one); every other
state source (WrenchStamped, PoseStamped, Imu, Float64MultiArray, ...) is read by the
contract's field extraction into top-level numbers named by its stream names
(`ft.force.x`, `ee_pose.position.z`), as a task's `goal.<joint>` numbers are, so a
LeRobot binding and the export find them by name. Actions are absolute joint position
targets keyed by joint name (every controller's joints); `step` publishes one command
per controller (a `std_msgs/Float64MultiArray` in that controller's joint order for a
forward_command_controller, or a one-point `trajectory_msgs/JointTrajectory` for a
joint_trajectory_controller; ros/commands.py builds both) and returns at once with the
latest observation: on a real robot the kernel's realtime wall-clock mode paces the
loop. A joint that an action does not name keeps its last target. The shield on each
command topic has the last word; `shields` lists them.

Thread model: the episode loop that calls `observe`/`step` takes the state messages and
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
`step` publishes the commands before it takes the joint states and frames of the next
observation, so their take is not work between the tick and the commands.

The node is lent by its owner (the runner); the environment only creates and destroys
its own readers and publishers. Nothing here is MuJoCo.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rclpy.node import Node
from sensor_msgs.msg import JointState

from robokernel_interfaces.msg import ShieldState
from robokernel_ros.kernel import Capabilities, EnvSpec, StepResult
from robokernel_ros.kernel.motion import step_toward
from robokernel_ros.kernel.scheduling import check_priority
from robokernel_ros.kernel.timing import Pacer
from robokernel_ros.ros.commands import (
    CONTROLLERS,
    command_message,
    command_type,
    command_values,
)
from robokernel_ros.ros.env_config import (
    ControllerRoute,
    RosEnvConfig,
    ShieldRoute,
    StateSource,
    message_class,
)
from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS, STATUS_READER_QOS
from robokernel_ros.ros.transport import (
    DirectReader,
    acquire_link,
    publisher_gids,
    release_link,
)
from robokernel_ros.ros.wire import image_from_msg

__all__ = ["CONTROLLERS", "RosEnvConfig", "RosRobotEnv", "RosScene"]

#: An inherited speed that points away from the reset pose is braked at this share of the
#: joint's acceleration limit (the shield's own bound, with a margin for its float
#: comparison), whatever reset_speed_scale is: the shortest detour the shield passes.
BRAKE_SCALE = 0.9


@dataclass
class _Channel:
    """One controller as the env drives it: its route, publisher and shield reader, and
    (behind a shield) a reader of the controller's own topic, the shield's output."""

    route: ControllerRoute
    topic: str  # resolved
    publisher: Any
    shield_reader: DirectReader | None
    controller_reader: DirectReader | None = None
    # the controller's last two commands heard, oldest first: (positions, velocities, sent_at)
    heard: tuple[tuple[dict[str, float], dict[str, float] | None, float], ...] = ()


class RosRobotEnv:
    """A robot behind ros2_control (or the sim_robot node), seen as a kernel Environment."""

    def __init__(self, node: Node, config: RosEnvConfig | None = None, **single: Any) -> None:
        if config is None:
            config = RosEnvConfig.single(**single)
        elif single:
            raise TypeError(
                f"RosRobotEnv: give a config or keyword arguments, not both: {sorted(single)}"
            )
        for source in config.state:
            if not source.type:
                raise ValueError(
                    f"state source {source.topic}: its message type is not known (give `type` "
                    "in the contract, or resolve it on the graph first: ros.contract_live)"
                )
        self.node = node
        self.config = config
        self.joints = config.joints
        self.controller = config.controllers[0].kind
        self.command_topic = config.controllers[0].topic
        self.shield_state_topic = config.controllers[0].shield_state_topic
        self.joint_states_topic = next(s.topic for s in config.state if s.is_joint_state)
        self.control_hz = float(config.control_hz)
        self.state_timeout_s = float(config.state_timeout_s)
        self.discovery_timeout_s = float(config.discovery_timeout_s)
        self.reset_positions = dict(config.reset_positions)
        self.reset_tolerance = float(config.reset_tolerance)
        self.reset_timeout_s = float(config.reset_timeout_s)
        # Who may end a reset early (the rollout sets it while its reset runs: its stop,
        # cancel, deactivate, e-stop): called at each reset tick; a non-empty reason ends
        # the reset there, before its next command (RuntimeError naming it).
        self.reset_interrupt: Any = None
        self.motion_limits = dict(config.motion_limits)
        self.reset_speed_scale = float(config.reset_speed_scale)
        self.pace = bool(config.pace)
        self.pacer = Pacer(
            1.0 / self.control_hz,
            priority=check_priority("control_priority", config.control_priority),
        )
        cameras = dict(config.cameras)
        self.env_spec = EnvSpec(
            action_keys=self.joints,
            control="absolute",
            control_hz=self.control_hz,
            action_limits=dict(config.action_limits),
            capabilities=Capabilities(
                images=bool(cameras),
                requires_reset_confirmation=bool(config.requires_reset_confirmation),
            ),
        )
        # The joints observed: every JointState source's names, then the commanded joints.
        observed = [j for s in config.state if s.is_joint_state for j in s.names]
        self._observed = tuple(dict.fromkeys([*observed, *self.joints]))
        self._lock = threading.Lock()
        self._take_lock = threading.Lock()  # one thread takes from the readers at a time
        self._positions: dict[str, float] = {}
        self._velocities: dict[str, float] = {}
        self._state_at: float | None = None  # monotonic time the last joint state was taken
        self._consumer_seen = False  # every command publisher has been matched once
        self._frames: dict[str, Any] = {}  # camera: the latest message, converted on observe
        self._images: dict[str, Any] = {}  # camera: the latest frame as an array
        self._values: dict[str, float] = {}  # the other state sources' numbers, by name
        self._target: dict[str, float] | None = None
        self._previous_target: dict[str, float] | None = None  # the command before _target
        self._published_at = -math.inf  # monotonic time just before the last _publish
        self.commands_sent = 0
        self._link = acquire_link()
        rx = self._link.rx_node
        resolve = node.resolve_topic_name
        joint_topics = dict.fromkeys(resolve(s.topic) for s in config.state if s.is_joint_state)
        self._joint_readers = [DirectReader(rx, JointState, t, SENSOR_QOS) for t in joint_topics]
        self._source_readers: list[tuple[StateSource, tuple[str, ...], DirectReader]] = []
        for source in config.state:
            if source.is_joint_state:
                continue
            from robokernel_ros.contract import stream_names

            stream = replace(source.stream, type=source.type)
            names = stream_names(stream)
            self._source_readers.append(
                (
                    replace(source, stream=stream),
                    names,
                    DirectReader(rx, message_class(source.type), resolve(source.topic), SENSOR_QOS),
                )
            )
        self._camera_readers = {
            name: DirectReader(rx, message_class(type_name), resolve(topic), SENSOR_QOS)
            for name, (topic, type_name) in cameras.items()
        }
        self._channels: list[_Channel] = []
        for route in config.controllers:
            shield_reader = (
                DirectReader(rx, ShieldState, resolve(route.shield_state_topic), STATUS_READER_QOS)
                if route.shield_state_topic
                else None
            )
            # What the controller receives (the shield's forwards, clips and holds), read
            # at each reset; only behind a shield whose output the contract names (the
            # runner's parameters without a contract name only the shield's input).
            output = resolve(route.controller_topic) if route.controller_topic else ""
            controller_reader = (
                DirectReader(rx, command_type(route.kind), output, COMMAND_QOS)
                if route.shield is not None and output and output != resolve(route.topic)
                else None
            )
            self._channels.append(
                _Channel(
                    route,
                    resolve(route.topic),
                    node.create_publisher(command_type(route.kind), route.topic, COMMAND_QOS),
                    shield_reader,
                    controller_reader,
                )
            )
        for reader in self._readers():
            self._link.readers.add(reader)  # closed with the link at shutdown
        self._pub = self._channels[0].publisher  # the first controller's (tests ask its match)

    def _readers(self) -> list[DirectReader]:
        return [
            *self._joint_readers,
            *(r for _, _, r in self._source_readers),
            *self._camera_readers.values(),
            *(c.shield_reader for c in self._channels if c.shield_reader is not None),
            *(c.controller_reader for c in self._channels if c.controller_reader is not None),
        ]

    @property
    def shields(self) -> tuple[ShieldRoute, ...]:
        """The safety_shield nodes this env commands through, one per controller that has
        one (contract `commands` order), their names resolved against the owner's
        namespace: input topic, `~/state`, `~/clear_fault`."""
        resolve = self.node.resolve_topic_name
        out = []
        for c in self.config.controllers:
            if c.shield is None:
                continue
            s = c.shield
            out.append(
                ShieldRoute(
                    resolve(s.name) if s.name else "",
                    resolve(s.input_topic),
                    resolve(s.state_topic),
                    resolve(s.clear_fault_service) if s.clear_fault_service else "",
                )
            )
        return tuple(out)

    # readers -----------------------------------------------------------------------------------

    def _take(self, timeout_s: float = 0.0) -> None:
        """Take every joint state, state message and frame that has arrived (waiting up to
        `timeout_s` for a joint state when none has): the calling thread's own rcl take,
        no executor."""
        if not self._take_lock.acquire(blocking=timeout_s > 0):
            return  # another thread is taking right now: what it takes is as fresh
        try:
            first, *others = self._joint_readers
            states = first.take(timeout_s)
            for reader in others:
                states += reader.take(0.0)
            sources = [(s, names, r.take(0.0)) for s, names, r in self._source_readers]
            frames = {name: r.take(0.0) for name, r in self._camera_readers.items()}
        finally:
            self._take_lock.release()
        values = self._source_values(sources)
        with self._lock:
            for msg in states:
                for i, name in enumerate(msg.name):
                    if i < len(msg.position):
                        self._positions[name] = float(msg.position[i])
                    if i < len(msg.velocity):
                        self._velocities[name] = float(msg.velocity[i])
            if states and all(j in self._positions for j in self._observed):
                self._state_at = time.monotonic()
            self._values.update(values)
            for name, msgs in frames.items():
                if msgs:
                    self._frames[name] = msgs[-1]

    def _source_values(
        self, sources: list[tuple[StateSource, tuple[str, ...], list[Any]]]
    ) -> dict[str, float]:
        """The latest message of each other state source, as numbers by name."""
        from robokernel_ros.contract import extract

        values: dict[str, float] = {}
        for source, names, msgs in sources:
            if not msgs:
                continue
            try:
                vector = extract(source.stream, msgs[-1])
            except ValueError as exc:
                self.node.get_logger().warning(
                    f"state {source.topic}: {exc}", throttle_duration_sec=5.0
                )
                continue
            values.update(zip(names, (float(v) for v in vector), strict=False))
        return values

    def _convert_frames(self) -> None:
        """The latest frame of each camera as an array (a compressed one decoded here)."""
        with self._lock:
            fresh, self._frames = self._frames, {}
        for name, msg in fresh.items():
            try:
                image = image_from_msg(msg)
            except ValueError as exc:
                self.node.get_logger().warning(f"camera {name}: {exc}", throttle_duration_sec=5.0)
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
                    j: self._positions[j] for j in self._observed if j in self._positions
                },
                "joint_velocities": {j: self._velocities.get(j, 0.0) for j in self._observed},
            }
            if self._values:
                obs.update(self._values)
            if self._target is not None:
                obs["actuator_targets"] = dict(self._target)
            if self.env_spec.capabilities.images:
                obs["images"] = dict(self._images)
        return obs

    def joint_state_age_s(self) -> float:
        at = self._state_at
        return math.inf if at is None else time.monotonic() - at

    def connect(self) -> None:
        """Return once a fresh joint state is in (`wait_for_state`) and commands published
        now reach every controller's consumer (`wait_for_consumer`); `reset` starts here.
        RuntimeError naming the topic otherwise."""
        self.wait_for_state()
        self.wait_for_consumer()

    def wait_for_consumer(self) -> None:
        """Return once commands published now reach every controller's consumer, waiting
        up to discovery_timeout_s the first time; RuntimeError naming the topic otherwise.
        Commands are volatile: what is published before DDS has paired both ends is
        lost, and the episode would command a robot that does not move, then the shield
        would judge the first command that arrives as a jump from where the robot stood.

        The publisher's matched count says only that it found a reader, not that the
        reader found it. So a controller behind a shield is confirmed by that shield: the pose the next
        command would start from (the last command, else the measured pose) is sent to
        every controller once a period until each shield's ~/state names this
        publisher as the sender of the last command it read. Without a shield (a
        controller takes the commands) the match is all there is."""
        if self._consumer_seen:
            return
        deadline = time.monotonic() + self.discovery_timeout_s
        for channel in self._channels:
            # rclpy has no wait for a match: poll the publisher's matched count
            while channel.publisher.get_subscription_count() == 0:
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"no subscriber on {channel.topic} within {self.discovery_timeout_s:g} s "
                        "(is the safety_shield or the controller running, on this ROS_DOMAIN_ID?)"
                    )
                time.sleep(0.005)
        if any(c.shield_reader is not None for c in self._channels):
            self._confirm_with_shields(deadline)
        self._consumer_seen = True

    def _confirm_with_shields(self, deadline: float) -> None:
        waiting = {id(c): c for c in self._channels if c.shield_reader is not None}
        mine: dict[int, set[str]] = {k: set() for k in waiting}
        last_state: dict[int, Any] = {}
        pose = self.hold_action(None)  # fixed: a sagging measured pose would make a motion
        # On the pacer's ticks: the command after the last one of these goes out a period
        # later (a restarted schedule starts no earlier), as the shield's rate guards expect.
        self.pacer.restart()
        while True:
            self.pacer.wait()
            self._publish(pose)
            next_tick = self.pacer.deadline() or time.monotonic()
            for key, channel in list(waiting.items()):
                # (a publisher appears in its own node's graph when created; asked again if not)
                mine[key] = mine[key] or publisher_gids(self.node, channel.route.topic)
                wait_s = max(0.0, min(next_tick, deadline) - time.monotonic())
                for state in channel.shield_reader.take(wait_s if len(waiting) == 1 else 0.0):
                    if state.command_sender in mine[key]:
                        del waiting[key]
                        break
                    last_state[key] = state
            if not waiting:
                return
            if time.monotonic() >= deadline:
                channel = next(iter(waiting.values()))
                last = last_state.get(id(channel))
                seen = (
                    f"its last state: {last.state}"
                    + (f" ({last.reason})" if last.reason else "")
                    + f", last sender {last.command_sender or 'none'}"
                    if last is not None
                    else "no state from it at all: is the safety_shield running, on this "
                    "ROS_DOMAIN_ID? shield_state_topic '' when a controller takes the commands"
                )
                raise RuntimeError(
                    f"the safety shield ({channel.route.shield_state_topic}) did not confirm a "
                    f"command from this process on {channel.route.topic} within "
                    f"{self.discovery_timeout_s:g} s ({seen})"
                )

    def wait_for_state(self) -> None:
        """Return once a joint state at most state_timeout_s old has been taken for every
        observed joint (and a first message of every other state source). Until the
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
        while self.joint_state_age_s() > self.state_timeout_s or self._sources_missing():
            left = deadline - time.monotonic()
            if left <= 0:
                with self._lock:
                    seen = sorted(self._positions)
                missing = [j for j in self._observed if j not in seen]
                if self.joint_state_age_s() <= self.state_timeout_s:
                    raise RuntimeError(
                        f"no message on the state source(s) {self._sources_missing()} within "
                        f"{timeout:g} s (is the sensor publishing, on this ROS_DOMAIN_ID?)"
                    )
                topics = ", ".join(s.topic for s in self.config.state if s.is_joint_state)
                raise RuntimeError(
                    f"no joint state for {list(self._observed)} on {topics} within {timeout:g} s"
                    + (f" (joints never seen: {missing})" if missing else " (the stream stopped)")
                )
            self._take(left)

    def _sources_missing(self) -> list[str]:
        """The topics of the other state sources that have sent nothing yet."""
        with self._lock:
            have = set(self._values)
        return [s.topic for s, names, _ in self._source_readers if not set(names) <= have]

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Bring the robot to reset_positions (none: start where it is) and return the
        first observation. The command ramps from the last one each controller received
        (`_ramp_start`) to the reset pose within motion_limits x reset_speed_scale,
        braking from the speed it had (within the joint's own limits where that speed
        points away from the pose), so the shield has nothing to clip; then it holds the
        pose until every joint is within reset_tolerance. A joint without motion limits
        gets the reset pose at once (the shield's rate guards then ramp it)."""
        self.connect()
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

    def _ramp_start(self) -> tuple[dict[str, float], dict[str, float]]:
        """Where the reset's ramp starts, by joint: (the command each controller last
        received, the speed it had: its last change per period), which is what the
        shield judges the ramp's first command against.

        Behind a shield whose output topic is read (`controller_reader`), that is the
        last command the shield sent the controller, when it was sent after this env's
        last command (its forward, clip or hold of it, or a later hold: the watchdog's,
        at the robot's measured, sagging pose, once the robot stood idle longer than
        the shield's command_timeout_s). Its speed is the change from the command the
        controller received before it (a trajectory's: its point's velocities), zero for
        the shield's own hold (the shield's rate guards take every hold as at rest). Otherwise (no such reader; nothing heard yet, e.g. before DDS matched
        the reader; or the forward of this env's last command still in flight) it is
        this env's own last command and its last change (at rest without two), as
        before the reader existed: the shield forwards those unchanged. (The sent times
        are the DDS source stamps on this host's clock: a shield on another machine
        needs the clocks synchronised well within command_timeout_s.)"""
        with self._lock:
            last, before = self._target, self._previous_target
            published_at = self._published_at
            command = dict(last or {j: self._positions[j] for j in self.joints})
        speed = {j: last[j] - before[j] if last and before else 0.0 for j in self.joints}
        period = 1.0 / self.control_hz
        for channel in self._channels:
            reader = channel.controller_reader
            if reader is None:
                continue
            heard = list(channel.heard)
            for msg, sent in reader.take_sent(0.0):
                values = command_values(channel.route.kind, channel.route.joints, msg)
                if values is not None:
                    heard = [*heard[-1:], (*values, sent)]
            channel.heard = tuple(heard)
            if not heard or heard[-1][2] < published_at:
                continue  # not heard, or this env's last command not forwarded yet: its own
            positions, velocities, _ = heard[-1]
            # The shield answers each command with one message (forward, clip or refusal
            # hold); a second one sent after this env's last command is the shield's own
            # hold (watchdog, e-stop), which its rate guards take as at rest.
            own_hold = len(heard) == 2 and heard[0][2] >= published_at
            previous = heard[0][0] if len(heard) == 2 and not own_hold else positions
            for j in channel.route.joints:
                command[j] = positions[j]
                speed[j] = (
                    velocities[j] * period
                    if velocities is not None and not own_hold
                    else positions[j] - previous[j]
                )
        return command, speed

    def _ramp(self, target: Mapping[str, float]) -> Iterator[dict[str, float]]:
        """The commands from where `_ramp_start` says to `target`, one per control period."""
        command, speed = self._ramp_start()
        period = 1.0 / self.control_hz
        scale = self.reset_speed_scale
        bounds = {}
        for j in self.joints:
            vmax, amax = self.motion_limits.get(j, (None, None))
            if vmax is not None:
                accel = None if amax is None else amax * period * period
                bounds[j] = (
                    vmax * scale * period,
                    None if accel is None else accel * scale,
                    None if accel is None else accel * max(scale, BRAKE_SCALE),
                )
        while any(command[j] != target[j] or speed[j] for j in self.joints):
            for j in self.joints:
                if j not in bounds:
                    command[j], speed[j] = target[j], 0.0
                    continue
                max_step, max_accel, max_brake = bounds[j]
                if speed[j] * (target[j] - command[j]) < 0:
                    max_accel = max_brake  # moving away from the pose: brake, within the limits
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
            topics = ", ".join(c.topic for c in self._channels)
            raise RuntimeError(
                f"reset: the robot did not reach reset_positions within {self.reset_timeout_s:g} s "
                f"(largest error {error:.3f} > tolerance {self.reset_tolerance:g}); the commands "
                f"went out on {topics}: a safety shield holding them (its e-stop "
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
        # The commands first, then the joint states and frames (observe takes them): their
        # take is not work between the tick and the commands. The age is of the states taken
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

    def set_reset_interrupt(self, check: Any) -> None:
        """Who may end a reset early: `check()` is asked after each reset tick, and a
        non-empty reason ends the reset there (RuntimeError naming it); None: nobody. A
        method, so that a wrapper of this env (ros.checked_env) passes it on."""
        self.reset_interrupt = check

    def hold_action(self, last: Mapping[str, float] | None) -> dict[str, float]:
        with self._lock:
            if self._target is not None:
                return dict(self._target)
            return {j: self._positions[j] for j in self.joints if j in self._positions}

    def _publish(self, target: Mapping[str, float]) -> None:
        """One command per controller, each of its own joints' targets."""
        period = 1.0 / self.control_hz
        published_at = time.monotonic()
        for channel in self._channels:
            joints = channel.route.joints
            channel.publisher.publish(
                command_message(
                    channel.route.kind, joints, [float(target[j]) for j in joints], period
                )
            )
        with self._lock:
            self._previous_target = self._target
            self._target = dict(target)
            self._published_at = published_at
            self.commands_sent += 1

    def close(self) -> None:
        readers = self._readers()
        self._camera_readers = {}
        for reader in readers:
            reader.close()
        for channel in self._channels:
            self.node.destroy_publisher(channel.publisher)
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
