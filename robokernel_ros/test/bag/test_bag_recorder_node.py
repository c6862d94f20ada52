"""The live recorder node: KernelEvents over real DDS -> a bag in the mirror's layout."""

from __future__ import annotations

import json
import signal
import time

import pytest
from robokernel_ros.kernel.trace import load_trace

rclpy = pytest.importorskip("rclpy")


def test_recorder_node_writes_the_episode(processes, tmp_path):
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from robokernel_interfaces.msg import KernelEvent

    node_proc = processes.python(
        "recorder",
        "robokernel_ros.nodes.bag_recorder",
        "--ros-args",
        "-p",
        f"trace_dir:={tmp_path}",
        "-p",
        "namespace:=/rktest",
    )
    rclpy.init()
    node = rclpy.create_node("event_source")
    try:
        pub = node.create_publisher(
            KernelEvent,
            "/rktest/events",
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE),
        )
        deadline = time.monotonic() + 30
        while pub.get_subscription_count() == 0:
            assert time.monotonic() < deadline, processes.log(node_proc)
            time.sleep(0.05)
        kinds = ["episode.start"] + ["observation", "action"] * 5 + ["episode.end"]
        for seq, kind in enumerate(kinds):
            step = max(0, (seq - 1) // 2)
            data = (
                {"run_id": "live-run", "env": {"action_keys": ["a"], "control_hz": 10.0}}
                if kind == "episode.start"
                else {}
            )
            if kind == "observation":
                data = {"obs": {"joint_positions": {"a": step * 0.1}}}
            elif kind == "action":
                data = {"action": {"a": step * 0.1}, "hold": False, "reward": 0.0}
            elif kind == "episode.end":
                data = {"outcome": "success", "steps": 5}
            line = {
                "seq": seq,
                "kind": kind,
                "step": step,
                "t": step / 10,
                "wall": 0.0,
                "data": data,
            }
            msg = KernelEvent(
                run_id="live-run", seq=seq, kind=kind, step=step, data_json=json.dumps(line)
            )
            msg.stamp.sec, msg.stamp.nanosec = divmod(int(step / 10 * 1e9), 1_000_000_000)
            pub.publish(msg)
        bag = tmp_path / "live-run" / "bag"
        deadline = time.monotonic() + 30
        while not (bag / "metadata.yaml").exists():
            assert time.monotonic() < deadline, processes.log(node_proc)
            time.sleep(0.05)
    finally:
        node.destroy_node()
        rclpy.shutdown()
    processes.kill(node_proc, signal.SIGINT)
    trace = load_trace(bag)
    assert [e.kind for e in trace.events] == kinds
    assert trace.meta["outcome"] == "success" and trace.meta["run_id"] == "live-run"
    assert [e.data["action"]["a"] for e in trace.of_kind("action")] == [
        0.0,
        0.1,
        0.2,
        0.30000000000000004,
        0.4,
    ]
