"""`robokernel benchmark NAME|SPEC.json` runs a shipped benchmark (or a spec file);
`robokernel benchmark --list` lists the shipped ones. Importing this module registers the
subcommand."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from robokernel_ros.cli.options import add_policy_args, common_kwargs, flag_conflict
from robokernel_ros.cli.output import (
    emit,
    emit_interruptible,
    interruptible,
    json_stdout,
    usage_error,
)
from robokernel_ros.cli.registry import register_subcommand


def _benchmark_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a shipped benchmark (see --list) or a spec JSON file")
    p.add_argument("--list", action="store_true", help="list the shipped benchmarks")
    add_policy_args(p)


def _shorten(text: str, width: int = 60) -> str:
    """A table cell: the first sentence, cut at a word to `width` characters (--json: all)."""
    text = " ".join(str(text).split()).split(". ")[0]
    if len(text) <= width:
        return text
    return text[: width - 1].rsplit(" ", 1)[0] + "…"


def _benchmark_run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell

    conflict = flag_conflict(args)
    if conflict:
        return usage_error("benchmark", conflict)

    with SimWorkcell(trace_dir=None) as cell:
        cell.register_builtin_benchmarks()
        if args.list or not args.name:
            out = cell.list_benchmarks()
            if not args.json and out["status"] == "success":
                from robokernel_ros.rollout import envelope_json
                from robokernel_ros.rollout.results import summary_table

                rows = [
                    (b["name"], b["robot_model"], b["max_steps"], _shorten(b["description"]))
                    for b in (envelope_json(out) or {})["benchmarks"]
                ]
                print(summary_table(rows, ("name", "robot", "max_steps", "description")))
                return 0
            return emit(out, as_json=args.json)
        spec: Any = args.name
        path = Path(args.name)
        if (path.suffix == ".json" or "/" in args.name) and not path.is_file():
            print(
                f"error: NAME={args.name!r}: no such file (a spec file; or a shipped "
                "benchmark's name, see --list)",
                file=sys.stderr,
            )
            return 1
        if path.suffix == ".json" and path.is_file():
            try:
                spec = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                print(f"error: {path}: not valid JSON: {exc}", file=sys.stderr)
                return 1
        with interruptible(cell) as state, json_stdout(args.json):
            result = cell.evaluate_benchmark(
                spec, **common_kwargs(args, str(args.name).replace("/", "_"))
            )
        return emit_interruptible(result, state, as_json=args.json)


register_subcommand(
    "benchmark", "run a shipped benchmark (or a spec file)", _benchmark_arguments, _benchmark_run
)
