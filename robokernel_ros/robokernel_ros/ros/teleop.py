"""The contract's teleop stream as the kernel's TeleopSource: what drives the robot while
the operator corrects a policy (the runner's `correct`, docs/operator_ros.md).

    source = RosTeleopSource(node, contract.teleop)
    source.teleop_action(observation)   # {joint: target} from the newest message, or None

The episode loop calls `teleop_action` once per correcting step, on its own thread: it
takes what arrived on the contract's `teleop.topic` since the last call (a DirectReader on
the process's private link, no executor in between) and answers the newest message's
entries (`contract.extract`: `teleop.names`, action names) or None when there is no
fresh command, so the loop holds: no message yet, the newest one older than
`teleop.stale_s` (judged by when it reached this process), or one that lacks a named
joint (said in the log, throttled).

An actuated leader (`teleop.command`, a Float64MultiArray in the names' order) is driven
to the follower's pose before it drives the follower: at the first correcting step of a
takeover (a correcting step that does not follow one) the source publishes the
follower's observed positions there and answers None (the robot holds) until the
leader reports them within `align_tolerance` of every joint; it keeps commanding the
leader meanwhile. A leader that has not arrived after `align_timeout_s` is said in the
log once and the robot keeps holding (fail closed: the follower never jumps to a leader
that is elsewhere). Without `teleop.command` the leader is passive: the kernel's
handover limiter slides the follower to it within the shield's limits.

The node is lent by its owner (the runner), as for RosRobotEnv: the source creates and
destroys only its own reader and publisher.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from std_msgs.msg import Float64MultiArray

from robokernel_ros.contract import FieldError, extract, stream_names
from robokernel_ros.kernel.observation import observed_joint_positions
from robokernel_ros.ros.env_config import message_class
from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS
from robokernel_ros.ros.transport import DirectReader, acquire_link, release_link

#: how close (rad, or the joint's unit) an actuated leader must come to the follower
ALIGN_TOLERANCE = 0.05
#: how long the runner drives an actuated leader before it says the leader does not follow
ALIGN_TIMEOUT_S = 5.0


class RosTeleopSource:
    """See the module docstring. `teleop`: the contract's `Teleop` (its type known)."""

    def __init__(
        self,
        node: Any,
        teleop: Any,
        *,
        align_tolerance: float = ALIGN_TOLERANCE,
        align_timeout_s: float = ALIGN_TIMEOUT_S,
    ) -> None:
        stream = teleop.stream
        if not stream.type:
            raise ValueError(f"teleop.type: the type of {stream.topic} is not known")
        self.node = node
        self.teleop = teleop
        self.stream = stream
        self.names = stream_names(stream)
        self.topic = node.resolve_topic_name(stream.topic)
        self.name = f"teleop {self.topic}"
        self.stale_s = float(teleop.stale_s)
        self.align_tolerance = float(align_tolerance)
        self.align_timeout_s = float(align_timeout_s)
        self._lock = threading.Lock()
        self._latest: tuple[Any, float] | None = None  # (message, received at, monotonic)
        self._step: int | None = None  # the step observe() saw last
        self._last_call_step: int | None = None  # the step of the last teleop_action
        self._last_call_at = -1e9
        self._aligning_since: float | None = None  # an actuated leader being driven
        self._align_reported = False
        self.alignments = 0  # takeovers that drove the actuated leader first
        self.aligned = 0  # of which the leader arrived
        self._link = acquire_link()
        self._reader = DirectReader(
            self._link.rx_node, message_class(stream.type), self.topic, SENSOR_QOS
        )
        self._link.readers.add(self._reader)
        self._command_pub = (
            node.create_publisher(Float64MultiArray, teleop.command, COMMAND_QOS)
            if teleop.command
            else None
        )
        self.command_topic = node.resolve_topic_name(teleop.command) if teleop.command else None
        self._closed = False

    # the kernel's TeleopSource -------------------------------------------------------------

    def reset(self, *, seed: int | None = None) -> None:
        """A new episode: its first correcting step starts a takeover."""
        with self._lock:
            self._step = None
            self._last_call_step = None
            self._aligning_since = None

    def observe(self, step: int, observation: Mapping[str, Any]) -> None:
        """The loop's step number (a takeover starts at a correcting step that does not
        follow one)."""
        self._step = int(step)

    def teleop_action(self, observation: Mapping[str, Any]) -> dict[str, float] | None:
        """The newest fresh command by action name, or None (the loop holds)."""
        if self._closed:
            return None
        now = time.monotonic()
        with self._lock:
            starts = self._takeover_starts(now)
            self._last_call_step, self._last_call_at = self._step, now
        action = self._newest(now)
        if self._command_pub is None:
            return action
        if starts:
            self._aligning_since, self._align_reported = now, False
            self.alignments += 1
        if self._aligning_since is None:
            return action
        # An actuated leader: driven to the follower until it is there.
        follower = observed_joint_positions(observation)
        target = [follower.get(n) for n in self.names]
        if any(v is None for v in target):
            return None  # the follower's pose is not known: nothing to drive the leader to
        self._command_pub.publish(Float64MultiArray(data=[float(v) for v in target]))
        if action is not None and all(
            abs(action[n] - v) <= self.align_tolerance
            for n, v in zip(self.names, target, strict=True)
        ):
            self._aligning_since = None
            self.aligned += 1
            return action
        if not self._align_reported and now - self._aligning_since > self.align_timeout_s:
            self._align_reported = True
            self.node.get_logger().warning(
                f"teleop: the leader on {self.topic} has not reached the follower's pose "
                f"within {self.align_tolerance:g} after {self.align_timeout_s:g} s of commands "
                f"on {self.command_topic}; the robot holds until it does"
            )
        return None

    def _takeover_starts(self, now: float) -> bool:
        """Whether this correcting step starts a takeover: it does not follow the last one
        (by the loop's step when observe() gives it, else by time: a gap of 0.5 s)."""
        if self._step is not None and self._last_call_step is not None:
            return self._step != self._last_call_step + 1
        if self._step is not None:
            return True
        return now - self._last_call_at > 0.5

    def _newest(self, now: float) -> dict[str, float] | None:
        taken = self._reader.take_received(0.0)
        if taken:
            self._latest = taken[-1]
        if self._latest is None:
            return None
        msg, received = self._latest
        if now - received > self.stale_s:
            return None
        try:
            values = extract(self.stream, msg)
        except FieldError as exc:
            self.node.get_logger().warning(f"teleop: {exc}", throttle_duration_sec=5.0)
            return None
        return {n: float(v) for n, v in zip(self.names, values, strict=True)}

    # status --------------------------------------------------------------------------------

    def publisher_count(self) -> int:
        """Publishers matched with the teleop stream's reader."""
        return self._reader.publisher_count()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        if self._command_pub is not None:
            self.node.destroy_publisher(self._command_pub)
        release_link()
