"""Appending serialised messages to a rosbags Writer, cheaply and in batches.

`MessageAppender(writer)` offers `add(connection, timestamp_ns, data)`, which does what
`writer.write(connection, timestamp_ns, data)` does, and `drain()`, which must be called
before the storage's chunk is closed or flushed and before the writer is closed.

For rosbags' MCAP storage without compression (the mirror's default) `add` only queues
the message (a list append); `drain` writes the queued MCAP Message records straight
into the storage's pending chunk, one `struct.pack` and one `bytes.join` per chunk, and
keeps the bookkeeping rosbags keeps in `Writer.write` (chunk message index, time
bounds, counts), closing the chunk with rosbags' own `close_chunk` exactly where
`Writer.write` would (past 1 MiB). So the file and metadata.yaml come out byte for
byte as `Writer.write` makes them (a test checks it) at a fraction of the per-message
cost. The queue holds at most `max_pending_bytes` of message data, so memory stays
bounded; the caller's flush interval still bounds what a SIGKILL can lose.

Any other storage, compression mode or rosbags layout is written through
`writer.write` message by message (`drain` has nothing to do).
"""

from __future__ import annotations

import struct
from collections import Counter
from typing import Any

from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.storage_mcap import McapWriter

# MCAP Message record: opcode 0x05, record length, channel id, sequence, log time, publish time
_MESSAGE = struct.Struct("<BQHIQQ")
_MESSAGE_FIELDS = _MESSAGE.size - 9  # the record length counts what follows opcode + length
_CHUNK_LIMIT = 1 << 20  # McapWriter.write closes the pending chunk past this many bytes


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
        and isinstance(getattr(writer, "counts", None), dict)
        and hasattr(writer, "min_timestamp")
        and hasattr(writer, "max_timestamp")
    )


class MessageAppender:
    """`add` = `writer.write`, batched for rosbags' MCAP storage (see the module doc)."""

    def __init__(self, writer: Writer, *, max_pending_bytes: int = 1 << 18) -> None:
        self.writer = writer
        self.batched = _mcap_layout_known(writer)
        self.max_pending_bytes = max_pending_bytes
        self._pending: list[tuple[int, int, bytes]] = []
        self._pending_bytes = 0
        if not self.batched:
            self.add = writer.write  # type: ignore[method-assign]

    def add(self, connection: Any, timestamp: int, data: bytes) -> None:
        """Queue one serialised message (written by `drain`, or now when the queue is full)."""
        self._pending.append((connection.id, timestamp, data))
        self._pending_bytes += len(data)
        if self._pending_bytes > self.max_pending_bytes:
            self.drain()

    def drain(self) -> None:
        """Write every queued message into the storage (closing chunks past 1 MiB)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._pending_bytes = 0
        writer: Any = self.writer
        storage: Any = writer.storage
        pack = _MESSAGE.pack
        fields = _MESSAGE_FIELDS
        header = _MESSAGE.size
        n = len(pending)
        i = 0
        while i < n:
            chunk = storage.chunk
            bio = chunk.bio
            msgs = chunk.msgs
            pos = bio.tell()
            parts: list[bytes] = []
            first = i
            while i < n:
                cid, timestamp, data = pending[i]
                i += 1
                msgs[cid].append((timestamp, pos))
                parts.append(pack(0x05, fields + len(data), cid, 0, timestamp, timestamp))
                parts.append(data)
                pos += header + len(data)
                if pos > _CHUNK_LIMIT:
                    break
            bio.write(b"".join(parts))
            stamps = [entry[1] for entry in pending[first:i]]
            low, high = min(stamps), max(stamps)
            if low < chunk.message_start_time:
                chunk.message_start_time = low
            if high > chunk.message_end_time:
                chunk.message_end_time = high
            if pos > _CHUNK_LIMIT:
                storage.close_chunk()
        stamps = [entry[1] for entry in pending]
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
        for cid, count in Counter(entry[0] for entry in pending).items():
            channel_stats[cid] += count
            counts[cid] += count
