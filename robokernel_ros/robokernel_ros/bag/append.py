"""Appending serialised messages to a rosbags Writer, cheaply and in batches.

`MessageAppender(writer)` queues MCAP Message records: `add(connection, timestamp_ns,
data)` frames a serialised message (what `writer.write(connection, timestamp_ns, data)`
writes), `add_record(cid, timestamp_ns, record)` takes one already framed (the mirror's
per-topic templates pack the record head and the CDR bytes in one `struct.pack`: see
`bag.cdr`'s `*_record` functions; `pending` and `pending_bytes` may also be appended to
directly, followed by `drain()` past `max_pending_bytes`). `drain()` must be called before
the storage's chunk is closed or flushed and before the writer is closed.

For rosbags' MCAP storage without compression (the mirror's default) `drain` writes the
queued records straight into the storage's pending chunk with one `bytes.join` per
chunk, closing the chunk exactly where `Writer.write` would (past 1 MiB), and keeps the
bookkeeping rosbags keeps in `Writer.write` (time bounds, counts) with C-level
builtins; the chunk's message index is kept per channel as numpy (log time, offset)
pairs (one argsort per drain instead of a tuple per message). `close_chunk` writes the
Chunk and MessageIndex records as rosbags' `close_chunk` does. So the file and
metadata.yaml come out byte for byte as `Writer.write` and rosbags' `close_chunk` make
them (a test checks it). The queue holds at most `max_pending_bytes` of records, so
memory stays bounded; the caller's flush interval still bounds what a SIGKILL can lose.
In that mode every message must go through the appender (not `writer.write`).

Any other storage, compression mode or rosbags layout is written through `writer.write`
message by message when the queue drains (`drain` strips the record heads).

`add_connection` and `close_writer` are `Writer.add_connection` and `Writer.close` with
their YAML cached: rosbags dumps each connection's QoS profiles and, at close, the whole
metadata twice (metadata.yaml and the MCAP file's metadata record) with ruamel's pure
Python emitter, some 10 ms a dump. Here a QoS profile is dumped once per process, and
the metadata is dumped once per shape (topics, types, QoS, file name, custom_data keys)
into a template whose integers are filled in per bag; only the custom_data block is
dumped per bag. The texts are ruamel's own, byte for byte (a test checks it); any
writer these do not recognise goes through rosbags' own methods.
"""

from __future__ import annotations

import re
import struct
import threading
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from io import BytesIO, StringIO
from itertools import accumulate
from typing import Any

import numpy as np
from rosbags.interfaces import (
    Connection,
    ConnectionExtRosbag2,
    MessageDefinition,
    MessageDefinitionFormat,
    Qos,
)
from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.metadata import dump_qos_v8, dump_qos_v9
from rosbags.rosbag2.storage_mcap import McapWriter, PendingChunk
from ruamel.yaml import YAML

from .cdr import RECORD_HEAD_SIZE, record

_CHUNK_LIMIT = 1 << 20  # McapWriter.write closes the pending chunk past this many bytes
_CHUNK_HEAD = struct.Struct("<QQQI")  # start, end, uncompressed size, uncompressed crc (0)
_RECORD_HEAD = struct.Struct("<BQ")  # opcode, record length
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INDEX_HEAD = struct.Struct("<QQQQI")  # start, end, chunk offset, chunk length, offsets size
_INDEX_OFFSET = struct.Struct("<HQ")
_MESSAGE_INDEX_HEAD = struct.Struct("<BQHI")  # opcode 0x07, record length, channel, size
_TWO_U64 = struct.Struct("<QQ")


def _mcap_layout_known(writer: Writer) -> bool:
    storage = writer.storage
    if type(storage) is not McapWriter or writer.compression_mode != CompressionMode.NONE:
        return False
    chunk = getattr(storage, "chunk", None)
    return (
        all(
            hasattr(chunk, name)
            for name in ("bio", "msgs", "message_start_time", "message_end_time")
        )
        and isinstance(getattr(storage, "channel_stats", None), dict)
        and hasattr(storage, "message_start_time")
        and hasattr(storage, "message_end_time")
        and callable(getattr(storage, "close_chunk", None))
        and callable(getattr(storage, "compressor", None))
        and isinstance(getattr(storage, "compression", None), str)
        and isinstance(getattr(storage, "chunks", None), list)
        and hasattr(storage, "bio")
        and isinstance(getattr(writer, "counts", None), dict)
        and hasattr(writer, "min_timestamp")
        and hasattr(writer, "max_timestamp")
    )


class MessageAppender:
    """`add` = `writer.write`, queued and batched (see the module doc)."""

    def __init__(
        self, writer: Writer, *, max_pending_bytes: int = 1 << 18, batched: bool | None = None
    ) -> None:
        """batched: None = whenever the storage allows it; False = rosbags' own calls."""
        self.writer = writer
        self.batched = _mcap_layout_known(writer) if batched is None else batched
        if self.batched and not _mcap_layout_known(writer):
            raise ValueError("batched=True: the writer's storage is not rosbags' plain MCAP")
        self.max_pending_bytes = max_pending_bytes
        self.pending: list[tuple[int, int, bytes]] = []  # (channel id, log time, record)
        self.pending_bytes = 0
        # The pending chunk's message index: channel id -> blocks of (log time, offset)
        # rows, channels in the order of their first message in the chunk.
        self._index: dict[int, list[np.ndarray]] = {}
        # The pending chunk's bytes, as written segments (rosbags' PendingChunk.bio only
        # receives the schema and channel records rosbags writes, moved here at each drain):
        # no BytesIO growth and copy, written to the file as they are at close_chunk.
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, connection: Any, timestamp: int, data: bytes) -> None:
        """Queue one serialised message (as `writer.write(connection, timestamp, data)`)."""
        self.add_record(connection.id, timestamp, record(connection.id, timestamp, data))

    def add_record(self, cid: int, timestamp: int, rec: bytes) -> None:
        """Queue one MCAP Message record of channel `cid` (its log time `timestamp`)."""
        self.pending.append((cid, timestamp, rec))
        self.pending_bytes += len(rec)
        if self.pending_bytes > self.max_pending_bytes:
            self.drain()

    @property
    def chunk_has_messages(self) -> bool:
        """Whether the storage's pending chunk holds messages (after a drain)."""
        if self.batched:
            return bool(self._index)
        chunk = getattr(self.writer.storage, "chunk", None)
        return bool(getattr(chunk, "msgs", None))

    def drain(self) -> None:
        """Write every queued message into the storage (closing chunks past 1 MiB)."""
        pending = self.pending
        if not pending:
            return
        batch = pending[:]
        pending.clear()  # the same list: callers may hold it
        self.pending_bytes = 0
        writer: Any = self.writer
        if not self.batched:
            connections = {c.id: c for c in writer.connections}
            write = writer.write
            for cid, timestamp, rec in batch:
                write(connections[cid], timestamp, memoryview(rec)[RECORD_HEAD_SIZE:])
            return
        storage: Any = writer.storage
        cids, stamps, recs = zip(*batch, strict=True)
        n = len(recs)
        ends = list(accumulate(map(len, recs)))  # end of each record, from the batch's start
        ends_array = np.array(ends, dtype=np.int64)
        cid_array = np.array(cids, dtype=np.int64)
        stamp_array = np.array(stamps, dtype=np.uint64)
        first = 0
        while first < n:
            chunk = storage.chunk
            if chunk.bio.tell():
                self._take_records(chunk)
            before = ends[first - 1] if first else 0  # batch bytes already in earlier chunks
            base = self._size - before  # chunk position = base + batch position
            # McapWriter.write closes the chunk right after the first message ending past
            # the limit: that message is the segment's last.
            over = bisect_right(ends, _CHUNK_LIMIT - base, first)
            stop = min(over + 1, n)
            segment = b"".join(recs[first:stop])
            self._parts.append(segment)  # (close_chunk below starts a new list)
            self._size += len(segment)
            seg_stamps = stamp_array[first:stop]
            low, high = int(seg_stamps.min()), int(seg_stamps.max())
            if low < chunk.message_start_time:
                chunk.message_start_time = low
            if high > chunk.message_end_time:
                chunk.message_end_time = high
            self._index_segment(cid_array[first:stop], seg_stamps, ends_array[first:stop], recs[first:stop], base)  # fmt: skip
            if over < n:
                self.close_chunk()
            first = stop
        low, high = min(stamps), max(stamps)
        if low < storage.message_start_time:
            storage.message_start_time = low
        if high > storage.message_end_time:
            storage.message_end_time = high
        if low < writer.min_timestamp:
            writer.min_timestamp = low
        if high > writer.max_timestamp:
            writer.max_timestamp = high
        channel_stats = storage.channel_stats
        counts = writer.counts
        for cid, count in Counter(cids).items():
            channel_stats[cid] += count
            counts[cid] += count

    def _take_records(self, chunk: Any) -> None:
        """Move what rosbags wrote into the pending chunk's BytesIO to the chunk's parts."""
        data = chunk.bio.getvalue()
        chunk.bio.seek(0)
        chunk.bio.truncate()
        self._parts.append(data)
        self._size += len(data)

    def _index_segment(
        self,
        cids: np.ndarray,
        stamps: np.ndarray,
        ends: np.ndarray,
        recs: Sequence[bytes],
        base: int,
    ) -> None:
        """Add one chunk segment's (log time, offset) rows to the chunk's message index."""
        lengths = np.fromiter(map(len, recs), dtype=np.int64, count=len(recs))
        offsets = (ends - lengths + base).astype(np.uint64)
        index = self._index
        first_cid = int(cids[0])
        if (cids == first_cid).all():  # one channel (a drain right after one message)
            rows = np.empty((len(recs), 2), dtype=np.uint64)
            rows[:, 0] = stamps
            rows[:, 1] = offsets
            index.setdefault(first_cid, []).append(rows)
            return
        order = np.argsort(cids, kind="stable")
        rows = np.empty((len(recs), 2), dtype=np.uint64)
        rows[:, 0] = stamps[order]
        rows[:, 1] = offsets[order]
        channels, firsts, sizes = np.unique(cids, return_index=True, return_counts=True)
        bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
        blocks = {
            int(cid): rows[bounds[j] : bounds[j + 1]] for j, cid in enumerate(channels.tolist())
        }
        for j in np.argsort(firsts, kind="stable").tolist():  # first appearance in the chunk
            cid = int(channels[j])
            index.setdefault(cid, []).append(blocks[cid])

    def close_chunk(self) -> None:
        """Close the storage's pending chunk: rosbags' McapWriter.close_chunk, cheaper."""
        self.drain()
        storage: Any = self.writer.storage
        if not self.batched:
            storage.close_chunk()
            return
        chunk = storage.chunk
        if chunk.bio.tell():
            self._take_records(chunk)
        size = self._size
        compression = storage.compression.encode()
        if compression:  # not a batched layout; kept for completeness
            chunk_parts = [storage.compressor(b"".join(self._parts))]
        else:
            chunk_parts = self._parts
        compressed_size = sum(map(len, chunk_parts))
        self._parts = []
        self._size = 0
        start, end = chunk.message_start_time, chunk.message_end_time
        head = b"".join(
            (
                _CHUNK_HEAD.pack(start, end, size, 0),
                _U32.pack(len(compression)),
                compression,
                _U64.pack(compressed_size),
            )
        )
        bio = storage.bio
        chunk_start = bio.tell()
        bio.write(_RECORD_HEAD.pack(0x06, len(head) + compressed_size) + head)
        bio.writelines(chunk_parts)
        chunk_end = bio.tell()
        offsets: list[tuple[int, int]] = []
        parts: list[bytes] = []
        position = chunk_end
        for cid, blocks in self._index.items():
            rows = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
            offsets.append((cid, position))
            body = rows.astype("<u8", copy=False).tobytes()
            parts.append(_MESSAGE_INDEX_HEAD.pack(0x07, 6 + len(body), cid, len(body)))
            parts.append(body)
            position += 15 + len(body)
        bio.write(b"".join(parts))
        self._index = {}
        rec = BytesIO()  # the ChunkIndex record's body, written by rosbags at close
        rec.write(_INDEX_HEAD.pack(start, end, chunk_start, chunk_end - chunk_start, 10 * len(offsets)))  # fmt: skip
        for cid, offset in offsets:
            rec.write(_INDEX_OFFSET.pack(cid, offset))
        rec.write(_U64.pack(bio.tell() - chunk_end))
        rec.write(_U32.pack(len(compression)))
        rec.write(compression)
        rec.write(_TWO_U64.pack(compressed_size, size))
        storage.chunks.append(rec)
        storage.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))

    def flush_chunk(self) -> None:
        """Drain, and close the pending chunk when it holds messages (for a durable flush)."""
        self.drain()
        if self.chunk_has_messages:
            self.close_chunk()

    def finish(self) -> None:
        """Before the writer's close: write what is queued (and close the last chunk)."""
        self.drain()
        if self.batched and (self._size or self.writer.storage.chunk.bio.tell()):  # type: ignore[union-attr]
            self.close_chunk()


# -- Writer.add_connection and Writer.close, their YAML cached ---------------------------

_cache_lock = threading.Lock()
_msgdefs: dict[tuple[int, str], tuple[str, str]] = {}
_qos_texts: dict[tuple[int, tuple[Qos, ...]], str] = {}
_MAX_CACHED = 256


def _yaml() -> YAML:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    return yaml


def _dump(obj: Any) -> str:
    """rosbags' YAML dump (YAML(typ='safe'), block style)."""
    stream = StringIO()
    _yaml().dump(obj, stream)
    return stream.getvalue()


def _writer_known(writer: Writer) -> bool:
    return (
        _mcap_layout_known(writer)
        and isinstance(getattr(writer, "connections", None), list)
        and isinstance(getattr(writer, "added_types", None), set)
        and isinstance(getattr(writer, "custom_data", None), dict)
        and hasattr(writer, "metapath")
        and hasattr(writer, "storage_plugin")
        and isinstance(getattr(writer, "version", None), int)
    )


def add_connection(
    writer: Writer, topic: str, msgtype: str, *, typestore: Any, qos: Qos
) -> Connection:
    """`writer.add_connection(topic, msgtype, typestore=typestore, offered_qos_profiles=[qos])`.

    The message definition, its hash and the QoS profile's YAML are computed once per
    process; the storage gets the same schema and channel records.
    """
    key = (id(typestore), msgtype)
    found = _msgdefs.get(key)
    if found is None:
        msgdef, _ = typestore.generate_msgdef(msgtype, ros_version=2)
        found = (msgdef, typestore.hash_rihs01(msgtype))
        with _cache_lock:
            if len(_msgdefs) < _MAX_CACHED:
                _msgdefs[key] = found
    msgdef, rihs01 = found
    if not _writer_known(writer) or msgdef.startswith("=" * 80 + "\nIDL: "):
        return writer.add_connection(
            topic, msgtype, msgdef=msgdef, rihs01=rihs01, offered_qos_profiles=[qos]
        )
    connection = Connection(
        id=len(writer.connections) + 1,
        topic=topic,
        msgtype=msgtype,
        msgdef=MessageDefinition(MessageDefinitionFormat.MSG, msgdef),
        digest=rihs01,
        msgcount=0,
        ext=ConnectionExtRosbag2(serialization_format="cdr", offered_qos_profiles=[qos]),
        owner=writer,
    )
    for conn in writer.connections:
        if conn.topic == topic and conn.msgtype == msgtype and conn.ext == connection.ext:
            return writer.add_connection(  # rosbags raises its own error
                topic, msgtype, msgdef=msgdef, rihs01=rihs01, offered_qos_profiles=[qos]
            )
    qos_key = (writer.version, (qos,))
    dumped = _qos_texts.get(qos_key)
    if dumped is None:
        dump_qos = dump_qos_v9 if writer.version >= 9 else dump_qos_v8
        dumped = dump_qos([qos])
        if not isinstance(dumped, str):
            dumped = _dump(dumped).strip()
        with _cache_lock:
            if len(_qos_texts) < _MAX_CACHED:
                _qos_texts[qos_key] = dumped
    storage: Any = writer.storage
    if msgtype not in writer.added_types:
        storage.add_msgtype(connection)
        writer.added_types.add(msgtype)
    storage.add_connection(connection, dumped)
    writer.connections.append(connection)
    writer.counts[connection.id] = 0
    return connection


_SENTINEL = 7_305_218_946_000_000_000  # + k: the k-th integer of a template (19 digits)
_SENTINEL_RE = re.compile(r"(?<![0-9A-Za-z_.])(7305218946000\d{6})(?![0-9A-Za-z_.])")
_CUSTOM_PLACEHOLDER = {"robokernel.custom-data-placeholder": "x"}
_OUTER = "rosbag2_bagfile_information"
_templates: dict[str, tuple[list[Any], list[Any]] | None] = {}


def _skeleton(obj: Any, ints: list[int]) -> Any:
    """`obj` with every int replaced by the next sentinel (collected in `ints`)."""
    if type(obj) is int:
        ints.append(obj)
        return _SENTINEL + len(ints) - 1
    if type(obj) is dict:
        return {k: _skeleton(v, ints) for k, v in obj.items()}
    if type(obj) is list:
        return [_skeleton(v, ints) for v in obj]
    return obj


def _custom_block(custom: dict[str, str], outer: bool) -> str:
    """The custom_data entry as it appears in the outer (metadata.yaml) or inner dump."""
    if outer:
        text = _dump({_OUTER: {"custom_data": custom}})
        return text.split("\n", 1)[1]
    return _dump({"custom_data": custom})


def _template(text: str, nints: int, outer: bool) -> list[Any] | None:
    """`text` as pieces: strings, ints (the k-th value) and None (the custom_data block)."""
    block = _custom_block(_CUSTOM_PLACEHOLDER, outer)
    if text.count(block) != 1:
        return None
    head, tail = text.split(block)
    pieces: list[Any] = []
    seen: list[int] = []
    for part in (head, None, tail):
        if part is None:
            pieces.append(None)
            continue
        for j, piece in enumerate(_SENTINEL_RE.split(part)):
            if j % 2:
                k = int(piece) - _SENTINEL
                seen.append(k)
                pieces.append(k)
            elif piece:
                pieces.append(piece)
    if sorted(seen) != list(range(nints)) or str(_SENTINEL)[:13] in "".join(
        p for p in pieces if isinstance(p, str)
    ):
        return None
    return pieces


def _fill(pieces: list[Any], ints: list[int], block: str) -> str:
    return "".join(p if type(p) is str else (block if p is None else str(ints[p])) for p in pieces)


def metadata_texts(metadata: dict[str, Any]) -> tuple[str, str]:
    """(the dump of `metadata`, the dump of metadata['rosbag2_bagfile_information']).

    Equal to rosbags' two `yaml.dump` calls in Writer.close, from a cached template.
    """
    info = metadata[_OUTER]
    custom = info.get("custom_data")
    if type(custom) is not dict or not all(
        type(k) is str and type(v) is str for k, v in custom.items()
    ):
        return _dump(metadata), _dump(info)
    ints: list[int] = []
    skeleton = _skeleton({**info, "custom_data": None}, ints)
    key = repr(skeleton) + repr(sorted(custom))
    found = _templates.get(key, False)
    if found is False:
        skeleton["custom_data"] = _CUSTOM_PLACEHOLDER
        outer = _template(_dump({_OUTER: skeleton}), len(ints), True)
        inner = _template(_dump(skeleton), len(ints), False)
        found = (outer, inner) if outer is not None and inner is not None else None
        with _cache_lock:
            if len(_templates) >= _MAX_CACHED:
                _templates.clear()
            _templates[key] = found
    if found is None:
        return _dump(metadata), _dump(info)
    outer, inner = found
    return (
        _fill(outer, ints, _custom_block(custom, True)),
        _fill(inner, ints, _custom_block(custom, False)),
    )


def close_writer(writer: Writer) -> None:
    """`writer.close()` (rosbags' Writer.close) with `metadata_texts` for its two dumps."""
    if not _writer_known(writer):
        writer.close()
        return
    w: Any = writer
    storage: Any = w.storage
    dst = storage.path
    duration = max(0, w.max_timestamp - w.min_timestamp)
    start = w.min_timestamp
    count = sum(w.counts.values())
    dump_qos = dump_qos_v9 if w.version >= 9 else dump_qos_v8
    metadata: dict[str, Any] = {
        _OUTER: {
            "version": w.version,
            "storage_identifier": w.storage_plugin.name.lower(),
            "relative_file_paths": [dst.name],
            "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": count,
            "topics_with_message_count": [
                {
                    "topic_metadata": {
                        "name": x.topic,
                        "type": x.msgtype,
                        "serialization_format": x.ext.serialization_format,
                        "offered_qos_profiles": dump_qos(x.ext.offered_qos_profiles),
                        "type_description_hash": x.digest,
                    },
                    "message_count": w.counts[x.id],
                }
                for x in w.connections
                if isinstance(x.ext, ConnectionExtRosbag2)
            ],
            "compression_format": "",
            "compression_mode": "",
            "files": [
                {
                    "path": dst.name,
                    "starting_time": {"nanoseconds_since_epoch": start},
                    "duration": {"nanoseconds": duration},
                    "message_count": count,
                },
            ],
            "custom_data": w.custom_data or None,
            "ros_distro": "rosbags",
        },
    }
    metadata_text, inner_text = metadata_texts(metadata)
    storage.close(w.version, inner_text.strip())
    w.storage = None
    tmp = w.metapath.with_suffix(".yaml.tmp")
    tmp.write_text(metadata_text, "utf8")
    tmp.replace(w.metapath)
