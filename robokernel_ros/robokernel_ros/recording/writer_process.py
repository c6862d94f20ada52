"""The rosbag2 mirror in a writer process, so a recorded loop runs at the speed of an
unrecorded one.

Serialising every kernel event to CDR and MCAP costs the loop about as much as the
MuJoCo step itself (bench/rollout_throughput.py: ~90 us per SO-101 step), and a thread
cannot hide it: the GIL is held by mj_step and by the mirror alike. So the episode's
process only frames each event's events.jsonl line (encoded once already, for the run
directory: `kernel.trace.event_line`) into a pipe, in batches; a child process rebuilds
the events from those lines and runs the very EpisodeBagMirror the in-process path
uses, on the machine's other core. The bag holds the same events and topics as the
in-process mirror writes from the run directory (`mirror_trace`; tested).

    mirror = ProcessBagMirror(trace_dir)          # as EpisodeBagMirror(trace_dir)
    mirror.attach(bus)
    runner.run(...)
    mirror.close()                                # waits until the bag is closed
    mirror.last_bag_path

What a crash leaves: the child reads to the end of the pipe, so when the episode's
process dies (even by SIGKILL) the child still writes what it was sent and closes the
bag with its metadata; what was not yet sent (at most `send_interval_s`, 0.1 s, of
events, and what a child that lags had not read yet) is lost. The pipe is written by a
thread, so a child that is slow for a moment (starting, opening a bag) does not hold up
the loop; beyond 64 MiB queued the loop waits for it. If the child dies, the mirror logs
it once and stops (the episode goes on), and the bag holds what the child flushed. Where
no child can be started, the mirror runs in-process.

Children are pooled per process: one is started (~0.5-1 s, it imports rosbags) the first
time a bag is mirrored, and reused by the next episodes; parallel episodes get one each.

The pool is public for other children that speak the same framing (live.recorder's
MCAP writer): `acquire_writer(module)` takes an idle `WriterProcess` running
`python -m module` (or starts one), `release_writer(child)` hands it back, `pack_frame(op,
payload)` builds a frame for `child.send`, and the child reads them with
`split_frames(buffer)`; `child.reply()` reads its one-line JSON answers.

Wire format (parent -> child, stdin): frames of op (1 byte), length (uint32 LE), payload:
    O  open: JSON {"root", "storage", "kwargs"}: an EpisodeBagMirror for the next events
    R  the run_id of the events that follow (utf-8)
    L  an event: its events.jsonl line (seq, kind, step, t, wall, data)
    P  an event as a pickle (observations carrying image arrays: no JSON line for them):
       the count of its out-of-band buffers (uint32 LE), then the pickle (protocol 5);
       that many B frames follow it
    B  one out-of-band buffer of the pickle before it (a camera frame's pixels, raw)
    C  close the mirror; the child answers one JSON line on stdout:
       {"bag_paths": [...], "failed": bool}
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..kernel.events import EPISODE_END, EPISODE_START, OBSERVATION, Event
from ..kernel.trace import event_line
from ..memory import retain_freed_memory
from .mirror import STORAGES, bag_path_for

_log = logging.getLogger(__name__)

FRAME_HEAD = struct.Struct("<cI")  # a frame: op (1 byte), payload length (uint32 LE)
_COUNT = struct.Struct("<I")
_F_SETPIPE_SZ = 1031  # Linux fcntl: a 1 MiB pipe lets the child start while events queue
_PIPE_BYTES = 1 << 20
_MAX_IDLE = 4
_QUEUE_BYTES = 64 << 20  # queued for a child beyond this, send() waits for it


# -- the parent side ------------------------------------------------------------------------


_MODULE = "robokernel_ros.recording.writer_process"


class WriterProcess:
    """One writer process and its pipes: `python -m module` (this one, or another that
    speaks the same framing on stdin/stdout: live.recorder)."""

    def __init__(self, module: str = _MODULE) -> None:
        self.module = module
        package_parent = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_parent, env.get("PYTHONPATH", "")) if p
        )
        self.proc = subprocess.Popen(  # noqa: S603 - our own module, our interpreter
            [sys.executable, "-m", module],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            import fcntl

            fcntl.fcntl(self.proc.stdin.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
        except (ImportError, OSError):
            pass  # the default pipe size: the loop may wait while the child starts

        # The pipe is written by a thread of its own: a child busy opening a bag (or just
        # started: it imports rosbags) while camera frames come held up the episode loop for
        # 0.2-0.3 s at its first step (bench/workcell_timing.py --cameras).
        self._queue: collections.deque[bytes | bytearray] = collections.deque()
        self._queued_bytes = 0
        self._cond = threading.Condition()
        self._error: OSError | None = None
        self._closing = False
        self._writer = threading.Thread(target=self._write_loop, name="bag-pipe", daemon=True)
        self._writer.start()

    def alive(self) -> bool:
        return self.proc.poll() is None and self._error is None

    def send(self, data: bytes | bytearray) -> None:
        """Queue `data` for the child's stdin and return; waits only while more than
        _QUEUE_BYTES are queued (a child that cannot keep up). Raises the OSError that
        ended the writing (the child is gone)."""
        with self._cond:
            while self._error is None and self._queued_bytes > _QUEUE_BYTES:
                self._cond.wait()
            if self._error is not None:
                raise self._error
            self._queue.append(data)  # handed over: the mirror starts a new buffer
            self._queued_bytes += len(data)
            self._cond.notify_all()

    def _write_loop(self) -> None:
        stdin = self.proc.stdin
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return  # closing, and everything queued is written
                data = self._queue.popleft()
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError) as exc:
                with self._cond:
                    self._error = exc if isinstance(exc, OSError) else BrokenPipeError(str(exc))
                    self._queue.clear()
                    self._queued_bytes = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._queued_bytes -= len(data)
                self._cond.notify_all()

    def reply(self) -> dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise BrokenPipeError(f"bag writer process exited ({self.proc.poll()})")
        return json.loads(line)

    def stop(self, timeout_s: float = 10.0) -> None:
        with self._cond:  # what is queued goes first
            self._closing = True
            self._cond.notify_all()
        self._writer.join(timeout_s)
        try:
            self.proc.stdin.close()  # EOF: the child closes what it has open and exits
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


_pool_lock = threading.Lock()
_idle: list[WriterProcess] = []


def acquire_writer(module: str = _MODULE) -> WriterProcess:
    """An idle pooled child running `python -m module`, or a new one (OSError when it
    cannot start). Hand it back with release_writer, or stop() it."""
    with _pool_lock:
        for child in [c for c in reversed(_idle) if c.module == module]:
            _idle.remove(child)
            if child.alive():
                return child
    return WriterProcess(module)


def release_writer(child: WriterProcess) -> None:
    """Back to the pool for the next acquire_writer (a dead child, or one beyond the pool's
    size, is stopped)."""
    with _pool_lock:
        if child.alive() and len(_idle) < _MAX_IDLE:
            _idle.append(child)
            return
    child.stop()


@atexit.register
def shutdown_pool() -> None:
    """Stop the idle writer processes (each finishes what it was sent first)."""
    with _pool_lock:
        children, _idle[:] = list(_idle), []
    for child in children:
        child.stop()


def pack_frame(op: bytes, payload: bytes) -> bytes:
    """One frame of the wire format: `op` (one byte), the payload's length, the payload."""
    return FRAME_HEAD.pack(op, len(payload)) + payload


def split_frames(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """The whole frames at the start of `buffer` as (op, payload), removed from it; a frame
    not fully read yet stays for the next call (a child that reads its stdin in pieces)."""
    frames = []
    while len(buffer) >= FRAME_HEAD.size:
        op, size = FRAME_HEAD.unpack_from(buffer)
        if len(buffer) < FRAME_HEAD.size + size:
            break
        frames.append((op, bytes(buffer[FRAME_HEAD.size : FRAME_HEAD.size + size])))
        del buffer[: FRAME_HEAD.size + size]
    return frames


class ProcessBagMirror:
    """EpisodeBagMirror's interface, with the bag written by a pooled writer process.

    root, storage, mirror_kwargs: as EpisodeBagMirror (each episode's bag lands at
    <root>/<run_id>/bag). send_interval_s: the longest time an event waits in this
    process before it is sent (also what a SIGKILL of this process can lose).
    """

    def __init__(
        self,
        root: str | Path,
        *,
        storage: str = "mcap",
        send_interval_s: float = 0.1,
        **mirror_kwargs: Any,
    ) -> None:
        if not isinstance(root, str | Path) or str(root) == "":
            raise ValueError(f"root={root!r}: must be a non-empty path")
        if storage not in STORAGES:
            raise ValueError(f"storage={storage!r}: must be one of {', '.join(STORAGES)}")
        try:  # they travel to the child as JSON (so no image_loader: frames come along)
            json.dumps(mirror_kwargs)
        except TypeError:
            raise ValueError(
                f"mirror_kwargs={mirror_kwargs!r}: must be JSON values (BagMirror's "
                "flush_interval_s, prefix)"
            ) from None
        self.root = Path(root)
        self.storage = storage
        self.mirror_kwargs = mirror_kwargs
        self.send_interval_s = send_interval_s
        self.bag_paths: list[Path] = []
        self.failed = False
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._last_send = time.monotonic()
        self._run_id: str | None = None
        self._started: list[Path] = []  # the bag of each episode.start sent
        self._child: WriterProcess | None = None
        self._inline: Any = None  # an in-process EpisodeBagMirror when no child starts
        self._open()

    def _open(self) -> None:
        try:
            self._child = acquire_writer()
        except OSError:
            _log.exception("no bag writer process could start; mirroring in-process")
            from .mirror import EpisodeBagMirror

            self._inline = EpisodeBagMirror(self.root, storage=self.storage, **self.mirror_kwargs)
            return
        spec = {"root": str(self.root), "storage": self.storage, "kwargs": self.mirror_kwargs}
        self._buf += pack_frame(b"O", json.dumps(spec).encode())

    @property
    def last_bag_path(self) -> Path | None:
        if self._inline is not None:
            return self._inline.last_bag_path
        return self.bag_paths[-1] if self.bag_paths else None

    def attach(self, bus: Any) -> Callable[[], None]:
        return bus.subscribe(self)

    def __call__(self, event: Event) -> None:
        if self._inline is not None:
            self._inline(event)
            return
        if self.failed or self._child is None:
            return
        kind = event.kind
        frames: list[bytes] = []  # the raw buffers of an observation's images, framed after it
        if kind == OBSERVATION and event.data.get("images"):
            # The pixels travel out of band (PEP 574): copied once here (the env may reuse
            # its arrays once the step is over), not into the pickle, the frame and the
            # batch in turn; the child rebuilds the arrays over what it reads.
            buffers: list[pickle.PickleBuffer] = []
            payload = pickle.dumps(event, protocol=5, buffer_callback=buffers.append)
            record = pack_frame(b"P", _COUNT.pack(len(buffers)) + payload)
            for buffer in buffers:
                pixels = bytes(buffer.raw())
                frames += (FRAME_HEAD.pack(b"B", len(pixels)), pixels)
        else:
            record = pack_frame(b"L", event_line(event))  # the run directory's line, encoded once
        with self._lock:
            if kind == EPISODE_START and event.run_id:
                # known here too, so a bag the child could not finish is still reported
                self._started.append(bag_path_for(self.root / event.run_id))
            if event.run_id != self._run_id:
                self._run_id = event.run_id
                self._buf += pack_frame(b"R", event.run_id.encode())
            self._buf += record
            now = time.monotonic()
            if frames:  # sent as they are, after what is batched
                self._send(now, extra=frames)
            elif (
                len(self._buf) >= 1 << 16
                or now - self._last_send >= self.send_interval_s
                or kind in (EPISODE_END, EPISODE_START)
            ):
                self._send(now)

    def _send(
        self, now: float, child: WriterProcess | None = None, extra: Sequence[bytes] = ()
    ) -> None:
        """Hand the batch, then `extra` (large pieces, not copied into it), to the child."""
        data, self._buf = self._buf, bytearray()
        self._last_send = now
        try:
            child = child or self._child
            child.send(data)
            for piece in extra:
                child.send(piece)
        except (OSError, ValueError):
            self._fail("the bag writer process is gone")

    def _fail(self, why: str) -> None:
        if not self.failed:
            self.failed = True
            _log.error("bag mirror of %s stopped: %s", self.root, why)

    def close(self) -> None:
        """Send what is queued, close the open bag and wait for it (idempotent)."""
        if self._inline is not None:
            self._inline.close()
            return
        with self._lock:
            child, self._child = self._child, None
            if child is None:
                return
            if not self.failed:
                self._buf += pack_frame(b"C", b"")
                self._send(time.monotonic(), child)
            reply = None
            if not self.failed:
                try:
                    reply = child.reply()
                except (OSError, ValueError) as exc:
                    self._fail(str(exc))
            if reply is None:  # what the child wrote before it died is still a bag
                self.bag_paths.extend(p for p in self._started if p.is_dir())
                child.stop()
                return
        self.bag_paths.extend(Path(p) for p in reply["bag_paths"])
        if reply.get("failed"):
            self._fail("the writer reported a storage error (see its log)")
        release_writer(child)


# -- the child side ---------------------------------------------------------------------------


def _serve(inp: Any, out: Any) -> None:
    import orjson

    from .mirror import EpisodeBagMirror

    read = inp.read
    unpack = FRAME_HEAD.unpack
    loads = orjson.loads
    mirror: EpisodeBagMirror | None = None
    run_id = ""
    try:
        while True:
            head = read(5)
            if len(head) < 5:
                return  # EOF: the parent is done (or dead)
            op, size = unpack(head)
            payload = read(size)
            if op == b"L":
                d = loads(payload)
                event = Event(d["kind"], d["step"], d["data"], d["t"], d["wall"], d["seq"], run_id)
                event.line = payload
                mirror(event)
            elif op == b"P":
                (count,) = _COUNT.unpack_from(payload)
                buffers = []
                for _ in range(count):
                    head = read(5)
                    if len(head) < 5:
                        return  # the parent died mid-observation
                    _op, size = unpack(head)
                    buffer = bytearray(size)  # the array is rebuilt over it: no copy
                    if inp.readinto(buffer) < size:
                        return
                    buffers.append(buffer)
                event = pickle.loads(payload[_COUNT.size :], buffers=buffers)  # noqa: S301 - our own parent's frames
                mirror(event)
            elif op == b"R":
                run_id = payload.decode()
            elif op == b"O":
                spec = json.loads(payload)
                mirror = EpisodeBagMirror(spec["root"], storage=spec["storage"], **spec["kwargs"])
            elif op == b"C":
                failed = False
                if mirror is not None:
                    mirror.close()
                    failed = mirror.failed
                    paths = [str(p) for p in mirror.bag_paths]
                else:
                    paths = []
                mirror = None
                out.write(json.dumps({"bag_paths": paths, "failed": failed}).encode() + b"\n")
                out.flush()
    finally:
        if mirror is not None:
            mirror.close()


def main() -> None:
    retain_freed_memory()  # camera frames pass through: ~3x less CPU per frame (memory.py)
    # Ctrl-C in a terminal reaches the whole process group: the child finishes the bag
    # when its parent's pipe closes instead of dying with a half-written chunk.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="bag writer: %(levelname)s %(message)s")
    _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
