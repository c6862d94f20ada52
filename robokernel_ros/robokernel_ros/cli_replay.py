"""`robokernel replay PATH [--episode N] [--robot MODEL]`: a recorded episode's actions
through the shield, from a run directory, a folder of them, a bag or a LeRobot dataset.
Importing this module registers the subcommand."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from robokernel_ros.cli import (
    TRACE_DIR_DEFAULT,
    _emit_interruptible,
    emit,
    register_subcommand,
    usage_error,
    video_path,
)
from robokernel_ros.cli_output import interruptible, json_stdout


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recording", metavar="PATH",
                   help="a run directory, a folder of them, a bag, or a LeRobot dataset root")  # fmt: skip
    p.add_argument("--episode", type=int, default=0,
                   help="which episode of a folder or dataset (default 0, oldest first)")  # fmt: skip
    p.add_argument(
        "--robot", default=None, help="packaged model or MJCF path (default: the recorded robot)"
    )
    p.add_argument("--robot-name", default=None, help="the robot's name in the scene")
    p.add_argument("--seed", type=int, default=None, help="default: the recorded seed")
    p.add_argument(
        "--trace-dir", default=TRACE_DIR_DEFAULT, help="run directories go here (default runs/)"
    )
    p.add_argument("--no-trace", action="store_true", help="record no trace")
    p.add_argument("--video", default=None, metavar="FILE.mp4", help="record the replay")
    p.add_argument("--json", action="store_true", help="print the JSON report")


def _replay_run(args: argparse.Namespace) -> int:
    from robokernel_ros.envs.models import PACKAGED_MODELS
    from robokernel_ros.rollout import SimWorkcell
    from robokernel_ros.rollout.replay import resolve_recording

    model = args.robot
    if model is None:
        try:
            recorded = resolve_recording(args.recording, args.episode).robot
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if recorded not in PACKAGED_MODELS:
            return usage_error(
                "replay",
                f"--robot: the recorded robot {recorded!r} is not a packaged model; give one",
            )
        model = recorded
    name = args.robot_name or Path(model).stem
    kwargs: dict[str, Any] = {"trace_dir": None if args.no_trace else args.trace_dir}
    if args.seed is not None:
        kwargs["seed"] = args.seed
    if args.video:
        kwargs["video"] = {"path": video_path(args.video, "replay")}
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, model)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        from robokernel_ros.recording.cli import quiet_libraries

        # a LeRobot dataset is read with lerobot: its import noise only with -v
        with (
            interruptible(cell) as state,
            quiet_libraries(enabled=not args.verbose),
            json_stdout(args.json),
        ):
            out = cell.replay_episode(args.recording, name, episode=args.episode, **kwargs)
        return _emit_interruptible(out, state, as_json=args.json)


register_subcommand(
    "replay",
    "replay a recorded episode's actions through the shield (run dir, bag, LeRobot dataset)",
    _replay_arguments,
    _replay_run,
    replace=True,
)
