"""`robokernel limits FILE... [--joints A,B] [--json]`: the merged joint limits of a
configuration, per joint with the source of each limit, before a robot moves.

FILEs are joint_limits YAML files (ros2_control, MoveIt, UR layouts) and URDFs, merged
as the safety_shield node merges them (the most restrictive wins). Importing this module
registers `limits` on the `robokernel` CLI. Exit status: 0; 1 when a file is refused or
a joint of --joints has no limits (the message, naming the file, goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="joint_limits YAML or URDF files")
    parser.add_argument(
        "--joints",
        metavar="A,B",
        help="comma-separated joints that must all have limits (the shield's `joints`)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from robokernel_ros.safety.limits import describe_limit, load_limit_sources, merge_limit_sources

    joints = [j for j in args.joints.split(",") if j] if args.joints else None
    try:
        # sources named by file name (the paths are listed once, above the joints)
        sources = [s for path in args.files for s in load_limit_sources(path, Path(path).name)]
        merged = merge_limit_sources(joints, sources)
    except ValueError as exc:
        print(f"robokernel limits: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        out = {
            joint: {"limits": vars(m.limit), "sources": dict(m.sources)}
            for joint, m in merged.items()
        }
        print(json.dumps(out, indent=2))
    else:
        print("files:")
        for path in args.files:
            print(f"  {Path(path).name}: {Path(path).resolve()}")
        print(f"{len(merged)} joints, each limit with its source:")
        for joint, m in merged.items():
            print("  " + describe_limit(joint, m))
    return 0


def _register() -> None:
    from robokernel_ros.cli.registry import register_subcommand

    register_subcommand(
        "limits",
        "print the merged joint limits of limit files and URDFs, with their sources",
        add_arguments,
        run,
        replace=True,
    )


_register()
