"""The runner node's foxglove_port: one live view for the node's lifetime, fed by every call."""

from __future__ import annotations

import json
import socket

import pytest

rclpy = pytest.importorskip("rclpy")

from foxglove_client import FoxgloveClient, proto_decoder  # noqa: E402
from robokernel_ros.live.channels import JOINTS_TOPIC, LOG_TOPIC, PROGRESS_TOPIC  # noqa: E402

from robokernel_interfaces.srv import RunPolicy  # noqa: E402

NS = "/rk_live_runner"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(request: RunPolicy.Request, timeout_s: float = 60.0) -> RunPolicy.Response:
    """One call in a context of its own; the executor, the node and the context are
    destroyed after it (checked: the executor's shutdown, the context shut down)."""
    from rclpy.executors import SingleThreadedExecutor

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("live_test_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    try:
        client = node.create_client(RunPolicy, f"{NS}/run_policy")
        assert client.wait_for_service(timeout_sec=60.0), "run_policy never appeared"
        future = client.call_async(request)
        executor.add_node(node)
        executor.spin_until_future_complete(future, timeout_sec=timeout_s)
        assert future.done(), "run_policy did not answer"
        return future.result()
    finally:
        assert executor.shutdown(timeout_sec=5.0), "the executor kept a callback running"
        node.destroy_node()
        rclpy.try_shutdown(context=context)
        assert not context.ok(), "the client's context is still valid after its shutdown"
        context.destroy()


def test_a_client_of_the_node_sees_each_run_policy_call(processes, tmp_path):
    port = _free_port()
    proc = processes.python("runner_live", "robokernel_ros.nodes.runner", "--ros-args", "-r", f"__ns:={NS}",
                            "-p", "robot:=so101", "-p", f"trace_dir:={tmp_path}", "-p", f"foxglove_port:={port}",
                            "-p", "autostart:=true")  # fmt: skip
    client = FoxgloveClient(port, deadline_s=60.0)  # the server is up as soon as the node is
    channels = client.wait_for({JOINTS_TOPIC, LOG_TOPIC, PROGRESS_TOPIC}, deadline_s=60.0)
    assert {JOINTS_TOPIC, LOG_TOPIC, PROGRESS_TOPIC} <= set(channels), processes.log(proc)
    client.subscribe([c["id"] for c in channels.values()])
    response = _call(RunPolicy.Request(robot_name="arm", policy_provider="mock", n_steps=25))
    assert response.ok, response.message
    live = json.loads(response.report_json)["live"]
    # a fast run: the client gets the joints at the display rate, the MCAP every step
    assert live["port"] == port and live["recorded"][JOINTS_TOPIC] == 26 and live["dropped"] == 0
    assert 1 <= live["sent"][JOINTS_TOPIC] <= 26
    joints_id = channels[JOINTS_TOPIC]["id"]
    decode = proto_decoder(channels[JOINTS_TOPIC])
    end_seen = False
    for _ in range(100):  # bounded: read until the episode's end line has arrived
        if end_seen:
            break
        client._read(0.2)
        log_id = channels[LOG_TOPIC]["id"]
        lines = [
            proto_decoder(channels[LOG_TOPIC])(p).message
            for c, _, p in client.messages
            if c == log_id
        ]
        end_seen = any("ended" in line for line in lines)
    joints = [decode(p) for c, _, p in client.messages if c == joints_id]
    assert len(joints) == live["sent"][JOINTS_TOPIC] and joints[0].joints[0].name == "shoulder_pan"
    assert not client.closed, "the node's server lives on after the call"
    client.close()


def test_a_foxglove_port_outside_its_domain_is_refused(processes):
    proc = processes.python("runner_live_bad", "robokernel_ros.nodes.runner", "--ros-args", "-r", f"__ns:={NS}_bad",
                            "-p", "foxglove_port:=70000")  # fmt: skip
    assert proc.wait(timeout=60) == 2, processes.log(proc)
    log = processes.log(proc)
    assert "foxglove_port" in log and "70000" in log, log
