"""`import-bag` with a UR-style contract: an arm on a joint trajectory controller, a gripper
on a forward command controller (Float64MultiArray: no header, it counts at its log time),
a wrench and a tool pose in the state. Values checked against what was written; the
export puts the joints in observation.state and the rest in environment_state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from robokernel_ros.cli import main
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.recording.importer import import_bags
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

store = get_typestore(Stores.ROS2_HUMBLE)
TY = store.types
ARM = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]  # fmt: skip
T0 = 1_800_000_000_000_000_000
CONTRACT = Path(__file__).resolve().parents[2] / "config" / "contract_ur_gripper.yaml"


def _time(ns: int) -> object:
    return TY["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def _header(ns: int) -> object:
    return TY["std_msgs/msg/Header"](stamp=_time(ns), frame_id="base")


def _vec(x: float, y: float, z: float) -> object:
    return TY["geometry_msgs/msg/Vector3"](x=x, y=y, z=z)


def write_ur_bag(
    path: Path, seconds: float = 2.0, *, finger_until_s: float | None = None
) -> dict[str, list[tuple[int, int, float]]]:
    """{topic: [(header ns, log ns, value t)]}: joint states 100 Hz, wrench 200 Hz, pose 50
    Hz, trajectories 5 Hz (two points, 0 and 0.1 s), gripper commands 10 Hz, a camera."""
    import cv2

    records = []
    written: dict[str, list[tuple[int, int, float]]] = {}

    def add(topic: str, msgtype: str, ns: int, msg: object, delay_ns: int = 5_000_000) -> None:
        records.append(
            (ns + delay_ns, topic, msgtype, bytes(store.serialize_cdr(msg, msgtype)), ns)
        )

    for k in range(int(seconds * 100) + 1):
        ns = T0 + k * 10_000_000
        t = k / 100
        names = [*reversed(ARM), "finger_joint"]
        if finger_until_s is not None and t > finger_until_s:
            names = names[:6]  # the gripper's driver went away mid-session
        add("/joint_states", "sensor_msgs/msg/JointState", ns, TY["sensor_msgs/msg/JointState"](
            header=_header(ns), name=names, position=np.array([t + i for i in range(len(names))]),
            velocity=np.zeros(len(names)), effort=np.zeros(len(names))))  # fmt: skip
    for k in range(int(seconds * 200) + 1):
        ns = T0 + k * 5_000_000
        t = k / 200
        add("/force_torque_sensor_broadcaster/wrench", "geometry_msgs/msg/WrenchStamped", ns,
            TY["geometry_msgs/msg/WrenchStamped"](header=_header(ns), wrench=TY["geometry_msgs/msg/Wrench"](
                force=_vec(t, 2 * t, 3 * t), torque=_vec(-t, 0.0, 1.0))))  # fmt: skip
    for k in range(int(seconds * 50) + 1):
        ns = T0 + k * 20_000_000
        t = k / 50
        add("/tcp_pose", "geometry_msgs/msg/PoseStamped", ns, TY["geometry_msgs/msg/PoseStamped"](
            header=_header(ns), pose=TY["geometry_msgs/msg/Pose"](
                position=TY["geometry_msgs/msg/Point"](x=t, y=0.5, z=1.0 - t),
                orientation=TY["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))))  # fmt: skip
    point = TY["trajectory_msgs/msg/JointTrajectoryPoint"]
    dur = TY["builtin_interfaces/msg/Duration"]
    for k in range(int(seconds * 5) + 1):
        ns = T0 + k * 200_000_000
        t = k / 5
        pts = [point(positions=np.array([t + 10 * (i + 1) + off for i in range(6)]), velocities=np.array([]),
                     accelerations=np.array([]), effort=np.array([]),
                     time_from_start=dur(sec=0, nanosec=round(off * 1e9)))
               for off in (0.0, 0.1)]  # fmt: skip
        add("/scaled_joint_trajectory_controller/joint_trajectory", "trajectory_msgs/msg/JointTrajectory", ns,
            TY["trajectory_msgs/msg/JointTrajectory"](header=_header(ns), joint_names=ARM, points=pts))  # fmt: skip
    for k in range(int(seconds * 10) + 1):
        ns = T0 + k * 100_000_000
        add("/gripper_controller/commands", "std_msgs/msg/Float64MultiArray", ns,
            TY["std_msgs/msg/Float64MultiArray"](layout=TY["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0),
                                                 data=np.array([k / 10])), delay_ns=30_000_000)  # fmt: skip
    ok, jpg = cv2.imencode(".jpg", np.full((48, 64, 3), 128, np.uint8))
    for k in range(int(seconds * 30) + 1):
        ns = T0 + round(k * 1e9 / 30)
        add("/camera/color/image_raw/compressed", "sensor_msgs/msg/CompressedImage", ns,
            TY["sensor_msgs/msg/CompressedImage"](header=_header(ns), format="jpeg", data=jpg.reshape(-1)))  # fmt: skip
    records.sort(key=lambda r: r[0])
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {}
        for log, topic, msgtype, data, ns in records:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
            writer.write(conns[topic], log, data)
            written.setdefault(topic, []).append((ns, log, 0.0))
    return written


def latest(entries: list[tuple[int, int, float]], at: int, *, log: bool = False) -> int:
    return max(e[1 if log else 0] for e in entries if e[1 if log else 0] <= at)


def test_a_ur_style_bag_imports_wrench_pose_trajectory_and_gripper(tmp_path: Path) -> None:
    written = write_ur_bag(tmp_path / "ur")
    contract = yaml.safe_load(CONTRACT.read_text())
    for source in contract["state"] + contract["action"]:
        source.pop("type")  # read from the bag
    path = tmp_path / "ur.yaml"
    path.write_text(yaml.safe_dump(contract))
    [result] = import_bags([tmp_path / "ur"], path, tmp_path / "runs")
    trace = load_trace(result.run_dir)
    observations = [e for e in trace.events if e.kind == "observation"]
    actions = {e.step: e.data["action"] for e in trace.events if e.kind == "action"}
    assert len(observations) == result.frames > 50
    for o in observations[::7]:
        t_frame = o.data["stamp_ns"]
        obs = o.data["obs"]
        js_t = (latest(written["/joint_states"], t_frame) - T0) / 1e9
        assert obs["joint_positions"]["shoulder_pan_joint"] == pytest.approx(
            js_t + 5
        )  # reversed order
        assert obs["joint_positions"]["finger_joint"] == pytest.approx(js_t + 6)
        w_t = (latest(written["/force_torque_sensor_broadcaster/wrench"], t_frame) - T0) / 1e9
        assert obs["force_torque_sensor_broadcaster_wrench.force.y"] == pytest.approx(2 * w_t)
        assert obs["force_torque_sensor_broadcaster_wrench.torque.z"] == 1.0
        p_t = (latest(written["/tcp_pose"], t_frame) - T0) / 1e9
        assert obs["tcp_pose.position.z"] == pytest.approx(1.0 - p_t)
        traj_ns = latest(written["/scaled_joint_trajectory_controller/joint_trajectory"], t_frame)
        in_force = 0.1 if t_frame - traj_ns >= 100_000_000 else 0.0  # the second point after 0.1 s
        action = actions[o.step]
        assert action["shoulder_pan_joint"] == pytest.approx((traj_ns - T0) / 1e9 + 10 + in_force)
        # the gripper command has no header: held by its log time (30 ms after its stamp)
        grip_log = latest(written["/gripper_controller/commands"], t_frame, log=True)
        k = next(
            i for i, e in enumerate(written["/gripper_controller/commands"]) if e[1] == grip_log
        )
        assert action["finger_joint"] == pytest.approx(k / 10)
    root = tmp_path / "dataset"
    args = ["export-lerobot", str(tmp_path / "ur"), "--contract", str(path),
            "--repo-id", "lab/ur", "--root", str(root)]  # fmt: skip
    assert main(args) == 0
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("lab/ur", root=root)
    features = dataset.meta.features
    assert len(features["observation.state"]["names"]) == 7
    env_names = features["observation.environment_state"]["names"]
    assert env_names[0] == "force_torque_sensor_broadcaster_wrench.force.x"
    assert env_names[-1] == "tcp_pose.position.z" and len(env_names) == 9
    item = dataset[3]
    obs = observations[3].data["obs"]
    assert np.allclose(item["observation.environment_state"].numpy(), [obs[n] for n in env_names])
    assert features["action"]["names"][-1] == "finger_joint"


def test_a_joint_that_vanishes_mid_bag_is_named_and_the_import_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_ur_bag(tmp_path / "ur", finger_until_s=1.0)
    out = tmp_path / "runs"
    args = ["import-bag", str(tmp_path / "ur"), "--contract", str(CONTRACT), "--out", str(out)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "topic /joint_states: joint 'finger_joint' is not in the message" in err, err
    assert not out.exists()
