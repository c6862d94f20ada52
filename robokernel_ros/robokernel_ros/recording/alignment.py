"""Hold alignment of several message streams onto one frame clock, streaming.

    aligner = HoldAligner(n_streams=3, fps=30.0, slack_ns=1_000_000_000)
    for stream, stamp_ns, payload, log_ns in messages_in_log_order:
        for frame in aligner.push(stream, stamp_ns, payload, log_ns):
            write(frame.index, frame.stamp_ns, frame.payloads)
    for frame in aligner.finish():
        ...

Frame k's time is `start_ns + k / fps` (start: the episode's start, or the first stamp
pushed); it holds, for every stream, the latest message whose stamp is at or before that
time (hold alignment). Stamps are header stamps or log (receive) times; with header
stamps a message is logged some time after its stamp, so a frame is final only once the
log clock has passed its time by `slack_ns` (messages stay buffered that long: memory is
bounded by the slack, not by the bag). A message whose stamp is older than a final frame
is counted in `late` (it still holds for the frames after it). Frames before every
stream has a message are dropped and counted in `dropped_leading`; frames after `end_ns`
are not made. Nothing here reads a bag.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Frame:
    index: int  # 0, 1, ... among the frames kept
    stamp_ns: int  # the frame's time
    payloads: tuple[Any, ...]  # one per stream: what its held message carried
    stamps: tuple[int, ...]  # the held messages' stamps


class HoldAligner:
    """Hold alignment of `n_streams` streams at `fps` (see the module docstring)."""

    def __init__(
        self,
        n_streams: int,
        fps: float,
        *,
        slack_ns: int = 1_000_000_000,
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> None:
        if n_streams < 1:
            raise ValueError(f"n_streams={n_streams!r}: must be >= 1")
        if not fps > 0:
            raise ValueError(f"fps={fps!r}: must be > 0")
        self.fps = float(fps)
        self.slack_ns = int(slack_ns)
        self.start_ns = start_ns
        self.end_ns = end_ns
        self._buffers: list[deque[tuple[int, Any]]] = [deque() for _ in range(n_streams)]
        self._held: list[tuple[int, Any] | None] = [None] * n_streams
        self._next = 0  # the next grid index to decide
        self._last_final_ns: int | None = None
        self.kept = 0
        self.dropped_leading = 0
        self.late = 0
        self.messages = [0] * n_streams

    def frame_time(self, k: int) -> int:
        assert self.start_ns is not None
        return self.start_ns + round(k * 1e9 / self.fps)

    def push(self, stream: int, stamp_ns: int, payload: Any, log_ns: int) -> list[Frame]:
        """Add one message; returns the frames that became final (log time - slack past them)."""
        if self.start_ns is None:
            self.start_ns = stamp_ns
        self.messages[stream] += 1
        if self._last_final_ns is not None and stamp_ns <= self._last_final_ns:
            self.late += 1
        buf = self._buffers[stream]
        if not buf or buf[-1][0] <= stamp_ns:
            buf.append((stamp_ns, payload))
        else:  # out of stamp order (jitter between log and header time): insert in place
            i = len(buf)
            while i > 0 and buf[i - 1][0] > stamp_ns:
                i -= 1
            buf.insert(i, (stamp_ns, payload))
        return self._advance(log_ns - self.slack_ns)

    def finish(self) -> list[Frame]:
        """The remaining frames, up to `end_ns` or the newest stamp pushed."""
        newest = max((b[-1][0] for b in self._buffers if b), default=None)
        if newest is None and self._last_final_ns is None:
            return []
        until = self.end_ns if self.end_ns is not None else newest
        if until is None:
            return []
        return self._advance(until)

    def _advance(self, until_ns: int) -> list[Frame]:
        out: list[Frame] = []
        if self.start_ns is None:
            return out
        limit = until_ns if self.end_ns is None else min(until_ns, self.end_ns)
        while True:
            t = self.frame_time(self._next)
            if t > limit:
                break
            for i, buf in enumerate(self._buffers):
                held = self._held[i]
                while buf and buf[0][0] <= t:
                    entry = buf.popleft()
                    if held is None or entry[0] >= held[0]:
                        held = entry
                self._held[i] = held
            self._last_final_ns = t
            self._next += 1
            if any(h is None for h in self._held):
                self.dropped_leading += 1
                continue
            held_all: Sequence[tuple[int, Any]] = self._held  # type: ignore[assignment]
            out.append(
                Frame(
                    index=self.kept,
                    stamp_ns=t,
                    payloads=tuple(h[1] for h in held_all),
                    stamps=tuple(h[0] for h in held_all),
                )
            )
            self.kept += 1
        return out
