"""Two real processes over Fast DDS: an ActionChunk and a RunPolicy call round-trip."""

from __future__ import annotations

import json
import time

import pytest

rclpy = pytest.importorskip("rclpy")
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robokernel_interfaces.msg import ActionChunk, Observation  # noqa: E402
from robokernel_interfaces.srv import RunPolicy  # noqa: E402


def test_chunk_and_service_round_trip_between_processes(processes) -> None:
    server = processes.python(
        "chunk_echo", "robokernel_ros.nodes.chunk_echo", "--ros-args", "-p", "horizon:=3"
    )
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
        assert client.wait_for_service(timeout_sec=30), processes.log(server)

        request = RunPolicy.Request()
        request.robot_name = "arm"
        request.policy_provider = "scripted"
        request.instruction = "reach"
        request.n_steps = 20
        request.policy_config_json = json.dumps({"targets": [[0.1, 0.2]]})
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=10)
        response = future.result()
        assert response is not None and response.ok and response.status == "success"
        report = json.loads(response.report_json)
        assert report == {
            "robot_name": "arm",
            "policy": "scripted",
            "instruction": "reach",
            "n_steps": 20,
            "policy_config": {"targets": [[0.1, 0.2]]},
        }

        obs = Observation()
        obs.run_id = "run-1"
        obs.step = 17
        obs.joint_state = JointState(name=["a", "b"], position=[1.0, -2.0])
        deadline = time.monotonic() + 15
        while not chunks and time.monotonic() < deadline:
            # The subscription match takes a moment: republish until the chunk comes back.
            obs_pub.publish(obs)
            executor.spin_once(timeout_sec=0.2)
        assert chunks, processes.log(server)
        chunk = chunks[0]
        assert (chunk.run_id, chunk.obs_step, list(chunk.keys), chunk.horizon) == (
            "run-1",
            17,
            ["a", "b"],
            3,
        )
        assert list(chunk.actions) == pytest.approx([1.01, -1.99, 1.02, -1.98, 1.03, -1.97])
        assert chunk.inference_time_s >= 0.0
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
