"""`robokernel`: the rollout API from a shell.

    robokernel eval --robot so101 --policy mock --episodes 5 [--async-rtc] [--video DIR] [--seed N] [--json]
    robokernel eval --robot so101 --episodes 50 --output DIR [--video]   (--resume DIR continues it)
    robokernel replay RUN_DIR_BAG_OR_DATASET [--episode N]
    robokernel benchmark go2_walk_forward --episodes 3
    robokernel benchmark --list

main() builds the parser from the subcommand registry (cli.registry), runs the chosen
subcommand and returns its exit status: 0 when the call succeeded, 1 when it was refused or
failed (the message goes to stderr, naming the CLI flag), 2 for a command-line usage error,
130 when interrupted (Ctrl-C: the running episode is closed and the report of what ran is
printed).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from robokernel_ros.cli.flags import (
    clear_running_flags,
    parser_flags,
    parser_switches,
    set_running_flags,
)
from robokernel_ros.cli.registry import SUBCOMMANDS, load_subcommand_modules
from robokernel_ros.memory import retain_freed_memory

EXIT_STATUS = (
    "exit status: 0 done; 1 refused or failed (the reason on stderr, naming the flag); "
    "2 usage error (an unknown flag or a bad value argparse sees); 130 interrupted (Ctrl-C)"
)


def build_parser() -> argparse.ArgumentParser:
    load_subcommand_modules()
    parser = argparse.ArgumentParser(
        prog="robokernel", description="robokernel_ros from a shell", epilog=EXIT_STATUS
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO level, with tracebacks"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS.values():
        p = sub.add_parser(
            command.name, help=command.help, description=command.help, epilog=EXIT_STATUS
        )
        command.add_arguments(p)
        p.set_defaults(_run=command.run, _flags=parser_flags(p), _switches=parser_switches(p))
    return parser


LIVE_LOGGER = "robokernel_ros.live.view"


class _LiveFormat(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        if record.levelno < logging.WARNING:
            return record.getMessage()  # "live view: ws://127.0.0.1:PORT ..."
        return f"{record.levelname} {record.name}: {record.getMessage()}"


def _live_lines() -> logging.Handler:
    """With --live, the view's own lines (the URL with the port it got, waiting for a
    viewer) go to stderr as they are, without -v; its warnings keep the usual format.
    The view's logger then logs here only (removed again by main)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LiveFormat())
    logger = logging.getLogger(LIVE_LOGGER)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)
    return handler


class _NoTraceback(logging.Filter):
    """Without --verbose a logged exception shows its message, not its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {exc} (-v: the traceback)"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    retain_freed_memory()  # camera frames: reuse their buffers (memory.py)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    quiet_tracebacks = None
    if not args.verbose:
        quiet_tracebacks = _NoTraceback()
        for handler in logging.getLogger().handlers:
            handler.addFilter(quiet_tracebacks)
    set_running_flags(args._flags, args._switches)
    live_lines = _live_lines() if getattr(args, "live", None) is not None else None
    try:
        return int(args._run(args))
    except BrokenPipeError:
        # `robokernel ... --json | head`: the reader left; say nothing more (Python's
        # advice: point stdout at devnull so the interpreter's final flush stays quiet)
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a reader that left
    except KeyboardInterrupt:
        folder = getattr(args, "output", None) if args.command == "eval" else None
        hint = (
            f": `robokernel eval --resume {folder}` runs the episodes that did not finish and "
            "writes its eval_info.json and report"
            if folder
            else ""
        )
        print(f"interrupted{hint}", file=sys.stderr)
        return 130
    finally:
        clear_running_flags()
        if live_lines is not None:
            live_logger = logging.getLogger(LIVE_LOGGER)
            live_logger.removeHandler(live_lines)
            live_logger.propagate = True
            live_logger.setLevel(logging.NOTSET)
        if quiet_tracebacks is not None:
            for handler in logging.getLogger().handlers:
                handler.removeFilter(quiet_tracebacks)
