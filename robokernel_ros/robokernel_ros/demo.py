"""`make demo`: bring up nodes on a private ROS_DOMAIN_ID, exercise them, shut down cleanly.

Interim version (foundation): one chunk_echo node process answers an observation with
an ActionChunk and a RunPolicy call with a JSON report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def _private_domain() -> str:
    return os.environ.get("ROS_DOMAIN_ID") or str(1 + os.getpid() % 100)


def main() -> int:
    os.environ["ROS_DOMAIN_ID"] = _private_domain()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState

    from robokernel_interfaces.msg import ActionChunk, Observation
    from robokernel_interfaces.srv import RunPolicy

    server = subprocess.Popen(
        [sys.executable, "-m", "robokernel_ros.nodes.chunk_echo"], start_new_session=True
    )
    rclpy.init()
    node = rclpy.create_node("robokernel_demo")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        chunks: list[ActionChunk] = []
        node.create_subscription(ActionChunk, "action_chunk", chunks.append, 10)
        publisher = node.create_publisher(Observation, "observation", 10)
        client = node.create_client(RunPolicy, "run_policy")
        if not client.wait_for_service(timeout_sec=30):
            print("demo: the chunk_echo node did not come up", file=sys.stderr)
            return 1
        future = client.call_async(RunPolicy.Request(robot_name="arm", n_steps=10))
        executor.spin_until_future_complete(future, timeout_sec=10)
        print(f"RunPolicy -> ok={future.result().ok} report={future.result().report_json}")
        obs = Observation(
            run_id="demo", step=0, joint_state=JointState(name=["j1", "j2"], position=[0.0, 0.5])
        )
        deadline = time.monotonic() + 10
        while not chunks and time.monotonic() < deadline:
            publisher.publish(obs)
            executor.spin_once(timeout_sec=0.2)
        if not chunks:
            print("demo: no ActionChunk came back", file=sys.stderr)
            return 1
        c = chunks[0]
        print(
            f"ActionChunk obs_step={c.obs_step} keys={list(c.keys)} horizon={c.horizon} "
            f"actions={json.dumps([round(v, 3) for v in c.actions])}"
        )
        return 0
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown()
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
