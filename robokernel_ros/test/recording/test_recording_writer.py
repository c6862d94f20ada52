"""BagWriter (recording.bag_writer) writes the very bytes rosbags' Writer writes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import publish_episode
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.recording import mirror as mirror_module
from robokernel_ros.recording.bag_writer import BagWriter, flush_storage, message_definition
from robokernel_ros.recording.mirror import QOS_RELIABLE, QOS_SENSOR, BagMirror
from rosbags.rosbag2 import Reader, StoragePlugin, Writer, WriterError
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

TOPICS = (("/a", "std_msgs/msg/String", QOS_RELIABLE), ("/b", "sensor_msgs/msg/JointState", QOS_SENSOR),
          ("/c", "std_msgs/msg/String", QOS_SENSOR))  # fmt: skip


def _calls(seed: int = 0) -> list[tuple[str, object]]:
    """A writer's calls: connections added on the way, messages of every size (past the 1 MiB
    chunk limit too, one larger than a chunk), timestamps out of order, bytes / bytearray /
    memoryview payloads, flushes (the mirror's mid-chunk close) and custom data."""
    rng = random.Random(seed)
    calls: list[tuple[str, object]] = [("connect", 0)]
    ts = 1_000_000_000
    for i in range(3000):
        if i in (10, 400):
            calls.append(("connect", 1 if i == 10 else 2))
        size = rng.choice((0, 1, 7, 60, 400, 1500, 9000)) if i != 1700 else 1_200_000
        payload = bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64 + 1)
        payload = payload[:size]
        kind = i % 3
        data = payload if kind == 0 else bytearray(payload) if kind == 1 else memoryview(payload)
        ts += rng.choice((0, 1, 20_000_000, -5_000_000))
        calls.append(("write", (rng.randrange(1 if i < 10 else 2 if i < 400 else 3), ts, data)))
        if i % 700 == 699:
            calls.append(("flush", None))
    calls.append(("custom", ("robokernel.events", "3000")))
    return calls


def _write(cls: type, bag: Path, calls: list, mode: CompressionMode = CompressionMode.NONE) -> None:
    writer = cls(bag, version=9, storage_plugin=StoragePlugin.MCAP)
    if mode != CompressionMode.NONE:
        writer.set_compression(mode, CompressionFormat.ZSTD)
    writer.open()
    conns = []
    for op, arg in calls:
        if op == "connect":
            topic, msgtype, qos = TOPICS[arg]
            msgdef, rihs01 = message_definition(msgtype)
            conns.append(writer.add_connection(topic, msgtype, msgdef=msgdef, rihs01=rihs01,
                                               offered_qos_profiles=[qos]))  # fmt: skip
        elif op == "write":
            index, ts, data = arg
            writer.write(conns[index], ts, data)
        elif op == "flush":
            flush_storage(writer.storage)
        else:
            writer.set_custom_data(*arg)
    writer.close()


def _files(bag: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(bag.iterdir())}


@pytest.mark.parametrize(
    "mode", [CompressionMode.NONE, CompressionMode.STORAGE, CompressionMode.MESSAGE]
)
def test_bag_writer_writes_rosbags_bytes(tmp_path, mode):
    calls = _calls()
    _write(Writer, tmp_path / "plain" / "bag", calls, mode)
    _write(BagWriter, tmp_path / "fast" / "bag", calls, mode)
    plain, fast = _files(tmp_path / "plain" / "bag"), _files(tmp_path / "fast" / "bag")
    assert list(fast) == list(plain) and len(plain) == 2  # bag.mcap(.zstd), metadata.yaml
    for name in plain:
        assert fast[name] == plain[name], name
    with Reader(tmp_path / "fast" / "bag") as reader:
        assert sum(c.msgcount for c in reader.connections) == 3000
        assert sum(1 for _ in reader.messages()) == 3000


def test_bag_writer_refuses_what_writer_refuses(tmp_path):
    one = BagWriter(tmp_path / "one", version=9, storage_plugin=StoragePlugin.MCAP)
    other = BagWriter(tmp_path / "other", version=9, storage_plugin=StoragePlugin.MCAP)
    one.open()
    other.open()
    msgdef, rihs01 = message_definition("std_msgs/msg/String")
    foreign = other.add_connection("/x", "std_msgs/msg/String", msgdef=msgdef, rihs01=rihs01)
    with pytest.raises(WriterError, match="unknown connection"):
        one.write(foreign, 1, b"\0\1\0\0\1\0\0\0\0\0\0\0")
    one.close()
    other.close()


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_mirror_bag_equals_the_plain_writers(tmp_path, monkeypatch, storage):
    """The mirror through BagWriter and the mirror through rosbags' Writer: the same files."""

    def record(root: Path) -> dict[str, bytes]:
        bus = EventBus()
        mirror = BagMirror(root / "bag", storage=storage, flush_interval_s=1e9)
        mirror.attach(bus)
        publish_episode(bus, "run-x", steps=300)
        mirror.close()
        return _files(root / "bag")

    fast = record(tmp_path / "fast")
    monkeypatch.setattr(mirror_module, "BagWriter", Writer)
    plain = record(tmp_path / "plain")
    assert list(fast) == list(plain)
    if storage == "mcap":
        assert fast == plain
    else:  # sqlite3 goes through Writer.write either way; the database file is not byte-stable
        assert fast["metadata.yaml"] == plain["metadata.yaml"]
