"""The run directory writer: `TraceStore` opens one per episode, `RunWriter` streams it.

Layout of a run directory:

    <root>/<run_id>/                 run_id = "YYYYmmdd-HHMMSS-xxxxxx" (sortable, unique)
        meta.json                    the episode.start data; rewritten at the end with the
                                     episode.end summary merged in (outcome, status, steps, ...)
        events.jsonl                 one JSON object per line, in publish order:
                                     {"seq", "kind", "step", "t", "wall", "data"}
                                     (strict JSON: non-finite numbers are written as null)
        images/<camera>/<step:06d>.npy   camera frames (HxWx3 uint8); the observation
                                     event's data["images"] maps camera -> this relative path

Events are streamed as the episode runs: lines are buffered and flushed at least every
`flush_interval_s` of the events' own clock (their `wall` stamps: the episode's
monotonic seconds) and at the end, images are saved by a background thread through
a bounded queue, so memory does not grow with episode length and a killed process
leaves a readable trace (`load_trace` tolerates a truncated last line).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..events import EPISODE_END, EPISODE_START, OBSERVATION, Event
from .jsonl import dumps_pretty, event_line, line_of, line_with_data

_log = logging.getLogger(__name__)

META_FILE = "meta.json"
EVENTS_FILE = "events.jsonl"
IMAGES_DIR = "images"

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_META_KINDS = frozenset((EPISODE_START, EPISODE_END))


def new_run_id() -> str:
    """A sortable, unique run id: local time to the second plus 6 random hex digits."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class _ImageWriter:
    """Saves frames in a background thread; the bounded queue keeps memory flat."""

    def __init__(self, max_queued: int) -> None:
        self._queue: queue.Queue[tuple[Path, np.ndarray] | None] = queue.Queue(maxsize=max_queued)
        self._thread = threading.Thread(target=self._loop, name="trace-images", daemon=True)
        self._thread.start()
        self.errors = 0

    def put(self, path: Path, image: np.ndarray) -> None:
        self._queue.put((path, image))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            path, image = item
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, image, allow_pickle=False)
            except Exception:
                self.errors += 1
                _log.exception("could not save trace image %s", path)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


class RunWriter:
    """Writes one episode's run directory: subscribe it to a bus (`writer(event)` for
    every event), or feed it directly as the EpisodeRecorder does (`write(event)`, or
    `write_fields(...)` when there is no Event). `close()` flushes and waits for the
    images. A disk error is logged once and stops the writer (the episode goes on).
    """

    def __init__(
        self, path: Path, *, flush_interval_s: float = 0.5, max_queued_images: int = 32
    ) -> None:
        self.path = path
        self.run_id = path.name
        self.flush_interval_s = flush_interval_s
        self.failed = False
        self.closed = False
        # Taken by flush() and close() only: the buffered file locks its own writes, so an
        # event from another thread (the operator's) needs no lock of ours, and one that
        # races close() finds the file closed (ValueError) and is dropped, as after close.
        self._lock = threading.Lock()
        self._meta: dict[str, Any] = {"run_id": self.run_id}
        self._file = open(path / EVENTS_FILE, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self._write_line = self._file.write
        self._images: _ImageWriter | None = None
        self._max_queued_images = max_queued_images
        self._flush_due = flush_interval_s  # on the events' wall clock (episode seconds)
        self._image_dirs: dict[str, str] = {}
        # meta.json is written at episode.start (the first event), at episode.end, and at
        # close when neither came; load_trace rebuilds a missing one from the events.
        self._meta_written = False

    def __call__(self, event: Event) -> None:
        self.write(event)

    def write(self, event: Event) -> None:
        """Append the event's line (encoded once: the line cached on the event, which the
        bag mirror shares)."""
        if self.failed or self.closed:
            return
        line = event.line
        if line is None:
            if event.kind == OBSERVATION and "images" in event.data:
                data = {**event.data, "images": self._save_images(event.step, event.data["images"])}
                line = line_with_data(event, data)
            else:
                line = event_line(event)
        self._append(line, event.wall, event)

    def write_fields(self, seq: int, kind: str, step: int, t: float, wall: float,
                     data: dict[str, Any]) -> None:  # fmt: skip
        """write(Event(kind, step, data, t, wall, seq, run_id)), the same line, without an
        Event: the recorder's path when nobody but the trace listens (every event of a
        traced episode then comes here: keep it lean)."""
        if self.failed or self.closed:
            return
        if kind in _META_KINDS or (kind == OBSERVATION and "images" in data):
            self.write(Event(kind, step, data, t, wall, seq, self.run_id))
            return
        self._append(line_of(seq, kind, step, t, wall, data), wall, None)

    def _append(self, line: bytes, wall: float, meta_event: Event | None) -> None:
        """Buffer `line`, flushed once `flush_interval_s` of the events' own clock (their
        wall stamps: no clock read per event) has passed; episode.start and episode.end
        also (re)write meta.json."""
        try:
            try:
                self._write_line(line)
                if wall >= self._flush_due:
                    self._flush_due = wall + self.flush_interval_s
                    self._file.flush()
            except ValueError:  # closed by another thread meanwhile
                return
            if meta_event is not None and meta_event.kind in _META_KINDS:
                self._episode_meta(meta_event)
        except OSError:
            self.failed = True
            _log.exception(
                "trace writer for %s failed; the rest of the episode is not recorded", self.path
            )

    def _episode_meta(self, event: Event) -> None:
        if event.kind == EPISODE_START:
            self._meta = {"run_id": self.run_id, **event.data}
        else:
            self._meta.update(event.data)
        self._write_meta()

    def _save_images(self, step: int, images: Any) -> dict[str, str]:
        if self._images is None:
            self._images = _ImageWriter(self._max_queued_images)
        paths: dict[str, str] = {}
        for camera, image in images.items():
            folder = self._image_dirs.get(camera)
            if folder is None:
                folder = self._image_dirs[camera] = _SAFE_NAME.sub("_", str(camera)) or "camera"
            relative = f"{IMAGES_DIR}/{folder}/{step:06d}.npy"
            # A copy: the env may reuse its frame buffer before the thread saves it.
            self._images.put(self.path / relative, np.array(image, copy=True))
            paths[str(camera)] = relative
        return paths

    def _write_meta(self) -> None:
        tmp = self.path / (META_FILE + ".tmp")
        tmp.write_bytes(dumps_pretty(self._meta))
        tmp.replace(self.path / META_FILE)
        self._meta_written = True

    def flush(self) -> None:
        with self._lock:
            if not self.closed:
                self._file.flush()

    def close(self) -> None:
        """Flush the events, wait for pending images; idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                self._file.close()
                if not self._meta_written and not self.failed:
                    self._write_meta()
            except OSError:
                _log.exception("closing %s failed", self.path / EVENTS_FILE)
        if self._images is not None:
            self._images.close()


class TraceStore:
    """A folder of run directories: `open_run()` starts one per episode.

    TraceStore(root) creates `root` when needed. The EpisodeRunner (and ServedSession)
    call `open_run()` at episode start, their EpisodeRecorder feeds the returned
    RunWriter every event, and closes it after episode.end.
    """

    def __init__(
        self, root: str | Path, *, flush_interval_s: float = 0.5, max_queued_images: int = 32
    ) -> None:
        if not isinstance(root, str | Path) or str(root) == "":
            raise ValueError(f"root={root!r}: must be a non-empty path")
        if not (
            isinstance(flush_interval_s, int | float)
            and not isinstance(flush_interval_s, bool)
            and flush_interval_s >= 0
        ):
            raise ValueError(f"flush_interval_s={flush_interval_s!r}: must be a number >= 0")
        if not (
            isinstance(max_queued_images, int)
            and not isinstance(max_queued_images, bool)
            and max_queued_images >= 1
        ):
            raise ValueError(f"max_queued_images={max_queued_images!r}: must be an integer >= 1")
        self.root = Path(root)
        self.flush_interval_s = float(flush_interval_s)
        self.max_queued_images = max_queued_images

    def run_dir(self, run_id: str) -> Path:
        return self.root / run_id

    def open_run(self, run_id: str | None = None) -> RunWriter:
        """Create <root>/<run_id>/ (a fresh id when None) and return its writer."""
        for _ in range(100):
            rid = run_id or new_run_id()
            path = self.root / rid
            try:
                try:
                    path.mkdir()
                except FileNotFoundError:  # the root first (not checked every episode)
                    self.root.mkdir(parents=True, exist_ok=True)
                    path.mkdir()
            except FileExistsError:
                if run_id is not None:
                    raise ValueError(f"run_id={run_id!r}: {path} already exists") from None
                continue
            return RunWriter(
                path,
                flush_interval_s=self.flush_interval_s,
                max_queued_images=self.max_queued_images,
            )
        raise RuntimeError(f"could not find a free run id under {self.root}")

    def runs(self) -> list[Path]:
        """Run directories under root, oldest first (run ids sort by time)."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and (p / EVENTS_FILE).exists())


def append_event(run_dir: Path, event: Event, meta: dict[str, Any]) -> None:
    """Append `event` to a closed run directory's events.jsonl and merge `meta` into its
    meta.json (a verdict given after the episode ended)."""
    with open(run_dir / EVENTS_FILE, "ab") as f:
        f.write(event_line(event))
    meta_path = run_dir / META_FILE
    merged = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    merged.update(meta)
    tmp = run_dir / (META_FILE + ".tmp")
    tmp.write_bytes(dumps_pretty(merged))
    tmp.replace(meta_path)
