"""Scoring many recorded episodes: per episode and aggregated, as a dict or a table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..kernel.events import ACTION, EPISODE_START
from ..kernel.trace import EVENTS_FILE, Trace, load_trace
from .scorers import Scorer, aggregate, get_scorers, score_trace


def _is_trace(path: Path) -> bool:
    if (path / EVENTS_FILE).is_file():
        return True
    from ..recording.mirror import BAG_DIR
    from ..recording.reader import is_bag

    return is_bag(path) or is_bag(path / BAG_DIR)  # a run directory left with its bag only


def _episodes_folder(path: Path) -> Path:
    """An `eval --output` folder's runs/ (its eval_config.json or eval_info.json beside it);
    any other path as it is."""
    from ..tasks.eval_output import EVAL_CONFIG, EVAL_INFO, RUNS_DIR

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
        if _is_trace(p) or p.is_file():
            found.append(p)
            continue
        p = _episodes_folder(p)
        children = sorted(c for c in p.iterdir() if c.is_dir() and _is_trace(c))
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


def score_paths(
    paths: Sequence[str | Path], scorers: Sequence[Scorer] | None = None
) -> dict[str, Any]:
    """{"episodes": [per-episode figures], "aggregate": {...}, "skipped": [...],
    "ignored": [...]} for the episodes under `paths`. An unreadable or empty recording is
    left out of both and listed in "skipped" as {"path", "error"}; a folder among several
    paths that holds no episode at all (runs/report/) is listed in "ignored"."""
    chosen = list(scorers) if scorers is not None else get_scorers()
    episodes = []
    skipped: list[dict[str, str]] = []
    ignored: list[str] = []
    sources = expand_paths(paths, ignored)
    for path in sources:
        try:
            trace = load_episode(path)
        except ValueError as exc:
            skipped.append({"path": str(path), "error": str(exc)})
            continue
        episodes.append(score_trace(trace, chosen))
    return {
        "episodes": [public(e) for e in episodes],
        "aggregate": aggregate(episodes, chosen),
        "skipped": skipped,
        "ignored": ignored,
    }


def public(figures: dict[str, Any]) -> dict[str, Any]:
    """Figures without the "_" samples kept for aggregation."""
    return {k: v for k, v in figures.items() if not k.startswith("_")}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items()) or "-"
    return str(value)


TABLE_COLUMNS = (
    ("run_id", "episode"),
    ("outcome", "outcome"),
    ("return", "return"),
    ("length", "steps"),
    ("time_to_success_s", "t_success[s]"),
    ("holds", "holds"),
    ("stale_action_ratio", "stale"),
    (
        "effective_control_hz",
        "wall steps/s",
    ),  # executed steps per wall second, not the control rate
    ("chunk_latency_p50_ms", "lat p50[ms]"),
    ("chunk_latency_p99_ms", "lat p99[ms]"),
    ("shield_interventions", "shield"),
    ("action_jerk_rms", "jerk rms"),
)


def format_table(result: dict[str, Any]) -> str:
    """The per-episode table and the aggregate, as text."""
    episodes = result["episodes"]
    columns = [(k, h) for k, h in TABLE_COLUMNS if any(k in e for e in episodes)]
    rows = [[h for _, h in columns]] + [[_fmt(e.get(k)) for k, _ in columns] for e in episodes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    agg = result["aggregate"]
    lines.append(f"aggregate over {agg.get('episodes', len(episodes))} episode(s):")
    for key, value in agg.items():
        if key != "episodes":
            lines.append(f"  {key}: {_fmt(value)}")
    return "\n".join(lines)
