"""The `robokernel` command's subcommand registry.

A module adds a subcommand with `register_subcommand(name, help, add_arguments, run)`,
where run(args) returns the exit status; `load_subcommand_modules()` imports the modules of
SUBCOMMAND_MODULES, each of which registers its subcommands when imported.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass


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


#: Modules that register subcommands when imported, in the order `--help` lists them (a
#: missing one is skipped).
SUBCOMMAND_MODULES: list[str] = [
    "robokernel_ros.cli.run",  # run (--sentry-rotate-s), issue #40
    "robokernel_ros.cli.evaluate",
    "robokernel_ros.cli.benchmark",
    "robokernel_ros.cli.score",
    "robokernel_ros.cli.export",
    "robokernel_ros.cli.import_bag",  # import-bag, contract check (issue #35)
    "robokernel_ros.cli.limits",
    "robokernel_ros.cli.replay",
    "robokernel_ros.cli.flywheel",
    "robokernel_ros.cli.ros",
]


def load_subcommand_modules() -> None:
    for module in SUBCOMMAND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
