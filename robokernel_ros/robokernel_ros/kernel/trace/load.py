"""Reading a recorded episode back: `load_trace(path)` -> `Trace`.

`load_trace` dispatches on what the path holds through `register_trace_loader`: the
run directory reader is built in; other formats (the rosbag mirror's reader, which
`robokernel_ros.recording` registers on import) register themselves. The kernel imports no
reader: whoever needs one imports its package. Scorers and shadow replay read only this;
they never call the agent or the environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..events import EPISODE_END, EPISODE_START, Event
from .store import EVENTS_FILE, META_FILE


@dataclass
class Trace:
    """A loaded episode: `meta` (dict), `events` (list of Event), `path` (the run directory)."""

    meta: dict[str, Any]
    events: list[Event]
    path: Path
    truncated: bool = False  # the last line was cut (the writing process was killed)
    extras: dict[str, Any] = field(default_factory=dict)  # what other loaders attach

    def of_kind(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def image(self, relative_path: str) -> np.ndarray:
        """Load an image an observation event refers to."""
        return np.load(self.path / relative_path, allow_pickle=False)


TraceLoader = Callable[[Path], Trace]
_LOADERS: list[tuple[str, Callable[[Path], bool], TraceLoader]] = []


def register_trace_loader(
    name: str, accepts: Callable[[Path], bool], loader: TraceLoader
) -> Callable[[], None]:
    """Teach `load_trace` a new format: `accepts(path)` says whether `loader(path)` reads it.

    Loaders registered later are tried first; registering a name again replaces it.
    Returns a callable that removes this registration (harmless when called twice).
    """
    global _LOADERS
    entry = (name, accepts, loader)
    _LOADERS = [entry, *(e for e in _LOADERS if e[0] != name)]

    def unregister() -> None:
        global _LOADERS
        _LOADERS = [e for e in _LOADERS if e is not entry]

    return unregister


def trace_loaders() -> list[str]:
    return [name for name, _, _ in _LOADERS]


def load_trace(path: str | Path) -> Trace:
    """Read a recorded episode from `path` (a run directory, or its events.jsonl, or what a
    registered loader reads: a bag folder once `robokernel_ros.recording` is imported)."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"path={str(path)!r}: does not exist")
    for _, accepts, loader in _LOADERS:
        if accepts(p):
            return loader(p)
    hint = ""
    if "rosbag2" not in trace_loaders() and _looks_like_bag(p):
        hint = "; it looks like a rosbag2 folder: import robokernel_ros.recording to read bags"
    raise ValueError(
        f"path={str(path)!r}: not a trace (readers: {', '.join(trace_loaders())}){hint}"
    )


def _looks_like_bag(p: Path) -> bool:
    """A rosbag2 folder or file by its names (metadata.yaml, .mcap, .db3), read by no one yet."""
    if p.is_dir():
        return (p / "metadata.yaml").is_file() or any(p.glob("*.mcap")) or any(p.glob("*.db3"))
    return p.suffix in (".mcap", ".db3")


def _is_run_dir(path: Path) -> bool:
    if path.is_file():
        return path.name == EVENTS_FILE
    return (path / EVENTS_FILE).is_file()


def iter_event_lines(events_file: Path) -> Iterable[tuple[Event | None, bool]]:
    """(event, False) per line; (None, True) for a cut last line. A bad middle line raises."""
    run_id = events_file.parent.name
    with open(events_file, encoding="utf-8") as f:
        pending: tuple[int, str] | None = None
        for number, line in enumerate(f, start=1):
            if pending is not None:
                raise ValueError(
                    f"{events_file}: line {pending[0]} is not valid JSON: {pending[1][:80]!r}"
                )
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                pending = (number, line)
                continue
            yield (
                Event(
                    kind=obj["kind"],
                    step=int(obj["step"]),
                    data=obj.get("data") or {},
                    t=float(obj.get("t", 0.0)),
                    wall=float(obj.get("wall", 0.0)),
                    seq=int(obj.get("seq", 0)),
                    run_id=run_id,
                ),
                False,
            )
        if pending is not None:
            yield None, True


def meta_from_events(events: list[Event], run_id: str) -> dict[str, Any]:
    """The run directory's meta.json rebuilt from the events (episode.start, then episode.end),
    as the TraceWriter writes it."""
    meta: dict[str, Any] = {"run_id": run_id}
    for event in events:
        if event.kind == EPISODE_START:
            meta = {"run_id": run_id, **event.data}
        elif event.kind == EPISODE_END:
            meta.update(event.data)
    return meta


def load_run_dir(path: Path) -> Trace:
    """A run directory (or its events.jsonl), read as it is: without meta.json (lost, not
    copied) its meta comes from the events. load_trace reads run directories with it; a
    loader of run directories with more beside them (recording.importer_trace) starts from it."""
    run_dir = path.parent if path.is_file() else path
    meta_path = run_dir / META_FILE
    meta: dict[str, Any] | None = json.loads(meta_path.read_text()) if meta_path.exists() else None
    events: list[Event] = []
    truncated = False
    for event, cut in iter_event_lines(run_dir / EVENTS_FILE):
        if cut:
            truncated = True
        elif event is not None:
            events.append(event)
    if meta is None:
        meta = meta_from_events(events, run_dir.name)
    run_id = str(meta.get("run_id") or run_dir.name)
    for event in events:
        event.run_id = run_id
    return Trace(meta=meta, events=events, path=run_dir, truncated=truncated)


register_trace_loader("run_dir", _is_run_dir, load_run_dir)
