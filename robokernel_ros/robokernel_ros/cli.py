"""`robokernel`: the rollout API from a shell.

    robokernel eval --robot so101 --policy mock --episodes 5 [--async-rtc] [--video DIR] [--seed N] [--json]
    robokernel benchmark go2_walk_forward --episodes 3
    robokernel benchmark --list

Subcommands live in a registry: a module adds one with `register_subcommand(name,
help, add_arguments, run)`, where run(args) returns the exit status. Exit status: 0
when the call succeeded, 1 when it was refused or failed (the message goes to
stderr), 2 for a command-line usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Subcommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


SUBCOMMANDS: dict[str, Subcommand] = {}


def register_subcommand(
    name: str,
    help: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    *,
    replace: bool = False,
) -> None:
    """Add a `robokernel <name>` subcommand (others add `score`, `export-lerobot`, ...)."""
    if name in SUBCOMMANDS and not replace:
        raise ValueError(f"subcommand {name!r} is already registered (pass replace=True)")
    SUBCOMMANDS[name] = Subcommand(name, help, add_arguments, run)


# Modules that register subcommands when imported (a missing one is skipped).
SUBCOMMAND_MODULES: list[str] = [
    "robokernel_ros.scoring.cli",
    "robokernel_ros.bag.cli",
    "robokernel_ros.safety.cli",
    "robokernel_ros.flywheel.cli",
]


def _load_subcommand_modules() -> None:
    import importlib

    for module in SUBCOMMAND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


# ------------------------------------------------------------------ shared helpers


def json_arg(text: str) -> Any:
    """argparse type: a JSON value (e.g. --policy-config '{"amplitude": 0.5}')."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def emit(out: dict[str, Any], *, as_json: bool) -> int:
    """Print an envelope: the text (a table) or the JSON report; errors to stderr, exit 1."""
    from robokernel_ros.rollout import envelope_json, envelope_text

    if out["status"] != "success":
        print(f"error: {envelope_text(out)}", file=sys.stderr)
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


def _add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--policy", default="mock", help="policy provider (mock, scripted, lerobot, ...)"
    )
    p.add_argument(
        "--policy-config",
        type=json_arg,
        default=None,
        metavar="JSON",
        help="provider config as JSON",
    )
    p.add_argument("--episodes", type=int, default=1, help="number of episodes (default 1)")
    p.add_argument(
        "--seed", type=int, default=None, help="base seed (episode i runs with seed + i)"
    )
    p.add_argument(
        "--video", default=None, metavar="DIR", help="write one MP4 per episode into DIR"
    )
    p.add_argument("--video-fps", type=float, default=30.0)
    p.add_argument("--camera", default=None, help="camera to record (default: the free camera)")
    p.add_argument("--trace-dir", default="runs/", help="run directories go here (default runs/)")
    p.add_argument("--no-trace", action="store_true", help="record no trace")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: on a terminal)")  # fmt: skip
    p.add_argument("--wbc-install-torque-control", action="store_true",
                   help="torque motors track the policy's joint targets through a PD shim")  # fmt: skip
    p.add_argument("--wbc-gains", type=json_arg, default=None, metavar="JSON",
                   help='shim gains {joint: {"kp": .., "kd": ..}} over the model\'s defaults')  # fmt: skip


def _common_kwargs(args: argparse.Namespace, label: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "policy_provider": args.policy,
        "policy_config": args.policy_config,
        "n_episodes": args.episodes,
        "seed": args.seed,
        "trace_dir": None if args.no_trace else args.trace_dir,
        "progress": args.progress,
        "wbc_install_torque_control": bool(args.wbc_install_torque_control),
    }
    if args.wbc_gains is not None:
        kwargs["wbc_gains"] = args.wbc_gains
    if args.video:
        kwargs["video"] = {
            "path": str(Path(args.video) / f"{label}.mp4"),
            "fps": args.video_fps,
            "camera": args.camera,
        }
    return kwargs


# ------------------------------------------------------------------ eval


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--robot", required=True, help="packaged model (so101, panda, go2) or an MJCF path"
    )
    p.add_argument(
        "--robot-name", default=None, help="name of the robot in the scene (default: from --robot)"
    )
    _add_policy_args(p)
    p.add_argument("--max-steps", type=int, default=300, help="steps per episode (default 300)")
    p.add_argument("--control-frequency", type=float, default=50.0)
    p.add_argument("--action-horizon", type=int, default=8)
    p.add_argument(
        "--async-rtc",
        action="store_true",
        help="overlap inference with execution (realtime, virtual clock)",
    )
    p.add_argument("--instruction", default="")


def _eval_run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell

    name = args.robot_name or Path(args.robot).stem
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, args.robot)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        out = cell.eval_policy(
            name,
            max_steps=args.max_steps,
            control_frequency=args.control_frequency,
            action_horizon=args.action_horizon,
            async_rtc=bool(args.async_rtc),
            instruction=args.instruction,
            **_common_kwargs(args, "eval"),
        )
        return emit(out, as_json=args.json)


# ------------------------------------------------------------------ benchmark


def _benchmark_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a shipped benchmark (see --list) or a spec JSON file")
    p.add_argument("--list", action="store_true", help="list the shipped benchmarks")
    _add_policy_args(p)


def _benchmark_run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell

    with SimWorkcell(trace_dir=None) as cell:
        cell.register_builtin_benchmarks()
        if args.list or not args.name:
            out = cell.list_benchmarks()
            if not args.json and out["status"] == "success":
                from robokernel_ros.rollout import envelope_json
                from robokernel_ros.rollout.results import summary_table

                rows = [
                    (b["name"], b["robot_model"], b["max_steps"], b["description"])
                    for b in envelope_json(out)["benchmarks"]
                ]
                print(summary_table(rows, ("name", "robot", "max_steps", "description")))
                return 0
            return emit(out, as_json=args.json)
        spec: Any = args.name
        path = Path(args.name)
        if path.suffix == ".json" and path.is_file():
            try:
                spec = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                print(f"error: {path}: not valid JSON: {exc}", file=sys.stderr)
                return 1
        out = cell.evaluate_benchmark(
            spec, **_common_kwargs(args, str(args.name).replace("/", "_"))
        )
        return emit(out, as_json=args.json)


register_subcommand(
    "eval", "evaluate a policy on a robot over n episodes", _eval_arguments, _eval_run
)
register_subcommand(
    "benchmark", "run a shipped benchmark (or a spec file)", _benchmark_arguments, _benchmark_run
)


# ------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    _load_subcommand_modules()
    parser = argparse.ArgumentParser(prog="robokernel", description="robokernel_ros from a shell")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS.values():
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run as `python -m robokernel_ros.cli`, this file is `__main__`, a second copy of the
    # module: subcommands register on the importable `robokernel_ros.cli`, so use its main.
    from robokernel_ros.cli import main as registered_main

    sys.exit(registered_main())
