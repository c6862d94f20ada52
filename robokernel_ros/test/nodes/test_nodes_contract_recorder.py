"""sim_robot serves a robot's joints on several controllers, and the bag_recorder records what
a topic contract names: a teleop session on two controllers recorded with no `ros2 bag`,
then imported by `robokernel import-bag --contract` (real processes, a real rosbag2)."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading

import pytest

pytest.importorskip("rclpy")

from builtin_interfaces.msg import Duration  # noqa: E402
from robokernel_ros.demo import CONTRACT, config_dir  # noqa: E402
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.ros.qos import COMMAND_QOS, SENSOR_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

ARM = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"]


def _positions(joints: list, name: str) -> list[float]:
    return [m.position[list(m.name).index(name)] for m in list(joints)]


def test_sim_robot_serves_an_arm_and_a_gripper_on_two_controllers(processes, tmp_path, ros):
    """controllers: [arm, gripper], a forward command and a trajectory: each moves only its
    own joints, and a command of the wrong size for a controller is ignored."""
    params = tmp_path / "sim_two.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    robot: so101\n    controllers: [arm, gripper]\n"
        "    arm: {kind: forward_command, topic: /two/arm/commands,\n"
        f"          joints: [{', '.join(ARM)}]}}\n"
        "    gripper: {kind: joint_trajectory, topic: /two/gripper/joint_trajectory,\n"
        "              joints: [gripper]}\n    joint_states_topic: /two/joint_states\n"
    )
    robot = processes.python(
        "sim_two", "robokernel_ros.nodes.sim_robot", "--ros-args", "--params-file", str(params)
    )
    joints = ros.collect(JointState, "/two/joint_states", SENSOR_QOS)
    arm = ros.node.create_publisher(Float64MultiArray, "/two/arm/commands", COMMAND_QOS)
    gripper = ros.node.create_publisher(
        JointTrajectory, "/two/gripper/joint_trajectory", COMMAND_QOS
    )
    assert ros.wait_until(lambda: joints and arm.get_subscription_count(), 60), processes.log(robot)
    ros.wait_until(lambda: gripper.get_subscription_count(), 10)
    start_gripper = _positions(joints, "gripper")[-1]
    for _ in range(20):  # a forward command of the arm's five joints
        arm.publish(Float64MultiArray(data=[0.5, 0.0, 0.0, 0.0, 0.0]))
        ros.wait_until(lambda: False, 0.02)
    assert ros.wait_until(lambda: _positions(joints, "shoulder_pan")[-1] > 0.4, 10)
    assert abs(_positions(joints, "gripper")[-1] - start_gripper) < 0.05  # not the arm's
    arm.publish(Float64MultiArray(data=[0.5, 0.0]))  # the wrong size: ignored
    point = JointTrajectoryPoint(
        positions=[1.0], time_from_start=Duration(sec=0, nanosec=300_000_000)
    )
    gripper.publish(JointTrajectory(joint_names=["gripper"], points=[point]))
    assert ros.wait_until(lambda: _positions(joints, "gripper")[-1] > 0.9, 10), _positions(
        joints, "gripper"
    )[-3:]
    assert _positions(joints, "shoulder_pan")[-1] > 0.4  # the arm kept its target
    assert "arm: command ignored: 2 values for 5 joints" in processes.log(robot)


def _teleop(ros, stop: threading.Event, sent: list) -> None:
    """A leader arm's stream: the arm's and the gripper's commands at ~50 Hz."""
    arm = ros.node.create_publisher(Float64MultiArray, "/arm_controller/commands", COMMAND_QOS)
    gripper = ros.node.create_publisher(
        Float64MultiArray, "/gripper_controller/commands", COMMAND_QOS
    )
    k = 0
    while not stop.wait(0.02):
        q = 0.4 * math.sin(0.05 * k)
        g = 0.6 + 0.4 * math.sin(0.08 * k)
        arm.publish(Float64MultiArray(data=[q, 0.2, 0.0, 0.0, 0.0]))
        gripper.publish(Float64MultiArray(data=[g]))
        sent.append((q, g))
        k += 1


def test_a_teleop_session_recorded_by_contract_imports_with_import_bag(
    processes, tmp_path, ros
) -> None:
    contract = str(config_dir() / CONTRACT)
    processes.python("sim_robot", "robokernel_ros.nodes.sim_robot", "--ros-args",
                     "-p", f"contract_file:={contract}")  # fmt: skip
    recorder = processes.python(
        "recorder", "robokernel_ros.nodes.bag_recorder", "--ros-args",
        "-p", f"trace_dir:={tmp_path / 'recorded'}", "-p", f"contract_file:={contract}",
        "-p", "bag_name:=teleop", "-p", "storage:=mcap",
    )  # fmt: skip
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    assert ros.wait_until(lambda: len(joints) > 10, 60)
    assert ros.wait_until(lambda: "recording the 3 topics" in processes.log(recorder), 30), (
        processes.log(recorder)
    )
    assert ros.wait_until(
        lambda: ros.node.count_subscribers("/arm_controller/commands") >= 2, 30
    )  # sim_robot's and the recorder's
    stop, sent = threading.Event(), []
    teleop = threading.Thread(target=_teleop, args=(ros, stop, sent), daemon=True)
    teleop.start()
    ros.wait_until(lambda: len(sent) >= 150, 20)
    stop.set()
    teleop.join(timeout=5)
    ros.wait_until(lambda: False, 0.5)  # the last commands' effect reaches the joint states
    processes.kill(recorder, signal.SIGINT)  # a clean end: the bag's metadata.yaml
    bag = tmp_path / "recorded" / "teleop"
    assert (bag / "metadata.yaml").is_file(), processes.log(recorder)
    out = tmp_path / "runs"
    imported = subprocess.run(
        [sys.executable, "-m", "robokernel_ros.cli", "import-bag", str(bag), "--contract",
         contract, "--out", str(out)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stdout + imported.stderr
    (run_dir,) = [p for p in out.iterdir() if (p / "events.jsonl").is_file()]
    trace = load_trace(run_dir)
    actions = [e.data["action"] for e in trace.events if e.kind == "action"]
    observations = [e.data["obs"] for e in trace.events if e.kind == "observation"]
    # at 50 fps, most of the session (the first frames wait for every stream to start)
    assert len(actions) >= 0.6 * len(sent), (len(actions), len(sent))
    sent_q = {round(q, 6) for q, _ in sent}
    sent_g = {round(g, 6) for _, g in sent}
    assert all(round(a["shoulder_pan"], 6) in sent_q for a in actions)  # what was commanded
    assert all(round(a["gripper"], 6) in sent_g for a in actions)
    # and the robot followed it: the recorded state moved with the commands
    pans = [o["joint_positions"]["shoulder_pan"] for o in observations]
    grips = [o["joint_positions"]["gripper"] for o in observations]
    assert max(pans) - min(pans) > 0.3 and max(grips) - min(grips) > 0.3, (
        min(pans),
        max(pans),
        min(grips),
        max(grips),
    )
    assert (run_dir / "contract.yaml").is_file()  # the contract kept with the run
