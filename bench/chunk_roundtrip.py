"""Observation -> policy_server (mock policy) -> ActionChunk back, against a bare rclpy
ping-pong of messages of the same size, in the same run, at 50 Hz.

    python bench/chunk_roundtrip.py [--quick] [--seconds 10] [--hz 50]

Path A (anchors): the client publishes an Observation (6 joints), a bare rclpy echo
process (no policy) answers with a pre-built ActionChunk of the same size as the
server's (8 x 6 actions); the client's round trip is timed. Three bare setups, each on
both ends: rclpy's SingleThreadedExecutor, its EventsExecutor, and no executor (the
receiving thread waits on an rcl wait set and takes the message itself, which is what
the product does on both ends). The fair anchor is the fastest of them.
Path B: the `remote` policy provider (what the runner uses) sends the same observation
to the policy_server node hosting the mock policy and waits for its chunk; its time
includes the provider's and the server's work (message conversion, the mock policy).
All peers run in separate processes on a private ROS_DOMAIN_ID at the same time, and
the paths are sampled in turn within each 1/hz tick, so a load change on a shared
machine affects them alike. Target: path B's p50 within 1.2x of the fair anchor's p50.
Last line: JSON of all figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from rclpy.executors import ExternalShutdownException
from robokernel_ros.process import die_with_parent, stop_process_groups
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
HORIZON = 8
NS = "/bench_rt"
#: Bare rclpy setups of the anchor: the SingleThreadedExecutor, the EventsExecutor, and
#: no executor (the receiving thread waits on an rcl wait set and takes the message, as
#: the product does on both ends: the remote provider and the policy_server's inference
#: thread). The fair anchor is the fastest of them in the same run.
ANCHORS = ("single_threaded", "events", "waitset")


def _executor(kind: str, context=None):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.experimental import EventsExecutor

    return (
        EventsExecutor(context=context)
        if kind == "events"
        else SingleThreadedExecutor(context=context)
    )


class _Taker:
    """The "waitset" anchor's receive side: bare rclpy, the way rclpy.wait_for_message
    takes a message, with the subscription and wait set kept."""

    def __init__(self, node, msg_type, topic, qos) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        self.sub = node.create_subscription(msg_type, topic, lambda _m: None, qos)
        self.wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, node.context.handle)

    def take(self, timeout_s: float):
        handle = self.sub.handle
        with handle:
            taken = handle.take_message(self.sub.msg_type, False)
            if taken is None:
                self.wait_set.clear_entities()
                self.wait_set.add_subscription(handle)
                self.wait_set.wait(int(timeout_s * 1e9))
                taken = handle.take_message(self.sub.msg_type, False)
        return None if taken is None else taken[0]


def _echo(kind: str) -> int:
    """The bare ping-pong peer: Observation in, a same-size ActionChunk out."""
    import rclpy
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    from robokernel_interfaces.msg import ActionChunk, Observation

    rclpy.init()
    node = rclpy.create_node(f"bare_echo_{kind}", namespace=NS)
    qos = QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
    )
    pub = node.create_publisher(ActionChunk, f"pong_{kind}", qos)
    reply = ActionChunk(keys=JOINTS, horizon=HORIZON, actions=[0.1] * (HORIZON * len(JOINTS)))

    def on_ping(msg: Observation) -> None:
        reply.run_id = msg.run_id
        reply.obs_step = msg.step
        pub.publish(reply)

    try:
        if kind == "waitset":
            taker = _Taker(node, Observation, f"ping_{kind}", qos)
            while rclpy.ok():
                msg = taker.take(0.1)
                if msg is not None:
                    on_ping(msg)
        else:
            node.create_subscription(Observation, f"ping_{kind}", on_ping, qos)
            executor = _executor(kind)
            executor.add_node(node)
            while rclpy.ok():
                executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
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


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args], env=env, start_new_session=True, preexec_fn=die_with_parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip


class _Bare:
    """Path A with `kind` on both ends: the echo process and this client."""

    def __init__(self, kind: str, observation: dict, env: dict[str, str]) -> None:
        import rclpy
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        from robokernel_interfaces.msg import ActionChunk, Observation

        self.kind = kind
        self.observation = observation
        self.echo = _start([str(Path(__file__).resolve()), "--echo", kind], env)
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f"bench_client_{kind}", namespace=NS, context=self.context)
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
        )
        self.got = threading.Event()
        self.expect = -1
        self.executor = self.spinner = self.taker = None
        self.stop_spinning = threading.Event()
        if kind == "waitset":
            self.taker = _Taker(self.node, ActionChunk, f"pong_{kind}", qos)
        else:
            self.node.create_subscription(ActionChunk, f"pong_{kind}", self._on_pong, qos)
            self.executor = _executor(kind, self.context)
            self.executor.add_node(self.node)
            self.spinner = threading.Thread(target=self._spin)
            self.spinner.start()
        self.ping = self.node.create_publisher(Observation, f"ping_{kind}", qos)

    def _spin(self) -> None:
        while not self.stop_spinning.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _on_pong(self, msg) -> None:
        if msg.obs_step == self.expect:
            self.got.set()

    def matched(self) -> bool:
        return self.ping.get_subscription_count() > 0

    def once(self, i: int) -> float:
        from robokernel_ros.ros.wire import observation_to_msg

        msg = observation_to_msg(self.observation, run_id="bare", step=i)
        self.got.clear()
        self.expect = i
        t = time.perf_counter()
        self.ping.publish(msg)
        if self.taker is not None:
            deadline = t + 2.0
            while (left := deadline - time.perf_counter()) > 0:
                pong = self.taker.take(left)
                if pong is not None and pong.obs_step == i:
                    return time.perf_counter() - t
            return 2.0
        if not self.got.wait(2.0):
            return 2.0
        return time.perf_counter() - t

    def close(self) -> None:
        import rclpy

        self.stop_spinning.set()
        if self.spinner is not None:
            self.spinner.join(timeout=5)
            self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        stop_process_groups([self.echo], grace_s=10.0)


class _Served:
    """Path B: the remote provider against the policy_server (mock policy)."""

    kind = "policy_server"

    def __init__(self, observation: dict, env: dict[str, str]) -> None:
        self.observation = observation
        self.server = _start(
            ["-m", "robokernel_ros.nodes.policy_server", "--ros-args", "-r", f"__ns:={NS}",
             "-p", "provider:=mock", "-p", f"policy_config_json:='{{\"execution_horizon\": {HORIZON}}}'",
             "-p", f"action_keys:=[{','.join(JOINTS)}]", "-p", "autostart:=true"],
            env,
        )  # fmt: skip
        self.policy = None

    def connect(self) -> None:
        from robokernel_ros.policies import create_policy

        self.policy = create_policy("remote", namespace=NS, ready_timeout_s=60)
        self.policy.set_robot_state_keys(JOINTS)
        self.policy.reset()

    def once(self, i: int) -> float:
        t = time.perf_counter()
        self.policy.get_actions(self.observation, step=i)
        return time.perf_counter() - t

    def inference(self, n: int) -> list[float]:
        return [c[1] for c in list(self.policy.chunk_log)[-n:]]

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()
        stop_process_groups([self.server], grace_s=10.0)


def _interleaved(n: int, hz: float, paths: list, first_step: int = 0) -> dict[str, list[float]]:
    """n ticks at `hz`; in each, one round trip of every path, in an order that rotates."""
    period = 1.0 / hz
    out: dict[str, list[float]] = {p.kind: [] for p in paths}
    t_next = time.monotonic()
    for i in range(n):
        t_next += period
        k = i % len(paths)
        for path in paths[k:] + paths[:k]:
            out[path.kind].append(path.once(first_step + i))
        wait = t_next - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 s instead of 10")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hz", type=float, default=50.0)
    parser.add_argument("--echo", choices=ANCHORS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.echo:
        return _echo(args.echo)
    seconds = 3.0 if args.quick else args.seconds
    n = int(seconds * args.hz)
    from robokernel_ros.ros.domain import free_domain_id  # one no process here uses

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(free_domain_id())
    from robokernel_ros.demo import use_dds_profile

    use_dds_profile()  # the workcell's DDS settings unless the environment has its own
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    observation = {
        "joint_positions": dict.fromkeys(JOINTS, 0.1),
        "joint_velocities": dict.fromkeys(JOINTS, 0.0),
    }
    paths: list = []
    try:
        served = _Served(observation, env)
        paths.append(served)
        bare = [_Bare(kind, observation, env) for kind in ANCHORS]
        paths.extend(bare)
        served.connect()
        deadline = time.monotonic() + 30
        while not all(b.matched() for b in bare) and time.monotonic() < deadline:
            time.sleep(0.05)
        _interleaved(int(args.hz), args.hz, paths, first_step=100000)  # warm-up, 1 s
        samples = _interleaved(n, args.hz, paths)
        inference = served.inference(n)
    finally:
        for path in paths:
            path.close()

    anchors = {kind: _figures(samples[kind]) for kind in ANCHORS}
    b = _figures(samples["policy_server"])
    ratios = {kind: b["p50_ms"] / a["p50_ms"] for kind, a in anchors.items()}
    fair = min(anchors, key=lambda kind: anchors[kind]["p50_ms"])
    ratio = ratios[fair]
    print(
        f"chunk round trip at {args.hz:g} Hz, {n} samples each, interleaved "
        f"({HORIZON}x{len(JOINTS)} chunk, 6-joint observation)"
    )
    for kind, a in anchors.items():
        print(
            f"  bare rclpy ping-pong ({kind:>15})  p50 {a['p50_ms']:.3f} ms  p99 {a['p99_ms']:.3f} ms  "
            f"max {a['max_ms']:.3f} ms"
        )
    print(
        f"  remote -> policy_server (mock)          p50 {b['p50_ms']:.3f} ms  p99 {b['p99_ms']:.3f} ms  "
        f"max {b['max_ms']:.3f} ms"
    )
    print(f"  mock inference in server  p50 {1e3 * statistics.median(inference):.3f} ms")
    for kind, r in ratios.items():
        note = " (fair anchor: the fastest bare setup; target <= 1.2x)" if kind == fair else ""
        print(f"  ratio p50 vs bare {kind}: {r:.2f}x{note}")
    result = {
        "bench": "chunk_roundtrip",
        "hz": args.hz,
        "seconds": seconds,
        "fair_anchor": fair,
        "bare": anchors,
        "policy_server": b,
        "server_inference_p50_ms": 1e3 * statistics.median(inference),
        "ratio_p50": ratio,
        "ratio_p50_by_anchor": ratios,
        "target_ratio_p50": 1.2,
        "verdict_p50": "pass" if ratio <= 1.2 else "fail",
        "verdicts": {"ratio_p50<=1.2": ratio <= 1.2},
    }
    print(json.dumps(result))
    return exit_status(result["verdicts"], "chunk_roundtrip")


if __name__ == "__main__":
    sys.exit(main())
