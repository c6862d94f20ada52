"""Scoring many recorded episodes: per episode and aggregated, as a dict or a table.

Which paths hold episodes, and reading one, is the recording layer's
(`recording.discovery`: `expand_paths`, `load_episode`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..recording.discovery import expand_paths, load_episode
from .scorers import Scorer, aggregate, get_scorers, score_trace


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
    ("interventions", "takeovers"),  # episodes run with a teleop source only
    ("intervention_share", "operated"),
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
