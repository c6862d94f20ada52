"""Deployment fidelity: does the virtual clock predict the ROS workcell's wall clock?

    python bench/fidelity.py [--latencies 0,30,80] [--episodes 5] [--max-steps 300]

The demo's scripted task and policy (config/policy_server_scripted_so101.yaml: three
waypoints, chunks of 10, async_rtc), with an injected inference latency L of 0, 30 and
80 ms, run twice:

(a) virtual: `SimWorkcell.eval_policy(..., async_rtc=True, latency_s=L)` in this process:
    the kernel's virtual clock models the latency (the chunk computed from the
    observation of step s merges at step s + floor(L x rate) + 1, as many of its first
    actions dropped as the robot executed meanwhile), the policy itself answers at once. Deterministic and faster than real
    time. Its shield has the safety_shield node's limits (`safety=` from the same
    config/joint_limits_so101.yaml and clip_tolerance): the node's velocity and
    acceleration guards slow the robot after every hold, so without them the virtual
    episode at 80 ms is ~15 % shorter than the workcell's, with as many fewer holds.
(b) wall: the demo graph (robokernel_ros.demo.workcell_graph: sim_robot, safety_shield,
    estop_panel, policy_server with the scripted policy, runner env=ros) as processes,
    the policy server's scripted policy configured with `latency_s: L` (it sleeps L in
    every inference), and the runner's `eval_policy` action with async_rtc (the
    kernel's realtime wall-clock loop: the chunk merges at the first step after it came
    back over ROS).

Why a policy-side sleep on (b) and the kernel's model on (a): the question is whether the
number a user gives the virtual clock (the inference time their model takes) predicts
what the robot sees when inference really takes that long. The wall side must have the
real thing (time spent in the policy server's inference, then the transport back), the
virtual side the model; the same sleep on the virtual side would make it measure wall
time instead of predicting it.

Both sides are scored from their traces with scoring's TimingScorer and OutcomeScorer:
success rate, holds per episode, merges that dropped actions per episode, episode duration
(virtual: steps / rate, the duration the virtual clock predicts; wall: the commands'
wall-clock span plus one period), and the chunk round trip. The load average is printed
before and after each side. The last line is one JSON object with the figures and
`verdicts`: per latency, the virtual clock's holds per episode within 10 % of the wall
clock's and its success rate within 5 points.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "robokernel_ros"))

from robokernel_ros.demo import (  # noqa: E402
    NAMESPACE,
    config_dir,
    start_graph,
    use_dds_profile,
    workcell_graph,
)
from robokernel_ros.process import stop_process_groups  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

INSTRUCTION = "reach the three waypoints in order"
RATE_HZ = 50.0  # the demo's (runner_ros_so101.yaml)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def scripted_params() -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's policy_server parameters file (parsed) and its policy_config."""
    import yaml

    data = yaml.safe_load((config_dir() / "policy_server_scripted_so101.yaml").read_text())
    return data, json.loads(data["/**"]["ros__parameters"]["policy_config_json"])


def success_clause(config: dict[str, Any]) -> dict[str, Any]:
    """The demo's success criterion: at the last waypoint, within the policy's tolerance."""
    return {
        "predicate": "joint_near_target",
        "targets": config["targets"][-1],
        "tolerance": config["tolerance"],
    }


def shield_safety() -> dict[str, Any]:
    """The safety_shield node's guards as eval_policy's `safety=`: the velocity and
    acceleration limits of the file the demo graph gives the node, its clip_tolerance."""
    import yaml
    from robokernel_ros.safety.limits import load_limits_file, shield_limits

    _, safety = shield_limits(load_limits_file(config_dir() / "joint_limits_so101.yaml"))
    node = yaml.safe_load((config_dir() / "shield_so101.yaml").read_text())
    return {**safety, "clip_tolerance": node["/**"]["ros__parameters"]["clip_tolerance"]}


def figures(trace_paths: list[str], latency_s: float, wall: bool) -> dict[str, Any]:
    """Aggregate figures of a side's episodes, from their traces (scoring's scorers)."""
    from robokernel_ros.kernel.trace import load_trace
    from robokernel_ros.scoring import OutcomeScorer, TimingScorer, aggregate, score_trace

    scorers = [OutcomeScorer(), TimingScorer()]
    episodes, delays = [], []
    for path in trace_paths:
        trace = load_trace(path)
        episodes.append(score_trace(trace, scorers))
        # the merge delay: steps from a chunk's observation to its merge
        delays += [
            int(e.data["arrival_step"]) - int(e.data["obs_step"])
            for e in trace.events
            if e.kind == "chunk.merge"
        ]
    agg = aggregate(episodes, scorers)
    period = 1.0 / RATE_HZ
    if wall:
        durations = [e["wall_span_s"] + period for e in episodes]
    else:
        durations = [e["length"] * period for e in episodes]
    return {
        "latency_ms": 1e3 * latency_s,
        "episodes": len(episodes),
        "success_rate": agg["success_rate"],
        "holds_per_episode": agg["mean_holds"],
        "dropped_merges_per_episode": agg["mean_dropped_merges"],
        "dropped_actions_per_episode": agg["mean_dropped_actions"],
        "steps_per_episode": agg["mean_length"],
        "duration_s": sum(durations) / len(durations),
        "chunk_round_trip_p50_ms": agg["chunk_latency_p50_ms"],
        "chunk_round_trip_p99_ms": agg["chunk_latency_p99_ms"],
        "merge_delay_steps": {str(d): delays.count(d) for d in sorted(set(delays))},
        "holds_by_episode": [e["holds"] for e in episodes],
    }


def virtual_side(latency_s: float, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from robokernel_ros.rollout import SimWorkcell, envelope_json
    from robokernel_ros.tasks.predicates import compile_criteria

    _, config = scripted_params()
    (criterion,) = compile_criteria("success", success_clause(config))
    cell = SimWorkcell(trace_dir=folder / f"virtual_{1e3 * latency_s:g}", bag=False)
    try:
        cell.add_robot("arm", "so101")
        out = cell.eval_policy(
            "arm", policy_provider="scripted", policy_config=config, n_episodes=args.episodes,
            max_steps=args.max_steps, control_frequency=RATE_HZ, seed=0, async_rtc=True,
            latency_s=latency_s, instruction=INSTRUCTION, success_fn=criterion.fn,
            safety=shield_safety(),
        )  # fmt: skip
    finally:
        cell.close()
    report = envelope_json(out)
    if out["status"] != "success":
        raise RuntimeError(f"virtual eval_policy failed: {out['content'][0]['text']}")
    return figures([ep["trace_path"] for ep in report["episodes"]], latency_s, wall=False)


def wall_side(latency_s: float, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    import yaml
    from robokernel_ros.ros.client import WorkcellClient

    tag = f"{1e3 * latency_s:g}"
    data, config = scripted_params()
    params = data["/**"]["ros__parameters"]
    params["policy_config_json"] = json.dumps({**config, "latency_s": latency_s})
    params_file = folder / f"policy_server_{tag}ms.yaml"
    params_file.write_text(yaml.safe_dump(data))
    graph = workcell_graph(trace_dir=str(folder / f"wall_{tag}"), policy_params=str(params_file))
    procs = start_graph(graph, folder / f"logs_{tag}")
    try:
        with WorkcellClient(NAMESPACE, server_timeout_s=120) as client:
            client.wait_until_ready(timeout_s=120)
            result = client.eval_policy(
                robot_name="arm", policy_provider="remote", n_episodes=args.episodes,
                max_steps=args.max_steps, seed=0, async_rtc=True, instruction=INSTRUCTION,
                extra={"success": success_clause(config)},
            )  # fmt: skip
    finally:
        stop_process_groups(procs)
    if not result.ok:
        raise RuntimeError(f"wall eval_policy failed: {result.message} (logs in {folder})")
    paths = [ep["trace_path"] for ep in result.report["episodes"] if ep.get("trace_path")]
    return figures(paths, latency_s, wall=True)


def verdicts(rows: list[dict[str, Any]]) -> dict[str, bool]:
    out = {}
    for row in rows:
        v, w = row["virtual"], row["wall"]
        tag = f"{row['latency_ms']:g}ms"
        out[f"{tag}_holds_within_10pct"] = (
            abs(v["holds_per_episode"] - w["holds_per_episode"]) <= 0.1 * w["holds_per_episode"]
        )
        out[f"{tag}_success_within_5pts"] = abs(v["success_rate"] - w["success_rate"]) <= 0.05
    return out


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def print_row(row: dict[str, Any]) -> None:
    keys = ("success_rate", "holds_per_episode", "dropped_merges_per_episode",
            "dropped_actions_per_episode", "steps_per_episode", "duration_s",
            "chunk_round_trip_p50_ms", "chunk_round_trip_p99_ms", "merge_delay_steps",
            "holds_by_episode")  # fmt: skip
    print(f"latency {row['latency_ms']:g} ms ({row['load_before']} / {row['load_after']})")
    width = max(len(k) for k in keys)
    print(f"  {'':{width}}  {'virtual':>24}  {'wall':>24}")
    for key in keys:
        print(f"  {key:{width}}  {_cell(row['virtual'][key]):>24}  {_cell(row['wall'][key]):>24}")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--latencies", default="0,30,80", help="injected inference ms, comma separated"
    )
    parser.add_argument("--episodes", type=int, default=5, help="episodes per side and latency")
    parser.add_argument("--max-steps", type=int, default=300, help="steps per episode (50 Hz)")
    parser.add_argument("--quick", action="store_true", help="30 ms only, 2 episodes of 150 steps")
    args = parser.parse_args()
    if args.quick:
        args.latencies, args.episodes, args.max_steps = "30", 2, 150
    from robokernel_ros.ros.domain import free_domain_id  # one no process here uses

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(free_domain_id())
    use_dds_profile()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fidelity_") as tmp:
        for ms in [float(x) for x in args.latencies.split(",")]:
            latency = ms / 1e3
            before = load()
            virtual = virtual_side(latency, args, Path(tmp))
            wall = wall_side(latency, args, Path(tmp))
            row = {"latency_ms": ms, "virtual": virtual, "wall": wall,
                   "load_before": before, "load_after": load()}  # fmt: skip
            print_row(row)
            rows.append(row)
    judged = verdicts(rows)
    print(json.dumps({"bench": "fidelity", "rate_hz": RATE_HZ, "episodes": args.episodes,
                      "rows": rows, "verdicts": judged}))  # fmt: skip
    return exit_status(judged, "fidelity")


if __name__ == "__main__":
    sys.exit(main())
