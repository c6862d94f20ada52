"""The episode's foxglove.mcap, written from the run directory by a pooled child process.

    rec = McapRecording()                      # takes a child from the pool (the rollout's thread)
    rec.open(run_dir, base_ns=..., image_hz=10.0, progress={...})   # at episode.start
    rec.finish()                               # after the episode: the child closes the file
    stats = rec.result()                       # waits for it (now, or after the next episode)

Why a process that reads the trace. The file holds the channels' messages for every
event at the full control rate (two JointStates per step, the scene, the log lines...).
Translating and serialising them costs ~20 us per SO-101 step, and a thread cannot hide
it: under the GIL it competes with the loop; even handing every event to a child through
a pipe costs the loop's process a few microseconds a step (bench/live_view.py). The run
directory already holds every event: the trace writer streams <run_dir>/events.jsonl
(flushed every flush_interval_s) and saves the frames under images/. So the loop's
process sends the child one frame per episode (where to read, where to write, the
episode clock's base); the child follows events.jsonl as it grows and runs the very
LiveChannels translation the live server uses, into an MCAP sink of its own foxglove
Context, stamped as the server stamps them (`EpisodeMcap.stamp`, from that base); finish
has it read the rest and close the file while the caller goes on, result waits for it. A client of a real-time run gets the same
messages as the file; a client of a fast eval gets the joint and action channels at the
display rate (live.view). Where no child can be started the same EpisodeMcap reads the
finished trace in the closing thread. The child is pooled with the rosbag mirror's
writer processes (`recording.writer_process`), framed the same way.

Wire format (parent -> child, stdin): frames of op (1 byte), length (uint32 LE), payload:
    F  follow: JSON {"run_dir", "image_hz", "base_ns", "progress"}: an EpisodeMcap of
       <run_dir>/foxglove.mcap fed from <run_dir>/events.jsonl as it grows
    C  close: read the trace to its end and close the file; the child answers one JSON
       line on stdout: EpisodeMcap.close()'s stats, with "error" when something failed
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

import foxglove

from ..kernel.events import CHUNK_REQUEST, OBSERVATION, Event
from ..kernel.trace import EVENTS_FILE
from .channels import LiveChannels

_log = logging.getLogger(__name__)

MCAP_FILE = "foxglove.mcap"  # the episode's file in its run directory
MODULE = "robokernel_ros.live.recorder"
_REQUEST = b'"kind":"%s"' % CHUNK_REQUEST.encode()  # as the trace writer (orjson) spells it
FOLLOW_PERIOD_S = 0.1  # how often the child reads what the trace writer flushed


class EpisodeMcap:
    """One episode's MCAP from its run directory: LiveChannels on a Context of its own whose
    only sink is <run_dir>/foxglove.mcap, fed the lines of <run_dir>/events.jsonl."""

    def __init__(self, run_dir: str | Path, *, image_hz: float, base_ns: int,
                 progress: dict[str, Any]) -> None:  # fmt: skip
        import orjson

        self._loads = orjson.loads
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / MCAP_FILE
        self.context = foxglove.Context()
        self.channels = LiveChannels(self.context, image_hz=image_hz, load_frame=self._load_frame)
        self.channels.progress_state.update(progress)
        self.base_ns = base_ns
        self.last_ns = base_ns
        self.cpu0 = time.process_time()
        self.events = 0
        self._tail = b""  # a line the trace writer has not finished flushing
        self._file: Any = None
        self.writer = foxglove.open_mcap(self.path, allow_overwrite=True, context=self.context)

    def _load_frame(self, relative: str) -> Any:
        import numpy as np

        return np.load(self.run_dir / relative)

    def stamp(self, t: float) -> int:
        """The stamp of episode time t: the base plus t, never before the last one."""
        ns = self.base_ns + round(t * 1e9)
        if ns < self.last_ns:
            ns = self.last_ns
        self.last_ns = ns
        return ns

    def line(self, line: bytes) -> None:
        if _REQUEST in line[:64]:
            return  # not shown (live.view.SHOWN_KINDS): not even parsed
        d = self._loads(line)
        event = Event(d["kind"], d["step"], d["data"], d["t"], d["wall"], d["seq"])
        self.events += 1
        self.channels.publish(event, self.stamp(event.t))

    def follow(self, final: bool = False) -> None:
        """Translate the complete lines written so far (final: all of them: the episode
        ended, its trace is closed). A frame file the image thread has not saved yet
        holds its observation (and what follows) back to the next call."""
        if self._file is None:
            try:
                self._file = open(self.run_dir / EVENTS_FILE, "rb")  # noqa: SIM115 - closed in close()
            except FileNotFoundError:
                if final:
                    raise
                return
        data = self._tail + self._file.read()
        lines = data.split(b"\n")
        self._tail = lines.pop()  # b"" after a complete last line
        for i, line in enumerate(lines):
            if not line:
                continue
            if not final and b'"images"' in line and not self._frames_saved(line):
                self._tail = b"\n".join(lines[i:]) + b"\n" + self._tail
                return
            self.line(line)
        if final and self._tail:
            self.line(self._tail)
            self._tail = b""

    def _frames_saved(self, line: bytes) -> bool:
        d = self._loads(line)
        images = d["data"].get("images") if d["kind"] == OBSERVATION else None
        if not isinstance(images, dict):
            return True
        return all(not isinstance(p, str) or (self.run_dir / p).exists() for p in images.values())

    def close(self) -> dict[str, Any]:
        try:
            self.follow(final=True)
        finally:
            if self._file is not None:
                self._file.close()
            self.writer.close()
        ch = self.channels
        return {"path": str(self.path), "events": self.events, "sent": dict(ch.sent),
                "messages": ch.messages, "frames": ch.frames, "joint_names": list(ch.joint_names),
                "action_keys": list(ch.action_keys), "cameras": list(ch.cameras),
                "cpu_s": time.process_time() - self.cpu0}  # fmt: skip


class McapRecording:
    """The parent's side: one pooled child per view (or an EpisodeMcap run by finish()
    when none starts), one episode's file at a time. open from the view's sender thread,
    close after the episode's trace is closed (LiveView.detach)."""

    def __init__(self) -> None:
        from ..recording.writer_process import acquire_writer  # the pool: imported when used

        self.failed: str | None = None
        self._spec: dict[str, Any] | None = None
        self._waiting = 0  # close frames sent, not answered yet
        self._results: list[dict[str, Any]] = []  # the in-process fallback's answers
        try:
            self._child: Any = acquire_writer(MODULE)
        except OSError:
            _log.exception("live view: no MCAP writer process could start; writing in-process")
            self._child = None

    def open(
        self, run_dir: Path, *, image_hz: float, base_ns: int, progress: dict[str, Any]
    ) -> Path:
        """Start this episode's file (<run_dir>/foxglove.mcap, returned)."""
        self._spec = {"run_dir": str(run_dir), "image_hz": image_hz, "base_ns": base_ns,
                      "progress": progress}  # fmt: skip
        if self._child is not None and not self.failed:
            self._send(b"F", json.dumps(self._spec).encode())
        return Path(run_dir) / MCAP_FILE

    def finish(self) -> bool:
        """Have this episode's file closed (the child reads the rest of the trace meanwhile);
        False when no episode was opened. Each True is answered by one result()."""
        spec, self._spec = self._spec, None
        if spec is None:
            return False
        if self._child is None:
            try:
                self._results.append(EpisodeMcap(spec["run_dir"], image_hz=spec["image_hz"],
                                                 base_ns=spec["base_ns"], progress=spec["progress"]).close())  # fmt: skip
            except Exception as exc:
                _log.exception("live view: writing %s failed", Path(spec["run_dir"]) / MCAP_FILE)
                self._results.append({"error": f"{type(exc).__name__}: {exc}"})
        elif not self.failed:
            self._send(b"C", b"")
            self._waiting += 1
        return True

    def result(self) -> dict[str, Any]:
        """The stats of the oldest finished file (waits for the child's answer)."""
        if self._results:
            return self._results.pop(0)
        if self._waiting == 0 or self.failed:
            self._waiting = max(0, self._waiting - 1)
            return {"error": self.failed or "no file was finished"}
        self._waiting -= 1
        try:
            reply = self._child.reply()
        except (OSError, ValueError) as exc:
            self._fail(str(exc))
            return {"error": self.failed}
        if reply.get("error"):
            _log.error("live view: the MCAP writer: %s", reply["error"])
        return reply

    def release(self) -> None:
        """Hand the child back to the pool (a failed one is stopped)."""
        from ..recording.writer_process import release_writer

        child, self._child = self._child, None
        if child is None:
            return
        if self.failed:
            child.stop()
        else:
            release_writer(child)

    def _send(self, op: bytes, payload: bytes) -> None:
        from ..recording.writer_process import pack_frame

        try:
            self._child.send(pack_frame(op, payload))
        except (OSError, ValueError):
            self._fail("the MCAP writer process is gone")

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            _log.error("live view: the episode's MCAP stopped: %s", why)


# -- the child side ---------------------------------------------------------------------------


def _serve(fd: int, out: Any) -> None:
    from ..recording.writer_process import split_frames

    buf = bytearray()
    mcap: EpisodeMcap | None = None
    error: str | None = None
    try:
        while True:
            # wait for a frame; while an episode is followed, read its trace meanwhile
            ready, _, _ = select.select([fd], [], [], FOLLOW_PERIOD_S if mcap is not None else None)
            if mcap is not None and error is None:
                try:
                    mcap.follow()
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    _log.exception("MCAP writer: following %s", mcap.run_dir)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return  # EOF: the parent is done (or dead)
            buf += chunk
            for op, payload in split_frames(buf):
                if op == b"F":
                    spec = json.loads(payload)
                    error = None
                    try:
                        mcap = EpisodeMcap(spec["run_dir"], image_hz=spec["image_hz"],
                                           base_ns=spec["base_ns"], progress=spec["progress"])  # fmt: skip
                    except Exception as exc:
                        mcap, error = None, f"{type(exc).__name__}: {exc}"
                        _log.exception("MCAP writer: opening %s", spec.get("run_dir"))
                elif op == b"C":
                    reply: dict[str, Any] = {}
                    if mcap is not None:
                        try:
                            reply = mcap.close()
                        except Exception as exc:  # the parent waits for the line: it comes
                            error = error or f"{type(exc).__name__}: {exc}"
                    mcap = None
                    if error:
                        reply["error"] = error
                    out.write(json.dumps(reply).encode() + b"\n")
                    out.flush()
    finally:
        if mcap is not None:
            mcap.writer.close()


def main() -> None:
    # Ctrl-C reaches the whole process group: the child closes the file when its
    # parent's pipe closes instead of dying with a half-written chunk.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="live MCAP writer: %(levelname)s %(message)s")
    _serve(sys.stdin.fileno(), sys.stdout.buffer)


if __name__ == "__main__":
    main()
