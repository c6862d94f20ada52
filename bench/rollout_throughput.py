"""Rollout throughput: eval_policy (mock) steps/s against a bare mujoco.mj_step loop.

For the SO-101 and the Panda, in the same run and on the same compiled model:
  bare      the anchor: per control step, data.ctrl set from a precomputed array and
            mj_step(model, data, substeps) (the env's substeps at 50 Hz); the controls are
            the mock policy's own actions with the evaluation's seeds, so the anchor
            simulates the same trajectory (contacts, hence mj_step's cost, depend on it)
  idle      mj_step with the controls left as reset leaves them (a different trajectory:
            printed for reference only)
  env       MujocoEnv.step(action) per control step with the anchor's controls:
            mj_step + ctrl + observation
  floor     the least a Python loop does to write the same trace, hand-fused
            (floor_seconds_per_step): the mock's action clamped to the limits, mj_step,
            the joints observed, the step's events as JSON lines; no kernel objects.
            Where it stays under the target, no Python kernel reaches it here
  sync      eval_policy(mock, async_rtc=False) with tracing on: the run directory
            (events.jsonl + meta.json) streamed to disk, no rosbag mirror (bag=False)
  sync+bag  the same with the SimWorkcell default, which also mirrors every event into
            a rosbag2 (MCAP) file next to the run directory; the bag is written by a pooled
            writer process (recording.writer_process), whose CPU time is printed apart
            (bag_writer_process) since this process's CPU time does not hold it
  untraced  the same with trace_dir=None (what the trace costs)
  async     eval_policy(mock chunk-emitting, async_rtc=True) vs the same policy synchronous

The variants are interleaved (one pass of each per repeat) and each figure is the best
pass. A second anchor needs no separate loop: every mj_step call of the traced eval is
timed, and "in-run" is that physics time over the eval's wall time (median of the
passes): the bare loop of exactly the trajectory the eval simulated, in the same run,
which a separate loop only approximates (its contacts, hence mj_step's cost, differ
when the trajectories do, and its best pass is a different moment of a shared machine). The sync-vs-bare ratio and the breakdown use CPU time (time.process_time: every
thread of the process, so work a background writer does counts; on an idle machine it
equals wall time for these single-threaded loops), which load from other processes on
a shared machine disturbs far less than wall time; wall-time figures (best and median)
are printed next to them. async_rtc vs sync is a wall-time ratio (its point is overlap). A per-step
breakdown in microseconds follows: mj_step, the env's own step work, the mock policy,
the kernel + rollout loop untraced, the trace, the bag mirror, and privileged_state()
(recorded every 10th step by default, every step when a benchmark or predicate needs it).

Targets: sync (traced) >= 0.85x bare, and >= 0.85x the hand-fused floor (CPU, same run);
async_rtc >= 0.9x sync with the same chunked policy.
The last line is one JSON object with every figure and each target's verdict.

    python bench/rollout_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from robokernel_ros.policies.base import PolicyAgent  # noqa: E402
from robokernel_ros.policies.mock import MockPolicy  # noqa: E402
from robokernel_ros.rollout import SimWorkcell, envelope_json  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

CONTROL_HZ = 50.0


def mock_controls(env: Any, steps: int, episodes: int) -> list[np.ndarray]:
    """The mock policy's actions per episode (seeds 0, 1, ... as eval_policy(seed=0) uses)."""
    policy = MockPolicy(seed=0)
    policy.set_robot_state_keys(env.action_keys)
    policy.set_action_limits(env.env_spec.action_limits)
    controls = []
    for episode in range(episodes):
        policy.reset(seed=episode)
        rows = [list(policy.get_actions({})[0].values()) for _ in range(steps)]
        controls.append(np.asarray(rows, dtype=float))
    return controls


class Clock:
    """Wall (perf_counter) and CPU (process_time: every thread of this process) seconds."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c

    def per(self, n: int) -> tuple[float, float]:
        return self.wall / n, self.cpu / n


def bare_seconds_per_step(
    cell: SimWorkcell, env: Any, controls: list[np.ndarray] | None, steps: int, episodes: int
) -> tuple[float, float]:
    """mj_step per control step; with `controls`, data.ctrl set from them first."""
    model, data, substeps = cell.scene.model, cell.scene.data, env.substeps
    ids = np.asarray([env._key_to_id[k] for k in env.action_keys])
    ctrl = data.ctrl
    clock = Clock()
    for episode in range(episodes):
        cell.scene.reset(episode)
        if controls is None:
            with clock:
                for _ in range(steps):
                    mujoco.mj_step(model, data, substeps)
        else:
            rows = controls[episode]
            with clock:
                for row in rows:
                    ctrl[ids] = row
                    mujoco.mj_step(model, data, substeps)
    return clock.per(steps * episodes)


def env_seconds_per_step(
    cell: SimWorkcell, env: Any, controls: list[np.ndarray], steps: int, episodes: int
) -> tuple[float, float]:
    """MujocoEnv.step per control step, with the same controls as the anchor."""
    keys = env.action_keys
    step = env.step
    clock = Clock()
    for episode in range(episodes):
        env.reset(seed=episode)
        actions = [dict(zip(keys, row, strict=True)) for row in controls[episode].tolist()]
        with clock:
            for action in actions:
                step(action)
    return clock.per(steps * episodes)


def _latest_sync_trace(runs: Path) -> Path:
    """The events.jsonl of the latest synchronous traced eval under `runs` (the floor's
    template and the trace it must match)."""
    for events in sorted(runs.glob("*/events.jsonl"), key=lambda p: -p.stat().st_mtime):
        with open(events, "rb") as f:
            first = json.loads(f.readline() or b"{}")
        if first.get("kind") == "episode.start" and first["data"]["timing"]["mode"] == "sync":
            return events
    raise RuntimeError(f"no synchronous traced eval under {runs}")


def _eval_episode_data(runs: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The episode.start and episode.end data of the latest synchronous traced eval under
    `runs`: the floor writes the same, so its meta.json and start/end lines are the
    trace's own size."""
    lines = _latest_sync_trace(runs).read_bytes().splitlines()
    start, end = json.loads(lines[0]), json.loads(lines[-1])
    assert end["kind"] == "episode.end", end
    return start["data"], end["data"]


def trace_shape(events: Path) -> dict[str, Any]:
    """{kind: the key structure of its events' data} over a trace (values reduced to their
    types, lists to their first element's shape): two traces that write the same lines
    have the same shape."""

    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(value[0])] if value else []
        return "number" if isinstance(value, int | float) else type(value).__name__

    shapes: dict[str, Any] = {}
    for line in events.read_bytes().splitlines():
        event = json.loads(line)
        if event["data"].get("obs") == {}:  # the floor's first observation: none yet
            continue
        shapes.setdefault(event["kind"], shape(event["data"]))
    return shapes


def floor_seconds_per_step(
    cell: SimWorkcell, env: Any, steps: int, episodes: int, runs: Path, in_run: list
) -> tuple[float, float]:
    """The least a Python loop does per step to write the trace the kernel writes here,
    hand-fused into one function: the mock policy's action (its time taken: the merge's
    inference_s), each value clamped to its limits (the least of a shield), the targets
    set, mj_step, the joints and actuator targets observed, and the step's events as JSON
    lines with their seq/t/wall (observation, chunk.request, chunk.merge, action, and
    privileged state every 10th step as the rollout API samples it); per episode the
    episode.start and episode.end lines and meta.json (written at the start, rewritten
    with the end merged in, each through a temporary file as the trace's is), each
    episode into a new directory of its own under `runs`, as the trace's run directories
    are (rewriting one file would reuse its page-cache pages, which a new file's first
    write pays for: 2.5-3 ms per 950 kB here, ~6 us per SO-101 step). The same lines as
    the eval's trace, key for key (main checks it on its first pass). No kernel
    objects: no queue, no Event, no bus, no shield guards, no accounting.
    `in_run` gets its own mj_step time over its wall time appended."""
    import orjson

    model, data, substeps = cell.scene.model, cell.scene.data, env.substeps
    ctrl, qpos, qvel = data.ctrl, data.qpos, data.qvel
    keys = list(env.action_keys)
    limits = [(env._key_to_id[k], *env.env_spec.action_limits[k]) for k in keys]
    act_ids = [idx for idx, _lo, _hi in limits]
    joints = env.joint_keys
    qadr, vadr = env._qadr, env._vadr
    privileged = env.privileged_state
    start_data, end_data = _eval_episode_data(runs)
    policy = MockPolicy(seed=0)
    policy.set_robot_state_keys(env.action_keys)
    policy.set_action_limits(env.env_spec.action_limits)
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    pretty = orjson.OPT_INDENT_2 | newline
    monotonic = time.monotonic
    period = 1.0 / CONTROL_HZ
    clock = Clock()
    with MjStepTimer() as physics:
        mj_step = mujoco.mj_step  # the timed one

        for episode in range(episodes):
            cell.scene.reset(episode)
            policy.reset(seed=episode)
            obs: dict[str, Any] = {}
            seq = 0
            run_dir = Path(tempfile.mkdtemp(prefix="floor-", dir=runs))
            meta = {**start_data, "run_id": run_dir.name, "seed": episode}
            with clock, open(run_dir / "events.jsonl", "wb", buffering=1 << 20) as trace:
                write = trace.write

                def line(seq: int, kind: str, step: int, t0: float, data: dict) -> None:
                    event = {"seq": seq, "kind": kind, "step": step, "t": step * period,
                             "wall": monotonic() - t0, "data": data}  # fmt: skip
                    write(dumps(event, option=newline))  # noqa: B023 - this episode's file

                def write_meta(meta: dict) -> None:
                    tmp = run_dir / "meta.json.tmp"  # noqa: B023 - this episode's directory
                    tmp.write_bytes(dumps(meta, option=pretty))
                    tmp.replace(run_dir / "meta.json")  # noqa: B023

                t0 = monotonic()
                write_meta(meta)
                line(seq, "episode.start", 0, t0, meta)
                seq += 1
                for step in range(steps):
                    line(seq, "observation", step, t0, {"obs": obs})
                    if step % 10 == 0:
                        line(seq + 1, "privileged", step, t0, {"state": privileged()})
                        seq += 1
                    line(seq + 1, "chunk.request", step, t0, {"step": step, "request_id": step})
                    asked = monotonic()
                    action = policy.get_actions(obs)[0]
                    inference_s = monotonic() - asked
                    line(seq + 2, "chunk.merge", step, t0,
                         {"obs_step": step, "arrival_step": step, "dropped": 0, "kept": 1,
                          "inference_s": inference_s, "request_id": step, "keys": keys,
                          "actions": [list(action.values())]})  # fmt: skip
                    for (idx, lo, hi), value in zip(limits, action.values(), strict=True):
                        ctrl[idx] = lo if value < lo else hi if value > hi else value
                    mj_step(model, data, substeps)
                    obs = {
                        "joint_positions": dict(zip(joints, qpos[qadr].tolist(), strict=True)),
                        "joint_velocities": dict(zip(joints, qvel[vadr].tolist(), strict=True)),
                        "actuator_targets": dict(zip(keys, ctrl[act_ids].tolist(), strict=True)),
                    }
                    line(seq + 3, "action", step, t0,
                         {"step": step, "action": action, "hold": False, "reward": 0.0,
                          "terminated": False, "truncated": False})  # fmt: skip
                    seq += 4
                line(seq, "observation", steps, t0, {"obs": obs})  # the final observation
                line(seq + 1, "privileged", steps, t0, {"state": privileged()})
                end = {**end_data, "steps": steps}
                line(seq + 2, "episode.end", steps, t0, end)
                trace.flush()
                write_meta({**meta, **end})
    in_run.append(physics.seconds / clock.wall)
    return clock.per(steps * episodes)


def writer_cpu_seconds() -> float:
    """CPU seconds used so far by the pooled bag writer processes (recording.writer_process)."""
    from robokernel_ros.recording import writer_process

    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for child in list(writer_process._idle):
        try:
            stat = Path(f"/proc/{child.proc.pid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return total


def call_seconds(fn: Callable[[], Any], calls: int) -> tuple[float, float]:
    with Clock() as clock:
        for _ in range(calls):
            fn()
    return clock.per(calls)


class MjStepTimer:
    """Times every mujoco.mj_step call made while active (wall seconds): the bare loop of
    exactly the physics an eval ran, measured inside that very run."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._real = mujoco.mj_step

    def __enter__(self) -> MjStepTimer:
        real, clock = self._real, time.perf_counter

        def timed(model: Any, data: Any, nstep: int = 1) -> None:
            t0 = clock()
            real(model, data, nstep)
            self.seconds += clock() - t0

        mujoco.mj_step = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        mujoco.mj_step = self._real


def eval_seconds_per_step(
    cell: SimWorkcell,
    robot: str,
    steps: int,
    episodes: int,
    *,
    in_run: list | None = None,
    **kwargs: Any,
) -> tuple[tuple[float, float], dict]:
    """The whole eval_policy call (setup included) per step it ran. `in_run`: gets the
    ratio of the eval's own mj_step time to its wall time appended."""  # fmt: skip
    with MjStepTimer() as physics, Clock() as clock:
        out = cell.eval_policy(
            robot, n_episodes=episodes, max_steps=steps, seed=0, progress=False, **kwargs
        )
    if out["status"] != "success":
        raise RuntimeError(out["content"][0]["text"])
    report = envelope_json(out)
    if in_run is not None:
        in_run.append(physics.seconds / clock.wall)
    return clock.per(report["total_steps"]), report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    args = parser.parse_args()
    steps, episodes, repeats = (200, 2, 3) if args.quick else (500, 3, 5)
    figures: dict[str, Any] = {}
    verdicts: dict[str, str] = {}
    chunked = {"execution_horizon": 8}
    with tempfile.TemporaryDirectory() as runs:
        for model in ("so101", "panda"):
            cell = SimWorkcell(trace_dir=runs)
            cell.add_robot(model, model)
            env = cell.scene.make_env(model, control_hz=CONTROL_HZ)
            substeps = env.substeps
            eval_seconds_per_step(cell, model, 20, 1)  # warm up (first-call imports, caches)
            policy = MockPolicy(seed=0)
            policy.set_robot_state_keys(env.action_keys)
            policy.set_action_limits(env.env_spec.action_limits)
            agent = PolicyAgent(policy, action_horizon=1)
            agent.reset(seed=0)
            env.reset(seed=0)
            obs = env.observe()
            n = steps * episodes
            controls = mock_controls(env, steps, episodes)
            passes: dict[str, list[tuple[float, float]]] = {}

            def record(name: str, seconds: tuple[float, float], passes: dict = passes) -> None:
                passes.setdefault(name, []).append(seconds)

            rtc_report: dict = {}
            writer_us: list[float] = []  # the writer process's CPU per step, each pass
            in_run: list[float] = []  # the traced eval's own mj_step time / its wall time
            floor_in_run: list[float] = []  # the same for the hand-fused floor
            for _ in range(repeats):
                record("bare", bare_seconds_per_step(cell, env, controls, steps, episodes))
                record("idle", bare_seconds_per_step(cell, env, None, steps, episodes))
                record("env", env_seconds_per_step(cell, env, controls, steps, episodes))
                record("floor", floor_seconds_per_step(cell, env, steps, episodes, Path(runs), floor_in_run))  # fmt: skip
                if len(floor_in_run) == 1:  # the floor writes the eval's lines, key for key
                    floor_trace = max(Path(runs).glob("floor-*/events.jsonl"), key=lambda p: p.stat().st_mtime)  # fmt: skip
                    ours, theirs = trace_shape(floor_trace), trace_shape(_latest_sync_trace(Path(runs)))  # fmt: skip
                    if ours != theirs:
                        raise SystemExit(f"the floor's trace is not the eval's: {ours} != {theirs}")
                record("privileged", call_seconds(env.privileged_state, n))
                record("policy", call_seconds(lambda: agent.act(obs, 0), n))  # noqa: B023
                record("untraced", eval_seconds_per_step(cell, model, steps, episodes, trace_dir=None)[0])  # fmt: skip
                record("sync", eval_seconds_per_step(cell, model, steps, episodes, bag=False,
                                                     in_run=in_run)[0])  # fmt: skip
                writer_cpu = writer_cpu_seconds()
                record("sync_bag", eval_seconds_per_step(cell, model, steps, episodes)[0])
                writer_us.append(1e6 * (writer_cpu_seconds() - writer_cpu) / n)
                record("sync_chunked", eval_seconds_per_step(cell, model, steps, episodes, bag=False, policy_config=chunked)[0])  # fmt: skip
                rtc, rtc_report = eval_seconds_per_step(cell, model, steps, episodes, bag=False,
                                                        policy_config=chunked, async_rtc=True)  # fmt: skip
                record("async_rtc", rtc)
            cell.close()
            wall = {k: 1.0 / min(w for w, _ in v) for k, v in passes.items()}  # steps/s
            wall_median = {k: 1.0 / statistics.median(w for w, _ in v) for k, v in passes.items()}
            cpu = {k: 1.0 / min(c for _, c in v) for k, v in passes.items()}
            us = {k: 1e6 / v for k, v in cpu.items()}
            ratio = cpu["sync"] / cpu["bare"]
            floor_ratio = cpu["sync"] / cpu["floor"]
            wall_ratio = wall["sync"] / wall["bare"]
            bag_ratio = cpu["sync_bag"] / cpu["bare"]
            bag_wall_ratio = wall["sync_bag"] / wall["sync"]
            rtc_ratio = wall["async_rtc"] / wall["sync_chunked"]
            in_run_ratio = statistics.median(in_run)
            floor_in_run_ratio = statistics.median(floor_in_run)
            # what each layer adds per step (CPU time, best passes; small negatives are noise)
            breakdown = {
                "mj_step": us["bare"],
                "env_step_work": us["env"] - us["bare"],
                "mock_policy": us["policy"],
                "kernel_and_rollout_untraced": us["untraced"] - us["env"] - us["policy"],
                "trace_run_dir": us["sync"] - us["untraced"],
                "bag_mirror_in_loop": us["sync_bag"] - us["sync"],
                "bag_writer_process": min(writer_us),
                "privileged_state_call": us["privileged"],
            }
            print(f"{model}: {substeps} substeps per control step at {CONTROL_HZ:g} Hz; best of "
                  f"{repeats} interleaved passes of {n} steps: steps per CPU second, per wall "
                  "second, [median wall]")  # fmt: skip
            for name, label in (
                ("bare", "bare mj_step loop"),
                ("idle", "bare, idle controls (ref)"),
                ("env", "MujocoEnv.step loop"),
                ("floor", "traced floor, hand-fused"),
                ("untraced", "eval sync, no trace"),
                ("sync", "eval sync, traced"),
                ("sync_bag", "eval sync, traced + bag"),
                ("sync_chunked", "eval sync, chunks of 8"),
                ("async_rtc", "eval async_rtc, chunks 8"),
            ):
                extra = ""
                if name == "sync_bag":
                    extra = (f"  ({cpu[name] / cpu['bare']:.2f}x bare; wall {bag_wall_ratio:.2f}x "
                             "the traced eval without the bag)")  # fmt: skip
                if name == "floor":
                    extra = (f"  ({cpu[name] / cpu['bare']:.2f}x bare; in-run {floor_in_run_ratio:.2f}x: "
                             "the best a traced Python loop reaches)")  # fmt: skip
                if name in ("idle", "env", "untraced"):
                    extra = f"  ({cpu[name] / cpu['bare']:.2f}x bare)"
                if name == "sync":
                    extra = (f"  ({ratio:.2f}x bare, wall {wall_ratio:.2f}x; in-run {in_run_ratio:.2f}x; "
                             f"{floor_ratio:.2f}x the floor; target >= 0.85x)")  # fmt: skip
                if name == "async_rtc":
                    extra = (f"  (wall {rtc_ratio:.2f}x sync; target >= 0.9x; hits "
                             f"{rtc_report['chunk_prefetch_hits']}, blocks {rtc_report['chunk_prefetch_blocks']})")  # fmt: skip
                print(f"  {label:26s} {cpu[name]:7.0f} cpu {wall[name]:7.0f} wall [{wall_median[name]:6.0f}]{extra}")  # fmt: skip
            print("  per step (us CPU): " + ", ".join(f"{k} {v:.1f}" for k, v in breakdown.items()))
            budget = us["bare"] / 0.85 - us["bare"]
            print(f"  budget at 0.85x: {budget:.1f} us/step beyond the anchor; the traced eval "
                  f"adds {us['sync'] - us['bare']:.1f}")  # fmt: skip
            figures[f"{model}_substeps"] = substeps
            for k in passes:
                figures[f"{model}_{k}_steps_per_cpu_s"] = round(cpu[k], 1)
                figures[f"{model}_{k}_steps_per_s"] = round(wall[k], 1)
                figures[f"{model}_{k}_steps_per_s_median"] = round(wall_median[k], 1)
            figures.update(
                {
                    f"{model}_sync_vs_bare": round(ratio, 3),
                    f"{model}_sync_vs_floor": round(floor_ratio, 3),
                    f"{model}_sync_vs_bare_wall": round(wall_ratio, 3),
                    f"{model}_sync_vs_its_own_mj_step": round(in_run_ratio, 3),
                    f"{model}_sync_bag_vs_bare": round(bag_ratio, 3),
                    f"{model}_sync_bag_vs_sync_wall": round(bag_wall_ratio, 3),
                    f"{model}_untraced_vs_bare": round(cpu["untraced"] / cpu["bare"], 3),
                    f"{model}_floor_vs_bare": round(cpu["floor"] / cpu["bare"], 3),
                    f"{model}_floor_vs_its_own_mj_step": round(floor_in_run_ratio, 3),
                    f"{model}_async_vs_sync": round(rtc_ratio, 3),
                    f"{model}_async_prefetch_blocks": rtc_report["chunk_prefetch_blocks"],
                    f"{model}_breakdown_us": {k: round(v, 1) for k, v in breakdown.items()},
                    f"{model}_budget_us_at_0.85x": round(budget, 1),
                }
            )
            verdicts[f"{model}_sync_traced_ge_0.85x_bare"] = "pass" if ratio >= 0.85 else "fail"
            verdicts[f"{model}_sync_traced_ge_0.85x_floor"] = (
                "pass" if floor_ratio >= 0.85 else "fail"
            )
            verdicts[f"{model}_sync_traced_ge_0.85x_its_own_mj_step"] = (
                "pass" if in_run_ratio >= 0.85 else "fail"
            )
            verdicts[f"{model}_async_rtc_ge_0.9x_sync"] = "pass" if rtc_ratio >= 0.9 else "fail"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps({"bench": "rollout_throughput", "quick": args.quick, "steps": steps, "episodes": episodes,
                      "repeats": repeats, "load_avg_1min": load, "cpu_count": os.cpu_count(), **figures,
                      "verdicts": verdicts}))  # fmt: skip
    return exit_status(verdicts, "rollout_throughput")


if __name__ == "__main__":
    sys.exit(main())
