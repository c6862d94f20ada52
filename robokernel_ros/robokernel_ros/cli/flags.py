"""The running subcommand's flags: error messages that name the CLI flag, and argparse types.

`flag_names(text)` rewrites a rollout-API message's parameter names (`model=...`) as the
running subcommand's flags (`--robot=...`); main() sets what the running subcommand's
parser has with `set_running_flags` and clears it when the subcommand returns.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any

# API parameter names that the shell spells differently (the rest: argparse's dest -> flag)
API_FLAGS = {
    "model": "--robot",
    "robot_name": "--robot-name",
    "policy_provider": "--policy",
    "n_episodes": "--episodes",
    "n_steps": "--max-steps",
    "async_rtc": "--async-rtc",
}
# positional arguments' API names (the positional's own dest maps to its metavar)
# (and path=, in any subcommand's messages, is its first positional)
API_FLAGS.update({"repo_id": "PATH"})
# a dict entry of the API that the shell gives as a flag of its own
FIELD_FLAGS = {
    "video['fps']": "--video-fps",
    "video['camera']": "--camera",
    "video['path']": "--video",
}
#: The running subcommand's parameter name -> flag (empty when none runs).
RUNNING_FLAGS: dict[str, str] = {}
_switches: set[str] = set()  # its flags that take no value (store_true)


def set_running_flags(flags: dict[str, str], switches: list[str]) -> None:
    """The running subcommand's flags (parser_flags) and switches (parser_switches)."""
    RUNNING_FLAGS.clear()
    RUNNING_FLAGS.update(flags)
    _switches.clear()
    _switches.update(switches)


def clear_running_flags() -> None:
    RUNNING_FLAGS.clear()
    _switches.clear()


def flag_names(text: str) -> str:
    """An error message with the running subcommand's parameter names (`model=...`,
    `trace_dir=...`, `video['fps']=...`) spelled as its CLI flags (`--robot=...`,
    `--trace-dir=...`, `--video-fps=...`); a switch's `=True` / `=False` as the shell says
    it (`--batch-inference` / `without --batch-inference`), never a form argparse refuses."""
    flags = RUNNING_FLAGS
    if not flags:
        return text
    for field_name, flag in FIELD_FLAGS.items():
        if flag in flags.values():
            text = text.replace(field_name, flag)
    names = "|".join(map(re.escape, flags))
    pattern = r"(?<![\w\-.\[\'\"])(" + names + r")(?==)"
    text = re.sub(pattern, lambda m: flags[m.group(1)], text)
    # an entry of a dict-valued flag: policy_config['targets']=... -> --policy-config['targets']=...
    text = re.sub(r"(?<![\w\-.\[\'\"])(" + names + r")(?=\[)", lambda m: flags[m.group(1)], text)
    for switch in _switches:
        text = re.sub(re.escape(switch) + r"=True\b", switch, text)
        text = re.sub(re.escape(switch) + r"=False\b", f"without {switch}", text)
    return text


def parser_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{parameter name: its flag} of a subcommand's parser (a positional: its metavar)."""
    flags = {}
    for action in parser._actions:  # argparse has no public list of a parser's options
        longs = [o for o in action.option_strings if o.startswith("--")]
        # cameras= is a dict in Python, --add-camera NAME[=SPEC] on the shell: the
        # messages about it give both spellings (rollout.cameras)
        if longs and action.dest not in ("help", "cameras"):
            flags[action.dest] = longs[0]
        elif not action.option_strings and action.dest not in ("help", "command"):
            flags[action.dest] = str(action.metavar or action.dest.upper())  # a positional
            flags.setdefault("path", flags[action.dest])
    return {**flags, **{k: v for k, v in API_FLAGS.items() if v in flags.values()}}


def parser_switches(parser: argparse.ArgumentParser) -> list[str]:
    """A subcommand's flags that take no value (store_true)."""
    return [
        o
        for a in parser._actions
        if isinstance(a, argparse._StoreTrueAction)
        for o in a.option_strings
        if o.startswith("--")
    ]


def json_arg(text: str) -> Any:
    """argparse type: a JSON value (e.g. --policy-config '{"amplitude": 0.5}')."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def _number(
    text: str, convert: Callable[[str], float], ok: Callable[[float], bool], domain: str
) -> Any:
    """argparse type: `convert(text)` when `ok` of it, else an error naming `domain`."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r}: must be {domain}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    return _number(text, int, lambda v: v >= 1, "a positive whole number")


def positive_seconds(text: str) -> float:
    """argparse type: seconds, a finite number > 0."""
    return _number(text, float, lambda v: 0 < v < float("inf"), "seconds, a number > 0")


def live_port(text: str) -> int:
    """argparse type of --live: a TCP port."""
    return _number(
        text, int, lambda v: 0 <= v <= 65535, "a TCP port in [0, 65535] (0: any free port)"
    )
