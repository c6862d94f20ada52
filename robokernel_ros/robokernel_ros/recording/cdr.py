"""Hand-written CDR serialisers for the messages the mirror writes.

ROS 2's default wire format: XCDR1 (plain CDR), little endian. A message is the
4-byte encapsulation header `00 01 00 00` followed by its fields in order, each
primitive aligned to its own size (8 at most) counted from the end of the header;
a string is a uint32 length (terminating NUL included), the UTF-8 bytes and a NUL;
a sequence is a uint32 count followed by its elements (a sequence of float64 is
aligned to 8 only when it is not empty, as rosbags and Fast-CDR write it).

The output is byte-for-byte what rosbags' `Typestore.serialize_cdr` produces for the
same message (a property test checks it), at a fraction of the cost: no message
objects are built, and the constant parts of the two per-step messages
(KernelEvent: run_id and kind; JointState: frame_id and joint names) are laid out
once per layout in a cached `struct.Struct`.

Every function takes the stamp as (sec, nanosec) and returns the serialised bytes.
The mirror's per-step messages go through per-topic templates (`KernelEventTemplate`,
`JointStateTemplate`: the layout of a kind or a name list built once, so a message is
one `struct.pack`), which make the same bytes as `kernel_event` and `joint_state`.
"""

from __future__ import annotations

import struct
from collections.abc import Buffer, Sequence
from typing import Any

import numpy as np

HEADER = b"\x00\x01\x00\x00"  # CDR_LE, no options
_ZEROS = bytes(8)
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_MAX_CACHED_LAYOUTS = 256  # per cache: layouts are few (one per kind, per joint-name set)


class CdrBuilder:
    """Appends CDR fields to a list of byte parts, tracking the aligned position.

    The building block of the serialisers below; `bytes()` returns the message.
    """

    __slots__ = ("parts", "pos")

    def __init__(self) -> None:
        self.parts: list[Buffer] = [HEADER]
        self.pos = 0  # bytes written after the encapsulation header

    def align(self, size: int) -> None:
        pad = -self.pos & (size - 1)
        if pad:
            self.parts.append(_ZEROS[:pad])
            self.pos += pad

    def raw(self, data: Buffer, size: int) -> None:
        self.parts.append(data)
        self.pos += size

    def uint8(self, value: int) -> None:
        self.parts.append(bytes((value,)))
        self.pos += 1

    def pack(self, fmt: struct.Struct, alignment: int, *values: Any) -> None:
        self.align(alignment)
        self.parts.append(fmt.pack(*values))
        self.pos += fmt.size

    def uint32(self, value: int) -> None:
        self.pack(_U32, 4, value)

    def float64(self, value: float) -> None:
        self.pack(_F64, 8, value)

    def stamp(self, sec: int, nanosec: int) -> None:
        self.pack(_STAMP, 4, sec, nanosec)

    def string(self, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        self.align(4)
        self.parts.append(_U32.pack(len(data) + 1))
        self.parts.append(data)
        self.parts.append(b"\0")
        self.pos += len(data) + 5

    def strings(self, values: Sequence[str | bytes]) -> None:
        self.uint32(len(values))
        for value in values:
            self.string(value)

    def uint8s(self, data: np.ndarray | Buffer) -> None:
        flat = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        self.uint32(flat.size)
        self.raw(memoryview(flat), flat.size)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


_STAMP = struct.Struct("<iI")  # builtin_interfaces/Time: int32 sec, uint32 nanosec


def _string_field(pos: int, data: bytes) -> tuple[bytes, int]:
    """A string at `pos`: its bytes including the alignment before it, and the new pos."""
    pad = -pos & 3
    out = _ZEROS[:pad] + _U32.pack(len(data) + 1) + data + b"\0"
    return out, pos + len(out)


# -- robokernel_interfaces/msg/KernelEvent ---------------------------------------------
#   builtin_interfaces/Time stamp; string run_id; uint64 seq; string kind; int64 step;
#   string data_json


def _kernel_event_layout(run_id: bytes, kind: bytes) -> struct.Struct:
    # header | sec nanosec | len run_id NUL pad | seq | len kind NUL pad | step | len ...
    pos = 8 + 4 + len(run_id) + 1
    pad_run = -pos & 7
    pos += pad_run + 8 + 4 + len(kind) + 1
    pad_kind = -pos & 7
    return struct.Struct(
        f"<4siII{len(run_id) + 1 + pad_run}sQI{len(kind) + 1 + pad_kind}sqI"
    )  # 's' fields are NUL-padded: the terminator and the alignment come for free


_kernel_event_layouts: dict[tuple[bytes, bytes], struct.Struct] = {}


def _kernel_event_struct(run_id: bytes, kind: bytes) -> struct.Struct:
    key = (run_id, kind)
    layout = _kernel_event_layouts.get(key)
    if layout is None:
        if len(_kernel_event_layouts) >= _MAX_CACHED_LAYOUTS:
            _kernel_event_layouts.clear()
        layout = _kernel_event_layouts[key] = _kernel_event_layout(run_id, kind)
    return layout


def kernel_event(
    sec: int, nanosec: int, run_id: bytes, seq: int, kind: bytes, step: int, data_json: Buffer
) -> bytes:
    """A KernelEvent; run_id, kind and data_json as UTF-8 bytes (data_json without NUL)."""
    layout = _kernel_event_struct(run_id, kind)
    size = memoryview(data_json).nbytes
    head = layout.pack(HEADER, sec, nanosec, len(run_id) + 1, run_id, seq, len(kind) + 1, kind, step, size + 1)  # fmt: skip
    return b"".join((head, data_json, b"\0"))


class KernelEventTemplate:
    """KernelEvent messages of one run_id, one layout per kind.

    `layout(kind)` returns (pack, kind bytes): the layout's bound `pack`. The message of a
    line ending in its newline (which becomes data_json's NUL) is
    `pack(HEADER, sec, nanosec, len(run_id) + 1, run_id, seq, len(kind) + 1, kind, step,
    len(line))` followed by `line[:-1]` and b"\\0" (what `kernel_event_of_line` makes).
    """

    __slots__ = ("run_id", "_layouts")

    def __init__(self, run_id: bytes) -> None:
        self.run_id = run_id
        self._layouts: dict[str, tuple[Any, bytes]] = {}

    def layout(self, kind: str) -> tuple[Any, bytes]:
        """(pack, kind as UTF-8) for `kind`."""
        found = self._layouts.get(kind)
        if found is None:
            kind_bytes = kind.encode()
            found = (_kernel_event_layout(self.run_id, kind_bytes).pack, kind_bytes)
            if len(self._layouts) < _MAX_CACHED_LAYOUTS:
                self._layouts[kind] = found
        return found


def kernel_event_of_line(
    sec: int, nanosec: int, run_id: bytes, seq: int, kind: bytes, step: int, line: Buffer
) -> bytes:
    """`kernel_event(...)` of a data_json given as a line ending in one byte that is not
    part of it (the events.jsonl newline), which becomes the NUL."""
    layout = _kernel_event_struct(run_id, kind)
    view = memoryview(line)
    size = view.nbytes
    head = layout.pack(HEADER, sec, nanosec, len(run_id) + 1, run_id, seq, len(kind) + 1, kind, step, size)  # fmt: skip
    return b"".join((head, view[: size - 1], b"\0"))


_KERNEL_EVENT_HEAD = struct.Struct("<4siII")  # header, sec, nanosec, len(run_id)


def parse_kernel_event(raw: Buffer) -> tuple[int, int, str, int, str, int, bytes]:
    """A KernelEvent's (sec, nanosec, run_id, seq, kind, step, data_json as UTF-8 bytes).

    The inverse of `kernel_event` for little-endian CDR; raises ValueError on anything else.
    """
    view = memoryview(raw).cast("B")
    try:
        head, sec, nanosec, size = _KERNEL_EVENT_HEAD.unpack_from(view, 0)
        if head[1] != 1:
            raise ValueError(f"not little-endian CDR (encapsulation {bytes(head).hex()})")
        pos = 16
        run_id = bytes(view[pos : pos + size - 1]).decode()
        pos += size
        pos += -(pos - 4) & 7
        seq, size = _SEQ_LEN.unpack_from(view, pos)
        pos += 12
        kind = bytes(view[pos : pos + size - 1]).decode()
        pos += size
        pos += -(pos - 4) & 7
        step, size = _STEP_LEN.unpack_from(view, pos)
        pos += 12
        if size < 1 or pos + size > len(view):
            raise ValueError(f"data_json length {size} past the end of the message")
        return sec, nanosec, run_id, seq, kind, step, bytes(view[pos : pos + size - 1])
    except struct.error as exc:
        raise ValueError(f"truncated KernelEvent: {exc}") from exc


_SEQ_LEN = struct.Struct("<QI")
_STEP_LEN = struct.Struct("<qI")


# -- sensor_msgs/msg/JointState ----------------------------------------------------------
#   std_msgs/Header header (Time stamp, string frame_id); string[] name;
#   float64[] position; float64[] velocity; float64[] effort


def _joint_state_layout(
    frame_id: bytes, names: tuple[bytes, ...], counts: tuple[int, int, int]
) -> tuple[struct.Struct, bytes]:
    """The Struct of a JointState with this frame_id, these names and these column sizes.

    Its fields: header, sec, nanosec, the constant bytes (frame_id, names), then per
    column its count and values. Returns (struct, constant bytes).
    """
    fixed, pos = _string_field(8, frame_id)
    parts = [fixed]
    pad = -pos & 3
    parts.append(_ZEROS[:pad] + _U32.pack(len(names)))
    pos += pad + 4
    for name in names:
        out, pos = _string_field(pos, name)
        parts.append(out)
    constant = b"".join(parts)
    fmt = f"<4siI{len(constant)}s"
    for count in counts:
        pad = -pos & 3
        fmt += f"{pad}xI"
        pos += pad + 4
        if count:
            pad = -pos & 7
            fmt += f"{pad}x{count}d"
            pos += pad + 8 * count
    return struct.Struct(fmt), constant


_joint_state_layouts: dict[tuple[Any, ...], tuple[struct.Struct, bytes]] = {}


def _joint_state_struct(
    frame_id: str, names: tuple[str, ...], counts: tuple[int, int, int]
) -> tuple[struct.Struct, bytes]:
    key = (frame_id, names, counts)
    found = _joint_state_layouts.get(key)
    if found is None:
        if len(_joint_state_layouts) >= _MAX_CACHED_LAYOUTS:
            _joint_state_layouts.clear()
        found = _joint_state_layouts[key] = _joint_state_layout(
            frame_id.encode(), tuple(n.encode() for n in names), counts
        )
    return found


def joint_state(
    sec: int,
    nanosec: int,
    frame_id: str,
    names: tuple[str, ...],
    position: Sequence[float],
    velocity: Sequence[float] = (),
    effort: Sequence[float] = (),
) -> bytes:
    """A JointState. position/velocity/effort: Python or numpy floats (ints accepted)."""
    counts = (len(position), len(velocity), len(effort))
    layout, constant = _joint_state_struct(frame_id, names, counts)
    return layout.pack(
        HEADER,
        sec,
        nanosec,
        constant,
        counts[0],
        *position,
        counts[1],
        *velocity,
        counts[2],
        *effort,
    )


class JointStateTemplate:
    """JointState messages of one frame_id and name list (a per-topic template).

    `pack(sec, nanosec, position, velocity=(), effort=())` is `joint_state(sec, nanosec,
    frame_id, names, ...)`; the layout of each column-size combination is built once.
    Values are packed as `joint_state` packs them (struct.error/TypeError on a non-number).
    """

    __slots__ = ("frame_id", "names", "_layouts")

    def __init__(self, frame_id: str, names: tuple[str, ...]) -> None:
        self.frame_id = frame_id
        self.names = names
        self._layouts: dict[tuple[int, int, int], tuple[Any, bytes]] = {}

    def pack(
        self,
        sec: int,
        nanosec: int,
        position: Sequence[float],
        velocity: Sequence[float] = (),
        effort: Sequence[float] = (),
    ) -> bytes:
        counts = (len(position), len(velocity), len(effort))
        found = self._layouts.get(counts)
        if found is None:
            layout, constant = _joint_state_layout(
                self.frame_id.encode(), tuple(n.encode() for n in self.names), counts
            )
            found = (layout.pack, constant)
            if len(self._layouts) < 8:
                self._layouts[counts] = found
        pack, constant = found
        return pack(
            HEADER, sec, nanosec, constant,
            counts[0], *position, counts[1], *velocity, counts[2], *effort,
        )  # fmt: skip


# -- the types written once per chunk, frame or operator command -------------------------


def _header(cdr: CdrBuilder, sec: int, nanosec: int, frame_id: str) -> None:
    cdr.stamp(sec, nanosec)
    cdr.string(frame_id)


def image(
    sec: int, nanosec: int, frame_id: str, pixels: np.ndarray, encoding: str | None = None
) -> bytes:
    """A sensor_msgs/Image of an HxW (mono8) or HxWx1/HxWx3 (mono8/rgb8) uint8 array."""
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    if encoding is None:
        encoding = "rgb8" if channels == 3 else "mono8"
    cdr = CdrBuilder()
    _header(cdr, sec, nanosec, frame_id)
    cdr.pack(_IMAGE_SIZE, 4, height, width)
    cdr.string(encoding)
    cdr.uint8(0)  # is_bigendian
    cdr.uint32(width * channels)  # step: bytes per row
    cdr.uint8s(pixels)
    return cdr.bytes()


_IMAGE_SIZE = struct.Struct("<II")


def _action_chunk_layout(
    run_id: bytes, keys: tuple[bytes, ...], n: int
) -> tuple[struct.Struct, bytes, bytes]:
    """The Struct of an ActionChunk with this run_id, these keys and n action values.

    Fields: header, sec, nanosec, constant (empty frame_id, run_id,
    the alignment before obs_step), obs_step, constant (keys, the alignment before
    horizon), horizon, len(actions), the n values, inference_time_s.
    """
    first, pos = _string_field(8, b"")
    out, pos = _string_field(pos, run_id)
    pad = -pos & 7
    first += out + _ZEROS[:pad]
    pos += pad + 8  # obs_step
    pad = -pos & 3
    second = [_ZEROS[:pad] + _U32.pack(len(keys))]
    pos += pad + 4
    for key in keys:
        out, pos = _string_field(pos, key)
        second.append(out)
    pad = -pos & 3
    second.append(_ZEROS[:pad])
    pos += pad + 8  # horizon, count
    values = ""
    if n:
        pad = -pos & 7
        values = f"{pad}x{n}d"
        pos += pad + 8 * n
    pad = -pos & 7
    rest = b"".join(second)
    fmt = f"<4siI{len(first)}sQ{len(rest)}sII{values}{pad}xd"
    return struct.Struct(fmt), first, rest


_action_chunk_layouts: dict[tuple[Any, ...], tuple[struct.Struct, bytes, bytes]] = {}


def _action_chunk_struct(
    run_id: str, keys: tuple[str, ...], n: int
) -> tuple[struct.Struct, bytes, bytes]:
    key = (run_id, keys, n)
    found = _action_chunk_layouts.get(key)
    if found is None:
        if len(_action_chunk_layouts) >= _MAX_CACHED_LAYOUTS:
            _action_chunk_layouts.clear()
        found = _action_chunk_layouts[key] = _action_chunk_layout(
            run_id.encode(), tuple(k.encode() for k in keys), n
        )
    return found


def _float64_values(actions: np.ndarray | Sequence[float]) -> Sequence[float]:
    if type(actions) is list or type(actions) is tuple:
        return actions
    return np.ascontiguousarray(actions, dtype="<f8").reshape(-1).tolist()


def action_chunk(
    sec: int,
    nanosec: int,
    run_id: str,
    obs_step: int,
    keys: Sequence[str],
    horizon: int,
    actions: np.ndarray | Sequence[float],
    inference_time_s: float,
) -> bytes:
    """A robokernel_interfaces/ActionChunk (actions row-major, horizon x len(keys)).

    actions: a flat sequence of numbers or an array (converted as numpy's float64 does).
    """
    values = _float64_values(actions)
    keys = tuple(keys)
    try:
        return action_chunk_of_values(sec, nanosec, run_id, obs_step, keys, horizon, values, inference_time_s)  # fmt: skip
    except (struct.error, TypeError):  # not all plain numbers: as numpy converts them
        values = np.asarray(values, dtype="<f8").tolist()
        return action_chunk_of_values(sec, nanosec, run_id, obs_step, keys, horizon, values, inference_time_s)  # fmt: skip


def action_chunk_of_values(
    sec: int,
    nanosec: int,
    run_id: str,
    obs_step: int,
    keys: tuple[str, ...],
    horizon: int,
    values: Sequence[float],
    inference_time_s: float,
) -> bytes:
    """`action_chunk(...)` of a flat sequence of action values, converting nothing.

    Raises struct.error/TypeError when a value is not a number (the caller converts).
    """
    layout, first, rest = _action_chunk_struct(run_id, keys, len(values))
    return layout.pack(
        HEADER, sec, nanosec, first, obs_step, rest, horizon, len(values), *values,
        inference_time_s,
    )  # fmt: skip


def shield_intervention(
    sec: int,
    nanosec: int,
    guard: str,
    joint: str,
    value: float,
    limit: float,
    action: str,
    detail: str,
) -> bytes:
    """A robokernel_interfaces/ShieldIntervention."""
    cdr = CdrBuilder()
    cdr.stamp(sec, nanosec)
    cdr.string(guard)
    cdr.string(joint)
    cdr.pack(_TWO_F64, 8, value, limit)
    cdr.string(action)
    cdr.string(detail)
    return cdr.bytes()


_TWO_F64 = struct.Struct("<dd")


def verdict(outcome: str, note: str) -> bytes:
    """A robokernel_interfaces/Verdict."""
    cdr = CdrBuilder()
    cdr.string(outcome)
    cdr.string(note)
    return cdr.bytes()


def string(data: str) -> bytes:
    """A std_msgs/String."""
    cdr = CdrBuilder()
    cdr.string(data)
    return cdr.bytes()
