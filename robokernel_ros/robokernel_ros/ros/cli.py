"""`robokernel ros CALL [FIELD=VALUE ...]`: a runner node's API from a shell.

    robokernel ros eval_policy policy_provider=mock n_episodes=5
    robokernel ros run_policy robot_name=arm n_steps=200 policy_config='{"amplitude": 0.2}'
    robokernel ros list_policies_running

CALL is a long call (an action with live progress on stderr; Ctrl-C cancels it and the
robot holds) or start_policy, stop_policy, list_policies_running (services). Each FIELD
is named as in the interface (robokernel_interfaces); a VALUE is read as JSON when it
parses (numbers, true/false, objects) and as a string otherwise. Exit status: 0 ok; 1
refused or failed (the message on stderr); 130 cancelled by Ctrl-C. Works where no `ros2`
command is installed (robokernel_ros.ros.client.WorkcellClient does the calls).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

LONG_CALLS = (
    "run_policy",
    "eval_policy",
    "evaluate_benchmark",
    "replay_episode",
    "run_multi_policy",
)
QUICK_CALLS = ("start_policy", "stop_policy", "list_policies_running")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("call", choices=LONG_CALLS + QUICK_CALLS, help="the API call")
    parser.add_argument("fields", nargs="*", metavar="FIELD=VALUE", help="the call's fields")
    parser.add_argument(
        "--namespace", default="/robokernel", help="the runner's namespace (default /robokernel)"
    )
    parser.add_argument(
        "--server-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds to wait for the runner to be discovered (default 30)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def parse_fields(pairs: list[str]) -> dict[str, Any]:
    """FIELD=VALUE pairs: VALUE as JSON when it parses, else the string."""
    fields: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{pair!r}: fields are FIELD=VALUE (for example n_episodes=5)")
        try:
            fields[name] = json.loads(text)
        except ValueError:
            fields[name] = text
    return fields


def _progress(feedback: Any) -> None:
    print(
        f"\repisode {feedback.episode}/{feedback.n_episodes} step {feedback.step} "
        f"successes {feedback.successes}/{feedback.episodes_done} holds {feedback.holds} "
        f"interventions {feedback.interventions} chunk {feedback.chunk_latency_ms:.1f} ms "
        f"{feedback.elapsed_s:.1f} s",
        end="",
        file=sys.stderr,
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    try:
        fields = parse_fields(args.fields)
    except ValueError as exc:
        print(f"robokernel ros: error: {exc}", file=sys.stderr)
        return 2
    from .client import WorkcellClient, _Interrupted

    with WorkcellClient(args.namespace, server_timeout_s=args.server_timeout) as cell:
        try:
            if args.call in LONG_CALLS:
                show = _progress if sys.stderr.isatty() else None
                result = cell.call(args.call, fields, feedback=show)
                if show:
                    print(file=sys.stderr)
            else:
                result = getattr(cell, args.call)(**fields)
        except _Interrupted as stop:
            print(f"\nrobokernel ros: {stop.result.message}", file=sys.stderr)
            return 130
        except (ValueError, TimeoutError) as exc:
            print(f"robokernel ros: error: {exc}", file=sys.stderr)
            return 1
    if args.json:
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "status": result.status,
                    "message": result.message,
                    "report": result.report,
                }
            )
        )
    else:
        print(result.message, file=sys.stdout if result.ok else sys.stderr)
    return 0 if result.ok else 1


def _register() -> None:
    from ..cli import register_subcommand

    register_subcommand(
        "ros",
        "call a runner node's API over ROS 2 (actions with progress; Ctrl-C cancels)",
        add_arguments,
        run,
        replace=True,
    )


_register()
