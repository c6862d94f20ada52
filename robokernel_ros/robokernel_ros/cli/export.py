"""`robokernel export-lerobot BAG_OR_RUNS... --repo-id NAME --root DIR` and
`robokernel bag-recover BAG [--repair OUT] [--json]`.

Importing this module registers both on the `robokernel` CLI's subcommand registry;
`main(argv)` runs export-lerobot on its own (`python -m robokernel_ros.cli.export`).
Exit status: 0, 1 when refused (message on stderr), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", metavar="BAG_OR_RUNS", help="bags, run directories, or folders of them"
    )
    parser.add_argument(
        "--repo-id",
        required=True,
        help="the dataset's name: NAME or USER/NAME (one slash at most), e.g. user/pick_cube",
    )
    parser.add_argument(
        "--root", required=True, help="folder to write the dataset to (must not exist or be empty)"
    )
    parser.add_argument(
        "--images", action="store_true", help="store frames as images instead of video"
    )
    parser.add_argument(
        "--robot-type",
        default=None,
        help="robot_type in the dataset's metadata, a name (default: none; "
        "--convention lerobot: so101_follower)",
    )
    parser.add_argument(
        "--convention",
        choices=("default", "lerobot", "lerobot-range"),
        default="default",
        help="default: the robot's names and radians, for policies served here; lerobot: what "
        "lerobot-record writes for the robot's family (SO-101: shoulder_pan.pos..., degrees, gripper "
        "0..100, robot_type so101_follower, 30 fps, observation.environment_state), to merge with "
        "real-robot datasets; lerobot-range: the same with body joints in -100..100",
    )
    parser.add_argument(
        "--fps",
        type=int,
        default=None,
        help="resample to this frame rate, a whole number > 0 (default: the control rate; "
        "30 with --convention lerobot)",
    )
    parser.add_argument(
        "--env-state",
        default=None,
        metavar="NAME,...",
        help="observation names written as observation.environment_state (e.g. "
        "shoulder_pan.vel; default with --convention lerobot: the observation's top-level numbers)",
    )
    parser.add_argument(
        "--corrections-only",
        action="store_true",
        help="export only the operator's corrections (steps whose mode is 'correcting'), each "
        "correction one dataset episode, every frame intervention=True (docs/operator.md)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the export report as one JSON object"
    )
    parser.add_argument(
        "--verbose",
        dest="export_verbose",
        action="store_true",
        help="show the libraries' output (lerobot's and the encoder's logs, progress bars)",
    )


def run_export(args: argparse.Namespace) -> int:
    from robokernel_ros.cli.flags import flag_names
    from robokernel_ros.recording.export import export_lerobot

    verbose = bool(getattr(args, "export_verbose", False) or getattr(args, "verbose", False))
    try:
        with quiet_libraries(enabled=not verbose):
            report = export_lerobot(
                args.paths,
                repo_id=args.repo_id,
                root=args.root,
                use_videos=not args.images,
                robot_type=args.robot_type,
                convention=args.convention,
                fps=args.fps,
                env_state=[n for n in args.env_state.split(",") if n] if args.env_state else None,
                corrections_only=bool(getattr(args, "corrections_only", False)),
            )
    except (ValueError, OSError) as exc:
        print(f"robokernel export-lerobot: error: {flag_names(str(exc))}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(asdict(report)))
    else:
        print(
            f"wrote {report.episodes} episode(s), {report.frames} frames at {report.fps} fps to {report.root} "
            f"({report.repo_id}, LeRobotDataset {report.codebase_version}; cameras: {', '.join(report.cameras) or 'none'})"
        )
    return 0


@contextlib.contextmanager
def quiet_libraries(*, enabled: bool = True) -> Iterator[None]:
    """Silence what the libraries an export drives write (lerobot's torchcodec warnings,
    datasets' progress bars, the video encoder's log lines from C): other loggers below
    ERROR, warnings, progress bars, and file descriptor 2 (kept in a temporary file and
    written out only if the export fails). robokernel_ros's own log records still show."""
    if not enabled:
        yield
        return
    import logging
    import os
    import tempfile
    import warnings

    class _Ours(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return record.name.startswith("robokernel_ros") or record.levelno >= logging.ERROR

    sys.stderr.flush()
    real_err = os.fdopen(os.dup(2), "w", buffering=1)  # noqa: SIM115 - closed in finally
    captured = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 - closed in finally
    root = logging.getLogger()
    added = None
    if not root.handlers:  # else the first library to call basicConfig would print freely
        added = logging.StreamHandler(real_err)
        added.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(added)
    handlers = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
    streams = {h: h.stream for h in handlers}
    ours = _Ours()
    saved_fd = os.dup(2)
    saved_stderr = sys.stderr
    ok = False
    try:
        for h in handlers:
            h.addFilter(ours)
            if h.stream in (sys.stderr, sys.__stderr__):
                h.setStream(real_err)
        sys.stderr = real_err
        os.dup2(captured.fileno(), 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                import datasets

                datasets.disable_progress_bars()
            except ImportError:
                pass
            yield
        ok = True
    finally:
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        sys.stderr = saved_stderr
        for h in handlers:
            h.removeFilter(ours)
            h.setStream(streams[h])
        if added is not None:
            root.removeHandler(added)
        if not ok:  # the libraries' output may say why: show it
            captured.seek(0)
            real_err.write(captured.read().decode(errors="replace"))
        captured.close()
        real_err.close()


def run_recover(args: argparse.Namespace) -> int:
    from robokernel_ros.recording.recover import main as recover_main

    argv = (
        [args.bag]
        + (["--repair", args.repair] if args.repair else [])
        + (["--json"] if args.json else [])
    )
    return recover_main(argv)


def _recover_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="bag folder (or its .mcap / .db3 file)")
    parser.add_argument(
        "--repair",
        metavar="OUT",
        help="write the recovered messages to a complete bag at OUT, a folder that must not exist",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")


def _register() -> None:
    from robokernel_ros.cli.registry import register_subcommand

    register_subcommand(
        "export-lerobot",
        "recorded episodes -> a LeRobotDataset",
        add_export_arguments,
        run_export,
        replace=True,
    )
    register_subcommand(
        "bag-recover",
        "report (and repair) a bag left by a killed writer",
        _recover_arguments,
        run_recover,
        replace=True,
    )


_register()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="robokernel export-lerobot", description="Recorded episodes -> a LeRobotDataset."
    )
    add_export_arguments(parser)
    return run_export(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
