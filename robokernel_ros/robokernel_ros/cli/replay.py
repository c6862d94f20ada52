"""`robokernel replay PATH [--episode N] [--robot MODEL]`: a recorded episode's actions
through the shield, from a run directory, a folder of them, a bag or a LeRobot dataset.
Importing this module registers the subcommand."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from robokernel_ros.cli.flags import flag_names
from robokernel_ros.cli.options import video_path
from robokernel_ros.cli.output import (
    TRACE_DIR_DEFAULT,
    emit,
    emit_interruptible,
    interruptible,
    json_stdout,
    usage_error,
)
from robokernel_ros.cli.registry import register_subcommand


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "recording",
        metavar="PATH",
        help="a run directory, a folder of them, a bag, or a LeRobot dataset root",
    )
    p.add_argument(
        "--episode",
        type=int,
        default=0,
        help="which episode, a whole number >= 0: of a folder, oldest first; of a dataset, its "
        "episode index (default 0)",
    )
    p.add_argument(
        "--robot",
        default=None,
        help="packaged model (so101, panda, go2) or an MJCF path (default: the recorded "
        "robot; a dataset's: the model its robot_type names, so101_follower: so101)",
    )
    p.add_argument(
        "--convention",
        default="auto",
        choices=("auto", "none", "so_follower", "so_follower_range"),
        help="a LeRobot dataset's units (default auto: what its robot_type implies, "
        "so101_follower: degrees, gripper 0..100; none: the robot's own, radians; "
        "so_follower_range: body joints -100..100)",
    )
    p.add_argument(
        "--robot-name", default=None, help="the robot's name in the scene (default: from --robot)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the replay's seed, a whole number (default: the recorded seed)",
    )
    p.add_argument(
        "--trace-dir",
        default=TRACE_DIR_DEFAULT,
        help="a folder (made if missing) the run directory goes to (default runs/)",
    )
    p.add_argument("--no-trace", action="store_true", help="record no trace")
    p.add_argument(
        "--video",
        default=None,
        metavar="FILE.mp4",
        help="record the replay as an MP4: FILE.mp4, or a folder",
    )
    p.add_argument("--json", action="store_true", help="print the JSON report")


def _replay_run(args: argparse.Namespace) -> int:
    from robokernel_ros.cli.export import quiet_libraries
    from robokernel_ros.envs.models import PACKAGED_MODELS
    from robokernel_ros.rollout import SimWorkcell
    from robokernel_ros.rollout.replay import resolve_recording

    verbose = bool(getattr(args, "verbose", False))
    model = args.robot
    if model is None:
        try:
            # a LeRobot dataset is read with lerobot: its import noise only with -v
            with quiet_libraries(enabled=not verbose):
                recording = resolve_recording(args.recording, args.episode, args.convention)
        except ValueError as exc:
            print(f"error: {flag_names(str(exc))}", file=sys.stderr)
            return 1
        recorded = recording.model or recording.robot
        if recorded not in PACKAGED_MODELS:
            what = (
                f"the dataset's robot_type {recording.meta.get('robot_type')!r}"
                if recording.source == "lerobot_dataset"
                else f"the recorded robot {recorded!r}"
            )
            return usage_error(
                "replay",
                f"--robot: {what} is not a packaged model ({', '.join(PACKAGED_MODELS)}); "
                "give --robot MODEL_OR_MJCF",
            )
        model = recorded
    name = args.robot_name or Path(model).stem
    kwargs: dict[str, Any] = {"trace_dir": None if args.no_trace else args.trace_dir}
    if args.seed is not None:
        kwargs["seed"] = args.seed
    if args.video:
        kwargs["video"] = {"path": video_path(args.video, "replay")}
    kwargs["convention"] = args.convention
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, model)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        with (
            interruptible(cell) as state,
            quiet_libraries(enabled=not verbose),
            json_stdout(args.json),
        ):
            out = cell.replay_episode(args.recording, name, episode=args.episode, **kwargs)
        return emit_interruptible(out, state, as_json=args.json)


register_subcommand(
    "replay",
    "replay a recorded episode's actions through the shield (run dir, bag, LeRobot dataset)",
    _replay_arguments,
    _replay_run,
    replace=True,
)
