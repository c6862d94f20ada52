"""What the commands print: a rollout-API envelope as a table or its JSON (`emit`); and the
eval command's folder and interruption handling on the shell (`robokernel eval
--output DIR`, `--resume DIR`, Ctrl-C, `--json`); the files themselves are
`robokernel_ros.tasks.eval_output`'s."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from robokernel_ros.cli.flags import flag_names

TRACE_DIR_DEFAULT = "runs/"


class Interruptible(Protocol):
    """What a Ctrl-C stops: a workcell (rollout.SimWorkcell) whose interrupt() stops the
    running rollout at its next step."""

    def interrupt(self) -> object: ...


def emit(out: Mapping[str, Any], *, as_json: bool) -> int:
    """Print an envelope: the text (a table) or the JSON report; errors to stderr, exit 1."""
    from robokernel_ros.rollout import envelope_json, envelope_text

    if out["status"] != "success":
        print(f"error: {flag_names(envelope_text(out))}", file=sys.stderr)
        if as_json:
            print(
                json.dumps(
                    {
                        "status": out["status"],
                        "error": envelope_text(out),
                        "json": envelope_json(out),
                    }
                )
            )
        return 1
    if as_json:
        print(json.dumps(envelope_json(out), indent=2, allow_nan=False))
    else:
        print(envelope_text(out))
    return 0


def emit_interruptible(out: Mapping[str, Any], state: dict[str, bool], *, as_json: bool) -> int:
    """emit(out), with exit status 130 when a Ctrl-C came (state: `interruptible`'s)."""
    code = emit(out, as_json=as_json)
    return 130 if state["interrupted"] else code


def usage_error(command: str, message: str) -> int:
    """A usage error found after parsing: said like argparse's, exit status 2."""
    print(f"robokernel {command}: error: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def interruptible(cell: Interruptible) -> Iterator[dict[str, bool]]:
    """Ctrl-C (SIGINT) while a rollout runs: the first stops it at the next step (the
    episode ends "stopped", stopped_reason "interrupted", its trace and bag complete) and
    the command prints what finished and exits 130; a second one aborts at once.

    Yields a dict whose "interrupted" is True once a Ctrl-C arrived."""
    state = {"interrupted": False}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if state["interrupted"]:
            raise KeyboardInterrupt
        state["interrupted"] = True
        print("interrupted: stopping at the next step (Ctrl-C again to abort)", file=sys.stderr)
        # from a thread: the handler runs in the main thread, which may hold the locks
        threading.Thread(target=cell.interrupt, name="sigint-stop", daemon=True).start()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield state
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def json_stdout(as_json: bool) -> Iterator[None]:
    """With --json, stdout carries the JSON report only: what libraries print while the
    rollout runs (lerobot's "Loading weights ...") goes to stderr."""
    if not as_json:
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


# What --resume takes as given on its command line: how and where the episodes run and
# what is printed, never what an episode is (that stays as eval_config.json has it).
RESUME_TAKES = (
    "json",
    "progress",
    "live",
    "workers",
    "ray_address",
    "batch_inference",
    "max_batch",
)


def load_resume(
    args: argparse.Namespace, defaults: dict[str, Any], flags: Mapping[str, str]
) -> int:
    """--resume DIR: the options of the evaluation in DIR (its eval_config.json).

    `defaults`: the eval parser's defaults; `flags`: its parameter names' CLI flags. A
    flag given with another value than the saved one is refused by name (exit 2, nothing
    runs), but those in RESUME_TAKES, which are taken as given."""
    from robokernel_ros.tasks.eval_output import EVAL_CONFIG, VIDEOS_DIR

    path = Path(args.resume) / EVAL_CONFIG
    if not path.is_file():
        print(
            f"error: --resume={args.resume!r}: no {EVAL_CONFIG} there (a folder that "
            "eval --output wrote)",
            file=sys.stderr,
        )
        return 1
    saved = json.loads(path.read_text())
    videos = str(Path(args.resume) / VIDEOS_DIR)
    conflicts = []
    if args.output is not None and Path(args.output) != Path(args.resume):
        conflicts.append(f"--output={args.output!r} (it is {args.resume!r})")
    for key, default in defaults.items():
        if key in (*RESUME_TAKES, "resume", "output", "verbose") or key.startswith("_"):
            continue
        given, kept = getattr(args, key, default), saved.get(key, default)
        if isinstance(given, tuple):
            given = list(given)
        if key == "video" and given == "" and kept == videos:
            continue  # bare --video: the folder's videos/, as saved
        if given != default and given != kept:
            flag = flags.get(key, "--" + key.replace("_", "-"))
            conflicts.append(f"{flag}={given!r} (it has {kept!r})")
    if conflicts:
        takes = ", ".join(flags.get(k, "--" + k.replace("_", "-")) for k in RESUME_TAKES)
        return usage_error(
            "eval",
            f"--resume={args.resume!r} continues the evaluation as its {EVAL_CONFIG} has it: "
            f"{', '.join(conflicts)} differ; drop them, or start a new evaluation with "
            f"--output NEW_DIR (--resume takes {takes} as given)",
        )
    for key, value in saved.items():
        if key not in (*RESUME_TAKES, "resume", "verbose", "output"):
            setattr(args, key, value)
    args.output = str(args.resume)
    args.trace_dir = TRACE_DIR_DEFAULT  # set again from --output
    if isinstance(args.video, str) and Path(args.video) == Path(videos):
        args.video = ""
    return 0


def episodes_to_run(args: argparse.Namespace, out_dir: Path | None) -> list[tuple[int, int]]:
    """(first episode, count) blocks: all of them, or on --resume the unfinished ones (their
    run directories, a stopped or cut episode's, move to DIR/unfinished/)."""
    if not args.resume or out_dir is None or args.no_trace:
        return [(0, args.episodes)]
    from robokernel_ros.tasks.eval_output import RUNS_DIR, finished_episodes

    done, unfinished = finished_episodes(out_dir / RUNS_DIR, args.seed or 0, args.episodes)
    for run_dir in unfinished:
        (out_dir / "unfinished").mkdir(exist_ok=True)
        run_dir.rename(out_dir / "unfinished" / run_dir.name)
    missing = [i for i in range(args.episodes) if i not in done]
    # an unfinished episode's video (episode n: *_ep<n>.mp4, the folder's own videos/) is
    # partial: it goes; the episode runs again and records a new one
    from robokernel_ros.tasks.eval_output import VIDEOS_DIR

    videos = out_dir / VIDEOS_DIR
    for i in missing:
        for partial in sorted(videos.glob(f"*_ep{i}.mp4")) if videos.is_dir() else []:
            partial.unlink()
    blocks: list[tuple[int, int]] = []
    for i in missing:
        if blocks and blocks[-1][0] + blocks[-1][1] == i:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + 1)
        else:
            blocks.append((i, 1))
    print(
        f"resuming {out_dir}: {len(done)} of {args.episodes} episode(s) finished, "
        f"running {len(missing)}",
        file=sys.stderr,
    )
    return blocks


def output_conflict(args: argparse.Namespace) -> str | None:
    if args.video == "" and not args.output:
        return "--video without a folder or file: give one, or --output DIR (videos in DIR/videos)"
    if args.output and args.trace_dir != TRACE_DIR_DEFAULT:
        return "--trace-dir with --output: the run directories go to DIR/runs; give one of them"
    return None


def write_output(
    out_dir: Path,
    outs: Sequence[Mapping[str, Any]],
    args: argparse.Namespace,
    kwargs: Mapping[str, Any],
    *,
    interrupted: Callable[[], bool] = lambda: False,
) -> bool:
    """DIR/eval_info.json over every finished episode (eval_s: this invocation's seconds plus
    the earlier ones' its eval_info.json had); says where everything was written and, when
    episodes are missing, that --resume runs them. `interrupted` is asked when the summary
    is printed: a Ctrl-C that lands while this aggregates and draws the report counts.
    Returns whether the summary counted the call as interrupted (its exit status follows)."""
    from robokernel_ros.rollout import envelope_json
    from robokernel_ros.tasks.eval_output import (
        EVAL_INFO,
        eval_info,
        write_json,
    )

    reports: list[Mapping[str, Any]] = [
        r for r in map(envelope_json, outs) if isinstance(r, dict) and "episodes" in r
    ]
    records, videos, earlier_s = _finished_records(out_dir, reports, args)
    config = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    config["policy_config"] = kwargs.get("policy_config")
    path = write_json(out_dir / EVAL_INFO, eval_info(records, config, reports, earlier_s=earlier_s))
    report_page = _report_page(out_dir) if not args.no_trace and records else None
    agg = json.loads(path.read_text())["aggregated"]
    ci = agg["success_rate_ci95"]
    where = [f"runs: {args.trace_dir}" if not args.no_trace else "no trace"]
    if report_page:
        where.append(f"report: {report_page}")
    if any(r.get("video_paths") for r in reports):
        where.append(f"videos: {Path(next(v for v in videos.values() if v)).parent}")
    summary = (
        f"{agg['n_episodes']} of {args.episodes} episode(s) in {out_dir}: "
        f"{agg['successes']} succeeded"
        + (f", 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        + f"; wrote {path} ({', '.join(where)})"
    )
    missing = args.episodes - agg["n_episodes"]
    was_interrupted = interrupted()
    if missing:
        summary += (
            f"; `robokernel eval --resume {out_dir}` runs the {missing} unfinished episode(s)"
        )
    elif was_interrupted:
        summary += "; interrupted after the last episode: the evaluation is complete"
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return was_interrupted


def _finished_records(
    out_dir: Path, reports: Sequence[Mapping[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, str | None], float]:
    """(eval_info.json's per-episode records of every finished episode, {run_id: video},
    the seconds of the invocations before this one): from the run directories (or, with
    --no-trace, this call's reports); --resume's kept episodes keep their videos."""
    from robokernel_ros.tasks.eval_output import (
        EVAL_INFO,
        RUNS_DIR,
        finished_episodes,
        records_from_report,
    )

    base = args.seed or 0
    videos = {
        e.get("run_id"): e.get("video_path")
        for r in reports
        for e in r["episodes"]
        if e.get("run_id")
    }
    previous = out_dir / EVAL_INFO
    earlier_s = 0.0
    if previous.is_file():
        before = json.loads(previous.read_text())
        earlier_s = float((before.get("aggregated") or {}).get("eval_s") or 0.0)
        for rec in before.get("per_episode", []):
            if rec.get("run_id") and rec.get("video_path"):
                videos.setdefault(rec["run_id"], rec["video_path"])
    if args.no_trace:
        return [rec for r in reports for rec in records_from_report(r, base)], videos, earlier_s
    done, _ = finished_episodes(out_dir / RUNS_DIR, base, args.episodes)
    records = list(done.values())
    for rec in records:
        rec["video_path"] = videos.get(rec["run_id"]) or rec["video_path"]
    return records, videos, earlier_s


def _report_page(out_dir: Path) -> str | None:
    """DIR/report/'s HTML page of the evaluation (None, with a warning, when it failed)."""
    from robokernel_ros.scoring import write_report

    try:
        return str(write_report([out_dir], out_dir / "report")["html"])
    except (ValueError, OSError) as exc:
        logging.getLogger(__name__).warning("the report of %s failed: %s", out_dir, exc)
        return None
