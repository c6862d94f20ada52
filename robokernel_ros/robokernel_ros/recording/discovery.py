"""Which paths hold recorded episodes, and reading one (the trace discovery that scoring,
`report`, `export-lerobot` and the flywheel share).

    from robokernel_ros.recording.discovery import expand_paths, load_episode
    for path in expand_paths(["runs/"]):
        trace = load_episode(path)

A recorded episode is a run directory (events.jsonl), a rosbag2 folder or storage file, or
a run directory left with its bag only. A folder holds them (runs/), and an `eval --output`
folder holds them in its runs/. Refusals are ValueErrors naming the path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..kernel.events import ACTION, EPISODE_START
from ..kernel.trace import EVENTS_FILE, Trace, load_trace
from ..tasks.eval_output import EVAL_CONFIG, EVAL_INFO, RUNS_DIR
from .mirror import BAG_DIR
from .reader import is_bag


def is_trace(path: Path) -> bool:
    """Whether `path` is one recorded episode: a run directory, a bag, or a run directory
    left with its bag only."""
    if (path / EVENTS_FILE).is_file():
        return True
    return is_bag(path) or is_bag(path / BAG_DIR)  # a run directory left with its bag only


def _episodes_folder(path: Path) -> Path:
    """An `eval --output` folder's runs/ (its eval_config.json or eval_info.json beside it);
    any other path as it is."""
    runs = path / RUNS_DIR
    if runs.is_dir() and ((path / EVAL_CONFIG).is_file() or (path / EVAL_INFO).is_file()):
        return runs
    return path


def expand_paths(paths: Iterable[str | Path], skipped: list[str] | None = None) -> list[Path]:
    """Each PATH is a run directory, a bag, a folder of them (e.g. runs/), or an
    `eval --output` folder (its runs/): the episodes, in order.

    A run directory that also holds its bag counts once (the run directory). Among several
    paths (a shell's `runs/*`), a folder that holds no episode (the report's runs/report/,
    a demo's logs/) is left out, and named in `skipped` when given; one path alone, or
    paths that hold no episode at all, are refused (ValueError naming the path).
    """
    raws = list(paths)
    found: list[Path] = []
    empty: list[str] = []
    for raw in raws:
        p = Path(raw)
        if not p.exists():
            raise ValueError(f"path={str(raw)!r}: does not exist")
        if is_trace(p) or p.is_file():
            found.append(p)
            continue
        p = _episodes_folder(p)
        children = sorted(c for c in p.iterdir() if c.is_dir() and is_trace(c))
        if not children:
            empty.append(str(raw))
            continue
        found.extend(children)
    if empty and (len(raws) == 1 or not found):
        raise ValueError(f"path={empty[0]!r}: neither a run directory, a bag, nor a folder of them")
    if skipped is not None:
        skipped.extend(empty)
    return found


def load_episode(path: str | Path) -> Trace:
    """`load_trace(path)`, refused by name (ValueError) when it cannot be read or holds no
    episode (no episode.start and no executed step: e.g. a bag cut before its first
    complete record). A recording cut short but holding steps loads (`trace.truncated`)."""
    try:
        trace = load_trace(path)
    except ValueError:
        raise
    except Exception as exc:  # the storage libraries raise their own types on damaged files
        raise ValueError(f"path={str(path)!r}: unreadable ({type(exc).__name__}: {exc})") from exc
    if not any(e.kind in (EPISODE_START, ACTION) for e in trace.events):
        cut = " (the file is cut short; see `robokernel bag-recover`)" if trace.truncated else ""
        raise ValueError(
            f"path={str(path)!r}: empty: no recorded episode ({len(trace.events)} events){cut}"
        )
    return trace
