"""A rosbag2 of topics as they were on the wire: what `ros2 bag record TOPIC...` writes.

    bag = TopicBag(Path("recorded/teleop-20261207-034501"), {"/joint_states":
                   "sensor_msgs/msg/JointState"}, storage="mcap")
    bag.write("/joint_states", received_ns, cdr_bytes)   # the message's own bytes
    bag.close()                                          # metadata.yaml: a complete bag

Each topic is one connection of its message type (definition from the recording
typestore, recording.types), each message its serialised CDR bytes as received, at its
receipt time (the log time, what `align: receive` reads; the header stamps stay inside
the messages, for `align: header`). `robokernel import-bag BAG --contract FILE` reads
it as it reads a bag of `ros2 bag record`. Written messages reach the file at least every
`flush_interval_s` (a recorder killed by SIGKILL leaves a bag that `robokernel recover`
completes). Nothing here imports ROS.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import StoragePlugin

from . import types as bag_types
from .bag_writer import BagWriter, flush_storage, message_definition
from .mirror import QOS_SENSOR, STORAGES


class TopicBag:
    """See the module docstring. `topics`: {topic: "pkg/msg/Type"}, every one a
    connection from the start (a topic that stays silent is in the bag with no message)."""

    def __init__(
        self,
        path: Path,
        topics: Mapping[str, str],
        *,
        storage: str = "mcap",
        flush_interval_s: float = 0.5,
    ) -> None:
        if storage not in STORAGES:
            raise ValueError(f"storage={storage!r}: must be one of {', '.join(STORAGES)}")
        store = bag_types.typestore()
        unknown = sorted(t for t in topics.values() if t not in store.fielddefs)
        if unknown:
            raise ValueError(f"message types the bag cannot describe: {unknown}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = BagWriter(self.path, version=9, storage_plugin=plugin)
        self._writer.open()
        self._connections: dict[str, Any] = {}
        for topic, msgtype in topics.items():
            msgdef, rihs01 = message_definition(msgtype)
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, msgdef=msgdef, rihs01=rihs01, offered_qos_profiles=[QOS_SENSOR]
            )
        self.counts: dict[str, int] = dict.fromkeys(topics, 0)
        self._flush_interval_s = float(flush_interval_s)
        self._last_flush = time.monotonic()
        self.closed = False

    def write(self, topic: str, timestamp_ns: int, data: bytes | memoryview) -> None:
        """One message of `topic`: its serialised bytes, logged at `timestamp_ns`."""
        if self.closed:
            return
        self._writer.write(self._connections[topic], int(timestamp_ns), data)
        self.counts[topic] += 1
        now = time.monotonic()
        if now - self._last_flush >= self._flush_interval_s:
            self._last_flush = now
            flush_storage(self._writer.storage)

    def close(self) -> None:
        """Finish the bag (metadata.yaml); later writes are dropped."""
        if not self.closed:
            self.closed = True
            self._writer.close()
