"""Reading mirrored bags: raw messages, decoded messages, and the trace (`load_bag_trace`).

A complete bag (metadata.yaml written at close) is read with rosbags' Reader. A bag
whose writer was killed has no metadata.yaml; its storage file is then scanned
record by record (MCAP: every complete chunk; sqlite3: every committed row) and the
result is marked `truncated`. `robokernel_ros.recording.recover` reports and repairs such bags.
"""

from __future__ import annotations

import io
import json
import logging
import sqlite3
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..kernel.events import OBSERVATION, Event
from ..kernel.trace import EVENTS_FILE, Trace, meta_from_events
from . import cdr
from . import types as T
from .mirror import BAG_DIR, DEFAULT_PREFIX, META_KEY, camera_topic

_log = logging.getLogger(__name__)

METADATA_FILE = "metadata.yaml"


@dataclass(frozen=True, slots=True)
class RawMessage:
    topic: str
    msgtype: str
    timestamp: int  # log time, ns (the episode clock)
    data: bytes | memoryview


@dataclass
class BagInfo:
    path: Path  # the bag folder
    storage: str  # "mcap" | "sqlite3"
    storage_file: Path
    complete: bool  # metadata.yaml present and (MCAP) the file ends with its end magic
    custom_data: dict[str, str] = field(default_factory=dict)


def _storage_file(folder: Path) -> Path | None:
    for pattern in ("*.mcap", "*.db3"):
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    return None


def is_bag(path: str | Path) -> bool:
    """A rosbag2 folder (metadata.yaml, or an .mcap/.db3 file left by a killed writer)."""
    p = Path(path)
    if p.is_file():
        return p.suffix in (".mcap", ".db3")
    if not p.is_dir():
        return False
    return (p / METADATA_FILE).is_file() or _storage_file(p) is not None


def bag_info(path: str | Path) -> BagInfo:
    """Resolve a bag folder (or its storage file, or a run directory holding bag/)."""
    p = Path(path)
    if p.is_dir() and not is_bag(p) and is_bag(p / BAG_DIR):
        p = p / BAG_DIR
    if p.is_file():
        p = p.parent
    if not is_bag(p):
        raise ValueError(
            f"path={str(path)!r}: not a rosbag2 folder (no metadata.yaml, .mcap or .db3)"
        )
    meta_path = p / METADATA_FILE
    custom: dict[str, str] = {}
    complete = meta_path.is_file()
    if complete:
        info = (yaml.safe_load(meta_path.read_text()) or {}).get("rosbag2_bagfile_information", {})
        custom = dict(info.get("custom_data") or {})
        storage = str(info.get("storage_identifier", "mcap"))
        files = info.get("relative_file_paths") or []
        storage_file = p / Path(files[0]).name if files else _storage_file(p)
    else:
        storage_file = _storage_file(p)
        storage = (
            "sqlite3" if storage_file is not None and storage_file.suffix == ".db3" else "mcap"
        )
    if storage_file is None or not storage_file.exists():
        raise ValueError(f"path={str(path)!r}: the bag's storage file is missing")
    if complete and storage == "mcap" and not _mcap_whole(storage_file):
        complete = False  # metadata.yaml kept but the file was cut: read it record by record
    return BagInfo(
        path=p, storage=storage, storage_file=storage_file, complete=complete, custom_data=custom
    )


def iter_raw(path: str | Path, topics: Iterable[str] | None = None) -> Iterator[RawMessage]:
    """Every message of the bag (only `topics` when given), in log-time order.

    Complete bags go through rosbags' Reader; bags left by a killed writer are
    scanned directly (see `scan_storage`).
    """
    info = bag_info(path)
    wanted = None if topics is None else set(topics)
    if not info.complete:
        for msg in scan_storage(info)[0]:
            if wanted is None or msg.topic in wanted:
                yield msg
        return
    from rosbags.rosbag2 import Reader

    with Reader(info.path) as reader:
        conns = [c for c in reader.connections if wanted is None or c.topic in wanted]
        if not conns:
            return
        for conn, timestamp, data in reader.messages(connections=conns):
            yield RawMessage(conn.topic, conn.msgtype, timestamp, data)


def scan_storage(info: BagInfo) -> tuple[list[RawMessage], dict[str, Any]]:
    """Read what a killed writer left: (messages, details).

    MCAP: records are read in file order until the first incomplete one; every complete
    chunk's messages are returned. sqlite3: every committed row. `details` says where
    the readable part ends and why reading stopped.
    """
    if info.storage == "sqlite3":
        return _scan_sqlite(info.storage_file)
    return _scan_mcap(info.storage_file)


_MCAP_MAGIC = b"\x89MCAP0\r\n"


def _mcap_whole(file: Path) -> bool:
    """The MCAP file ends with its end magic (a writer that closed it; not cut short)."""
    size = file.stat().st_size
    if size < 2 * len(_MCAP_MAGIC):
        return False
    with open(file, "rb") as f:
        f.seek(size - len(_MCAP_MAGIC))
        return f.read() == _MCAP_MAGIC


def _mcap_records(buf: memoryview) -> Iterator[tuple[int, memoryview, int]]:
    """(opcode, body, end offset) of every complete record in `buf`; stops at the first cut one."""
    pos, size = 0, len(buf)
    while pos + 9 <= size:
        opcode, length = struct.unpack_from("<BQ", buf, pos)
        end = pos + 9 + length
        if end > size:
            return
        yield opcode, buf[pos + 9 : end], end
        pos = end


def _chunk_records(body: memoryview, whole: bool) -> tuple[memoryview, str, int]:
    """(records section, compression, its offset in `body`) of a Chunk record's body.

    `whole`: the record is complete.
    A cut chunk yields the part of its records section that is in the file (uncompressed
    or zstd: a zstd stream decodes up to where it was cut; lz4 is not salvaged).
    """
    (clen,) = struct.unpack_from("<I", body, 28)
    compression = bytes(body[32 : 32 + clen]).decode()
    start = 32 + clen + 8
    data = body[start:]
    if whole:
        (rlen,) = struct.unpack_from("<Q", body, 32 + clen)
        data = body[start : start + rlen]
    if compression == "":
        return data, compression, start
    if compression == "zstd":
        import zstandard

        obj = zstandard.ZstdDecompressor().decompressobj()
        try:
            return memoryview(obj.decompress(bytes(data))), compression, start
        except zstandard.ZstdError:
            return memoryview(b""), compression, start
    if compression == "lz4" and whole:
        import lz4.frame

        return memoryview(lz4.frame.decompress(bytes(data))), compression, start
    return memoryview(b""), compression, start


def _scan_mcap(file: Path) -> tuple[list[RawMessage], dict[str, Any]]:
    """Every message in a complete record of the MCAP file, read record by record.

    A chunk cut by the end of the file gives the messages it holds completely (the
    writer appends records to the chunk in order, so its readable part is a prefix).
    """
    from mcap.data_stream import ReadDataStream
    from mcap.opcode import Opcode
    from mcap.records import Channel, Schema

    def read(cls: Any, body: memoryview) -> Any:
        return cls.read(ReadDataStream(io.BytesIO(body)))

    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str]] = {}
    messages: list[RawMessage] = []

    def inner(opcode: int, body: memoryview) -> None:
        if opcode == Opcode.SCHEMA:
            schema = read(Schema, body)
            schemas[schema.id] = schema.name
        elif opcode == Opcode.CHANNEL:
            channel = read(Channel, body)
            channels[channel.id] = (channel.topic, schemas.get(channel.schema_id, ""))
        elif opcode == Opcode.MESSAGE and len(body) >= 22:
            channel_id, _, log_time = struct.unpack_from("<HIQ", body, 0)
            topic, msgtype = channels.get(channel_id, ("", ""))
            if topic:
                messages.append(RawMessage(topic, msgtype, log_time, bytes(body[22:])))

    buf = memoryview(file.read_bytes())
    size = len(buf)
    if bytes(buf[:8]) != _MCAP_MAGIC:
        return [], {"file_bytes": size, "stopped": "not an MCAP file", "read_bytes": 0}
    pos, stop_reason = 8, "end of file"
    while True:
        if pos + 9 > size:
            if pos < size:
                stop_reason = f"cut inside a record header at byte {pos}"
            break
        opcode, length = struct.unpack_from("<BQ", buf, pos)
        end = pos + 9 + length
        whole = end <= size
        body = buf[pos + 9 : min(end, size)]
        if opcode == Opcode.CHUNK and len(body) >= 32:
            before, consumed = len(messages), 0
            records, compression, offset = _chunk_records(body, whole)
            for rec_opcode, rec_body, rec_end in _mcap_records(records):
                inner(rec_opcode, rec_body)
                consumed = rec_end
            if not whole:
                kind = f"a {compression}" if compression else "an uncompressed"
                stop_reason = (
                    f"cut inside {kind} chunk at byte {pos}: "
                    f"{len(messages) - before} complete message(s) of it salvaged"
                )
                # the readable part ends after the last complete record of the chunk
                pos = pos + 9 + offset + consumed if not compression else size
        elif not whole:
            stop_reason = f"cut inside a record (opcode {opcode:#x}) at byte {pos}"
        elif opcode == Opcode.FOOTER:
            break
        else:
            inner(opcode, body)
        if not whole:
            break
        pos = end
    # Chunks keep messages in write order; sort by time the way rosbags' reader does.
    messages.sort(key=lambda m: m.timestamp)
    return messages, {"file_bytes": size, "stopped": stop_reason, "read_bytes": min(pos, size)}


def _scan_sqlite(file: Path) -> tuple[list[RawMessage], dict[str, Any]]:
    conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
    try:
        topics = {
            row[0]: (row[1], row[2]) for row in conn.execute("SELECT id, name, type FROM topics")
        }
        rows = conn.execute(
            "SELECT topic_id, timestamp, data FROM messages ORDER BY timestamp, id"
        ).fetchall()
    finally:
        conn.close()
    messages = [
        RawMessage(topics[t][0], topics[t][1], ts, data) for t, ts, data in rows if t in topics
    ]
    return messages, {
        "file_bytes": file.stat().st_size,
        "stopped": "committed rows",
        "read_bytes": None,
    }


def decode(msg: RawMessage) -> Any:
    """The message object (rosbags' typestore with the project's types registered)."""
    return T.typestore().deserialize_cdr(msg.data, msg.msgtype)


try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is pinned in requirements/base.txt
    _loads = json.loads


def _event_from_cdr(raw: Any) -> Event:
    """The Event of a KernelEvent's CDR bytes (decoded by hand: only data_json is parsed)."""
    sec, nanosec, run_id, seq, kind, step, data_json = cdr.parse_kernel_event(raw)
    try:
        obj = _loads(data_json)
    except ValueError:  # e.g. an integer beyond 64 bits: the standard library reads it
        obj = json.loads(data_json)
    return Event(
        kind=obj.get("kind", kind),
        step=int(obj.get("step", step)),
        data=obj.get("data") or {},
        t=float(obj.get("t", sec + nanosec * 1e-9)),
        wall=float(obj.get("wall", 0.0)),
        seq=int(obj.get("seq", seq)),
        run_id=run_id,
    )


def _event_from(kernel_event: Any) -> Event:
    obj = json.loads(kernel_event.data_json)
    return Event(
        kind=obj.get("kind", kernel_event.kind),
        step=int(obj.get("step", kernel_event.step)),
        data=obj.get("data") or {},
        t=float(obj.get("t", kernel_event.stamp.sec + kernel_event.stamp.nanosec * 1e-9)),
        wall=float(obj.get("wall", 0.0)),
        seq=int(obj.get("seq", kernel_event.seq)),
        run_id=kernel_event.run_id,
    )


class BagTrace(Trace):
    """A trace loaded from a bag. `image(relative_path)` reads the frame from the bag's camera topic."""

    def image(self, relative_path: str) -> np.ndarray:
        for event in self.events:
            if event.kind != OBSERVATION:
                continue
            images = event.data.get("images") or {}
            for camera, rel in images.items():
                if rel == relative_path:
                    return self._frame(camera, event)
        raise KeyError(f"relative_path={relative_path!r}: no observation refers to this frame")

    def _frame(self, camera: str, event: Event) -> np.ndarray:
        topic = camera_topic(camera, self.extras.get("prefix", DEFAULT_PREFIX))
        ns = max(0, round(event.t * 1e9))
        info = bag_info(self.path)
        if info.complete:
            from rosbags.rosbag2 import Reader

            with Reader(info.path) as reader:
                conns = [c for c in reader.connections if c.topic == topic]
                for conn, _, data in reader.messages(connections=conns, start=ns, stop=ns + 1):
                    return image_array(decode(RawMessage(topic, conn.msgtype, ns, data)))
        else:
            for msg in iter_raw(self.path, [topic]):
                if msg.timestamp == ns:
                    return image_array(decode(msg))
        raise KeyError(f"camera={camera!r} step={event.step}: frame not in the bag")

    def iter_frames(self, camera: str) -> Iterator[tuple[int, np.ndarray]]:
        """(step, frame) for every recorded frame of `camera`, in order, streaming."""
        steps = [
            e.step
            for e in self.events
            if e.kind == OBSERVATION and camera in (e.data.get("images") or {})
        ]
        topic = camera_topic(camera, self.extras.get("prefix", DEFAULT_PREFIX))
        for step, msg in zip(steps, iter_raw(self.path, [topic]), strict=False):
            yield step, image_array(decode(msg))


def image_array(msg: Any) -> np.ndarray:
    """A sensor_msgs/Image (rgb8 / mono8) as an HxWx3 or HxW uint8 array."""
    data = np.asarray(msg.data, dtype=np.uint8)
    if msg.encoding in ("rgb8", "bgr8"):
        return data.reshape(msg.height, msg.width, 3).copy()
    if msg.encoding == "mono8":
        return data.reshape(msg.height, msg.width).copy()
    raise ValueError(f"encoding={msg.encoding!r}: only rgb8, bgr8 and mono8 frames are read")


def load_bag_trace(path: str | Path, *, prefix: str = DEFAULT_PREFIX) -> BagTrace:
    """Read a mirrored episode from a bag folder; equal to loading its run directory."""
    info = bag_info(path)
    topic = f"{prefix}/events"
    store = T.typestore()
    events: list[Event] = []
    for msg in iter_raw(info.path, [topic]):
        try:
            events.append(_event_from_cdr(msg.data))
        except ValueError:  # not the CDR the mirror writes: rosbags decodes it
            events.append(_event_from(store.deserialize_cdr(msg.data, msg.msgtype)))
    events.sort(key=lambda e: e.seq)
    custom_meta: dict[str, Any] = {}
    if META_KEY in info.custom_data:
        try:
            custom_meta = json.loads(info.custom_data[META_KEY])
        except json.JSONDecodeError:
            _log.warning("%s: custom_data %s is not JSON; ignored", info.path, META_KEY)
    run_id = str(
        custom_meta.get("run_id")
        or next((e.run_id for e in events if e.run_id), "")
        or (info.path.parent.name if info.path.name == BAG_DIR else info.path.name)
    )
    for event in events:
        event.run_id = run_id
    meta = meta_from_events(events, run_id) if events else (custom_meta or {"run_id": run_id})
    truncated = not info.complete
    return BagTrace(
        meta=meta,
        events=events,
        path=info.path,
        truncated=truncated,
        extras={
            "format": "rosbag2",
            "storage": info.storage,
            "prefix": prefix,
            "custom_data": info.custom_data,
        },
    )


def _accepts(path: Path) -> bool:
    # a run directory is read from its events.jsonl; from its bag only when that is all it has
    return is_bag(path) or (
        path.is_dir() and not (path / EVENTS_FILE).exists() and is_bag(path / BAG_DIR)
    )


def register() -> None:
    """Teach kernel.load_trace to read bags (done on importing robokernel_ros.recording)."""
    from ..kernel.trace import register_trace_loader

    register_trace_loader("rosbag2", _accepts, load_bag_trace)
