"""The options `robokernel eval` and `robokernel benchmark` share (the policy, episodes,
seed, video, trace, live view, workers), and what they become as rollout-API keywords.
A flag that only means something with another one is refused by name (`flag_conflict`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from robokernel_ros.cli.flags import json_arg, live_port, positive_int, positive_seconds
from robokernel_ros.cli.output import TRACE_DIR_DEFAULT


def add_policy_args(p: argparse.ArgumentParser) -> None:
    """The shared options, in --help's order: the policy and the episodes, what is
    recorded and printed, how the episodes run."""
    p.add_argument(
        "--policy", default="mock", help="policy provider (mock, scripted, lerobot, ...)"
    )
    p.add_argument(
        "--policy-config",
        type=json_arg,
        default=None,
        metavar="JSON",
        help="the provider's config, a JSON object (default {})",
    )
    p.add_argument("--episodes", type=int, default=1, help="number of episodes, >= 1 (default 1)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="base seed, a whole number (episode i runs with seed + i; default 0)",
    )
    _add_recording_args(p)
    _add_execution_args(p)


def _add_recording_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--video",
        nargs="?",
        const="",  # bare --video: DIR/videos of --output
        default=None,
        metavar="DIR|FILE.mp4",
        help="one MP4 per episode: DIR/<command>_<id>_ep<i>.mp4 (<id> unique per call), "
        "or FILE_ep<i>.mp4 for FILE.mp4",
    )
    p.add_argument(
        "--video-fps",
        type=float,
        default=30.0,
        help="frames per second of --video, > 0 (default 30; at most the control rate)",
    )
    p.add_argument(
        "--camera",
        default=None,
        help="with --video: a camera of the scene to record (default: the free camera)",
    )
    p.add_argument(
        "--trace-dir",
        default=TRACE_DIR_DEFAULT,
        help="a folder (made if missing) the run directories go to (default runs/)",
    )
    p.add_argument("--no-trace", action="store_true", help="record no trace")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar, --progress / --no-progress (default: on a terminal)",
    )


def _add_execution_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wbc-install-torque-control",
        action="store_true",
        help="torque motors track the policy's joint targets through a PD shim",
    )
    p.add_argument(
        "--wbc-gains",
        type=json_arg,
        default=None,
        metavar="JSON",
        help='with --wbc-install-torque-control: a JSON object of shim gains {joint: {"kp": .., "kd": ..}} over the model\'s defaults',
    )
    p.add_argument(
        "--live",
        nargs="?",
        type=live_port,
        const=8765,
        default=None,
        metavar="PORT",
        help="serve a live Foxglove view on ws://127.0.0.1:PORT, a TCP port 0..65535 (bare --live: 8765; "
        "0: a free one, printed)",
    )
    p.add_argument(
        "--live-wait",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="with --live: wait up to SECONDS (> 0) for a viewer before the first episode",
    )
    p.add_argument(
        "--realtime",
        action="store_true",
        help="pace the episodes at the control rate (wall clock), as a robot runs; "
        "default: as fast as the simulation goes",
    )
    _add_workers_args(p)


def _add_workers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="run the episodes on N Ray workers, N >= 1 (default: in this process, no Ray)",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="with --workers: a Ray cluster to run the workers on ('auto', 'ray://head:10001'; default: a local Ray)",
    )
    p.add_argument(
        "--batch-inference",
        action="store_true",
        help="with --workers N (N >= 2): one policy actor batches every worker's inference",
    )
    p.add_argument(
        "--max-batch",
        type=positive_int,
        default=None,
        metavar="B",
        help="with --batch-inference: observations per forward pass at most "
        "(default: eval_policy's max_batch)",
    )


def flag_conflict(args: argparse.Namespace) -> str | None:
    """A flag that only means something with another one: refused by name (nothing runs)."""
    if args.camera is not None and not args.video:
        return f"--camera={args.camera!r}: chooses the camera --video records; give --video too"
    if args.max_batch is not None and not args.batch_inference:
        return (
            f"--max-batch={args.max_batch}: the batch size of --batch-inference; "
            "give --batch-inference (and --workers N, N >= 2) too"
        )
    if args.live_wait is not None and args.live is None:
        return f"--live-wait={args.live_wait}: waits for a viewer of --live; give --live too"
    if args.ray_address is not None and args.workers is None:
        return (
            f"--ray-address={args.ray_address!r}: the Ray cluster --workers runs on; "
            "give --workers N too"
        )
    return None


def common_kwargs(args: argparse.Namespace, label: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "policy_provider": args.policy,
        "policy_config": args.policy_config,
        "n_episodes": args.episodes,
        "seed": args.seed,
        "trace_dir": None if args.no_trace else args.trace_dir,
        "progress": args.progress,
        "ray_address": args.ray_address,
        "batch_inference": bool(args.batch_inference),
        "wbc_install_torque_control": bool(args.wbc_install_torque_control),
    }
    for name in ("workers", "max_batch"):  # not given: the API's default (rollout.plan)
        if getattr(args, name) is not None:
            kwargs[name] = getattr(args, name)
    if args.wbc_gains is not None:
        kwargs["wbc_gains"] = args.wbc_gains
    if args.realtime:
        kwargs["fast_mode"] = False
    if args.live is not None:
        kwargs["live"] = (
            args.live if args.live_wait is None else {"port": args.live, "wait_s": args.live_wait}
        )
        where = (
            f"ws://127.0.0.1:{args.live}" if args.live else "a free port (printed once it listens)"
        )
        print(
            f"live view: {where} (Foxglove: Open connection > Foxglove WebSocket)", file=sys.stderr
        )
    if args.video:
        kwargs["video"] = {
            "path": video_path(args.video, label),
            "fps": args.video_fps,
            "camera": args.camera,
        }
    return kwargs


def video_path(value: str, label: str) -> str:
    """--video: a file when it ends in .mp4 (episode i: <stem>_ep<i>.mp4), else a folder that
    gets <label>_<id>_ep<i>.mp4, <id> unique per call (the run-id format, sortable), so
    that a second evaluation into the same folder never replaces the first's videos."""
    from robokernel_ros.kernel.trace import new_run_id

    path = Path(value)
    if path.suffix.lower() == ".mp4":
        return str(path)
    return str(path / f"{label}_{new_run_id()}.mp4")
