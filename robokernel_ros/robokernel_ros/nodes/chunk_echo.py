"""A minimal policy-like node: answers observations with action chunks and RunPolicy calls with a report.

It exists to prove the wiring of a fresh workspace (interfaces built, DDS between
processes, services answered) before the real policy_server and runner nodes take
over; `make demo` and the foundation test start it as a separate process.
"""

from __future__ import annotations

import json
import time

import rclpy
from rclpy.node import Node

from robokernel_interfaces.msg import ActionChunk, Observation
from robokernel_interfaces.srv import RunPolicy


class ChunkEcho(Node):
    def __init__(self) -> None:
        super().__init__("chunk_echo")
        self.declare_parameter("horizon", 4)
        self._chunks = self.create_publisher(ActionChunk, "action_chunk", 10)
        self.create_subscription(Observation, "observation", self._on_observation, 10)
        self.create_service(RunPolicy, "run_policy", self._on_run_policy)

    def _on_observation(self, obs: Observation) -> None:
        started = time.monotonic()
        horizon = int(self.get_parameter("horizon").value)
        names = list(obs.joint_state.name)
        # Each row steps every joint 0.01 further from the observed position.
        positions = list(obs.joint_state.position)
        rows = [[p + 0.01 * (i + 1) for p in positions] for i in range(horizon)]
        msg = ActionChunk()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.run_id = obs.run_id
        msg.obs_step = obs.step
        msg.keys = names
        msg.horizon = horizon
        msg.actions = [v for row in rows for v in row]
        msg.inference_time_s = time.monotonic() - started
        self._chunks.publish(msg)

    def _on_run_policy(
        self, request: RunPolicy.Request, response: RunPolicy.Response
    ) -> RunPolicy.Response:
        report = {
            "robot_name": request.robot_name,
            "policy": request.policy_provider,
            "instruction": request.instruction,
            "n_steps": request.n_steps,
            "policy_config": json.loads(request.policy_config_json or "{}"),
        }
        response.ok = True
        response.status = "success"
        response.message = f"echoed a {request.policy_provider} request for {request.robot_name!r}"
        response.report_json = json.dumps(report)
        return response


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args)
    node = ChunkEcho()
    try:
        rclpy.spin(node)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    main()
