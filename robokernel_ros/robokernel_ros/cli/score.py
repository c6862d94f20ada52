"""`robokernel score PATH... [--json] [--plot OUT.png] [--scorers NAMES] [--success CLAUSE]`,
`robokernel compare A B [--json]` and `robokernel report DIR... [--out OUT] [--episodes I,J]`.

Importing this module registers them on the `robokernel` CLI's subcommand registry;
`main(argv)` runs score on its own (`python -m robokernel_ros.scoring`). Exit status: 0,
1 when refused or when a recording could not be scored (unreadable or empty: named on
stderr, left out of the aggregate), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run directories, bags, folders of them (runs/), or eval --output folders",
    )
    parser.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    parser.add_argument(
        "--plot",
        metavar="OUT.png",
        help="a .png path: write a plot of the episode (PATH must hold exactly one)",
    )
    parser.add_argument(
        "--scorers",
        metavar="NAMES",
        help="comma-separated names of registered scorers (default: all of them)",
    )
    parser.add_argument(
        "--success",
        metavar="CLAUSE",
        help='a success predicate evaluated offline over the recorded privileged state, as JSON, e.g. \'{"body_above_z": {"body": "cube", "z": 0.1}}\'',
    )


def run(args: argparse.Namespace) -> int:
    from robokernel_ros.cli.flags import flag_names
    from robokernel_ros.kernel.trace import load_trace
    from robokernel_ros.scoring.plot import plot_episode
    from robokernel_ros.scoring.report import expand_paths, format_table, score_paths
    from robokernel_ros.scoring.scorers import PredicateScorer, get_scorers
    from robokernel_ros.tasks.predicates import CriterionError

    try:
        scorers = get_scorers(args.scorers.split(",") if args.scorers else None)
        if args.success:
            try:
                clause = json.loads(args.success)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--success={args.success!r}: not JSON ({exc})") from None
            scorers.append(PredicateScorer(clause))
        result = score_paths(args.paths, scorers)
        if args.plot:
            episodes = expand_paths(args.paths)
            if len(episodes) != 1:
                raise ValueError(f"--plot: needs exactly one episode, got {len(episodes)}")
            result["plot"] = str(plot_episode(load_trace(episodes[0]), args.plot))
    except ValueError as exc:
        print(f"robokernel score: error: {flag_names(str(exc))}", file=sys.stderr)
        return 1
    except CriterionError as exc:  # the --success clause on a recorded state
        print(f"robokernel score: error: --success: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(
            json.dumps(result, allow_nan=False, default=str)
            if _finite(result)
            else json.dumps(_clean(result))
        )
    else:
        print(format_table(result))
        if "plot" in result:
            print(f"plot: {result['plot']}")
    for episode in result["episodes"]:
        if episode.get("recording_cut"):
            print(
                f"robokernel score: note: {episode['path']}: the recording is cut short; "
                "scored the steps it holds",
                file=sys.stderr,
            )
    for folder in result.get("ignored", []):
        print(
            f"robokernel score: note: {folder}: holds no recorded episode; left out",
            file=sys.stderr,
        )
    for skipped in result["skipped"]:
        print(f"robokernel score: error: skipped {skipped['error']}", file=sys.stderr)
    return 1 if result["skipped"] else 0


def _finite(obj: Any) -> bool:
    try:
        json.dumps(obj, allow_nan=False, default=str)
        return True
    except ValueError:
        return False


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj or obj in (float("inf"), float("-inf")):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="robokernel score", description="Score recorded episodes."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="an eval --output folder, or a folder of runs")
    parser.add_argument("b", metavar="B", help="the other evaluation, on the same seeds")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run_compare(args: argparse.Namespace) -> int:
    from robokernel_ros.scoring.compare import (
        compare,
        format_comparison,
        horizon_warnings,
        load_episodes,
    )

    try:
        records_a, records_b = load_episodes(args.a), load_episodes(args.b)
        result = compare(records_a, records_b)
        result["warnings"] = horizon_warnings(args.a, args.b, records_a, records_b)
    except ValueError as exc:
        print(f"robokernel compare: error: {exc}", file=sys.stderr)
        return 1
    for warning in result["warnings"]:
        print(f"robokernel compare: warning: {warning}", file=sys.stderr)
    print(json.dumps(result) if args.json else format_comparison(result, args.a, args.b))
    return 0


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="DIR",
        help="evaluations: eval --output folders or folders of runs",
    )
    parser.add_argument(
        "--out",
        metavar="OUT",
        help="folder for the PNGs and index.html (default DIR/report for one DIR)",
    )
    parser.add_argument(
        "--episodes",
        default="0",
        metavar="I,J",
        help="comma-separated whole numbers >= 0: the episodes (0-based) whose joint "
        "trajectories are plotted (default 0)",
    )


def run_report(args: argparse.Namespace) -> int:
    from robokernel_ros.scoring.pictures import write_report

    if args.out is None and len(args.paths) > 1:
        print("robokernel report: error: --out: needed for several evaluations", file=sys.stderr)
        return 2
    try:
        chosen = [int(x) for x in str(args.episodes).split(",") if x.strip()]
    except ValueError:
        print(
            f"robokernel report: error: --episodes={args.episodes!r}: must be I,J,...",
            file=sys.stderr,
        )
        return 2
    out = args.out or str(Path(args.paths[0]) / "report")
    try:
        written = write_report(args.paths, out, episodes=chosen)
    except ValueError as exc:
        print(f"robokernel report: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {written['html']} ({len(written['pngs'])} pictures)")
    return 0


def _register() -> None:
    from robokernel_ros.cli.registry import register_subcommand

    register_subcommand(
        "compare",
        "two evaluations on the same seeds, episode by episode (McNemar, paired returns)",
        _compare_arguments,
        run_compare,
        replace=True,
    )
    register_subcommand(
        "report",
        "pictures of evaluations: PNGs and one self-contained HTML page",
        _report_arguments,
        run_report,
        replace=True,
    )

    register_subcommand(
        "score",
        "score recorded episodes (run directories or bags)",
        add_arguments,
        run,
        replace=True,
    )


_register()

if __name__ == "__main__":
    sys.exit(main())
