"""Appending serialised messages to a rosbags Writer, cheaply and in batches.

`MessageAppender(writer)` offers `add(connection, timestamp_ns, data)`, which does what
`writer.write(connection, timestamp_ns, data)` does, and `drain()`, which must be called
before the storage's chunk is closed or flushed and before the writer is closed.

For rosbags' MCAP storage without compression (the mirror's default) `add` only queues
the message (a list append); `drain` writes the queued MCAP Message records straight
into the storage's pending chunk, one `struct.pack` and one `bytes.join` per chunk, and
keeps the bookkeeping rosbags keeps in `Writer.write` (chunk message index, time
bounds, counts), closing the chunk exactly where `Writer.write` would (past 1 MiB).
`close_chunk` writes the Chunk and MessageIndex records as rosbags' `close_chunk` does,
with one `struct.pack` per index instead of two `int.to_bytes` per message. So the file
and metadata.yaml come out byte for byte as `Writer.write` and rosbags' `close_chunk`
make them (a test checks it) at a fraction of the per-message cost. The queue holds at most `max_pending_bytes` of message data, so memory stays
bounded; the caller's flush interval still bounds what a SIGKILL can lose.

Any other storage, compression mode or rosbags layout is written through
`writer.write` message by message (`drain` has nothing to do).
"""

from __future__ import annotations

import struct
from collections import Counter, defaultdict
from io import BytesIO
from itertools import chain
from typing import Any

from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.storage_mcap import McapWriter, PendingChunk

# MCAP Message record: opcode 0x05, record length, channel id, sequence, log time, publish time
_MESSAGE = struct.Struct("<BQHIQQ")
_MESSAGE_FIELDS = _MESSAGE.size - 9  # the record length counts what follows opcode + length
_CHUNK_LIMIT = 1 << 20  # McapWriter.write closes the pending chunk past this many bytes
_CHUNK_HEAD = struct.Struct("<QQQI")  # start, end, uncompressed size, uncompressed crc (0)
_RECORD_HEAD = struct.Struct("<BQ")  # opcode, record length
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_INDEX_HEAD = struct.Struct("<QQQQI")  # start, end, chunk offset, chunk length, offsets size
_INDEX_OFFSET = struct.Struct("<HQ")
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
    """`add` = `writer.write`, batched for rosbags' MCAP storage (see the module doc)."""

    def __init__(
        self, writer: Writer, *, max_pending_bytes: int = 1 << 18, batched: bool | None = None
    ) -> None:
        """batched: None = whenever the storage allows it; False = rosbags' own calls."""
        self.writer = writer
        self.batched = _mcap_layout_known(writer) if batched is None else batched
        if self.batched and not _mcap_layout_known(writer):
            raise ValueError("batched=True: the writer's storage is not rosbags' plain MCAP")
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
                self.close_chunk()
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

    def close_chunk(self) -> None:
        """Close the storage's pending chunk: rosbags' McapWriter.close_chunk, cheaper."""
        self.drain()
        storage: Any = self.writer.storage
        if not self.batched:
            storage.close_chunk()
            return
        chunk = storage.chunk
        data = chunk.bio.getvalue()
        compressed = storage.compressor(data)
        compression = storage.compression.encode()
        start, end = chunk.message_start_time, chunk.message_end_time
        head = b"".join(
            (
                _CHUNK_HEAD.pack(start, end, len(data), 0),
                _U32.pack(len(compression)),
                compression,
                _U64.pack(len(compressed)),
            )
        )
        bio = storage.bio
        chunk_start = bio.tell()
        bio.write(_RECORD_HEAD.pack(0x06, len(head) + len(compressed)))
        bio.write(head)
        bio.write(compressed)
        chunk_end = bio.tell()
        offsets: list[tuple[int, int]] = []
        for cid, msgs in chunk.msgs.items():
            offsets.append((cid, bio.tell()))
            n = len(msgs)
            index = struct.pack(f"<HI{2 * n}Q", cid, 16 * n, *chain.from_iterable(msgs))
            bio.write(_RECORD_HEAD.pack(0x07, len(index)))
            bio.write(index)
        rec = BytesIO()  # the ChunkIndex record's body, written by rosbags at close
        rec.write(_INDEX_HEAD.pack(start, end, chunk_start, chunk_end - chunk_start, 10 * len(offsets)))  # fmt: skip
        for cid, offset in offsets:
            rec.write(_INDEX_OFFSET.pack(cid, offset))
        rec.write(_U64.pack(bio.tell() - chunk_end))
        rec.write(_U32.pack(len(compression)))
        rec.write(compression)
        rec.write(_TWO_U64.pack(len(compressed), len(data)))
        storage.chunks.append(rec)
        storage.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))

    def finish(self) -> None:
        """Before the writer's close: write what is queued (and close the last chunk)."""
        self.drain()
        if self.batched and self.writer.storage.chunk.bio.tell():  # type: ignore[union-attr]
            self.close_chunk()
