"""Appending serialised messages to a rosbags Writer, cheaply.

`message_appender(writer)` returns a callable `append(connection, timestamp_ns, data)`
that does what `writer.write(connection, timestamp_ns, data)` does. For rosbags' MCAP
storage without compression (the mirror's default) it writes the MCAP Message record
straight into the storage's pending chunk with one `struct.pack` and keeps the same
bookkeeping (chunk message index, time bounds, counts) that rosbags keeps, so the file
and metadata.yaml come out byte for byte as `Writer.write` makes them (a test checks
it) at a fraction of the per-message cost of `Writer.write` (a BytesIO and five
`int.to_bytes` per message). The chunk is still closed past 1 MiB by rosbags'
`close_chunk`, and closing and indexing stay rosbags' own.

Any other storage, compression mode or rosbags layout gets `writer.write` itself.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from rosbags.rosbag2 import Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.storage_mcap import McapWriter

Append = Callable[[Any, int, bytes], None]

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


def message_appender(writer: Writer) -> Append:
    """A fast equivalent of `writer.write` for an opened writer (see the module doc)."""
    if not _mcap_layout_known(writer):
        return writer.write
    storage: Any = writer.storage
    counts = writer.counts
    channel_stats = storage.channel_stats
    pack = _MESSAGE.pack

    def append(connection: Any, timestamp: int, data: bytes) -> None:
        cid = connection.id
        chunk = storage.chunk
        bio = chunk.bio
        chunk.msgs[cid].append((timestamp, bio.tell()))
        bio.write(pack(0x05, _MESSAGE_FIELDS + len(data), cid, 0, timestamp, timestamp))
        bio.write(data)
        if timestamp < chunk.message_start_time:
            chunk.message_start_time = timestamp
        if timestamp > chunk.message_end_time:
            chunk.message_end_time = timestamp
        if timestamp < storage.message_start_time:
            storage.message_start_time = timestamp
        if timestamp > storage.message_end_time:
            storage.message_end_time = timestamp
        if timestamp < writer.min_timestamp:
            writer.min_timestamp = timestamp
        if timestamp > writer.max_timestamp:
            writer.max_timestamp = timestamp
        channel_stats[cid] += 1
        counts[cid] += 1
        if bio.tell() > _CHUNK_LIMIT:
            storage.close_chunk()

    return append
