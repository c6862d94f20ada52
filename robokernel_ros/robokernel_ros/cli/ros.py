"""`robokernel ros CALL [FIELD=VALUE ...]`: a runner node's API from a shell, and the
operator's calls.

    robokernel ros eval_policy policy_provider=mock n_episodes=5
    robokernel ros run_policy robot_name=arm n_steps=200 policy_config='{"amplitude": 0.2}'
    robokernel ros eval_policy --help            # the call's fields, defaults and domains
    robokernel ros list_policies_running
    robokernel ros estop press | release         # the estop_panel (<ns>/estop_panel)
    robokernel ros clear-fault                   # the runner's clear_fault (and its shields')
    robokernel ros pause | correct | resume      # the takeover: hold, the teleop drives, the
                                                 # policy drives again (docs/operator_ros.md)
    robokernel ros lifecycle safety_shield deactivate   # configure|activate|deactivate|
                                                        # cleanup|shutdown|get

CALL is a long call (an action with live progress on stderr; Ctrl-C cancels it and the
robot holds) or start_policy, stop_policy, list_policies_running (services). Each FIELD
is named as in the interface (robokernel_interfaces; `--help` after the call lists them
with their domains, read from the interface's own file); a VALUE is read as JSON when it
parses (numbers, true/false, objects) and as a string otherwise. A field the call does
not have is refused here, naming the closest ones, before anything is sent. The call's
report (its text, then what each shield did with each episode's commands) goes to
stdout whether it succeeded, failed or was cancelled; a refusal (nothing ran) and
errors go to stderr. Episodes are
numbered from 0, in the progress line as in the report. Exit status: 0 ok; 1 refused,
failed, or not completed (an episode e-stopped); 2 bad usage; 130 cancelled by Ctrl-C.
Works where no `ros2` command is installed (robokernel_ros.ros.client.WorkcellClient).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

LONG_CALLS = (
    "run_policy",
    "eval_policy",
    "evaluate_benchmark",
    "replay_episode",
    "run_multi_policy",
)
QUICK_CALLS = ("start_policy", "stop_policy", "list_policies_running")
TAKEOVER_CALLS = ("pause", "correct", "resume")
OPERATOR_CALLS = ("estop", "clear-fault", "lifecycle", *TAKEOVER_CALLS)
TRANSITIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown", "get")
#: The rollout API's typed request of a call (its fields may go in extra_json).
_REQUESTS = {
    "run_policy": "RunRequest",
    "start_policy": "RunRequest",
    "eval_policy": "EvalRequest",
    "run_multi_policy": "MultiRequest",
}

#: The API's arguments that cannot cross ROS (callables, objects) or are the call's own.
_NOT_OVER_ROS = frozenset({"call", "observer", "on_frame", "policy_object", "progress"})

_parser: argparse.ArgumentParser | None = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    global _parser
    _parser = parser
    # `robokernel ros CALL --help` is the call's help: -h/--help is read here.
    # (argparse's groups keep the handler they were made with: the optionals' is set too)
    parser.conflict_handler = parser._optionals.conflict_handler = "resolve"
    parser.add_argument("-h", "--help", action="store_true", help="this help, or the call's")
    parser.add_argument(
        "call",
        nargs="?",
        choices=LONG_CALLS + QUICK_CALLS + OPERATOR_CALLS,
        help="the API call, or an operator's call (estop, clear-fault, lifecycle, pause, "
        "correct, resume)",
    )
    parser.add_argument(
        "fields",
        nargs="*",
        metavar="FIELD=VALUE",
        help="the call's fields (estop: press|release; lifecycle: NODE TRANSITION)",
    )
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


# -- the calls' fields ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Field:
    name: str  # as typed on the command line (a `_json` field without its suffix too)
    type: str
    default: str
    domain: str  # the interface file's comment


def interface_file(call: str) -> Path | None:
    """The installed .action (long calls) or .srv file of `call`, None when not found."""
    kind, suffix = ("action", ".action") if call in LONG_CALLS else ("srv", ".srv")
    name = "".join(part.title() for part in call.split("_")) + suffix
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        path = Path(prefix) / "share" / "robokernel_interfaces" / kind / name
        if path.is_file():
            return path
    return None


_LINE = re.compile(r"^\s*([\w/\[\]<=]+)\s+(\w+)(?:\s+([^#]+?))?\s*(?:#\s*(.*))?$")


def call_fields(call: str) -> list[Field]:
    """The request (goal) fields of `call` with defaults and domains, from its interface
    file (the comments there are the domains); [] when the file is not installed."""
    path = interface_file(call)
    if path is None:
        return []
    out = []
    for line in path.read_text().split("---")[0].splitlines():
        match = _LINE.match(line)
        if not match or "=" in match.group(2) or match.group(2).isupper():
            continue
        kind, name, default, comment = match.groups()
        out.append(Field(name, kind, (default or "").strip(), (comment or "").strip()))
    return out


def extra_fields(call: str) -> list[str]:
    """The rollout API's keyword arguments that may go in extra_json (by name)."""
    request = _REQUESTS.get(call)
    if request is None:
        return []
    try:
        from robokernel_ros.rollout import requests as api

        cls = getattr(api, request)
        return sorted(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_OVER_ROS)
    except Exception:  # noqa: BLE001 - a help text: without the API, the interface's fields
        return []


def check_field_names(call: str, fields: dict[str, Any]) -> None:
    """ValueError naming a field that `call` does not have, and the closest ones."""
    declared = call_fields(call)
    if not declared:
        return  # not installed: the runner refuses what it does not know
    names = {f.name for f in declared} | {f.name.removesuffix("_json") for f in declared}
    extras = extra_fields(call)
    accepts_any = not extras and any(f.name == "extra_json" for f in declared)
    known = names | set(extras)
    for name in fields:
        if name in known or accepts_any:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        raise ValueError(
            f"{name}={fields[name]!r}: {call} has no field {name!r}{hint} "
            f"(`robokernel ros {call} --help` lists its fields)"
        )


def call_help(call: str) -> str:
    lines = [f"robokernel ros {call} [FIELD=VALUE ...]", ""]
    declared = call_fields(call)
    if not declared:
        lines.append("(the interface files of robokernel_interfaces are not installed here)")
    for f in declared:
        shown = f.name if f.name == "extra_json" else f.name.removesuffix("_json")
        default = f" (default {f.default})" if f.default else ""
        lines.append(f"  {shown:<26} {f.type}{default}")
        if f.domain:
            lines.append(f"  {'':<26} {f.domain}")
    extras = [e for e in extra_fields(call) if e not in {f.name for f in declared}]
    if extras:
        lines += ["", "more keyword arguments of the rollout API (sent in extra_json):",
                  "  " + ", ".join(extras)]  # fmt: skip
    if any(f.name.endswith("_json") for f in declared):
        lines += ["", "a <name>_json field may be given as <name>=<JSON>"]
    return "\n".join(lines)


# -- output --------------------------------------------------------------------------------


def _progress(feedback: Any) -> None:
    # episodes are numbered from 0, as in the report (feedback.episode counts from 1)
    print(
        f"\repisode {max(0, feedback.episode - 1)} ({feedback.episodes_done}/"
        f"{feedback.n_episodes} done) step {feedback.step} "
        f"successes {feedback.successes} holds {feedback.holds} "
        f"interventions {feedback.interventions} chunk {feedback.chunk_latency_ms:.1f} ms "
        f"{feedback.elapsed_s:.1f} s",
        end="",
        file=sys.stderr,
        flush=True,
    )


def shield_lines(report: Any) -> list[str]:
    """One line per episode and shield: what the shield did with its commands."""
    if not isinstance(report, dict):
        return []
    episodes = report.get("episodes")
    if not isinstance(episodes, list):
        episodes = [report]
    lines = []
    for i, episode in enumerate(episodes):
        shield = episode.get("shield") if isinstance(episode, dict) else None
        if not isinstance(shield, dict):
            continue
        for name, c in (shield.get("shields") or {}).items():
            line = (
                f"episode {episode.get('episode', i)} shield {name}: passed {c.get('passed')}, "
                f"clipped {c.get('clipped')}, refused {c.get('refused')}, held {c.get('held')} "
                f"of {c.get('commands_sent')} commands sent"
            )
            if not c.get("confirmed", True):
                line += f" (confirmed {c.get('read')} read)"
            if c.get("last_refusal"):
                line += f"; last refusal: {c['last_refusal']}"
            lines.append(line)
    return lines


def _print_result(result: Any, as_json: bool) -> None:
    if as_json:
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
        return
    if not result.ok and not result.report:  # refused before anything ran: an error line
        print(f"robokernel ros: error: {result.message}", file=sys.stderr)
        return
    print(result.message)  # the report, whether the call succeeded, failed or was cancelled
    for line in shield_lines(result.report):
        print(line)


# -- run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.help or args.call is None:
        if args.call in LONG_CALLS + QUICK_CALLS:
            print(call_help(args.call))
        elif _parser is not None:
            _parser.print_help()
        return 0 if args.help else 2
    try:
        operator = _operator_call(args.call, args.fields)
        fields = {} if operator else parse_fields(args.fields)
        if not operator:
            check_field_names(args.call, fields)
    except ValueError as exc:
        print(f"robokernel ros: error: {exc}", file=sys.stderr)
        return 2
    from robokernel_ros.ros.client import CallInterrupted, WorkcellClient

    with WorkcellClient(args.namespace, server_timeout_s=args.server_timeout) as cell:
        try:
            if operator:
                result = operator(cell)
            elif args.call in LONG_CALLS:
                show = _progress if sys.stderr.isatty() else None
                result = cell.call(args.call, fields, feedback=show)
                if show:
                    print(file=sys.stderr)
            else:
                result = cell.call(args.call, fields)
        except CallInterrupted as stop:
            _print_result(stop.result, args.json)  # what ran, on stdout as always
            print(f"\nrobokernel ros: {args.call} cancelled", file=sys.stderr)
            return 130
        except (ValueError, TimeoutError) as exc:
            print(f"robokernel ros: error: {exc}", file=sys.stderr)
            return 1
    _print_result(result, args.json)
    if not result.ok and result.report and not args.json:
        print(f"robokernel ros: {args.call}: {result.status}", file=sys.stderr)
    return 0 if result.ok else 1


def _operator_call(call: str, words: list[str]) -> Any:
    """The WorkcellClient call of an operator's verb (None for an API call); ValueError
    naming the verb's arguments and their domain."""
    if call == "estop":
        if words not in (["press"], ["release"]):
            raise ValueError(f"estop {' '.join(words)!r}: must be `estop press` or `estop release`")
        return lambda cell: cell.estop(words[0] == "press")
    if call == "clear-fault":
        if words:
            raise ValueError(f"clear-fault takes no arguments, got {words!r}")
        return lambda cell: cell.clear_fault()
    if call in TAKEOVER_CALLS:
        if words:
            raise ValueError(f"{call} takes no arguments, got {words!r}")
        return lambda cell: getattr(cell, call)()
    if call == "lifecycle":
        if len(words) != 2 or words[1] not in TRANSITIONS:
            raise ValueError(
                f"lifecycle {' '.join(words)!r}: must be `lifecycle NODE TRANSITION`, "
                f"TRANSITION one of {', '.join(TRANSITIONS)} (NODE relative to --namespace, "
                "e.g. safety_shield)"
            )
        return lambda cell: cell.lifecycle(words[0], words[1])
    return None


def _register() -> None:
    from robokernel_ros.cli.registry import register_subcommand

    register_subcommand(
        "ros",
        "call a runner node's API over ROS 2 (actions with progress; Ctrl-C cancels), and "
        "the operator's calls (estop press|release, clear-fault, lifecycle NODE TRANSITION, "
        "pause, correct, resume)",
        add_arguments,
        run,
        replace=True,
    )


_register()
