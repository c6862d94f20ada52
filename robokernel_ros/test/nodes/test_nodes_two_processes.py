"""Separate processes over Fast DDS: an ActionChunk from the policy_server node and a
RunPolicy call answered by the runner node with a JSON report."""

from __future__ import annotations

import json
import math
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robokernel_interfaces.msg import ActionChunk, Observation  # noqa: E402
from robokernel_interfaces.srv import RunPolicy  # noqa: E402


def test_chunk_and_service_round_trip_between_processes(processes, tmp_path) -> None:
    server = processes.python(
        "policy_server", "robokernel_ros.nodes.policy_server", "--ros-args",
        "-p", "provider:=mock", "-p", "policy_config_json:='{\"execution_horizon\": 3}'",
        "-p", "action_keys:=[a,b]", "-p", "autostart:=true",
    )  # fmt: skip
    runner = processes.python(
        "runner", "robokernel_ros.nodes.runner", "--ros-args",
        "-p", "env:=sim", "-p", "robot:=so101", "-p", "robot_name:=arm", "-p", f"trace_dir:={tmp_path}",
        "-p", "autostart:=true",
    )  # fmt: skip
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("foundation_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        chunks: list[ActionChunk] = []
        node.create_subscription(ActionChunk, "action_chunk", chunks.append, 10)
        obs_pub = node.create_publisher(Observation, "observation", 10)
        client = node.create_client(RunPolicy, "run_policy")
        assert client.wait_for_service(timeout_sec=60), processes.log(runner)

        request = RunPolicy.Request()
        request.robot_name = "arm"
        request.policy_provider = "mock"
        request.instruction = "reach"
        request.n_steps = 20
        request.seed = 4
        request.policy_config_json = json.dumps({"amplitude": 0.2})
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=60)
        response = future.result()
        assert response is not None and response.ok and response.status == "success", response
        report = json.loads(response.report_json)
        assert (report["robot_name"], report["policy"], report["instruction"], report["n_steps"]) == (
            "arm", "mock", "reach", 20,
        )  # fmt: skip
        assert report["seed"] == 4 and report["actions_applied"] == 20

        obs = Observation()
        obs.run_id = "run-1"
        obs.step = 17
        obs.joint_state = JointState(name=["a", "b"], position=[1.0, -2.0])
        deadline = time.monotonic() + 30
        while not chunks and time.monotonic() < deadline:
            # The subscription match (and the policy load) take a moment: republish.
            obs_pub.publish(obs)
            executor.spin_once(timeout_sec=0.2)
        assert chunks, (
            f"no chunk; policy_server exit code {server.poll()} (None: running), its log:\n"
            + processes.log(server)
        )
        chunk = chunks[0]
        assert (chunk.run_id, chunk.obs_step, list(chunk.keys), chunk.horizon) == (
            "run-1",
            17,
            ["a", "b"],
            3,
        )
        assert len(chunk.actions) == 6 and all(
            math.isfinite(v) and abs(v) <= 1.0 for v in chunk.actions
        )
        assert chunk.inference_time_s >= 0.0
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
