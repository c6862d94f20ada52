"""The safety shield's e-stop input on the graph, and its latch file.

    estop = EstopInput(node, rx_node, "estop", on_wake=..., on_incompatible=...)
    for pressed, received in estop.take(): circuit.sample(pressed, received, ...)
    latch = LatchFile("/var/run/shield.latch")   # or LatchFile(None): no file

`EstopInput` takes the samples of the e-stop topic (std_msgs/Bool, true = pressed) from a
`DirectReader` on `rx_node`, a node of the same context that no executor spins, each with
its reception time: a stall of the shield's executor is then not a silent source. The
executor's subscription of the same topic only wakes the shield (`on_wake`) for a new
sample, counts the publishers and reports a publisher whose QoS it cannot match (best
effort, volatile): such a publisher is never heard, and `incompatible_text` says so.
The decision itself is `safety.estop.EstopCircuit`'s.

`LatchFile` keeps a latch across restarts: written when the circuit latches, removed when
the fault is cleared; a shield that starts while it exists comes up latched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy, qos_policy_name_from_kind
from std_msgs.msg import Bool

from robokernel_ros.ros.qos import ESTOP_QOS, ESTOP_READER_QOS
from robokernel_ros.ros.transport import DirectReader


class EstopInput:
    """The e-stop topic `topic` (relative names in `node`'s namespace) read for `node`."""

    def __init__(
        self,
        node: Node,
        rx_node: Node,
        topic: str,
        on_wake: Callable[[], None],
        on_incompatible: Callable[[], None],
    ) -> None:
        self._node = node
        self._on_incompatible_cb = on_incompatible
        #: the resolved topic name (the circuit's reasons name it)
        self.topic = node.resolve_topic_name(topic)
        #: e-stop publishers seen with a QoS this subscription cannot match
        self.incompatible = 0
        self.incompatible_text = ""
        self._reader = DirectReader(rx_node, Bool, self.topic, ESTOP_READER_QOS)
        self._sub = node.create_subscription(
            Bool,
            topic,
            lambda _msg: on_wake(),
            ESTOP_QOS,
            event_callbacks=SubscriptionEventCallbacks(incompatible_qos=self._on_incompatible),
        )

    def take(self) -> list[tuple[bool, float]]:
        """Every sample waiting, in order: (pressed, reception time, monotonic seconds)."""
        return [(bool(msg.data), received) for msg, received in self._reader.take_received(0.0)]

    def publisher_count(self) -> int:
        return self._sub.get_publisher_count()

    def publishers_text(self, incompatible: bool = False) -> str:
        """The e-stop publishers' node names (only those this subscription cannot match
        when `incompatible`). A node discovered a moment ago may still be unnamed."""
        infos = self._node.get_publishers_info_by_topic(self._sub.topic_name)
        if incompatible:
            infos = [
                i
                for i in infos
                if i.qos_profile.reliability != ReliabilityPolicy.RELIABLE
                or i.qos_profile.durability != DurabilityPolicy.TRANSIENT_LOCAL
            ]
        names = [f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in infos]
        return ", ".join(sorted(names)) or "none"

    def _on_incompatible(self, info: QoSRequestedIncompatibleQoSInfo) -> None:
        """A publisher offers a QoS this subscription cannot match: it is never heard.
        Logged with the publishers' names where known, then the owner is told."""
        self.incompatible = int(info.total_count)
        policy = qos_policy_name_from_kind(info.last_policy_kind)
        self.incompatible_text = (
            f"an e-stop publisher with an incompatible QoS ({policy}) is not heard; the "
            "e-stop topic is reliable + transient_local depth 1"
        )
        self._node.get_logger().error(
            f"{self._sub.topic_name}: {self.incompatible_text} "
            f"(publishers: {self.publishers_text(incompatible=True)})"
        )
        self._on_incompatible_cb()

    def close(self) -> None:
        """Close the reader (the subscription goes with the node)."""
        self._reader.close()


class LatchFile:
    """The e-stop latch kept in a file across restarts (`path` None: not kept)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None

    def latched_at_start(self) -> str:
        """'latch_file <path>' when the file exists (an earlier latch never cleared)."""
        if self.path is not None and self.path.exists():
            return f"latch_file {self.path}"
        return ""

    def write(self, by: str) -> None:
        """Keep the latch (OSError when the file cannot be written)."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(f"e-stop latched by {by}\n")

    def clear(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
