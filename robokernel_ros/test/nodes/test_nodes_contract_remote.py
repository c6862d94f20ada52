"""The data a lab records is the data its policy is served (issue #35), as real
processes: a workcell whose contract has a WrenchStamped and a PoseStamped beside the
joint states serves a remote policy (policy_server, topic mode) the observation its trace
records, the wrench's and the pose's numbers included, step by step."""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.ros import wire  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402

from robokernel_interfaces.msg import Observation  # noqa: E402
from robokernel_interfaces.srv import RunPolicy  # noqa: E402

NS = "/rk_ftr"
JOINTS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
CONTRACT = f"""
fps: 50
state:
  - topic: /joint_states
    type: sensor_msgs/msg/JointState
    names: [{", ".join(JOINTS)}]
  - topic: /ftr/wrench
    type: geometry_msgs/msg/WrenchStamped
  - topic: /ftr/tcp_pose
    type: geometry_msgs/msg/PoseStamped
    field: position
action:
  topic: /forward_position_controller/commands
  type: std_msgs/msg/Float64MultiArray
  names: [{", ".join(JOINTS)}]
"""
NUMBERS = {"ftr_wrench.force.x", "ftr_wrench.torque.z", "ftr_tcp_pose.position.z"}


def _publish(ros, stop: threading.Event) -> None:
    """A wrench and a pose that change every sample, so a stale or shifted one shows."""
    from geometry_msgs.msg import PoseStamped, WrenchStamped

    wrench = ros.node.create_publisher(WrenchStamped, "/ftr/wrench", 10)
    pose = ros.node.create_publisher(PoseStamped, "/ftr/tcp_pose", 10)
    w, p, k = WrenchStamped(), PoseStamped(), 0
    while not stop.wait(0.01):
        k += 1
        w.wrench.force.x, w.wrench.torque.z = 1.5 + 0.001 * k, -0.25
        p.pose.position.z = 0.42 + 0.0001 * k
        w.header.stamp = p.header.stamp = ros.node.get_clock().now().to_msg()
        wrench.publish(w)
        pose.publish(p)


def test_a_remote_policy_is_served_the_wrench_and_pose_numbers_the_trace_records(
    processes, tmp_path, ros
) -> None:
    contract = tmp_path / "contract_ftr.yaml"
    contract.write_text(CONTRACT)
    sent = ros.collect(Observation, f"{NS}/observation", 1000)  # what the server reads
    stop = threading.Event()
    publisher = threading.Thread(target=_publish, args=(ros, stop), daemon=True)
    publisher.start()
    try:
        processes.python("sim_robot", "robokernel_ros.nodes.sim_robot", "--ros-args",
                         "-r", f"__ns:={NS}", "-p", "robot:=so101")  # fmt: skip
        server = processes.python(
            "policy_server", "robokernel_ros.nodes.policy_server", "--ros-args",
            "-r", f"__ns:={NS}", "-p", "provider:=mock", "-p", "autostart:=true",
            "-p", "policy_config_json:='{\"amplitude\": 0.1}'",
        )  # fmt: skip
        runner = processes.python(
            "runner", "robokernel_ros.nodes.runner", "--ros-args", "-r", f"__ns:={NS}",
            "-p", "env:=ros", "-p", f"contract_file:={contract}", "-p", "shields:=['']",
            "-p", "estop_required:=false", "-p", f"trace_dir:={tmp_path / 'runs'}",
            "-p", "autostart:=true",
        )  # fmt: skip
        assert ros.wait_for(RunPolicy, f"{NS}/run_policy", 60), processes.log(runner)
        wait_active(ros.node, f"{NS}/runner", timeout_s=60)
        wait_active(ros.node, f"{NS}/policy_server", timeout_s=60)
        reply = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
            robot_name="arm", policy_provider="remote", n_steps=40), timeout_s=90)  # fmt: skip
        assert reply.ok, (reply.message, processes.log(runner), processes.log(server))
    finally:
        stop.set()
        publisher.join(timeout=5)
    trace = load_trace(json.loads(reply.report_json)["trace_path"])
    recorded = {e.step: e.data["obs"] for e in trace.events if e.kind == "observation"}
    served = {int(m.step): wire.msg_to_observation(m) for m in list(sent)}
    common = sorted(set(recorded) & set(served))
    assert len(common) >= 30, (sorted(recorded)[:5], sorted(served)[:5])
    forces = set()
    for step in common:
        obs, got = recorded[step], served[step]
        assert set(obs) >= NUMBERS, sorted(obs)
        # every top-level number the trace records, the server was sent, equal
        numbers = {k: v for k, v in obs.items() if isinstance(v, int | float)}
        assert {k: got.get(k) for k in numbers} == pytest.approx(numbers), step
        assert got["joint_positions"] == pytest.approx(obs["joint_positions"]), step
        forces.add(got["ftr_wrench.force.x"])
    assert len(forces) > 5  # live samples, not one stale value
