"""foxglove.JointStates in protobuf, packed by one struct call per message.

    encode = JointStatesEncoder(("shoulder_pan", ...), velocity=True)
    data = encode(ns, positions, velocities)   # bytes == JointStates(...).encode() of the SDK

The SDK's message classes build one Python object per joint per step (about 8 us for a
6-joint arm with velocities); this writes the same bytes from a layout fixed per name
list: JointStates { timestamp = 1 (google.protobuf.Timestamp {seconds = 1, nanos = 2}),
repeated joints = 2 (JointState {name = 1, position = 2, velocity = 3, effort = 5})},
every double present (proto3 optional, so a value the env does not give is left out by
not asking for its column). The channel carries the SDK's own schema
(`JointStates.get_schema()`), so clients decode it as the SDK's messages.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence


def varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint (the common short cases without a loop)."""
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, value >> 14))
    if value < 0x10000000:
        return bytes((value & 0x7F | 0x80, (value >> 7) & 0x7F | 0x80, (value >> 14) & 0x7F | 0x80,
                      value >> 21))  # fmt: skip
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class JointStatesEncoder:
    """Encodes JointStates of a fixed name list with position (+ velocity, + effort)."""

    def __init__(
        self, names: Sequence[str], *, velocity: bool = False, effort: bool = False
    ) -> None:
        self.names = tuple(names)
        self.velocity = velocity
        self.effort = effort
        tags = [b"\x11"] + ([b"\x19"] if velocity else []) + ([b"\x29"] if effort else [])
        width = len(tags)
        fmt = ["<"]
        args: list[bytes | float] = []
        for name in self.names:
            raw = name.encode()
            body_len = 1 + len(varint(len(raw))) + len(raw) + 9 * width
            head = b"\x12" + varint(body_len) + b"\x0a" + varint(len(raw)) + raw
            for i, tag in enumerate(tags):
                const = head + tag if i == 0 else tag
                fmt.append(f"{len(const)}sd")
                args += [const, 0.0]
        self._pack = struct.Struct("".join(fmt)).pack
        self._args = args  # constants at even indexes, the doubles at odd ones (reused)
        self._step = 2 * width
        self._sec = -1
        self._sec_bytes = b""

    def __call__(self, ns: int, positions: Sequence[float], velocities: Sequence[float] = (),
                 efforts: Sequence[float] = ()) -> bytes:  # fmt: skip
        """The message; raises struct.error / ValueError when a value or a column is off."""
        args, step = self._args, self._step
        args[1::step] = positions
        if self.velocity:
            args[3::step] = velocities
        if self.effort:
            args[step - 1 :: step] = efforts
        sec, nsec = divmod(ns, 1_000_000_000)
        if sec != self._sec:  # the seconds field changes once a second
            self._sec, self._sec_bytes = sec, (b"\x08" + varint(sec) if sec else b"")
        body = self._sec_bytes + (b"\x10" + varint(nsec) if nsec else b"")
        return b"\x0a" + bytes((len(body),)) + body + self._pack(*args)
