"""Record the topics a contract names to one rosbag2, as `ros2 bag record` would: for a
teleop session on machines without `ros2 bag` (the bag_recorder node's `contract_file`).

    recorder = ContractRecorder(node, contract, Path("recorded/teleop-1"), storage="mcap")
    ...                                     # the node's executor delivers the messages
    recorder.close()                        # metadata.yaml: a complete bag

The topics: every state, action and image stream of the contract, each command's topic
(a controller's input: what it was told) and the episode marker topic. A stream without
a `type` gets the one the graph shows (waiting up to `discovery_s`; refused naming the
topic otherwise). Each topic is subscribed raw (the serialised bytes, no deserialisation)
with best-effort QoS of depth 100 (it matches reliable and best-effort publishers) and
written at its receipt time by recording.topic_bag; `robokernel import-bag BAG --contract
FILE` makes run directories of the result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rclpy.qos import QoSProfile

from robokernel_ros.contract import ContractError
from robokernel_ros.recording.topic_bag import TopicBag
from robokernel_ros.ros.contract_live import graph_types
from robokernel_ros.ros.env_config import full_type_name, message_class
from robokernel_ros.ros.qos import SENSOR_QOS

#: best effort (matches every publisher), deep enough for a short stall of the recorder
RECORD_QOS = QoSProfile(
    history=SENSOR_QOS.history,
    depth=100,
    reliability=SENSOR_QOS.reliability,
    durability=SENSOR_QOS.durability,
)
COMMAND_TYPES = {
    "forward_command": "std_msgs/msg/Float64MultiArray",
    "joint_trajectory": "trajectory_msgs/msg/JointTrajectory",
}


def contract_topics(contract: Any) -> dict[str, str]:
    """{topic: type or ''} of every topic the contract names (see the module docstring)."""
    topics: dict[str, str] = {}
    for _, stream in contract.streams():
        topics.setdefault(stream.topic, full_type_name(stream.type or ""))
        if not topics[stream.topic] and stream.type:
            topics[stream.topic] = full_type_name(stream.type)
    for command in contract.commands:
        topics.setdefault(command.topic, COMMAND_TYPES[command.kind])
    return topics


class ContractRecorder:
    """See the module docstring."""

    def __init__(
        self,
        node: Any,
        contract: Any,
        path: Path,
        *,
        storage: str = "mcap",
        flush_interval_s: float = 0.5,
        discovery_s: float = 10.0,
    ) -> None:
        topics = contract_topics(contract)
        untyped = [t for t, kind in topics.items() if not kind]
        if untyped:
            found = graph_types(node, untyped, discovery_s)
            missing = [t for t in untyped if t not in found]
            if missing:
                raise ContractError(
                    contract.origin,
                    [
                        f"topic {t}: no type in the contract and not on the graph within "
                        f"{discovery_s:g} s (give `type`, or start its publisher first)"
                        for t in missing
                    ],
                )
            topics.update({t: full_type_name(found[t]) for t in untyped})
        classes = {t: message_class(kind) for t, kind in topics.items()}  # installed here?
        self.topics = topics
        self.bag = TopicBag(path, topics, storage=storage, flush_interval_s=flush_interval_s)
        self._node = node
        self._subscriptions = [
            node.create_subscription(
                classes[topic],
                topic,
                lambda data, info, topic=topic: self._on_message(topic, data, info),
                RECORD_QOS,
                raw=True,
            )
            for topic in topics
        ]

    def _on_message(self, topic: str, data: bytes, info: Any) -> None:
        received = int(info["received_timestamp"] or info["source_timestamp"])
        self.bag.write(topic, received, data)

    def close(self) -> None:
        """Stop recording and finish the bag."""
        for subscription in self._subscriptions:
            self._node.destroy_subscription(subscription)
        self._subscriptions = []
        self.bag.close()
