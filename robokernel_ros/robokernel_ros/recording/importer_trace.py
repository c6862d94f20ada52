"""Reading an imported run directory (`import-bag`'s): the events like any run directory,
the camera frames from the bag they were imported from.

An imported run directory holds `import.json`; its observations' `images` name bag
messages (`bag/<camera>/<log ns>`). `ImportedTrace.image(path)` decodes one such frame,
`iter_frames(camera)` streams them in step order (a frame held over several steps is
decoded once). `register()` teaches `kernel.load_trace` to read these directories (done
on importing robokernel_ros.recording).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..contract.fields import image_rgb
from ..kernel.events import OBSERVATION
from ..kernel.trace import EVENTS_FILE, Trace
from ..kernel.trace.load import load_run_dir
from . import types as T

IMPORT_FILE = "import.json"


class ImportedTrace(Trace):
    """A run directory written by `import-bag`: frames are read from its bag."""

    @property
    def _info(self) -> dict[str, Any]:
        return self.extras["import"]

    def _bag(self) -> Path:
        bag = Path(self._info["bag"])
        if not bag.exists():
            raise ValueError(
                f"trace {self.path}: its frames are in the bag {str(bag)!r}, which is not there "
                "any more (import it again, or put the bag back)"
            )
        return bag

    def _open_reader(self) -> Any:
        reader = self.extras.get("_reader")
        if reader is None:
            from rosbags.highlevel import AnyReader

            reader = AnyReader([self._bag()], default_typestore=T.typestore())
            reader.open()
            self.extras["_reader"] = reader
        return reader

    def close(self) -> None:
        """Close the bag reader `image()` keeps open (also done when the trace is freed)."""
        reader = self.extras.pop("_reader", None)
        if reader is not None:
            reader.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _topic(self, camera: str) -> tuple[str, str]:
        cams = self._info.get("cameras") or {}
        if camera not in cams:
            raise KeyError(f"camera={camera!r}: not a camera of this import ({sorted(cams)})")
        return cams[camera]["topic"], cams[camera]["type"]

    def image(self, relative_path: str) -> np.ndarray:
        parts = relative_path.split("/")
        if len(parts) != 3 or parts[0] != "bag":
            return super().image(relative_path)
        camera, ns = parts[1], int(parts[2])
        topic, msgtype = self._topic(camera)
        reader = self._open_reader()  # kept open: shadow replay reads a frame per step
        conns = [c for c in reader.connections if c.topic == topic]
        for conn, _, raw in reader.messages(connections=conns, start=ns, stop=ns + 1):
            return image_rgb(reader.deserialize(raw, conn.msgtype), msgtype)
        raise KeyError(f"{relative_path}: no {topic} message at {ns} ns in {self._bag()}")

    def iter_frames(self, camera: str) -> Iterator[tuple[int, np.ndarray]]:
        """(step, RGB frame) for every observation of `camera`, in step order, streaming."""
        wanted: list[tuple[int, int]] = []
        for e in self.events:
            if e.kind == OBSERVATION:
                ref = (e.data.get("images") or {}).get(camera)
                if isinstance(ref, str) and ref.startswith("bag/"):
                    wanted.append((e.step, int(ref.rsplit("/", 1)[1])))
        if not wanted:
            return
        uses: dict[int, int] = {}
        for _, ns in wanted:
            uses[ns] = uses.get(ns, 0) + 1
        topic, msgtype = self._topic(camera)
        lo, hi = min(ns for _, ns in wanted), max(ns for _, ns in wanted)
        cache: dict[int, np.ndarray] = {}
        pos = 0
        from rosbags.highlevel import AnyReader

        with AnyReader([self._bag()], default_typestore=T.typestore()) as reader:
            conns = [c for c in reader.connections if c.topic == topic]
            for conn, ns, raw in reader.messages(connections=conns, start=lo, stop=hi + 1):
                if ns in uses and ns not in cache:
                    cache[ns] = image_rgb(reader.deserialize(raw, conn.msgtype), msgtype)
                while pos < len(wanted) and wanted[pos][1] in cache:
                    step, want = wanted[pos]
                    yield step, cache[want]
                    pos += 1
                    uses[want] -= 1
                    if not uses[want]:
                        del cache[want]
                if pos == len(wanted):
                    return
        if pos < len(wanted):
            raise KeyError(
                f"camera={camera!r} step={wanted[pos][0]}: frame not in the bag {self._bag()}"
            )


def is_imported(path: Path) -> bool:
    run = path.parent if path.is_file() else path
    return (run / EVENTS_FILE).is_file() and (run / IMPORT_FILE).is_file()


def load_imported(path: Path) -> ImportedTrace:
    base = load_run_dir(path)
    run = base.path
    info = json.loads((run / IMPORT_FILE).read_text())
    return ImportedTrace(
        meta=base.meta,
        events=base.events,
        path=run,
        truncated=base.truncated,
        extras={"format": "imported_bag", "import": info},
    )


def register() -> None:
    """Teach kernel.load_trace to read imported run directories."""
    from ..kernel.trace import register_trace_loader

    register_trace_loader("imported_bag", is_imported, load_imported)
