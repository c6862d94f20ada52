"""`robokernel`: the rollout API from a shell.

    robokernel eval --robot so101 --policy mock --episodes 5 [--async-rtc] [--video DIR] [--seed N] [--json]
    robokernel eval --robot so101 --episodes 50 --output DIR [--video]   (--resume DIR continues it)
    robokernel replay RUN_DIR_BAG_OR_DATASET [--episode N]
    robokernel benchmark go2_walk_forward --episodes 3
    robokernel benchmark --list

Subcommands live in a registry: a module adds one with `register_subcommand(name,
help, add_arguments, run)`, where run(args) returns the exit status. Exit status: 0
when the call succeeded, 1 when it was refused or failed (the message goes to
stderr, naming the CLI flag), 2 for a command-line usage error, 130 when interrupted
(Ctrl-C: the running episode is closed and the report of what ran is printed).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robokernel_ros.cli_output import (
    TRACE_DIR_DEFAULT,
    episodes_to_run,
    interruptible,
    json_stdout,
    load_resume,
    output_conflict,
    usage_error,
    write_output,
)
from robokernel_ros.memory import retain_freed_memory


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


# Modules that register subcommands when imported (a missing one is skipped).
SUBCOMMAND_MODULES: list[str] = [
    "robokernel_ros.scoring.cli",
    "robokernel_ros.recording.cli",
    "robokernel_ros.recording.import_cli",  # import-bag, contract check (issue #35)
    "robokernel_ros.safety.cli",
    "robokernel_ros.cli_replay",
    "robokernel_ros.flywheel.cli",
    "robokernel_ros.ros.cli",
]


def _load_subcommand_modules() -> None:
    import importlib

    for module in SUBCOMMAND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


# ------------------------------------------------------------------ shared helpers

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
_flags: dict[str, str] = {}  # the running subcommand's parameter name -> flag
_switches: set[str] = set()  # its flags that take no value (store_true)


def flag_names(text: str) -> str:
    """An error message with the running subcommand's parameter names (`model=...`,
    `trace_dir=...`, `video['fps']=...`) spelled as its CLI flags (`--robot=...`,
    `--trace-dir=...`, `--video-fps=...`); a switch's `=True` / `=False` as the shell says
    it (`--batch-inference` / `without --batch-inference`), never a form argparse refuses."""
    if not _flags:
        return text
    for field_name, flag in FIELD_FLAGS.items():
        if flag in _flags.values():
            text = text.replace(field_name, flag)
    names = "|".join(map(re.escape, _flags))
    pattern = r"(?<![\w\-.\[\'\"])(" + names + r")(?==)"
    text = re.sub(pattern, lambda m: _flags[m.group(1)], text)
    # an entry of a dict-valued flag: policy_config['targets']=... -> --policy-config['targets']=...
    text = re.sub(r"(?<![\w\-.\[\'\"])(" + names + r")(?=\[)", lambda m: _flags[m.group(1)], text)
    for switch in _switches:
        text = re.sub(re.escape(switch) + r"=True\b", switch, text)
        text = re.sub(re.escape(switch) + r"=False\b", f"without {switch}", text)
    return text


def _parser_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
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


def _parser_switches(parser: argparse.ArgumentParser) -> list[str]:
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


def emit(out: dict[str, Any], *, as_json: bool) -> int:
    """Print an envelope: the text (a table) or the JSON report; errors to stderr, exit 1."""
    from robokernel_ros.rollout import envelope_json, envelope_text

    if out["status"] != "success":
        print(f"error: {flag_names(envelope_text(out))}", file=sys.stderr)
        if as_json:
            print(
                json.dumps(
                    {
                        "status": out["status"],
                        "error": envelope_text(out),
                        "json": envelope_json(out),
                    }
                )
            )
        return 1
    if as_json:
        print(json.dumps(envelope_json(out), indent=2, allow_nan=False))
    else:
        print(envelope_text(out))
    return 0


def _add_policy_args(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--video",
        nargs="?",
        const="",  # bare --video: DIR/videos of --output
        default=None,
        metavar="DIR|FILE.mp4",
        help="one MP4 per episode: DIR/<command>_<id>_ep<i>.mp4 (<id> unique per call), "
        "or FILE_ep<i>.mp4 for FILE.mp4",
    )
    p.add_argument("--video-fps", type=float, default=30.0,
                   help="frames per second of --video, > 0 (default 30; at most the control rate)")  # fmt: skip
    p.add_argument("--camera", default=None,
                   help="with --video: a camera of the scene to record (default: the free camera)")  # fmt: skip
    p.add_argument(
        "--trace-dir",
        default=TRACE_DIR_DEFAULT,
        help="a folder (made if missing) the run directories go to (default runs/)",
    )
    p.add_argument("--no-trace", action="store_true", help="record no trace")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar, --progress / --no-progress (default: on a terminal)")  # fmt: skip
    p.add_argument("--wbc-install-torque-control", action="store_true",
                   help="torque motors track the policy's joint targets through a PD shim")  # fmt: skip
    p.add_argument("--wbc-gains", type=json_arg, default=None, metavar="JSON",
                   help='with --wbc-install-torque-control: a JSON object of shim gains {joint: {"kp": .., "kd": ..}} over the model\'s defaults')  # fmt: skip
    p.add_argument("--live", nargs="?", type=_live_port, const=8765, default=None, metavar="PORT",
                   help="serve a live Foxglove view on ws://127.0.0.1:PORT, a TCP port 0..65535 (bare --live: 8765; "
                        "0: a free one, printed)")  # fmt: skip
    p.add_argument("--live-wait", type=_positive_seconds, default=None, metavar="SECONDS",
                   help="with --live: wait up to SECONDS (> 0) for a viewer before the first episode")  # fmt: skip
    p.add_argument("--realtime", action="store_true",
                   help="pace the episodes at the control rate (wall clock), as a robot runs; "
                        "default: as fast as the simulation goes")  # fmt: skip
    p.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                   help="run the episodes on N Ray workers, N >= 1 (default: in this process, no Ray)")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="with --workers: a Ray cluster to run the workers on ('auto', 'ray://head:10001'; default: a local Ray)")  # fmt: skip
    p.add_argument("--batch-inference", action="store_true",
                   help="with --workers N (N >= 2): one policy actor batches every worker's inference")  # fmt: skip
    p.add_argument("--max-batch", type=_positive_int, default=None, metavar="B",
                   help="with --batch-inference: observations per forward pass at most "
                        "(default: eval_policy's max_batch)")  # fmt: skip


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive whole number")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be seconds, a number > 0")
    return value


def _live_port(text: str) -> int:
    """argparse type of --live: a TCP port."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be a TCP port in [0, 65535] (0: any free port)"
        )
    return port


def _flag_conflict(args: argparse.Namespace) -> str | None:
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


def _common_kwargs(args: argparse.Namespace, label: str) -> dict[str, Any]:
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


def emit_interruptible(out: dict[str, Any], state: dict[str, Any], *, as_json: bool) -> int:
    """emit(out), with exit status 130 when a Ctrl-C came (state: `interruptible`'s)."""
    code = emit(out, as_json=as_json)
    return 130 if state["interrupted"] else code


# ------------------------------------------------------------------ eval


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--robot",
        default=None,
        help="packaged model (so101, panda, go2) or an MJCF path (required, but for --resume)",
    )
    p.add_argument(
        "--robot-name", default=None, help="name of the robot in the scene (default: from --robot)"
    )
    _add_policy_args(p)
    p.add_argument(
        "--max-steps", type=int, default=300, help="steps per episode, >= 1 (default 300)"
    )
    p.add_argument("--control-frequency", type=float, default=50.0,
                   help="control steps per second, > 0 (default 50)")  # fmt: skip
    p.add_argument("--action-horizon", type=int, default=8,
                   help="actions of a chunk executed before the next inference, >= 1 (default 8)")  # fmt: skip
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

    if args.resume:
        defaults = argparse.ArgumentParser(add_help=False)
        _eval_arguments(defaults)
        refused = load_resume(args, vars(defaults.parse_args([])), _flags)
        if refused:
            return refused
    if not args.robot:
        raise SystemExit(usage_error("eval", "the following arguments are required: --robot"))
    conflict = _flag_conflict(args) or output_conflict(args)
    if conflict:
        return usage_error("eval", conflict)
    out_dir = None
    if args.output:
        from robokernel_ros.tasks.eval_output import (
            EVAL_CONFIG,
            RUNS_DIR,
            VIDEOS_DIR,
            output_folder,
            write_json,
        )

        try:
            out_dir = Path(args.output) if args.resume else output_folder(args.output)
            made_out_dir = not out_dir.exists()
        except ValueError as exc:
            print(f"error: {flag_names(str(exc))}", file=sys.stderr)
            return 1
        if not args.no_trace:
            args.trace_dir = str(out_dir / RUNS_DIR)
        if args.video == "":
            args.video = str(out_dir / VIDEOS_DIR)
        if not args.resume:  # written first: --resume after a crash reads it
            saved = {k: v for k, v in vars(args).items() if not k.startswith("_")}
            write_json(out_dir / EVAL_CONFIG, saved)
    blocks = episodes_to_run(args, out_dir)
    name = args.robot_name or Path(args.robot).stem
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, args.robot)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        kwargs = _common_kwargs(args, "eval")
        config = kwargs["policy_config"]
        if (
            args.async_rtc
            and args.policy == "mock"
            and (config is None or (isinstance(config, dict) and "execution_horizon" not in config))
        ):
            # the mock acts one step at a time unless told: with --async-rtc it emits
            # chunks of --action-horizon actions, so that the first try of the flag works
            kwargs["policy_config"] = {**(config or {}), "execution_horizon": args.action_horizon}
        try:
            kwargs.update(_camera_kwargs(args))
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


def _refused_before_any_episode(outs: list[dict[str, Any]], out_dir: Path) -> bool:
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


# ------------------------------------------------------------------ benchmark


def _benchmark_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="a shipped benchmark (see --list) or a spec JSON file")
    p.add_argument("--list", action="store_true", help="list the shipped benchmarks")
    _add_policy_args(p)


def _shorten(text: str, width: int = 60) -> str:
    """A table cell: the first sentence, cut at a word to `width` characters (--json: all)."""
    text = " ".join(str(text).split()).split(". ")[0]
    if len(text) <= width:
        return text
    return text[: width - 1].rsplit(" ", 1)[0] + "…"


def _benchmark_run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell

    conflict = _flag_conflict(args)
    if conflict:
        return usage_error("benchmark", conflict)

    with SimWorkcell(trace_dir=None) as cell:
        cell.register_builtin_benchmarks()
        if args.list or not args.name:
            out = cell.list_benchmarks()
            if not args.json and out["status"] == "success":
                from robokernel_ros.rollout import envelope_json
                from robokernel_ros.rollout.results import summary_table

                rows = [
                    (b["name"], b["robot_model"], b["max_steps"], _shorten(b["description"]))
                    for b in envelope_json(out)["benchmarks"]
                ]
                print(summary_table(rows, ("name", "robot", "max_steps", "description")))
                return 0
            return emit(out, as_json=args.json)
        spec: Any = args.name
        path = Path(args.name)
        if (path.suffix == ".json" or "/" in args.name) and not path.is_file():
            print(
                f"error: NAME={args.name!r}: no such file (a spec file; or a shipped "
                "benchmark's name, see --list)",
                file=sys.stderr,
            )
            return 1
        if path.suffix == ".json" and path.is_file():
            try:
                spec = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                print(f"error: {path}: not valid JSON: {exc}", file=sys.stderr)
                return 1
        with interruptible(cell) as state, json_stdout(args.json):
            out = cell.evaluate_benchmark(
                spec, **_common_kwargs(args, str(args.name).replace("/", "_"))
            )
        return emit_interruptible(out, state, as_json=args.json)


register_subcommand(
    "eval", "evaluate a policy on a robot over n episodes", _eval_arguments, _eval_run
)
register_subcommand(
    "benchmark", "run a shipped benchmark (or a spec file)", _benchmark_arguments, _benchmark_run
)


# ------------------------------------------------------------------ main


EXIT_STATUS = (
    "exit status: 0 done; 1 refused or failed (the reason on stderr, naming the flag); "
    "2 usage error (an unknown flag or a bad value argparse sees); 130 interrupted (Ctrl-C)"
)


def build_parser() -> argparse.ArgumentParser:
    _load_subcommand_modules()
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
        p.set_defaults(_run=command.run, _flags=_parser_flags(p), _switches=_parser_switches(p))
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
    _flags.clear()
    _flags.update(args._flags)
    _switches.clear()
    _switches.update(args._switches)
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
        _flags.clear()
        _switches.clear()
        if live_lines is not None:
            live_logger = logging.getLogger(LIVE_LOGGER)
            live_logger.removeHandler(live_lines)
            live_logger.propagate = True
            live_logger.setLevel(logging.NOTSET)
        if quiet_tracebacks is not None:
            for handler in logging.getLogger().handlers:
                handler.removeFilter(quiet_tracebacks)


if __name__ == "__main__":
    # Run as `python -m robokernel_ros.cli`, this file is `__main__`, a second copy of the
    # module: subcommands register on the importable `robokernel_ros.cli`, so use its main.
    from robokernel_ros.cli import main as registered_main

    sys.exit(registered_main())
