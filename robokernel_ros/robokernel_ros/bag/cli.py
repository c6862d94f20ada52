"""`robokernel export-lerobot BAG_OR_RUNS... --repo-id NAME --root DIR` and
`robokernel bag-recover BAG [--repair OUT] [--json]`.

`add_parsers(subparsers)` registers both on the `robokernel` CLI; `main(argv)` runs
export-lerobot on its own (`python -m robokernel_ros.bag.cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="BAG_OR_RUNS", help="bags, run directories, or folders of them"
    )
    parser.add_argument("--repo-id", required=True, help="the dataset's name, e.g. user/pick_cube")
    parser.add_argument(
        "--root", required=True, help="folder to write the dataset to (must not exist or be empty)"
    )
    parser.add_argument(
        "--images", action="store_true", help="store frames as images instead of video"
    )
    parser.add_argument("--robot-type", default=None, help="robot_type in the dataset's metadata")
    parser.add_argument(
        "--json", action="store_true", help="print the export report as one JSON object"
    )


def run_export(args: argparse.Namespace) -> int:
    from .export import export_lerobot

    try:
        report = export_lerobot(
            args.paths,
            repo_id=args.repo_id,
            root=args.root,
            use_videos=not args.images,
            robot_type=args.robot_type,
        )
    except ValueError as exc:
        print(f"robokernel export-lerobot: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(
            f"wrote {report.episodes} episode(s), {report.frames} frames at {report.fps} fps to {report.root} "
            f"({report.repo_id}, LeRobotDataset {report.codebase_version}; cameras: {', '.join(report.cameras) or 'none'})"
        )
    return 0


def run_recover(args: argparse.Namespace) -> int:
    from .recover import main as recover_main

    argv = (
        [args.bag]
        + (["--repair", args.repair] if args.repair else [])
        + (["--json"] if args.json else [])
    )
    return recover_main(argv)


def add_parsers(subparsers: Any) -> None:
    export = subparsers.add_parser("export-lerobot", help="recorded episodes -> a LeRobotDataset")
    add_export_arguments(export)
    export.set_defaults(func=run_export)
    recover = subparsers.add_parser(
        "bag-recover", help="report (and repair) a bag left by a killed writer"
    )
    recover.add_argument("bag")
    recover.add_argument("--repair", metavar="OUT")
    recover.add_argument("--json", action="store_true")
    recover.set_defaults(func=run_recover)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="robokernel export-lerobot", description="Recorded episodes -> a LeRobotDataset."
    )
    add_export_arguments(parser)
    return run_export(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
