"""Observation -> policy_server (mock policy) -> ActionChunk back, against a bare rclpy
ping-pong of messages of the same size, in the same run, at 50 Hz.

    python bench/chunk_roundtrip.py [--quick] [--seconds 10] [--hz 50]

Path A (anchor): the client publishes an Observation (6 joints), a bare rclpy echo
process (SingleThreadedExecutor, no policy) answers with a pre-built ActionChunk of the
same size as the server's (8 x 6 actions); the client's round trip is timed.
Path B: the `remote` policy provider (what the runner uses) sends the same observation
to the policy_server node hosting the mock policy and waits for its chunk.
Both run in separate processes on a private ROS_DOMAIN_ID, one after the other in this
run. Target: path B's p50 within 1.2x of path A's p50. Last line: JSON of all figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from robokernel_ros.process import die_with_parent

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
HORIZON = 8
NS = "/bench_rt"


def _echo() -> int:
    """The bare ping-pong peer: Observation in, a same-size ActionChunk out."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    from robokernel_interfaces.msg import ActionChunk, Observation

    rclpy.init()
    node = rclpy.create_node("bare_echo", namespace=NS)
    qos = QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
    )
    pub = node.create_publisher(ActionChunk, "pong", qos)
    reply = ActionChunk(keys=JOINTS, horizon=HORIZON, actions=[0.1] * (HORIZON * len(JOINTS)))

    def on_ping(msg: Observation) -> None:
        reply.run_id = msg.run_id
        reply.obs_step = msg.step
        pub.publish(reply)

    node.create_subscription(Observation, "ping", on_ping, qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _figures(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": 1e3 * statistics.median(samples),
        "p99_ms": 1e3 * _pct(samples, 0.99),
        "max_ms": 1e3 * max(samples),
    }


def _paced(n: int, hz: float, once) -> list[float]:
    period = 1.0 / hz
    out = []
    t_next = time.monotonic()
    for i in range(n):
        t_next += period
        out.append(once(i))
        wait = t_next - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s per path instead of 10")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hz", type=float, default=50.0)
    parser.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo:
        return _echo()
    seconds = 3.0 if args.quick else args.seconds
    n = int(seconds * args.hz)
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(
        1 + (os.getpid() + 37) % 100
    )
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from robokernel_ros.policies import create_policy
    from robokernel_ros.policies.remote import observation_to_msg

    from robokernel_interfaces.msg import ActionChunk

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "robokernel_ros.nodes.policy_server", "--ros-args", "-r", f"__ns:={NS}",
         "-p", "provider:=mock", "-p", f"policy_config_json:='{{\"execution_horizon\": {HORIZON}}}'",
         "-p", f"action_keys:=[{','.join(JOINTS)}]"],
        env=env, start_new_session=True, preexec_fn=die_with_parent, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    echo = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--echo"],
        env=env, start_new_session=True, preexec_fn=die_with_parent, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    observation = {
        "joint_positions": dict.fromkeys(JOINTS, 0.1),
        "joint_velocities": dict.fromkeys(JOINTS, 0.0),
    }
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("bench_client", namespace=NS, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stop = threading.Event()
    spinner = threading.Thread(
        target=lambda: [executor.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)]
    )
    spinner.start()
    policy = None
    try:
        # --- path A: bare ping-pong ---
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
        )
        got = threading.Event()
        expect = {"step": -1}

        def on_pong(msg: ActionChunk) -> None:
            if msg.obs_step == expect["step"]:
                got.set()

        node.create_subscription(ActionChunk, "pong", on_pong, qos)
        ping = node.create_publisher(
            type(observation_to_msg(observation, run_id="b", step=0)), "ping", qos
        )

        def bare_once(i: int) -> float:
            msg = observation_to_msg(observation, run_id="bare", step=i)
            got.clear()
            expect["step"] = i
            t = time.perf_counter()
            ping.publish(msg)
            if not got.wait(2.0):
                return 2.0
            return time.perf_counter() - t

        deadline = time.monotonic() + 30
        while ping.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        _paced(int(args.hz), args.hz, lambda i: bare_once(100000 + i))  # warm-up, 1 s
        bare = _paced(n, args.hz, bare_once)

        # --- path B: remote provider -> policy_server(mock) ---
        policy = create_policy("remote", namespace=NS, ready_timeout_s=60)
        policy.set_robot_state_keys(JOINTS)
        policy.reset()

        def served_once(i: int) -> float:
            t = time.perf_counter()
            policy.get_actions(observation, step=i)
            return time.perf_counter() - t

        _paced(int(args.hz), args.hz, lambda i: served_once(100000 + i))
        served = _paced(n, args.hz, served_once)
        inference = [c[1] for c in policy.chunk_log[-n:]]
    finally:
        if policy is not None:
            policy.close()
        stop.set()
        spinner.join(timeout=5)
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        for proc in (server, echo):
            try:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)

    a, b = _figures(bare), _figures(served)
    ratio = b["p50_ms"] / a["p50_ms"]
    print(
        f"chunk round trip at {args.hz:g} Hz, {n} samples each ({HORIZON}x{len(JOINTS)} chunk, 6-joint observation)"
    )
    print(
        f"  bare rclpy ping-pong      p50 {a['p50_ms']:.3f} ms  p99 {a['p99_ms']:.3f} ms  max {a['max_ms']:.3f} ms"
    )
    print(
        f"  runner -> policy_server   p50 {b['p50_ms']:.3f} ms  p99 {b['p99_ms']:.3f} ms  max {b['max_ms']:.3f} ms"
    )
    print(f"  mock inference in server  p50 {1e3 * statistics.median(inference):.3f} ms")
    print(f"  ratio p50 {ratio:.2f}x (target <= 1.2x)")
    result = {
        "bench": "chunk_roundtrip",
        "hz": args.hz,
        "seconds": seconds,
        "bare": a,
        "policy_server": b,
        "server_inference_p50_ms": 1e3 * statistics.median(inference),
        "ratio_p50": ratio,
        "target_ratio_p50": 1.2,
        "verdict_p50": "pass" if ratio <= 1.2 else "fail",
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
