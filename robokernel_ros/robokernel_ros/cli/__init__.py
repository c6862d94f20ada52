"""The `robokernel` command: every subcommand module of the project's shell.

    robokernel eval --robot so101 --policy mock --episodes 5 [--json]
    robokernel --help                        (every subcommand, with its exit statuses)
    python -m robokernel_ros.cli ...         (the same command)

main (cli.main) builds the parser from the registry (cli.registry), where each subcommand
module registers itself when imported: evaluate (eval), benchmark, score (score, compare,
report), export (export-lerobot, bag-recover), import_bag (import-bag, contract check),
limits, replay, flywheel, ros (the operator's and the runner's ROS 2 calls). flags turns
API parameter names into CLI flags in messages; options holds eval's and benchmark's shared
options; output prints envelopes and handles --output/--resume and Ctrl-C.
The cli layer may import every layer but the nodes (test/boundary.py's LAYER_IMPORTS).
"""

from robokernel_ros.cli.main import EXIT_STATUS, build_parser, main
from robokernel_ros.cli.registry import (
    SUBCOMMAND_MODULES,
    SUBCOMMANDS,
    Subcommand,
    register_subcommand,
)

__all__ = [
    "EXIT_STATUS",
    "SUBCOMMANDS",
    "SUBCOMMAND_MODULES",
    "Subcommand",
    "build_parser",
    "main",
    "register_subcommand",
]
