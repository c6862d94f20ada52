"""What the safety_shield node costs on the command path, next to its anchor, a bare relay.

    probe (publisher) --/bench/in--> relay | safety_shield --/bench/out--> probe (subscriber)

One run measures, at 500 Hz and at 1 kHz, 7-joint std_msgs/Float64MultiArray commands
(within the Panda's limits, so the shield forwards them) through a bare relay node and
through the safety_shield node (config/joint_limits_panda.yaml: position, velocity and
acceleration guards active; estop_required with the probe's released heartbeat), each with rclpy's SingleThreadedExecutor and with the
EventsExecutor (spin_once(timeout_sec) in a loop: its spin() is broken in this build).
The publisher and the subscriber live in one probe process (one clock); the middle node
is its own process. Printed per run: p50 / p99 / max one-way latency, drops (sent but not
received) and the middle process's CPU share (CPU seconds / wall seconds, of one core).

Target: the shield adds at most 0.2 ms at p99 over the bare relay (same executor, same
rate), with zero drops at 1 kHz. Ends with one JSON line of all figures and verdicts.

    python bench/shield_latency.py            # 10 s per run (8 runs, about 2.5 minutes)
    python bench/shield_latency.py --quick    # 3 s per run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from robokernel_ros.process import die_with_parent
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

ROOT = Path(__file__).resolve().parents[1]
LIMITS = ROOT / "robokernel_ros" / "config" / "joint_limits_panda.yaml"
JOINTS = [f"joint{i}" for i in range(1, 8)]
POSE = [0.0, -0.3, 0.0, -2.0, 0.0, 1.8, 0.8]  # within the Panda's limits
TARGET_P99_ADDED_MS = 0.2
IN, OUT = "/bench/in", "/bench/out"


# --- roles run in child processes ---------------------------------------------------------


def role_relay(executor: str) -> None:
    import rclpy
    from robokernel_ros.ros.node import make_executor, spin_until
    from robokernel_ros.ros.qos import COMMAND_QOS
    from std_msgs.msg import Float64MultiArray

    rclpy.init()
    node = rclpy.create_node("bench_relay")
    pub = node.create_publisher(Float64MultiArray, OUT, COMMAND_QOS)
    node.create_subscription(Float64MultiArray, IN, pub.publish, COMMAND_QOS)
    exe = make_executor(executor)
    exe.add_node(node)
    try:
        spin_until(exe, lambda: False)
    except KeyboardInterrupt:
        pass
    finally:
        exe.shutdown(timeout_sec=1)
        node.destroy_node()
        rclpy.try_shutdown()


def role_probe(rate: float, seconds: float, warmup: float) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from robokernel_ros.ros.qos import COMMAND_QOS, ESTOP_QOS
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Bool, Float64MultiArray

    sys.setswitchinterval(0.0002)  # publisher and subscriber threads share the GIL
    rclpy.init()
    node = rclpy.create_node("bench_probe")
    pub = node.create_publisher(Float64MultiArray, IN, COMMAND_QOS)
    js_pub = node.create_publisher(JointState, "/joint_states", COMMAND_QOS)
    received: dict[int, int] = {}
    clock = time.perf_counter_ns

    def on_out(msg: Float64MultiArray) -> None:
        received[msg.layout.data_offset] = clock()

    node.create_subscription(Float64MultiArray, OUT, on_out, COMMAND_QOS)

    def joint_states() -> None:
        msg = JointState()
        msg.name = JOINTS
        msg.position = POSE
        js_pub.publish(msg)

    node.create_timer(0.01, joint_states)
    # the released heartbeat of an e-stop source (estop_panel's 10 Hz) on the shield's
    # default estop_topic (the panel's <ns>/estop; the root namespace here): the shield
    # runs as shipped, estop_required
    estop_pub = node.create_publisher(Bool, "/estop", ESTOP_QOS)
    node.create_timer(0.1, lambda: estop_pub.publish(Bool(data=False)))
    exe = SingleThreadedExecutor()
    exe.add_node(node)
    stop = threading.Event()
    spinner = threading.Thread(
        target=lambda: [exe.spin_once(0.05) for _ in iter(stop.is_set, True)]
    )
    spinner.start()

    msg = Float64MultiArray()
    msg.data = POSE
    sent: dict[int, int] = {}
    period = 1.0 / rate

    def stream(first_seq: int, duration: float, record: bool) -> int:
        seq = first_seq
        start = next_t = time.perf_counter()
        while time.perf_counter() - start < duration:
            msg.layout.data_offset = seq
            if record:
                sent[seq] = clock()
            pub.publish(msg)
            seq += 1
            next_t += period
            delay = next_t - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # no busy wait: it would hold the GIL from the subscriber
        return seq

    # warm up until the middle node forwards, then measure
    deadline = time.monotonic() + 60
    seq = 1
    while not received and time.monotonic() < deadline:
        seq = stream(seq, 0.2, record=False)
    if not received:
        print(json.dumps({"error": "nothing came through the middle node within 60 s"}), flush=True)
    else:
        seq = stream(seq, warmup, record=False)
        print("start", flush=True)
        seq = stream(seq + 1000, seconds, record=True)
        print("stop", flush=True)
        time.sleep(0.5)  # stragglers
        lat = sorted((received[s] - t) / 1e6 for s, t in sent.items() if s in received)
        drops = sum(1 for s in sent if s not in received)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

        print(
            json.dumps(
                {
                    "sent": len(sent),
                    "drops": drops,
                    "p50_ms": pct(0.50),
                    "p99_ms": pct(0.99),
                    "max_ms": lat[-1] if lat else float("nan"),
                }
            ),
            flush=True,
        )
    stop.set()
    spinner.join()
    exe.shutdown(timeout_sec=1)
    node.destroy_node()
    rclpy.try_shutdown()


# --- orchestration ------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _middle(kind: str, executor: str) -> list[str]:
    if kind == "relay":
        return [sys.executable, __file__, "--role", "relay", "--executor", executor]
    return [
        sys.executable,
        "-m",
        "robokernel_ros.nodes.safety_shield",
        "--ros-args",
        "-r",
        "__node:=bench_shield",
        "-p",
        f"joints:=[{','.join(JOINTS)}]",
        "-p",
        f"limits_file:={LIMITS}",
        "-p",
        f"input_topic:={IN}",
        "-p",
        f"output_topic:={OUT}",
        "-p",
        "autostart:=true",
        "-p",
        f"executor:={executor}",
    ]


def run_one(kind: str, executor: str, rate: float, seconds: float, warmup: float) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    middle = subprocess.Popen(
        _middle(kind, executor),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    probe = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "probe",
            "--rate",
            str(rate),
            "--seconds",
            str(seconds),
            "--warmup",
            str(warmup),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    result: dict = {"error": "probe gave no result"}
    cpu0 = t0 = None
    cpu_share = float("nan")
    try:
        for line in probe.stdout:
            line = line.strip()
            if line == "start":
                cpu0, t0 = _cpu_seconds(middle.pid), time.monotonic()
            elif line == "stop" and cpu0 is not None:
                cpu_share = (_cpu_seconds(middle.pid) - cpu0) / (time.monotonic() - t0)
            elif line.startswith("{"):
                result = json.loads(line)
        probe.wait(timeout=30)
    finally:
        for proc in (probe, middle):
            if proc.poll() is None:
                os.killpg(proc.pid, 2)
        for proc in (probe, middle):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
    result["cpu_share"] = cpu_share
    if "error" in result:
        log.seek(0)
        result["middle_log_tail"] = log.read().decode(errors="replace")[-600:]
    log.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 s per run instead of 10 s")
    parser.add_argument("--role", choices=["relay", "probe"], help=argparse.SUPPRESS)
    parser.add_argument("--executor", default="single_threaded", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "relay":
        return role_relay(args.executor)
    if args.role == "probe":
        return role_probe(args.rate, args.seconds, args.warmup)

    from robokernel_ros.ros.domain import free_domain_id  # one no process here uses

    os.environ.setdefault("ROS_DOMAIN_ID", str(free_domain_id()))
    from robokernel_ros.demo import use_dds_profile

    use_dds_profile()  # the workcell's DDS settings unless the environment has its own
    seconds = 3.0 if args.quick else 10.0
    figures: dict[str, dict] = {}
    print(
        f"{'executor':<16}{'rate':>6} {'node':<7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'sent':>8}{'drops':>7}{'cpu':>7}"
    )
    for executor in ("single_threaded", "events"):
        for rate in (500.0, 1000.0):
            for kind in ("relay", "shield"):
                r = run_one(kind, executor, rate, seconds, warmup=1.0)
                key = f"{executor}/{int(rate)}hz/{kind}"
                figures[key] = r
                if "error" in r:
                    print(f"{executor:<16}{int(rate):>6} {kind:<7} ERROR {r['error']}", flush=True)
                    continue
                print(
                    f"{executor:<16}{int(rate):>6} {kind:<7}{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}"
                    f"{r['max_ms']:>9.3f}{r['sent']:>8}{r['drops']:>7}{r['cpu_share']:>7.1%}",
                    flush=True,
                )
    verdicts: dict[str, dict] = {}
    for executor in ("single_threaded", "events"):
        for rate in (500, 1000):
            relay = figures[f"{executor}/{rate}hz/relay"]
            shield = figures[f"{executor}/{rate}hz/shield"]
            if "error" in relay or "error" in shield:
                verdicts[f"{executor}/{rate}hz"] = {"pass": False, "reason": "a run failed"}
                continue
            added = shield["p99_ms"] - relay["p99_ms"]
            ok = added <= TARGET_P99_ADDED_MS and (rate != 1000 or shield["drops"] == 0)
            verdicts[f"{executor}/{rate}hz"] = {
                "p99_added_ms": round(added, 4),
                "p50_added_ms": round(shield["p50_ms"] - relay["p50_ms"], 4),
                "p99_ratio": round(shield["p99_ms"] / relay["p99_ms"], 3),
                "shield_drops": shield["drops"],
                "pass": ok,
            }
            print(
                f"{executor} {rate} Hz: shield adds {added:+.3f} ms at p99 "
                f"(target <= {TARGET_P99_ADDED_MS} ms), drops {shield['drops']}: "
                f"{'PASS' if ok else 'FAIL'}"
            )
    print(
        json.dumps(
            {
                "bench": "shield_latency",
                "seconds_per_run": seconds,
                "target": {"p99_added_ms": TARGET_P99_ADDED_MS, "drops_at_1khz": 0},
                "figures": figures,
                "verdicts": verdicts,
                "pass": all(v["pass"] for v in verdicts.values()),
            }
        )
    )
    return exit_status(verdicts, "shield_latency")


if __name__ == "__main__":
    sys.exit(main())
