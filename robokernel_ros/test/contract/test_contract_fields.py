"""Reading messages as a contract says: rosbags' deserialised messages (the same attribute
names as rclpy's) of every supported type become vectors in the contract's order, frames
become RGB, and a missing joint is named."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from robokernel_ros.contract import FieldError, Stream, extract, header_stamp_ns, image_rgb
from robokernel_ros.contract import fields as F
from rosbags.typesys import Stores, get_typestore

store = get_typestore(Stores.ROS2_HUMBLE)
T = store.types
Time = T["builtin_interfaces/msg/Time"]
Duration = T["builtin_interfaces/msg/Duration"]


def header(ns: int = 1_500_000_123) -> object:
    return T["std_msgs/msg/Header"](stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="b")


def roundtrip(msg: object, msgtype: str) -> object:
    """What a bag reader gives back: the message serialised and deserialised."""
    return store.deserialize_cdr(store.serialize_cdr(msg, msgtype), msgtype)


def vec3(x: float, y: float, z: float) -> object:
    return T["geometry_msgs/msg/Vector3"](x=x, y=y, z=z)


def pose() -> object:
    return T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=1.0, y=2.0, z=3.0),
        orientation=T["geometry_msgs/msg/Quaternion"](x=0.1, y=0.2, z=0.3, w=0.9),
    )


def twist() -> object:
    return T["geometry_msgs/msg/Twist"](linear=vec3(4, 5, 6), angular=vec3(7, 8, 9))


def test_joint_state_entries_are_picked_by_name_in_the_contracts_order() -> None:
    msg = roundtrip(
        T[F.JOINT_STATE](
            header=header(),
            name=["b", "c", "a"],
            position=np.array([2.0, 3.0, 1.0]),
            velocity=np.array([20.0, 30.0, 10.0]),
            effort=np.array([]),
        ),
        F.JOINT_STATE,
    )
    s = Stream("/js", F.JOINT_STATE, "position", ("a", "b", "c"))
    assert extract(s, msg).tolist() == [1.0, 2.0, 3.0]
    assert extract(Stream("/js", F.JOINT_STATE, "velocity", ("c", "a")), msg).tolist() == [
        30.0,
        10.0,
    ]
    with pytest.raises(FieldError, match=r"topic /js: joint 'd' is not in the message"):
        extract(Stream("/js", F.JOINT_STATE, "position", ("a", "d")), msg)
    with pytest.raises(FieldError, match=r"topic /js: joint 'a' has no effort entry"):
        extract(Stream("/js", F.JOINT_STATE, "effort", ("a",)), msg)
    assert header_stamp_ns(msg) == 1_500_000_123


def test_arrays_trajectories_and_scalars() -> None:
    arr = T[F.FLOAT64_MULTI_ARRAY](
        layout=T["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0), data=np.array([0.5, 0.25])
    )
    assert extract(
        Stream("/a", F.FLOAT64_MULTI_ARRAY, None, ("x", "y")), roundtrip(arr, F.FLOAT64_MULTI_ARRAY)
    ).tolist() == [0.5, 0.25]
    with pytest.raises(FieldError, match="2 values in data, the contract names 3"):
        extract(Stream("/a", F.FLOAT64_MULTI_ARRAY, None, ("x", "y", "z")), arr)
    point = T["trajectory_msgs/msg/JointTrajectoryPoint"]
    traj = T[F.JOINT_TRAJECTORY](
        header=header(),
        joint_names=["j2", "j1"],
        points=[
            point(positions=np.array([2.0, 1.0]), velocities=np.array([]), accelerations=np.array([]),
                  effort=np.array([]), time_from_start=Duration(sec=0, nanosec=0)),
            point(positions=np.array([4.0, 3.0]), velocities=np.array([]), accelerations=np.array([]),
                  effort=np.array([]), time_from_start=Duration(sec=0, nanosec=500_000_000)),
        ],
    )  # fmt: skip
    traj = roundtrip(traj, F.JOINT_TRAJECTORY)
    s = Stream("/t", F.JOINT_TRAJECTORY, None, ("j1", "j2"))
    assert extract(s, traj).tolist() == [1.0, 2.0]
    assert extract(s, traj, time_s=0.49).tolist() == [1.0, 2.0]
    assert extract(s, traj, time_s=0.5).tolist() == [3.0, 4.0]
    assert extract(Stream("/f", F.FLOAT64), T[F.FLOAT64](data=0.75)).tolist() == [0.75]


def test_fixed_layout_types_and_their_fields() -> None:
    ps = roundtrip(T[F.POSE_STAMPED](header=header(), pose=pose()), F.POSE_STAMPED)
    assert extract(Stream("/p", F.POSE_STAMPED), ps).tolist() == [1, 2, 3, 0.1, 0.2, 0.3, 0.9]
    assert extract(Stream("/p", F.POSE_STAMPED, "orientation"), ps).tolist() == [0.1, 0.2, 0.3, 0.9]
    w = T[F.WRENCH_STAMPED](
        header=header(),
        wrench=T["geometry_msgs/msg/Wrench"](force=vec3(1, 2, 3), torque=vec3(4, 5, 6)),
    )
    assert extract(Stream("/w", F.WRENCH_STAMPED), w).tolist() == [1, 2, 3, 4, 5, 6]
    assert extract(Stream("/w", F.WRENCH_STAMPED, "torque"), w).tolist() == [4, 5, 6]
    ts = T[F.TWIST_STAMPED](header=header(), twist=twist())
    assert extract(Stream("/v", F.TWIST_STAMPED, "angular"), ts).tolist() == [7, 8, 9]
    assert extract(Stream("/v", F.TWIST), twist()).tolist() == [4, 5, 6, 7, 8, 9]
    cov = np.zeros(36)
    odom = T[F.ODOMETRY](
        header=header(), child_frame_id="base",
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose(), covariance=cov),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](twist=twist(), covariance=cov),
    )  # fmt: skip
    odom = roundtrip(odom, F.ODOMETRY)
    assert extract(Stream("/o", F.ODOMETRY), odom).tolist() == [
        1,
        2,
        3,
        0.1,
        0.2,
        0.3,
        0.9,
        4,
        5,
        6,
        7,
        8,
        9,
    ]
    assert extract(Stream("/o", F.ODOMETRY, "twist"), odom).tolist() == [4, 5, 6, 7, 8, 9]
    assert extract(Stream("/o", F.ODOMETRY, "position"), odom).tolist() == [1, 2, 3]
    imu = T[F.IMU](
        header=header(), orientation=T["geometry_msgs/msg/Quaternion"](x=0, y=0, z=0, w=1),
        orientation_covariance=np.zeros(9), angular_velocity=vec3(1, 2, 3),
        angular_velocity_covariance=np.zeros(9), linear_acceleration=vec3(0, 0, 9.8),
        linear_acceleration_covariance=np.zeros(9),
    )  # fmt: skip
    assert extract(Stream("/i", F.IMU), imu).tolist() == [0, 0, 0, 1, 1, 2, 3, 0, 0, 9.8]
    assert extract(Stream("/i", F.IMU, "linear_acceleration"), imu).tolist() == [0, 0, 9.8]
    assert header_stamp_ns(twist()) is None


def test_raw_and_compressed_frames_become_rgb() -> None:
    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 200, 100, 50
    Image = T[F.IMAGE]
    bgr = Image(header=header(), height=4, width=6, encoding="bgr8", is_bigendian=0, step=18,
                data=np.ascontiguousarray(rgb[..., ::-1]).reshape(-1))  # fmt: skip
    assert np.array_equal(image_rgb(roundtrip(bgr, F.IMAGE), F.IMAGE), rgb)
    mono = Image(
        header=header(),
        height=4,
        width=6,
        encoding="mono8",
        is_bigendian=0,
        step=8,
        data=np.full(32, 77, np.uint8),
    )  # fmt: skip  (rows padded to 8 bytes)
    assert image_rgb(mono, F.IMAGE).shape == (4, 6, 3) and int(image_rgb(mono, F.IMAGE).max()) == 77
    with pytest.raises(ValueError, match="encoding='16uc1'"):
        image_rgb(Image(header=header(), height=1, width=1, encoding="16UC1", is_bigendian=0,
                        step=2, data=np.zeros(2, np.uint8)), F.IMAGE)  # fmt: skip
    ok, png = cv2.imencode(".png", np.ascontiguousarray(rgb[..., ::-1]))
    assert ok
    comp = T[F.COMPRESSED_IMAGE](header=header(), format="png", data=png.reshape(-1))
    assert np.array_equal(image_rgb(roundtrip(comp, F.COMPRESSED_IMAGE), F.COMPRESSED_IMAGE), rgb)
    ok, jpg = cv2.imencode(
        ".jpg", np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 95]
    )
    comp = T[F.COMPRESSED_IMAGE](header=header(), format="jpeg", data=jpg.reshape(-1))
    decoded = image_rgb(comp, F.COMPRESSED_IMAGE).astype(int)
    assert np.abs(decoded - rgb).max() <= 4
    with pytest.raises(ValueError, match="does not decode"):
        image_rgb(
            T[F.COMPRESSED_IMAGE](header=header(), format="jpeg", data=np.zeros(10, np.uint8)),
            F.COMPRESSED_IMAGE,
        )
