"""The simulated operator over ROS: rollout.takeover's SimulatedOperator (the scripted
expert and the TubeRule) playing a leader arm and a pedal for a runner it only reaches
through topics (nodes/sim_operator.py is its node; docs/operator_ros.md).

    loop = SimOperatorLoop(node, contract, expert_agent, TubeRule(radius=0.15))
    loop.tick()            # at the contract's fps: the expert's command on teleop.topic,
                           # the rule's decision on takeover.topic

What it reads: the follower's joint states (the contract's first JointState state
source) and the runner's events (`<ns>/events`, KernelEvent): `episode.start` resets the
expert and the rule, the episode's first `action` starts the ticks (the runner's reset
is over: the robot is the policy's from there; a takeover during the reset would start
from a robot that the reset still moves), `episode.end` ends them, and
`intervention.start|mode|end` say the runner's mode. What it publishes: at every tick of an episode the expert's command
as a sensor_msgs/JointState of `teleop.names` on `teleop.topic` (a joint the expert does
not command stays where the follower is), and each decision of the rule on
`takeover.topic`: a std_msgs/Bool pedal (true = correct, false = resume; a decision the
pedal already stands at is pressed again, released and pressed, as a person would) or
a sensor_msgs/Joy press of the `correct` / `resume` button (down, then up). A decision
also sets the mode it asked for at once (the runner's events confirm or correct it), so
the rule is not asked twice while the call travels.

The runner hears the pedal as from a person: it takes over only while an episode runs,
and the same shield gates the commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sensor_msgs.msg import Joy
from std_msgs.msg import Bool

from robokernel_ros.kernel.operator import AUTONOMOUS, CORRECTING
from robokernel_ros.ros.qos import EVENTS_QOS, SENSOR_QOS
from robokernel_ros.ros.takeover import TAKEOVER_QOS

_JOINT_STATE = "sensor_msgs/msg/JointState"


class PedalOperator:
    """The rollout.takeover OperatorCalls of a runner reached through its takeover topic:
    `mode` as the runner's events say (or as last asked), correct()/resume() pressed on
    the pedal or joystick. Each call answers "" (sent: the runner's answer is its
    events); correct() is refused while no reader (the runner's) has matched the topic."""

    def __init__(self, node: Any, takeover: Any) -> None:
        self.takeover = takeover
        self.is_joy = takeover.type.endswith("/Joy")
        self._pub = node.create_publisher(
            Joy if self.is_joy else Bool, takeover.topic, TAKEOVER_QOS
        )
        self.mode = AUTONOMOUS
        self._level: bool | None = None  # the pedal's last published state
        self.sent: list[str] = []  # the calls pressed, in order

    @property
    def publisher(self) -> Any:
        return self._pub

    def correct(self, by: str = "") -> str:
        if self._pub.get_subscription_count() < 1:
            # a press before the runner's reader has matched this publisher is lost (the
            # topic is volatile): refused, so the rule decides again at the next tick
            return f"correct refused: {self._pub.topic_name} has no reader matched yet"
        self._press("correct")
        self.mode = CORRECTING
        return ""

    def resume(self, by: str = "") -> str:
        self._press("resume")
        self.mode = AUTONOMOUS
        return ""

    def _press(self, verb: str) -> None:
        self.sent.append(verb)
        if self.is_joy:
            index = self.takeover.buttons[verb]
            down = [0] * (index + 1)
            down[index] = 1
            self._pub.publish(Joy(buttons=down))
            self._pub.publish(Joy(buttons=[0] * (index + 1)))
            return
        want = verb == "correct"
        if self._level == want:  # the pedal stands there: released and pressed again
            self._pub.publish(Bool(data=not want))
        self._pub.publish(Bool(data=want))
        self._level = want

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        """The runner's mode from its events."""
        if kind in ("intervention.start", "intervention.mode"):
            self.mode = str(data.get("mode", self.mode))
        elif kind in ("intervention.end", "episode.start", "episode.end"):
            self.mode = AUTONOMOUS


class SimOperatorLoop:
    """See the module docstring. `operator`: a rollout.takeover.SimulatedOperator whose
    `operator` this loop sets to its PedalOperator."""

    def __init__(
        self, node: Any, contract: Any, operator: Any, *, events_topic: str = "events"
    ) -> None:
        from sensor_msgs.msg import JointState

        from robokernel_interfaces.msg import KernelEvent

        teleop, takeover = contract.teleop, contract.takeover
        if teleop is None or takeover is None:
            raise ValueError(
                "the contract names no teleop: and takeover: channels (where the simulated "
                "operator plays the leader and presses the pedal)"
            )
        if teleop.stream.type != _JOINT_STATE:
            raise ValueError(
                f"teleop.type: {teleop.stream.type} (the simulated leader publishes {_JOINT_STATE})"
            )
        state = next((s for s in contract.state if s.type == _JOINT_STATE), None)
        if state is None:
            raise ValueError(
                f"state: no {_JOINT_STATE} source (the follower's joints the rule reads)"
            )
        self.node = node
        self.names = tuple(teleop.stream.names)
        self.sim = operator
        self.pedal = PedalOperator(node, takeover)
        operator.attach(self.pedal)
        self.active = False  # an episode runs: its first step ran, it has not ended
        self._starting = False  # episode.start seen, its first step not yet (the reset)
        self.step = 0
        self.episodes = 0
        self.positions: dict[str, float] = {}
        self._leader_pub = node.create_publisher(JointState, teleop.stream.topic, SENSOR_QOS)
        self._msg_type = JointState
        node.create_subscription(JointState, state.topic, self._on_joint_state, SENSOR_QOS)
        node.create_subscription(KernelEvent, events_topic, self._on_event, EVENTS_QOS)

    @property
    def leader_publisher(self) -> Any:
        return self._leader_pub

    def _on_joint_state(self, msg: Any) -> None:
        for name, value in zip(msg.name, msg.position, strict=False):
            self.positions[str(name)] = float(value)

    def _on_event(self, msg: Any) -> None:
        import json

        kind = msg.kind
        if kind == "action" and self._starting:
            # the episode's first step ran: the reset is over, the robot is the policy's
            self._starting, self.active = False, True
            return
        if kind not in ("episode.start", "episode.end") and not kind.startswith("intervention."):
            return
        try:
            data = json.loads(msg.data_json or "{}")
        except ValueError:
            data = {}
        self.pedal.on_event(kind, data)
        if kind == "episode.start":
            self.sim.reset(seed=None)
            self.active, self._starting, self.step = False, True, 0
            self.episodes += 1
        elif kind == "episode.end":
            self.active = self._starting = False

    def tick(self) -> None:
        """One step: the expert's command for the follower's pose on the leader's topic,
        and the rule's decision on the pedal (only while an episode runs)."""
        if not self.active or not self.positions:
            return
        observation = {"joint_positions": dict(self.positions)}
        self.sim.observe(self.step, observation)
        self.step += 1
        leader = self.sim.teleop_action(observation)
        if leader is None:
            return
        position = [float(leader.get(n, self.positions.get(n, 0.0))) for n in self.names]
        msg = self._msg_type(name=list(self.names), position=position)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self._leader_pub.publish(msg)
