"""Instructions per step: the traced eval against the hand-fused floor, counted, not timed.

rollout_throughput.py times the traced SO-101 eval against its hand-fused floor in CPU
seconds; on these shared VMs one run moves by +-0.03 of that ratio, too much to see a
change of a few per cent. This script counts instead: valgrind's callgrind tool counts
the instructions each process executes, which does not depend on what else the machine
does. Each variant runs in a child under callgrind twice, with a short and a long
episode length and everything else the same (imports, model compile, warm-up, episode
setup), so the difference over the extra steps is the cost of a step. Two identical
children still differ by ~1.5M of their ~5.5G instructions (2026-12-06: start-up, not the
steps), so the long run has many steps: 2 x 1000 more than the short one (~750
instructions per step of noise; --quick: 2 x 250, ~3k; at 2 x 100, as before, ~15k):

  floor     rollout_throughput.floor_seconds_per_step (the anchor: the least a Python
            loop does to write the same trace)
  eval      eval_policy(mock, sync, traced, bag=False): the "sync" variant there

Both run real MuJoCo physics (`--no-physics` makes mj_step a no-op: the Python alone).
The ratio floor/eval is the instruction analogue of rollout_throughput's "x the floor"
(target there: 0.85); instructions are not seconds (cache misses, branch mispredictions),
so the timed ratio stays the verdict of record and this one steers the work.
`--functions N` also names where the eval's instructions go: the children run with
`python -X perf`, whose trampolines give every Python function an address of its own
(listed in /tmp/perf-<pid>.map); callgrind's inclusive count at those addresses is that
function's cost with everything it calls, and the difference between the long and the
short run over the extra steps is its cost per step. The N costliest functions of the
package are printed (inclusive: a caller includes its callees). They steer, they do not
add up: callgrind's call graph through the trampolines overcounts (the loop's inclusive
count came out ~15 % above the whole step's, 308k against 267k, on 2026-12-05).
The last line is one JSON object with the figures.

    python bench/step_instructions.py [--quick] [--no-physics] [--robot so101] [--functions 25]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EPISODES = 2


def child(variant: str, robot: str, steps: int, physics: bool) -> None:
    """The workload measured under callgrind (a warm-up episode, then EPISODES of `steps`)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    sys.path.insert(0, str(HERE))
    import mujoco
    import rollout_throughput as rt
    from robokernel_ros.rollout import SimWorkcell

    runs = tempfile.mkdtemp(prefix="step-instructions-")
    try:
        cell = SimWorkcell(trace_dir=runs)
        cell.add_robot(robot, robot)
        if not physics:
            mujoco.mj_step = lambda model, data, nstep=1: None
        if variant == "floor":
            env = cell.scene.make_env(robot, control_hz=rt.CONTROL_HZ)
            # the eval's episode.start/end data, which the floor writes too (in both runs)
            cell.eval_policy(robot, n_episodes=1, max_steps=20, seed=0, progress=False, bag=False)
            rt.floor_seconds_per_step(cell, env, 20, 1, Path(runs), [])
            rt.floor_seconds_per_step(cell, env, steps, EPISODES, Path(runs), [])
        else:
            for n, episodes in ((20, 1), (steps, EPISODES)):
                out = cell.eval_policy(robot, n_episodes=episodes, max_steps=n, seed=0,
                                       progress=False, bag=False)  # fmt: skip
                if out["status"] != "success":
                    raise SystemExit(out["content"][0]["text"])
        cell.close()
    finally:
        shutil.rmtree(runs, ignore_errors=True)


def count(
    variant: str, robot: str, steps: int, physics: bool, functions: bool = False
) -> tuple[subprocess.Popen, str]:
    """Start the child under callgrind (its stderr holds the instruction count), and the
    path of callgrind's output file; with `functions`, Python's perf trampolines on."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
           "PYTHONHASHSEED": "0"}  # fmt: skip
    fd, out_file = tempfile.mkstemp(prefix="callgrind-", suffix=".out")
    os.close(fd)
    python = [os.path.realpath(sys.executable)] + (["-X", "perf"] if functions else [])
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *python,
               __file__, "--child", variant, "--robot", robot, "--steps", str(steps)] + (
               [] if physics else ["--no-physics"])  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    return proc, out_file


def collected(proc: subprocess.Popen, out_file: str, functions: bool = False) -> tuple[int, dict]:
    """The child's instruction count, and with `functions` its package functions'
    inclusive counts ({name: instructions})."""
    _, err = proc.communicate()
    found = re.search(r"Collected\s*:\s*(\d+)", err)
    if proc.returncode != 0 or found is None:
        os.unlink(out_file)
        raise SystemExit(f"callgrind child failed (exit {proc.returncode}):\n{err[-2000:]}")
    costs = function_costs(out_file, Path(f"/tmp/perf-{proc.pid}.map")) if functions else {}
    os.unlink(out_file)
    return int(found.group(1)), costs


def function_costs(out_file: str, perf_map: Path) -> dict[str, int]:
    """Inclusive instructions of each robokernel_ros function: callgrind_annotate's
    inclusive counts at the addresses of the perf trampolines (perf_map: start size name)."""
    entries = []
    for line in perf_map.read_text().splitlines():
        start, size, name = line.split(" ", 2)
        entries.append((int(start, 16), int(size, 16), name))
    perf_map.unlink()
    entries.sort()
    starts = [start for start, _, _ in entries]
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    costs: dict[str, int] = {}
    for row in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\?\?\?:0x([0-9a-f]+)", text, re.M):
        address = int(row.group(2), 16)
        i = bisect.bisect_right(starts, address) - 1
        if i < 0 or address >= entries[i][0] + entries[i][1]:
            continue
        name = entries[i][2].removeprefix("py::")
        if "robokernel_ros/" in name or "rollout_throughput" in name:
            function, _, path = name.partition(":")
            name = f"{function} ({path.rsplit('robokernel_ros/', 1)[-1]})"
            cost = int(row.group(1).replace(",", ""))
            costs[name] = max(costs.get(name, 0), cost)  # recursion: the outermost
    return costs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter episodes")
    parser.add_argument("--no-physics", action="store_true", help="mj_step a no-op")
    parser.add_argument("--robot", default="so101", help="so101 (default) or panda")
    parser.add_argument("--functions", type=int, default=0, metavar="N",
                        help="also print the eval's N costliest package functions per step")  # fmt: skip
    parser.add_argument("--child", choices=("eval", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    physics = not args.no_physics
    if args.child:
        child(args.child, args.robot, args.steps, physics)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts with callgrind")
    short, long = (10, 260) if args.quick else (10, 1010)
    started = time.monotonic()
    per_step: dict[str, float] = {}
    extra_steps = (long - short) * EPISODES
    functions: dict[str, float] = {}
    for variant in ("floor", "eval"):  # the two lengths of a variant run side by side
        named = bool(args.functions) and variant == "eval"
        procs = [count(variant, args.robot, n, physics, named) for n in (short, long)]
        (low, low_costs), (high, high_costs) = (collected(*p, named) for p in procs)
        per_step[variant] = (high - low) / extra_steps
        functions = {name: (cost - low_costs.get(name, 0)) / extra_steps
                     for name, cost in high_costs.items()} or functions  # fmt: skip
    ratio = per_step["floor"] / per_step["eval"]
    what = "with MuJoCo physics" if physics else "mj_step a no-op (the Python alone)"
    print(f"{args.robot}, {what}; instructions per step over {extra_steps} steps:")
    print(f"  floor (hand-fused) {per_step['floor']:10.0f}")
    print(f"  eval sync, traced  {per_step['eval']:10.0f}  ({ratio:.3f}x the floor's rate; "
          f"the eval adds {per_step['eval'] - per_step['floor']:.0f} per step)")  # fmt: skip
    if functions:
        print(f"  the eval's {args.functions} costliest functions, instructions per step "
              "(inclusive):")  # fmt: skip
        for name, cost in sorted(functions.items(), key=lambda kv: -kv[1])[: args.functions]:
            print(f"    {cost:10.0f}  {name}")
    figures = {"bench": "step_instructions", "robot": args.robot, "physics": physics,
               "quick": args.quick, "floor_instructions_per_step": round(per_step["floor"]),
               "eval_instructions_per_step": round(per_step["eval"]),
               "eval_vs_floor": round(ratio, 3),
               "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    if functions:
        top = sorted(functions.items(), key=lambda kv: -kv[1])[: args.functions]
        figures["eval_functions_per_step"] = {name: round(cost) for name, cost in top}
    # No verdict of its own: instructions steer, CPU time judges (rollout_throughput.py).
    figures["target_of_record"] = "rollout_throughput.py: sync >= 0.85x the floor, CPU time"
    figures["verdicts"] = {}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
