"""`robokernel eval`: evaluate a policy on a robot over n episodes.

    robokernel eval --robot so101 --policy mock --episodes 5 [--async-rtc] [--video DIR] [--seed N] [--json]
    robokernel eval --robot so101 --episodes 50 --output DIR [--video]   (--resume DIR continues it)

Importing this module registers the subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from robokernel_ros.cli.flags import RUNNING_FLAGS, flag_names
from robokernel_ros.cli.options import add_policy_args, common_kwargs, flag_conflict
from robokernel_ros.cli.output import (
    emit,
    emit_interruptible,
    episodes_to_run,
    interruptible,
    json_stdout,
    load_resume,
    output_conflict,
    usage_error,
    write_output,
)
from robokernel_ros.cli.registry import register_subcommand


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--robot",
        default=None,
        help="packaged model (so101, panda, go2) or an MJCF path (required, but for --resume)",
    )
    p.add_argument(
        "--robot-name", default=None, help="name of the robot in the scene (default: from --robot)"
    )
    add_policy_args(p)
    p.add_argument(
        "--max-steps", type=int, default=300, help="steps per episode, >= 1 (default 300)"
    )
    p.add_argument(
        "--control-frequency",
        type=float,
        default=50.0,
        help="control steps per second, > 0 (default 50)",
    )
    p.add_argument(
        "--action-horizon",
        type=int,
        default=8,
        help="actions of a chunk executed before the next inference, >= 1 (default 8)",
    )
    p.add_argument(
        "--async-rtc",
        action="store_true",
        help="overlap inference with execution (realtime, virtual clock)",
    )
    p.add_argument(
        "--instruction", default="", help="the task's text for the policy (default none)"
    )
    p.add_argument(
        "--output",
        metavar="DIR",
        default=None,
        help="one folder for this evaluation: DIR/eval_info.json (per-episode records and "
        "the aggregate, like lerobot-eval's), DIR/runs/, and DIR/videos/ with a bare --video",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the evaluation an --output DIR holds (after a crash or Ctrl-C): the "
        "finished episodes are kept, the others run; eval_info.json covers them all. Other flags "
        "must match its eval_config.json or be left out, but --json, --progress, --live, "
        "--workers, --ray-address, --batch-inference and --max-batch, taken as given",
    )
    _add_camera_args(p)


def _add_camera_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--add-camera",
        dest="cameras",
        action="append",
        default=None,
        metavar="NAME[=SPEC]",
        help="render this camera for the policy (repeatable): a preset of the packaged robot "
        "(so101, panda, go2: front, top, side), a camera the scene has, or "
        'NAME=\'{"pos": [x, y, z], "lookat": [x, y, z], "fovy": 45}\'',
    )
    p.add_argument(
        "--image-size",
        default=None,
        metavar="HxW",
        help="camera image size HxW, two whole numbers > 0, e.g. 96x96 (default: the policy's)",
    )


def _camera_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """--add-camera / --image-size as eval_policy's cameras= / image_size=."""
    from robokernel_ros.rollout.cameras import camera_option

    out: dict[str, Any] = {}
    if args.cameras:
        out["cameras"] = dict(camera_option(args.robot, text) for text in args.cameras)
    if args.image_size is not None:
        height, sep, width = str(args.image_size).lower().partition("x")
        if not (sep and height.isdigit() and width.isdigit() and int(height) and int(width)):
            raise ValueError(f"--image-size={args.image_size!r}: must be HxW, e.g. 96x96")
        out["image_size"] = (int(height), int(width))
    return out


def _eval_run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell

    refused = _refused_arguments(args)
    if refused is not None:
        return refused
    opened = _open_output(args)
    if isinstance(opened, int):
        return opened
    out_dir, made_out_dir = opened
    blocks = episodes_to_run(args, out_dir)
    name = args.robot_name or Path(args.robot).stem
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, args.robot)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        try:
            kwargs = _eval_kwargs(args)
        except ValueError as exc:
            return usage_error("eval", str(exc))
        outs = []
        with interruptible(cell) as state:
            with json_stdout(args.json):
                for first, count in blocks:  # --resume: the episodes that did not finish
                    # numbered on from `first` (seed + first ...), as in the first invocation
                    kwargs.update(n_episodes=count, seed=args.seed or 0, first_episode=first)
                    outs.append(
                        cell.eval_policy(
                            name,
                            max_steps=args.max_steps,
                            control_frequency=args.control_frequency,
                            action_horizon=args.action_horizon,
                            async_rtc=bool(args.async_rtc),
                            instruction=args.instruction,
                            **kwargs,
                        )
                    )
                    if state["interrupted"] or outs[-1]["status"] != "success":
                        break
            code = 0
            for out in outs:
                code = emit_interruptible(out, state, as_json=args.json) or code
            if (
                out_dir is not None
                and not args.resume
                and _refused_before_any_episode(outs, out_dir)
            ):
                # a refused call writes nothing: the folder holds only what this call wrote
                _remove_output(out_dir, made=made_out_dir)
                return code
            interrupted = state["interrupted"]
            if out_dir is not None:  # a Ctrl-C now waits for eval_info.json (a second aborts)
                interrupted = write_output(
                    out_dir, outs, args, kwargs, interrupted=lambda: state["interrupted"]
                )
        return 130 if interrupted else code


def _refused_arguments(args: argparse.Namespace) -> int | None:
    """--resume's folder read into `args` (its refusal's exit status), then the checks
    across flags: an exit status when refused, None when the eval may run."""
    if args.resume:
        defaults = argparse.ArgumentParser(add_help=False)
        _eval_arguments(defaults)
        refused = load_resume(args, vars(defaults.parse_args([])), RUNNING_FLAGS)
        if refused:
            return refused
    if not args.robot:
        raise SystemExit(usage_error("eval", "the following arguments are required: --robot"))
    conflict = flag_conflict(args) or output_conflict(args)
    if conflict:
        return usage_error("eval", conflict)
    return None


def _open_output(args: argparse.Namespace) -> tuple[Path | None, bool] | int:
    """--output DIR: (the folder, whether this call made it), with --trace-dir and a bare
    --video pointed into it and eval_config.json written (first: --resume after a crash
    reads it); (None, False) without --output; exit status 1 when the folder is refused."""
    if not args.output:
        return None, False
    from robokernel_ros.tasks.eval_output import (
        EVAL_CONFIG,
        RUNS_DIR,
        VIDEOS_DIR,
        output_folder,
        write_json,
    )

    try:
        out_dir = Path(args.output) if args.resume else output_folder(args.output)
        made = not out_dir.exists()
    except ValueError as exc:
        print(f"error: {flag_names(str(exc))}", file=sys.stderr)
        return 1
    if not args.no_trace:
        args.trace_dir = str(out_dir / RUNS_DIR)
    if args.video == "":
        args.video = str(out_dir / VIDEOS_DIR)
    if not args.resume:
        saved = {k: v for k, v in vars(args).items() if not k.startswith("_")}
        write_json(out_dir / EVAL_CONFIG, saved)
    return out_dir, made


def _eval_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """eval_policy's keywords from the shared options, the mock's chunks under --async-rtc
    and the cameras (ValueError naming the flag)."""
    kwargs = common_kwargs(args, "eval")
    config = kwargs["policy_config"]
    if (
        args.async_rtc
        and args.policy == "mock"
        and (config is None or (isinstance(config, dict) and "execution_horizon" not in config))
    ):
        # the mock acts one step at a time unless told: with --async-rtc it emits
        # chunks of --action-horizon actions, so that the first try of the flag works
        kwargs["policy_config"] = {**(config or {}), "execution_horizon": args.action_horizon}
    kwargs.update(_camera_kwargs(args))
    return kwargs


def _refused_before_any_episode(outs: Sequence[Mapping[str, Any]], out_dir: Path) -> bool:
    """The first eval call was refused (a bad policy config, ...) and no episode started:
    no run directory under the output folder's runs/."""
    from robokernel_ros.tasks.eval_output import RUNS_DIR

    if not outs or outs[0]["status"] == "success":
        return False
    runs = out_dir / RUNS_DIR
    return not (runs.is_dir() and any(runs.iterdir()))


def _remove_output(out_dir: Path, *, made: bool) -> None:
    """Undo what a refused eval wrote into its --output folder (eval_config.json, empty
    runs/ and videos/), and the folder itself when this call created it."""
    from robokernel_ros.tasks.eval_output import EVAL_CONFIG, RUNS_DIR, VIDEOS_DIR

    (out_dir / EVAL_CONFIG).unlink(missing_ok=True)
    for sub in (RUNS_DIR, VIDEOS_DIR):
        try:
            (out_dir / sub).rmdir()  # only when empty
        except OSError:
            pass
    if made:
        try:
            out_dir.rmdir()
        except OSError:
            pass


register_subcommand(
    "eval", "evaluate a policy on a robot over n episodes", _eval_arguments, _eval_run
)
