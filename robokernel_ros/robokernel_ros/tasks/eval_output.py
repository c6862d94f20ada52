"""One folder per evaluation (`robokernel eval ... --output DIR`), like lerobot-eval's.

    DIR/eval_info.json   per-episode records and the aggregate (lerobot-eval's keys:
                         per_episode[].episode_ix / sum_reward / max_reward / success /
                         seed, aggregated.avg_sum_reward / avg_max_reward / pc_success /
                         eval_s / eval_ep_s, video_paths), plus each episode's outcome,
                         steps, run directory and bag, the success rate's 95 % interval,
                         the call's configuration and the full eval report
    DIR/runs/<run_id>/   the episodes' run directories (trace, meta, bag)
    DIR/videos/          the episodes' MP4s (when videos are asked for)

DIR/eval_config.json holds the call's options, written before the first episode, so that
`--resume DIR` after a crash or a Ctrl-C runs the episodes that did not finish (a
stopped episode is run again, numbered as before; its partial video is removed) and the
aggregate covers them all; eval_s adds up the invocations' seconds (those of one killed
with SIGKILL, which wrote no eval_info.json, are not known).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .statistics import wilson_interval

EVAL_INFO = "eval_info.json"
EVAL_CONFIG = "eval_config.json"
RUNS_DIR = "runs"
VIDEOS_DIR = "videos"


def output_folder(path: str | Path) -> Path:
    """The --output folder: new, or empty. Refuses a file and a folder with contents."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output={str(path)!r}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise ValueError(
            f"output={str(path)!r}: already holds files (an evaluation's folder is never "
            "overwritten; give a new folder)"
        )
    return out


def _max_reward(trace: Any) -> float | None:
    from robokernel_ros.kernel.events import ACTION

    rewards = [
        float(e.data["reward"])
        for e in trace.of_kind(ACTION)
        if isinstance(e.data.get("reward"), int | float) and math.isfinite(e.data["reward"])
    ]
    return max(rewards) if rewards else None


def episode_from_run(run_dir: str | Path, base_seed: int) -> dict[str, Any] | None:
    """The per-episode record of a finished run directory (None: it never finished, or it
    was stopped, e.g. by Ctrl-C: such an episode is run again by --resume). episode_ix is
    the episode's place in the whole evaluation: its seed - the evaluation's base seed."""
    from robokernel_ros.kernel.trace import load_trace

    try:
        trace = load_trace(run_dir)
    except ValueError:
        return None
    meta = trace.meta
    outcome = meta.get("outcome")
    if outcome is None or outcome == "stopped" or not isinstance(meta.get("seed"), int):
        return None
    bag = Path(run_dir) / "bag"
    return {
        "episode_ix": int(meta["seed"]) - base_seed,
        "sum_reward": meta.get("total_reward"),
        "max_reward": _max_reward(trace),
        "success": outcome == "success",
        "seed": meta["seed"],
        "outcome": outcome,
        "steps": meta.get("steps"),
        "run_id": meta.get("run_id"),
        "run_dir": str(run_dir),
        "bag": str(bag) if bag.is_dir() else None,
        "video_path": None,
    }


def finished_episodes(
    runs: str | Path, base_seed: int, n_episodes: int
) -> tuple[dict[int, dict[str, Any]], list[Path]]:
    """({episode_ix: record} of the finished episodes under `runs`, the other run dirs)."""
    done: dict[int, dict[str, Any]] = {}
    unfinished: list[Path] = []
    folder = Path(runs)
    for run_dir in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        record = episode_from_run(run_dir, base_seed)
        if record is None or not 0 <= record["episode_ix"] < n_episodes:
            unfinished.append(run_dir)
        else:
            done.setdefault(record["episode_ix"], record)
    return done, unfinished


def records_from_report(report: Mapping[str, Any], base_seed: int) -> list[dict[str, Any]]:
    """Per-episode records of an eval report (an evaluation without a trace)."""
    return [
        {
            "episode_ix": int(e.get("seed") or 0) - base_seed,
            "sum_reward": e.get("total_reward"),
            "max_reward": None,
            "success": bool(e.get("success")),
            "seed": e.get("seed"),
            "outcome": e.get("outcome"),
            "steps": e.get("steps_advanced"),
            "run_id": e.get("run_id"),
            "run_dir": e.get("trace_path"),
            "bag": e.get("bag_path"),
            "video_path": e.get("video_path"),
        }
        for e in report.get("episodes") or []
    ]


def eval_info(
    per_episode: list[dict[str, Any]],
    config: Mapping[str, Any],
    reports: list[Mapping[str, Any]],
    *,
    earlier_s: float = 0.0,
) -> dict[str, Any]:
    """lerobot-eval's eval_info.json layout; the aggregate covers every record. eval_s:
    the reports' seconds plus `earlier_s` (a resumed evaluation's earlier invocations)."""
    per_episode = sorted(per_episode, key=lambda r: r["episode_ix"])
    n = len(per_episode)
    successes = sum(1 for r in per_episode if r["success"])
    rewards = [float(r["sum_reward"]) for r in per_episode if r["sum_reward"] is not None]
    max_rewards = [r["max_reward"] for r in per_episode if r["max_reward"] is not None]
    elapsed = earlier_s + sum(float(r.get("elapsed_s") or 0.0) for r in reports)
    return {
        "per_episode": per_episode,
        "aggregated": {
            "avg_sum_reward": (sum(rewards) / len(rewards)) if rewards else None,
            "avg_max_reward": (sum(max_rewards) / len(max_rewards)) if max_rewards else None,
            "pc_success": 100.0 * successes / n if n else None,
            "successes": successes,
            "success_rate_ci95": list(wilson_interval(successes, n)) if n else None,
            "n_episodes": n,
            "n_episodes_requested": config.get("episodes"),
            "eval_s": elapsed,
            "eval_ep_s": elapsed / n if n else None,
        },
        "video_paths": [r["video_path"] for r in per_episode if r["video_path"]],
        "config": dict(config),
        "reports": [dict(r) for r in reports],
    }


def write_json(path: str | Path, obj: Any) -> Path:
    """Write `obj` as JSON (a non-finite number becomes null), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(obj), indent=2, allow_nan=False)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return path


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
