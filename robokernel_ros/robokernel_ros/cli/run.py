"""`robokernel run`: one policy rollout on a simulated robot, optionally in sentry mode.

    robokernel run --robot so101 --policy mock --max-steps 500 [--seed N] [--json]
    robokernel run --robot so101 --max-steps 30000 --sentry-rotate-s 60 --trace-dir runs/

--sentry-rotate-s S runs one continuous rollout (one reset) recorded as a new episode (run
directory, trace, bag) every S seconds of robot time, without losing a step
(rollout.sentry, docs/operator.md); the report lists the episodes. Importing this module
registers the subcommand. Exit status: 0 ran; 1 refused or failed; 2 bad usage.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from robokernel_ros.cli.flags import json_arg
from robokernel_ros.cli.output import emit, interruptible, json_stdout
from robokernel_ros.cli.registry import register_subcommand


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", required=True,
                   help="packaged model (so101, panda, go2) or an MJCF path")  # fmt: skip
    p.add_argument("--robot-name", default=None,
                   help="name of the robot in the scene (default: from --robot)")  # fmt: skip
    p.add_argument("--policy", default="mock",
                   help="policy provider (mock, scripted, lerobot, ...)")  # fmt: skip
    p.add_argument("--policy-config", type=json_arg, default=None, metavar="JSON",
                   help="the provider's config, a JSON object (default {})")  # fmt: skip
    p.add_argument("--max-steps", type=int, default=500,
                   help="steps of the rollout, >= 1 (default 500)")  # fmt: skip
    p.add_argument("--control-frequency", type=float, default=50.0,
                   help="control steps per second, > 0 (default 50)")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="the rollout's seed (default none)")
    p.add_argument("--instruction", default="", help="the task's text for the policy")
    p.add_argument("--trace-dir", default="runs/",
                   help="where run directories (and their bags) go (default runs/)")  # fmt: skip
    p.add_argument("--sentry-rotate-s", type=float, default=None, metavar="S",
                   help="sentry mode: a new episode (run dir, trace, bag) every S seconds of "
                   "robot time, positive; one reset, no step lost (default: one episode)")  # fmt: skip
    p.add_argument("--realtime", action="store_true",
                   help="pace the loop at --control-frequency (the wall clock)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _run(args: argparse.Namespace) -> int:
    from robokernel_ros.rollout import SimWorkcell, envelope_json

    name = args.robot_name or Path(args.robot).stem
    with SimWorkcell(trace_dir=None) as cell:
        added = cell.add_robot(name, args.robot)
        if added["status"] != "success":
            return emit(added, as_json=args.json)
        with interruptible(cell), json_stdout(args.json):
            out = cell.run_policy(
                name,
                policy_provider=args.policy,
                policy_config=args.policy_config,
                n_steps=args.max_steps,
                control_frequency=args.control_frequency,
                seed=args.seed,
                instruction=args.instruction,
                trace_dir=args.trace_dir,
                sentry_rotate_s=args.sentry_rotate_s,
                fast_mode=not args.realtime,
            )
        status = emit(out, as_json=args.json)
    sentry = envelope_json(out).get("sentry") if status == 0 and not args.json else None
    if sentry:  # the episodes a sentry run recorded, one line each
        episodes = sentry["episodes"]
        print(f"sentry: {len(episodes)} episodes, a new one every {sentry['rotate_every_s']:g} s")
        for e in episodes:
            print(f"  {e['index']}: steps {e['first_step']}..{e['first_step'] + e['steps'] - 1} "
                  f"{e['outcome']} {e['trace_path']}")  # fmt: skip
    return status


register_subcommand(
    "run", "run a policy on a simulated robot once (--sentry-rotate-s: sentry mode)",
    _run_arguments, _run,
)  # fmt: skip
