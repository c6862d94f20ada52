"""Does the ROS workcell keep its control rate? The demo graph against a bare rclpy loop.

    python bench/workcell_timing.py [--rates 50,100] [--episodes 3] [--cameras]

For each rate: the demo graph (robokernel_ros.demo.workcell_graph: sim_robot, safety_shield,
policy_server with the scripted policy, runner with env=ros at that control_frequency) is
started as processes on a private ROS_DOMAIN_ID, and the runner's `eval_policy` runs the
demo's episodes (async_rtc: the kernel's realtime wall-clock loop). Measured from the
episodes' traces: the step period (time between two `action` events, each stamped when the
loop hands its command to the env, which publishes it then; until 2026-12-06 the stamp
came after the env had also taken the next joint states and frames) p50/p99/max, holds after the
first chunk, the chunk round trip (chunk.merge inference_s: observation out to chunk back)
p50/p99, and from the shield node's counters the share of commands it clipped. The period
"as sent" is that of the commands themselves, as the robot's side gets them: the source
timestamps (stamped by the runner's middleware at publish) of the episode's commands on
the shield's input topic, read by one more subscriber in this process.

Anchor, measured at the same time on the same machine: a bare rclpy loop in its own
process (`--anchor`) that receives the same /joint_states (a SingleThreadedExecutor
spun until each deadline) and publishes one Float64MultiArray per period against
absolute deadlines t0 + k/rate on a topic nobody listens to. It runs under the same
scheduling as the runner's episode loop: SCHED_FIFO at `--priority` (50 by default, given
to the runner as its control_priority; 0 runs both at normal priority).

Targets: period p50 within 1 % of nominal; p99 |period - nominal| at most 1.5x the
anchor's; zero holds after the first chunk; shield clipped < 1 % (the scripted policy
stays within the limits: its max_delta is scaled to the rate).

With --cameras, a camera publisher process (`--camera-publisher`, like
test/recording/camera_publisher.py without its PNG stream) adds two 640x480 rgb8 cameras at 30 Hz and the runner reads them (camera_names/camera_topics), so
every observation sent to the policy server carries both frames; the anchor then also
runs a bare rclpy round trip of the same Observation message (an echo process answers
it with an ActionChunk of the policy's size, no policy) and the observation-to-chunk
round trip is compared with it (target: at most 1.3x).

Every figure is the median over the rates' runs; the last line is one JSON object with
the figures and a `verdicts` object.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "robokernel_ros"))

from robokernel_ros.demo import (  # noqa: E402
    NAMESPACE,
    SO101_JOINTS,
    config_dir,
    start_graph,
    use_dds_profile,
    workcell_graph,
)
from robokernel_ros.process import die_with_parent, stop_process_groups  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

CAMERAS = {"front": "/cam/front/image_raw", "wrist": "/cam/wrist/image_raw"}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# --- the anchor: a bare rclpy loop in one process ------------------------------------------


def anchor_main(rate: float, seconds: float, out: str, cameras: bool, priority: int) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray

    rclpy.init()
    node = rclpy.create_node("bench_anchor_loop")
    latest: dict[str, Any] = {}
    node.create_subscription(JointState, "/joint_states", lambda m: latest.update(js=m), SENSOR_QOS)
    for name, topic in CAMERAS.items() if cameras else ():
        node.create_subscription(Image, topic, lambda m, n=name: latest.update({n: m}), SENSOR_QOS)
    pub = node.create_publisher(Float64MultiArray, "/bench_anchor/commands", COMMAND_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    while "js" not in latest:
        executor.spin_once(timeout_sec=0.1)
    period = 1.0 / rate
    stamps = []
    if priority:  # the runner's loop runs under SCHED_FIFO at control_priority: like for like
        try:
            os.sched_setscheduler(
                0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority)
            )
        except OSError as exc:
            print(f"anchor: normal priority, not SCHED_FIFO {priority}: {exc}", file=sys.stderr)
    t0 = time.monotonic()
    k = 0
    end = t0 + seconds
    while time.monotonic() < end:
        deadline = t0 + k * period
        while (left := deadline - time.monotonic()) > 0:
            executor.spin_once(timeout_sec=left)
        now = time.monotonic()
        if now - deadline > period:  # the same restart rule as the kernel's loop
            t0 = now - k * period
        js = latest["js"]
        pub.publish(Float64MultiArray(data=list(js.position)))
        stamps.append(now)
        k += 1
    Path(out).write_text(json.dumps({"stamps": stamps}))
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def cameras_main(rate: float) -> int:
    """Two 640x480 rgb8 cameras at `rate` (reliable, depth 5, as camera drivers publish)."""
    import numpy as np
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node("bench_cameras")
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
    pubs = {name: node.create_publisher(Image, topic, qos) for name, topic in CAMERAS.items()}
    frame = np.zeros((480, 640, 3), dtype=np.uint8).tobytes()
    t0, k = time.monotonic(), 0
    try:
        while rclpy.ok():
            for pub in pubs.values():
                msg = Image(height=480, width=640, encoding="rgb8", is_bigendian=0, step=640 * 3)
                msg.header.stamp = node.get_clock().now().to_msg()
                msg.data = frame
                pub.publish(msg)
            k += 1
            time.sleep(max(0.0, t0 + k / rate - time.monotonic()))
    except (KeyboardInterrupt, Exception):  # noqa: BLE001 - SIGINT ends the publisher
        pass
    return 0


def echo_main() -> int:
    """The bare round trip's far end: every Observation answered with an ActionChunk of
    the scripted policy's size (10 x 6), tagged with its step (no executor, no policy)."""
    import rclpy
    from robokernel_ros.ros.transport import DirectReader

    from robokernel_interfaces.msg import ActionChunk, Observation

    rclpy.init()
    node = rclpy.create_node("bench_obs_echo")
    reader = DirectReader(node, Observation, "/bench_echo/ping", 10)
    pub = node.create_publisher(ActionChunk, "/bench_echo/pong", 10)
    chunk = ActionChunk(keys=list(SO101_JOINTS), horizon=10, actions=[0.0] * 60)
    try:
        while rclpy.ok():
            for msg in reader.take(0.5):
                chunk.run_id, chunk.obs_step = msg.run_id, msg.step
                pub.publish(chunk)
    except (KeyboardInterrupt, Exception):  # noqa: BLE001 - SIGINT ends the echo
        pass
    return 0


def bare_round_trips(observation: Any, n: int, period: float) -> list[float]:
    """Observation out, ActionChunk back through the echo process (bare rclpy, no executor)."""
    import rclpy
    from robokernel_ros.ros.transport import DirectReader

    from robokernel_interfaces.msg import ActionChunk, Observation

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("bench_obs_ping", context=context)
    pub = node.create_publisher(Observation, "/bench_echo/ping", 10)
    reader = DirectReader(node, ActionChunk, "/bench_echo/pong", 10)
    deadline = time.monotonic() + 30
    while not (pub.get_subscription_count() and reader.publisher_count()):
        if time.monotonic() > deadline:
            raise RuntimeError("the echo process did not match within 30 s")
        time.sleep(0.01)
    out = []
    for i in range(n + 3):
        observation.step = i
        start = time.monotonic()
        pub.publish(observation)
        got = None
        while got is None and time.monotonic() - start < 2.0:
            for msg in reader.take(2.0):
                if msg.obs_step == i:
                    got = msg
        if got is not None and i >= 3:  # the first ones warm the path
            out.append(time.monotonic() - start)
        time.sleep(period)
    reader.close()
    node.destroy_node()
    rclpy.try_shutdown(context=context)
    return out


# --- one rate on the demo graph -------------------------------------------------------------


def _policy_params(rate: float, folder: Path) -> Path:
    import yaml

    data = yaml.safe_load((config_dir() / "policy_server_scripted_so101.yaml").read_text())
    params = data["/**"]["ros__parameters"]
    config = json.loads(params["policy_config_json"])
    scale = 50.0 / rate  # the same joint speed and acceleration at any rate
    config["max_delta"] *= scale
    config["max_accel"] *= scale * scale
    params["policy_config_json"] = json.dumps(config)
    path = folder / f"policy_server_{rate:g}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _episode_figures(trace_path: str, period: float) -> dict[str, Any]:
    periods: list[float] = []
    holds_after_first = 0
    chunks: list[float] = []
    last_wall = None
    first_chunk_step = None
    started = None  # the episode's start, system time (started_at, ms resolution)
    actions: list[tuple[float, int]] = []  # (system time, step) of every command
    for line in (Path(trace_path) / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        kind, data = event["kind"], event.get("data", {})
        if kind == "episode.start" and data.get("started_at"):
            started = datetime.datetime.fromisoformat(data["started_at"]).timestamp()
        if kind == "action" and started is not None:
            actions.append((started + event["wall"], event["step"]))
        if kind == "chunk.merge":
            chunks.append(float(data["inference_s"]))
            if first_chunk_step is None:
                first_chunk_step = event["step"]
        elif kind == "action":
            if last_wall is not None:
                periods.append(event["wall"] - last_wall)
            last_wall = event["wall"]
            if data.get("hold") and first_chunk_step is not None:
                holds_after_first += 1
    return {
        "periods": periods,
        "holds_after_first": holds_after_first,
        "chunks": chunks,
        "actions": actions,
        "first_chunk_step": first_chunk_step,
    }


def _clip_breakdown(
    interventions: list[tuple[float, str, str]], episodes: list[dict[str, Any]], period: float
) -> dict[str, Any]:
    """Clipped commands of the shield node, by where they fall: between episodes (the
    env's reset, which commands a step to its pose and leaves the ramp to the shield),
    in the run of clipped steps that starts at the episode's first chunk (its first
    command jumps from the hold into the chunk; what the shield holds back of that jump
    keeps the following commands ahead of it until the ramp catches up), or later.
    Interventions (stamp, guard, action) published within 1 ms of each other are one
    command's; a command belongs to the last step sent before it (the trace's
    started_at has ms resolution: near the edges one step either way)."""
    stamps = sorted((t, g) for t, g, a in interventions if a == "clipped")
    commands: list[tuple[float, set[str]]] = []
    for t, guard in stamps:
        if commands and t - commands[-1][0] < 1e-3:
            commands[-1][1].add(guard)
        else:
            commands.append((t, {guard}))
    out: dict[str, Any] = {"between_episodes": 0, "first_chunk": 0, "later": 0}
    later_guards: dict[str, int] = {}
    clipped_steps: dict[int, list[tuple[int, set[str]]]] = {}
    for t, guards in commands:
        for e, ep in enumerate(episodes):
            acts = ep["actions"]
            if acts and acts[0][0] - 0.002 <= t <= acts[-1][0] + period:
                step = max((s for a, s in acts if a <= t + 0.002), default=acts[0][1])
                clipped_steps.setdefault(e, []).append((step, guards))
                break
        else:
            out["between_episodes"] += 1
    for e, steps in clipped_steps.items():
        first = episodes[e]["first_chunk_step"]
        run_end = None if first is None else first + 2
        for step, guards in sorted(steps, key=lambda sg: sg[0]):
            if run_end is not None and step <= run_end:
                out["first_chunk"] += 1
                run_end = max(run_end, step + 2)  # the run goes on while steps are clipped
                continue
            run_end = None
            out["later"] += 1
            for g in guards:
                later_guards[g] = later_guards.get(g, 0) + 1
    out["later_by_guard"] = later_guards
    return out


def run_rate(rate: float, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    import rclpy
    from robokernel_ros.ros.lifecycle import wait_active
    from robokernel_ros.ros.qos import EVENT_QOS, STATUS_QOS

    from robokernel_interfaces.msg import ShieldIntervention, ShieldState
    from robokernel_interfaces.srv import EvalPolicy

    period = 1.0 / rate
    trace_dir = folder / f"runs_{rate:g}"
    graph = workcell_graph(
        trace_dir=str(trace_dir), policy_params=str(_policy_params(rate, folder))
    )
    for node in graph:
        if node.name == "safety_shield" and not args.shield_rate_from_config:
            # the runner's rate: the shield judges rates over this period, not arrivals
            node.params["command_rate_hz"] = f"{rate:.1f}"
        if node.name == "runner":
            node.params["control_frequency"] = f"{rate:.1f}"
            node.params["control_priority"] = str(args.priority)
            if args.cameras:
                node.params["camera_names"] = "[" + ",".join(CAMERAS) + "]"
                node.params["camera_topics"] = "[" + ",".join(CAMERAS.values()) + "]"
    procs = start_graph(graph, folder / f"logs_{rate:g}")
    if args.cameras:
        procs += _spawn([__file__, "--camera-publisher"])
        procs += _spawn([__file__, "--echo"])
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("bench_workcell_client", context=context)
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stop = threading.Event()
    spinner = threading.Thread(
        target=lambda: [executor.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)],
        daemon=True,
    )
    spinner.start()
    try:
        states: list[Any] = []
        node.create_subscription(
            ShieldState, f"{NAMESPACE}/safety_shield/state", states.append, STATUS_QOS
        )
        guards: dict[str, int] = {}
        interventions: list[tuple[float, str, str]] = []

        def on_intervention(m: ShieldIntervention) -> None:
            guards[f"{m.guard}:{m.joint}"] = guards.get(f"{m.guard}:{m.joint}", 0) + 1
            interventions.append((m.stamp.sec + m.stamp.nanosec * 1e-9, m.guard, m.action))

        node.create_subscription(
            ShieldIntervention,
            f"{NAMESPACE}/safety_shield/interventions",
            on_intervention,
            EVENT_QOS,
        )
        client = node.create_client(EvalPolicy, f"{NAMESPACE}/eval_policy")
        # When each command was published (its source timestamp, stamped by the runner's
        # middleware), from a reader on a node of its own that no executor spins.
        sent = _CommandStamps(context)
        if not client.wait_for_service(timeout_sec=90):
            raise RuntimeError(f"the runner did not come up (logs in {folder})")
        for name in ("policy_server", "runner"):  # up once their lifecycle says active
            wait_active(node, f"{NAMESPACE}/{name}", timeout_s=90)
        deadline = time.monotonic() + 30
        while not states and time.monotonic() < deadline:
            time.sleep(0.05)
        before = states[-1]
        config = json.loads(_policy_config(folder, rate))
        request = EvalPolicy.Request(
            robot_name="arm", policy_provider="remote", n_episodes=args.episodes,
            max_steps=int(args.seconds * rate), seed=0, async_rtc=True,
            instruction="reach the three waypoints in order",
        )  # fmt: skip
        request.extra_json = json.dumps(
            {
                "control_frequency": rate,
                "success": {
                    "predicate": "joint_near_target",
                    "targets": config["targets"][-1],
                    "tolerance": config["tolerance"],
                },
            }
        )
        anchor_out = folder / f"anchor_{rate:g}.json"
        anchor_s = args.episodes * args.seconds
        anchor = _spawn(
            [__file__, "--anchor", str(rate), "--anchor-seconds", f"{anchor_s:g}",
             "--anchor-out", str(anchor_out), "--priority", str(args.priority)]
            + (["--cameras"] if args.cameras else [])
        )  # fmt: skip
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(args.episodes * (args.seconds + 20) + 60):
            raise RuntimeError("eval_policy did not answer in time")
        response = future.result()
        for p in anchor:
            p.wait(timeout=anchor_s + 60)
        time.sleep(1.2)  # the shield publishes its counters every 0.5 s
        after = states[-1]
        report = json.loads(response.report_json or "{}")
        episodes = [
            _episode_figures(ep["trace_path"], period)
            for ep in report.get("episodes", [])
            if ep.get("trace_path")
        ]
        if not episodes:
            raise RuntimeError(f"eval_policy ran no episode: {response.message}")
        bare = []
        if args.cameras:
            bare = bare_round_trips(_camera_observation(), 60, period)
    finally:
        stop.set()
        if "sent" in locals():
            sent.close()
        spinner.join(timeout=5)
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        stop_process_groups(procs)

    stamps = json.loads(anchor_out.read_text())["stamps"]
    anchor_periods = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    periods = [p for ep in episodes for p in ep["periods"]]
    command_periods = [p for ep in episodes for p in sent.periods_within(ep["actions"], period)]
    chunks = [c for ep in episodes for c in ep["chunks"]]
    counts = {
        k: getattr(after, k) - getattr(before, k) for k in ("passed", "clipped", "refused", "held")
    }
    commands = sum(counts.values())
    steps = len(periods) + len(episodes)
    breakdown = _clip_breakdown(interventions, episodes, period)
    out = {
        "rate_hz": rate,
        "ok": bool(response.ok),
        "episodes": len(episodes),
        "steps": steps,
        "period_p50_ms": 1e3 * pct(periods, 0.5),
        "period_p99_ms": 1e3 * pct(periods, 0.99),
        "period_max_ms": 1e3 * max(periods),
        "dev_p99_ms": 1e3 * pct([abs(p - period) for p in periods], 0.99),
        "command_periods": len(command_periods),
        "command_dev_p99_ms": 1e3 * pct([abs(p - period) for p in command_periods], 0.99)
        if command_periods
        else float("nan"),
        "command_max_ms": 1e3 * max(command_periods) if command_periods else float("nan"),
        "anchor_period_p50_ms": 1e3 * pct(anchor_periods, 0.5),
        "anchor_period_p99_ms": 1e3 * pct(anchor_periods, 0.99),
        "anchor_dev_p99_ms": 1e3 * pct([abs(p - period) for p in anchor_periods], 0.99),
        "holds_after_first_chunk": sum(ep["holds_after_first"] for ep in episodes),
        "shield_clipped_share": counts["clipped"] / commands if commands else float("nan"),
        "shield_commands": commands,
        "shield_interventions_by_guard": dict(sorted(guards.items(), key=lambda kv: -kv[1])[:6]),
        "shield_clipped_where": breakdown,
        "episode_clipped_share": (breakdown["first_chunk"] + breakdown["later"]) / steps,
        "episode_clipped_share_after_first_chunk": breakdown["later"] / steps,
        "chunk_p50_ms": 1e3 * pct(chunks, 0.5),
        "chunk_p99_ms": 1e3 * pct(chunks, 0.99),
    }
    if bare:
        out["bare_obs_round_trip_p50_ms"] = 1e3 * pct(bare, 0.5)
        out["bare_obs_round_trip_p99_ms"] = 1e3 * pct(bare, 0.99)
    return out


class _CommandStamps:
    """The send times (monotonic) of the runner's commands on the shield's input topic,
    taken by a thread from a DirectReader (the sample's source timestamp: when the runner
    published it, however late this process reads it)."""

    def __init__(self, context: Any) -> None:
        import rclpy
        from robokernel_ros.ros.qos import COMMAND_READER_QOS
        from robokernel_ros.ros.transport import DirectReader
        from std_msgs.msg import Float64MultiArray

        self.node = rclpy.create_node("bench_command_stamps", context=context)
        self.reader = DirectReader(
            self.node, Float64MultiArray, f"{NAMESPACE}/safety_shield/commands", COMMAND_READER_QOS
        )
        self.stamps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._take, daemon=True)
        self._thread.start()

    def _take(self) -> None:
        while not self._stop.is_set():
            self.stamps.extend(at for _msg, at in self.reader.take_sent(0.05))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.reader.close()
        self.node.destroy_node()

    def periods_within(self, actions: list[tuple[float, int]], period: float) -> list[float]:
        """The periods between the commands of one episode: those sent within half a period
        of its first and last `action` event (system times; the reset's commands are at
        least a period before step 0's, the Pacer's floor)."""
        if not actions:
            return []
        offset = time.time() - time.monotonic()
        lo, hi = actions[0][0] - period / 2, actions[-1][0] + period / 2
        inside = sorted(t for t in self.stamps if lo <= t + offset <= hi)
        return [b - a for a, b in zip(inside, inside[1:], strict=False)]


def _camera_observation() -> Any:
    """An Observation as the runner sends it with both cameras: 6 joints, 2 x 640x480 rgb8."""
    import numpy as np
    from robokernel_ros.ros.wire import observation_to_msg

    image = np.zeros((480, 640, 3), dtype=np.uint8)
    return observation_to_msg(
        {
            "joint_positions": dict.fromkeys(SO101_JOINTS, 0.0),
            "joint_velocities": dict.fromkeys(SO101_JOINTS, 0.0),
            "images": {name: image for name in CAMERAS},
        },  # fmt: skip
        run_id="bench",
        step=0,
    )


def _policy_config(folder: Path, rate: float) -> str:
    import yaml

    data = yaml.safe_load((folder / f"policy_server_{rate:g}.yaml").read_text())
    return data["/**"]["ros__parameters"]["policy_config_json"]


def _spawn(argv: list[str]) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, *argv], start_new_session=True, preexec_fn=die_with_parent,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip


def verdicts(rows: list[dict[str, Any]], cameras: bool) -> dict[str, bool]:
    out = {}
    for r in rows:
        nominal = 1e3 / r["rate_hz"]
        tag = f"{r['rate_hz']:g}hz"
        out[f"{tag}_period_p50_within_1pct"] = abs(r["period_p50_ms"] - nominal) <= 0.01 * nominal
        out[f"{tag}_p99_dev_within_1.5x_anchor"] = r["dev_p99_ms"] <= 1.5 * r["anchor_dev_p99_ms"]
        out[f"{tag}_command_p99_dev_within_1.5x_anchor"] = (
            r["command_dev_p99_ms"] <= 1.5 * r["anchor_dev_p99_ms"]
        )
        out[f"{tag}_zero_holds_after_first_chunk"] = r["holds_after_first_chunk"] == 0
        out[f"{tag}_shield_clipped_below_1pct"] = r["shield_clipped_share"] < 0.01
        out[f"{tag}_shield_clipped_in_episodes_below_1pct"] = r["episode_clipped_share"] < 0.01
        if cameras and "bare_obs_round_trip_p50_ms" in r:
            out[f"{tag}_obs_chunk_within_1.3x_bare"] = (
                r["chunk_p50_ms"] <= 1.3 * r["bare_obs_round_trip_p50_ms"]
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,100", help="control rates, comma separated (Hz)")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="max seconds per episode")
    parser.add_argument("--cameras", action="store_true", help="two 640x480 rgb8 cameras at 30 Hz")
    parser.add_argument(
        "--shield-rate-from-config",
        action="store_true",
        help="leave the shield's command_rate_hz as config/shield_so101.yaml sets it (50 Hz) "
        "instead of the runner's rate",
    )
    parser.add_argument(
        "--dds-profile",
        choices=("localhost", "shm", "none"),
        default="localhost",
        help="localhost: the workcell's default (config/fastdds_localhost.xml: UDP loopback, "
        "unless the environment names a profile); shm: config/fastdds_shm.xml (shared "
        "memory) with rmw's LOCALHOST range; none: Fast DDS's defaults with LOCALHOST",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=50,
        help="SCHED_FIFO priority of the runner's episode loop (its control_priority) and of "
        "the anchor loop (0: both at normal priority)",
    )
    parser.add_argument("--keep", help="keep the traces and logs in this folder")
    parser.add_argument("--quick", action="store_true", help="50 Hz only, 1 episode of 2 s")
    parser.add_argument("--anchor", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--anchor-seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--anchor-out", help=argparse.SUPPRESS)
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--camera-publisher", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo:
        return echo_main()
    if args.camera_publisher:
        return cameras_main(30.0)
    if args.anchor:
        return anchor_main(
            args.anchor, args.anchor_seconds, args.anchor_out, args.cameras, args.priority
        )

    if args.quick:
        args.rates, args.episodes, args.seconds = "50", 1, 2.0
    from robokernel_ros.ros.domain import free_domain_id  # one no process here uses

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(free_domain_id())
    if args.dds_profile == "localhost":
        use_dds_profile()  # the workcell's default unless the environment has its own
    else:  # this profile whatever the environment says
        for name in ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE"):
            os.environ.pop(name, None)
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        if args.dds_profile == "shm":
            os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(config_dir() / "fastdds_shm.xml")
    rows = []
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="workcell_timing_") as tmp:
        tmp = str(keep) if keep is not None else tmp
        for rate in [float(r) for r in args.rates.split(",")]:
            row = run_rate(rate, args, Path(tmp))
            rows.append(row)
            print(
                f"{rate:5g} Hz  period p50 {row['period_p50_ms']:.2f} p99 {row['period_p99_ms']:.2f} "
                f"max {row['period_max_ms']:.2f} ms  |dev| p99 {row['dev_p99_ms']:.2f} ms "
                f"(as sent: {row['command_dev_p99_ms']:.2f}, max {row['command_max_ms']:.2f}, "
                f"{row['command_periods']} periods) "
                f"(anchor p50 {row['anchor_period_p50_ms']:.2f} |dev| p99 {row['anchor_dev_p99_ms']:.2f})  "
                f"holds {row['holds_after_first_chunk']}  clipped {100 * row['shield_clipped_share']:.1f} % "
                f"of {row['shield_commands']} {row['shield_clipped_where']}  chunk p50 {row['chunk_p50_ms']:.2f} p99 {row['chunk_p99_ms']:.2f} ms"
                + (
                    f"  bare obs round trip p50 {row['bare_obs_round_trip_p50_ms']:.2f} "
                    f"p99 {row['bare_obs_round_trip_p99_ms']:.2f} ms"
                    if "bare_obs_round_trip_p50_ms" in row
                    else ""
                ),
                flush=True,
            )
    judged = verdicts(rows, args.cameras)
    print(json.dumps({"bench": "workcell_timing", "cameras": args.cameras, "rows": rows,
                      "verdicts": judged}))  # fmt: skip
    return exit_status(judged, "workcell_timing")


if __name__ == "__main__":
    sys.exit(main())
