"""BagWriter: rosbags' rosbag2 Writer, with its MCAP per-message path in fewer calls.

    writer = BagWriter(path, version=9, storage_plugin=StoragePlugin.MCAP)
    ...                                    # rosbags' Writer API, unchanged

Why: the bag mirror's writer process (recording.writer_process) frames every kernel event
into ~1.7 MCAP messages, and in rosbags 0.11.9 each `Writer.write` costs ~5 us (a BytesIO
per record, five small writes, a list scan for the connection, and at each chunk's close
two calls per message for its index). That process runs beside every episode, so on a
2-core machine its CPU decides how far two parallel episodes are from twice one
(bench/eval_scaling.py, bench/RESULTS.md "Parallel evals on Ray").

What: `write` to an MCAP storage without compression frames the Message record in one
struct call and keeps the same bookkeeping; the closing chunk's message indexes are
packed one struct call per channel. Every other path (sqlite3, compression, add_connection,
close, metadata.yaml) is rosbags' own. The bytes are rosbags' own too: the .mcap and the
metadata.yaml of a bag written through BagWriter equal those of rosbags' Writer given the
same calls (test/recording/test_recording_writer.py). The attributes this reaches are those of
rosbags' McapWriter and Writer as pinned in requirements/base.txt; that test is the guard
when the pin moves.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from io import BytesIO
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.storage_mcap import (
    McapWriter,
    PendingChunk,
    write_record,
    write_string,
    write_uint32,
    write_uint64,
)

# MCAP Message record: opcode 0x05, record length, then channel id (u16), sequence (u32,
# 0 as rosbags writes it), log time, publish time (u64 each: both the message timestamp).
_MESSAGE = struct.Struct("<BQHIQQ")
_MESSAGE_BODY = _MESSAGE.size - 9  # the record length counts what follows the opcode + length
_CHUNK_LIMIT = 2**20  # rosbags closes the open chunk once it holds more than this many bytes


class _McapStorage(McapWriter):
    """rosbags' McapWriter with `write` and `close_chunk` in fewer calls (same bytes)."""

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
        """rosbags' close_chunk, each channel's MessageIndex packed in one call."""
        chunk = self.chunk
        rec = BytesIO()
        write_uint64(rec, chunk.message_start_time)
        write_uint64(rec, chunk.message_end_time)
        write_uint64(rec, chunk.bio.tell())
        write_uint32(rec, 0)
        compressed = self.compressor(chunk.bio.getvalue())
        write_string(rec, self.compression)
        write_uint64(rec, len(compressed))
        rec.write(compressed)

        chunk_start = self.bio.tell()
        write_record(self.bio, 0x06, rec)
        chunk_end = self.bio.tell()

        offsets: list[tuple[int, int]] = []
        for cid, msgs in chunk.msgs.items():
            offsets.append((cid, self.bio.tell()))
            n = len(msgs)
            # opcode 0x07, length, channel id, byte length of the (timestamp, offset) pairs
            head = struct.pack("<BQHI", 0x07, 6 + 16 * n, cid, 16 * n)
            self.bio.write(head + struct.pack(f"<{2 * n}Q", *(v for pair in msgs for v in pair)))

        rec = BytesIO()
        write_uint64(rec, chunk.message_start_time)
        write_uint64(rec, chunk.message_end_time)
        write_uint64(rec, chunk_start)
        write_uint64(rec, chunk_end - chunk_start)
        write_uint32(rec, len(offsets) * 10)
        for cid, offset in offsets:
            rec.write(struct.pack("<HQ", cid, offset))
        write_uint64(rec, self.bio.tell() - chunk_end)
        write_string(rec, self.compression)
        write_uint64(rec, len(compressed))
        write_uint64(rec, chunk.bio.tell())
        self.chunks.append(rec)

        self.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))


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
