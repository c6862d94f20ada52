"""bag_recorder: records the live runner's kernel events to bags in the mirror's layout.

Subscribes to `<namespace>/events` (robokernel_interfaces/msg/KernelEvent, reliable,
depth 1000) and writes each episode to `<trace_dir>/<run_id>/bag` through the same
BagMirror the in-process runner uses, so the topics derived from events
(joint_states, action, action_chunk, shield/intervention, operator) are identical.
Camera frames are not in the events stream and are not recorded by this node.

Parameters: namespace (string, "/robokernel"), trace_dir (string, "runs"),
storage (string, "mcap" | "sqlite3").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from robokernel_interfaces.msg import KernelEvent

    from ..bag.mirror import STORAGES, EpisodeBagMirror
    from ..kernel.events import Event

    class BagRecorder(Node):
        def __init__(self) -> None:
            super().__init__("bag_recorder")
            ns = self.declare_parameter(
                "namespace",
                "/robokernel",
                ParameterDescriptor(description="the runner's namespace"),
            ).value
            trace_dir = self.declare_parameter(
                "trace_dir",
                "runs",
                ParameterDescriptor(description="bags go to <trace_dir>/<run_id>/bag"),
            ).value
            storage = self.declare_parameter(
                "storage", "mcap", ParameterDescriptor(description="mcap or sqlite3")
            ).value
            if storage not in STORAGES:
                raise ValueError(f"storage={storage!r}: must be one of {', '.join(STORAGES)}")
            if not isinstance(ns, str) or not ns.startswith("/"):
                raise ValueError(
                    f"namespace={ns!r}: must be an absolute namespace like '/robokernel'"
                )
            self.sink = EpisodeBagMirror(Path(trace_dir), storage=storage)
            qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
            self.create_subscription(KernelEvent, f"{ns.rstrip('/')}/events", self._on_event, qos)
            self.get_logger().info(f"recording {ns}/events to {trace_dir}/<run_id>/bag ({storage})")

        def _on_event(self, msg: KernelEvent) -> None:
            try:
                record = json.loads(msg.data_json)
            except json.JSONDecodeError:
                self.get_logger().warning(f"event seq {msg.seq}: data_json is not JSON; skipped")
                return
            data = record.get("data", record) if isinstance(record, dict) else {}
            t = (
                float(record.get("t", msg.stamp.sec + msg.stamp.nanosec * 1e-9))
                if isinstance(record, dict)
                else 0.0
            )
            wall = float(record.get("wall", 0.0)) if isinstance(record, dict) else 0.0
            self.sink(Event(msg.kind, int(msg.step), data, t, wall, int(msg.seq), msg.run_id))

    rclpy.init(args=argv)
    node = None
    try:
        node = BagRecorder()
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        if node is not None:
            node.sink.close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
