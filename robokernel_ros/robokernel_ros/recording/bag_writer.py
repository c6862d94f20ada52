"""BagWriter: rosbags' rosbag2 Writer, with its MCAP per-message path in fewer calls.

    writer = BagWriter(path, version=9, storage_plugin=StoragePlugin.MCAP)
    ...                                    # rosbags' Writer API, unchanged

Beside it, what every bag writer of the package shares (the mirror, the topic bag):
`message_definition(msgtype)`, a type's definition and RIHS01 hash for add_connection, and
`flush_storage(storage)`, the one place that reaches into rosbags' storage (it has no flush).

Why: the bag mirror's writer process (recording.writer_process) frames every kernel event
into ~1.7 MCAP messages, and in rosbags 0.11.9 each `Writer.write` costs ~5 us (a BytesIO
per record, five small writes, a list scan for the connection, and at each chunk's close
two calls per message for its index). That process runs beside every episode, so on a
2-core machine its CPU decides how far two parallel episodes are from twice one
(bench/eval_scaling.py, bench/RESULTS.md "Parallel evals on Ray").

What: `write` to an MCAP storage without compression frames the Message record in one
struct call and keeps the same bookkeeping; the open chunk keeps a large message (a
camera frame) as its own piece and the closing chunk writes its pieces to the file as
they are, with no copy into one record first (`_ChunkBuffer`); the closing chunk's message
indexes are packed one struct call per channel. Every other path (sqlite3, compression, add_connection,
close, metadata.yaml) is rosbags' own. The bytes are rosbags' own too: the .mcap and the
metadata.yaml of a bag written through BagWriter equal those of rosbags' Writer given the
same calls (test/recording/test_recording_writer.py). The attributes this reaches are those of
rosbags' McapWriter and Writer as pinned in requirements/base.txt; that test is the guard
when the pin moves.
"""

from __future__ import annotations

import functools
import struct
from collections import defaultdict
from io import BytesIO
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.storage_mcap import (
    McapWriter,
    PendingChunk,
    write_string,
    write_uint32,
    write_uint64,
)
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Writer

from . import types as T

# MCAP Message record: opcode 0x05, record length, then channel id (u16), sequence (u32,
# 0 as rosbags writes it), log time, publish time (u64 each: both the message timestamp).
_MESSAGE = struct.Struct("<BQHIQQ")
_MESSAGE_BODY = _MESSAGE.size - 9  # the record length counts what follows the opcode + length
_CHUNK_LIMIT = 2**20  # rosbags closes the open chunk once it holds more than this many bytes
_CHUNK_HEAD = struct.Struct("<QQQII")  # Chunk record: start, end, size, crc, compression's length
_U64 = struct.Struct("<Q")
_RECORD = struct.Struct("<BQ")  # a record's opcode and length
_LARGE = 1 << 16  # a write this large is kept as its own piece of the chunk, not copied


class _ChunkBuffer:
    """The open chunk's bytes, with BytesIO's write and tell, keeping large writes
    as they came: a camera frame (0.9 MB of 640x480 rgb8) is not copied into a growing
    buffer and out again into the record, it goes to the file from the message's own
    bytes. Small records are gathered in one BytesIO as before. (Two frames a chunk cost
    the writer process ~2 ms of copying and page faults per observation.)"""

    __slots__ = ("_done", "_done_size", "_small")

    def __init__(self) -> None:
        self._done: list[bytes] = []
        self._done_size = 0
        self._small = BytesIO()

    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if size < _LARGE:
            return self._small.write(data)
        if self._small.tell():
            self._done.append(self._small.getvalue())
            self._done_size += self._small.tell()
            self._small = BytesIO()
        self._done.append(data if type(data) is bytes else bytes(data))  # ours to keep
        self._done_size += size
        return size

    def tell(self) -> int:
        return self._done_size + self._small.tell()

    def pieces(self) -> list[bytes]:
        """The chunk's bytes in order, as few pieces as the large writes allow."""
        tail = self._small.getvalue()
        return [*self._done, tail] if tail else list(self._done)


class _McapStorage(McapWriter):
    """rosbags' McapWriter with `write` and `close_chunk` in fewer calls and copies (same
    bytes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chunk = PendingChunk(2**63 - 1, 0, _ChunkBuffer(), defaultdict(list))

    def write(self, connection: Any, timestamp: int, data: bytes | memoryview) -> None:
        cid = connection.id
        if timestamp < self.message_start_time:
            self.message_start_time = timestamp
        if timestamp > self.message_end_time:
            self.message_end_time = timestamp
        self.channel_stats[cid] += 1
        chunk = self.chunk
        if timestamp < chunk.message_start_time:
            chunk.message_start_time = timestamp
        if timestamp > chunk.message_end_time:
            chunk.message_end_time = timestamp
        bio = chunk.bio
        offset = bio.tell()
        chunk.msgs[cid].append((timestamp, offset))
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        bio.write(_MESSAGE.pack(0x05, _MESSAGE_BODY + size, cid, 0, timestamp, timestamp))
        bio.write(data)
        if offset + _MESSAGE.size + size > _CHUNK_LIMIT:
            self.close_chunk()

    def close_chunk(self) -> None:
        """rosbags' close_chunk: the chunk's pieces go to the file as they are (no copy into
        one record first), each channel's MessageIndex packed in one call."""
        chunk = self.chunk
        bio = chunk.bio
        size = bio.tell()
        pieces = bio.pieces()  # a _ChunkBuffer: __init__ and every close put one there
        if self.compression:
            pieces = [self.compressor(b"".join(pieces))]
        stored = sum(len(p) for p in pieces)
        compression = self.compression.encode()
        # start, end, uncompressed size, crc (0, as rosbags writes it), compression, stored size
        head = _CHUNK_HEAD.pack(chunk.message_start_time, chunk.message_end_time, size, 0,
                                len(compression)) + compression + _U64.pack(stored)  # fmt: skip

        out = self.bio
        chunk_start = out.tell()
        out.write(_RECORD.pack(0x06, len(head) + stored))
        out.write(head)
        for piece in pieces:
            out.write(piece)
        chunk_end = out.tell()

        offsets: list[tuple[int, int]] = []
        for cid, msgs in chunk.msgs.items():
            offsets.append((cid, out.tell()))
            n = len(msgs)
            # opcode 0x07, length, channel id, byte length of the (timestamp, offset) pairs
            index = struct.pack("<BQHI", 0x07, 6 + 16 * n, cid, 16 * n)
            out.write(index + struct.pack(f"<{2 * n}Q", *(v for pair in msgs for v in pair)))

        rec = BytesIO()
        write_uint64(rec, chunk.message_start_time)
        write_uint64(rec, chunk.message_end_time)
        write_uint64(rec, chunk_start)
        write_uint64(rec, chunk_end - chunk_start)
        write_uint32(rec, len(offsets) * 10)
        for cid, offset in offsets:
            rec.write(struct.pack("<HQ", cid, offset))
        write_uint64(rec, out.tell() - chunk_end)
        write_string(rec, self.compression)
        write_uint64(rec, stored)
        write_uint64(rec, size)
        self.chunks.append(rec)

        self.chunk = PendingChunk(2**63 - 1, 0, _ChunkBuffer(), defaultdict(list))


class BagWriter(Writer):
    """rosbags.rosbag2.Writer, writing MCAP messages through `_McapStorage` (same bytes).

    `write` skips Writer's per-message list scan for a connection this writer added
    (`connection.owner is self`); anything else goes through Writer.write and its checks.
    """

    STORAGE_PLUGINS = {**Writer.STORAGE_PLUGINS, StoragePlugin.MCAP: _McapStorage}

    def write(self, connection: Any, timestamp: int, data: bytes | memoryview) -> None:
        storage = self.storage
        if (
            type(storage) is not _McapStorage
            or connection.owner is not self
            or self.compression_mode is not CompressionMode.NONE
        ):
            super().write(connection, timestamp, data)
            return
        storage.write(connection, timestamp, data)
        self.counts[connection.id] += 1
        if timestamp < self.min_timestamp:
            self.min_timestamp = timestamp
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp


@functools.cache
def message_definition(msgtype: str) -> tuple[str, str]:
    """(message definition, RIHS01 hash) of `msgtype`, generated once per process."""
    store = T.typestore()
    msgdef, _ = store.generate_msgdef(msgtype, ros_version=2)
    return msgdef, store.hash_rihs01(msgtype)


def flush_storage(storage: Any) -> None:
    """Make what was written so far survive a SIGKILL of the process.

    rosbags' Writer has no flush: this does what its storage's close does first (the
    MCAP storage closes its pending chunk and the file is flushed to the OS; sqlite3
    commits its transaction), leaving the storage open for more messages.
    """
    if isinstance(storage, McapWriter):
        if storage.chunk.msgs:  # a chunk holding messages (not only schema/channel records)
            storage.close_chunk()
        storage.bio.flush()
    elif isinstance(storage, Sqlite3Writer):
        storage.conn.commit()
