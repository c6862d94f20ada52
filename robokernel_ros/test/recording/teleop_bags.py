"""Bags this project did not write: what `ros2 bag record -a` leaves after a teleoperated
SO-101 session, written with rosbags' own Writer (MCAP, rosbag2 version 9).

Follower and leader JointState at 100 Hz (joint order unlike the model's), a JPEG front
camera at 30 Hz, a raw rgb8 wrist camera at 15 Hz, /tf and /rosout; log (receive) stamps
3-15 ms after the header stamps. The values are known functions of the header time, and
each frame's colour encodes its index, so a test can say what every aligned frame must
hold. `TeleopBag.messages` keeps (topic, header ns, log ns) of everything written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

SO101 = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
BAG_ORDER = ("gripper", "wrist_roll", "shoulder_pan", "elbow_flex", "wrist_flex", "shoulder_lift")
FOLLOWER = "/follower/joint_states"
LEADER = "/leader/joint_states"
FRONT = "/front_camera/image_raw/compressed"
WRIST = "/wrist_camera/image_raw"
MARKER = "/episode_start"
T0_NS = 1_700_000_000_000_000_000

store = get_typestore(Stores.ROS2_HUMBLE)
TY = store.types


def follower_value(joint: str, t: float) -> float:
    i = SO101.index(joint)
    return 0.5 * math.sin(0.7 * t + i) + 0.1 * i


def leader_value(joint: str, t: float) -> float:
    return follower_value(joint, t + 0.05) + 0.01


def front_colour(index: int) -> int:
    return (40 + 5 * index) % 250


def wrist_colour(index: int) -> int:
    return (7 + 3 * index) % 256


@dataclass
class TeleopBag:
    path: Path
    # topic -> [(header ns, log ns, index)] in write order
    messages: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)


def _header(ns: int, frame: str = "base") -> object:
    return TY["std_msgs/msg/Header"](
        stamp=TY["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
        frame_id=frame,
    )


def write_teleop_bag(
    path: Path,
    *,
    segments: tuple[tuple[float, float], ...] = ((0.0, 3.0),),
    seed: int = 0,
    front_start_s: float = 0.2,
    wrist_start_s: float = 0.35,
    markers: tuple[float, ...] = (),
    size: tuple[int, int] = (48, 64),
) -> TeleopBag:
    """A teleop bag at `path`: every stream publishes during each (start, end) segment
    (seconds after T0; a pause between segments is a gap); cameras start `*_start_s`
    after a segment's start. `markers`: std_msgs/String on /episode_start at those times."""
    rng = np.random.default_rng(seed)
    h, w = size
    records: list[tuple[int, str, bytes, int, int]] = []  # (log, topic, data, header, index)
    counters: dict[str, int] = {}

    def add(topic: str, header_ns: int, msg: object, msgtype: str) -> None:
        log = header_ns + int(rng.integers(3_000_000, 15_000_001))
        index = counters.get(topic, 0)
        counters[topic] = index + 1
        records.append((log, topic, bytes(store.serialize_cdr(msg, msgtype)), header_ns, index))

    def times(start: float, end: float, hz: float) -> list[int]:
        n = int(math.floor((end - start) * hz + 1e-9))
        return [T0_NS + round((start + k / hz) * 1e9) for k in range(n + 1)]

    js = "sensor_msgs/msg/JointState"
    for start, end in segments:
        for ns in times(start, end, 100.0):
            t = (ns - T0_NS) / 1e9
            for topic, fn in ((FOLLOWER, follower_value), (LEADER, leader_value)):
                msg = TY[js](
                    header=_header(ns),
                    name=list(BAG_ORDER),
                    position=np.array([fn(j, t) for j in BAG_ORDER]),
                    velocity=np.zeros(6),
                    effort=np.zeros(6),
                )
                add(topic, ns, msg, js)
        for ns in times(start + front_start_s, end, 30.0):
            index = counters.get(FRONT, 0)
            img = np.full((h, w, 3), front_colour(index), np.uint8)
            ok, jpg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 95])
            assert ok
            msg = TY["sensor_msgs/msg/CompressedImage"](
                header=_header(ns, "front"), format="jpeg", data=jpg.reshape(-1)
            )
            add(FRONT, ns, msg, "sensor_msgs/msg/CompressedImage")
        for ns in times(start + wrist_start_s, end, 15.0):
            index = counters.get(WRIST, 0)
            msg = TY["sensor_msgs/msg/Image"](
                header=_header(ns, "wrist"),
                height=h // 2,
                width=w // 2,
                encoding="rgb8",
                is_bigendian=0,
                step=3 * (w // 2),
                data=np.full(3 * (w // 2) * (h // 2), wrist_colour(index), np.uint8),
            )
            add(WRIST, ns, msg, "sensor_msgs/msg/Image")
        for ns in times(start, end, 50.0):
            tf = TY["geometry_msgs/msg/TransformStamped"](
                header=_header(ns, "world"),
                child_frame_id="base",
                transform=TY["geometry_msgs/msg/Transform"](
                    translation=TY["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                    rotation=TY["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                ),
            )
            add("/tf", ns, TY["tf2_msgs/msg/TFMessage"](transforms=[tf]), "tf2_msgs/msg/TFMessage")
        for ns in times(start, end, 1.0):
            log = TY["rcl_interfaces/msg/Log"](
                stamp=TY["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                level=20, name="teleop", msg="tick", file="teleop.py", function="loop", line=1,
            )  # fmt: skip
            add("/rosout", ns, log, "rcl_interfaces/msg/Log")
    for t in markers:
        ns = T0_NS + round(t * 1e9)
        add(MARKER, ns, TY["std_msgs/msg/String"](data="start"), "std_msgs/msg/String")
    records.sort(key=lambda r: r[0])
    types = {
        FOLLOWER: js,
        LEADER: js,
        FRONT: "sensor_msgs/msg/CompressedImage",
        WRIST: "sensor_msgs/msg/Image",
        "/tf": "tf2_msgs/msg/TFMessage",
        "/rosout": "rcl_interfaces/msg/Log",
    }
    if markers:
        types[MARKER] = "std_msgs/msg/String"
    bag = TeleopBag(path)
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, ty, typestore=store) for t, ty in types.items()}
        for log, topic, data, header_ns, index in records:
            writer.write(conns[topic], log, data)
            bag.messages.setdefault(topic, []).append((header_ns, log, index))
    return bag


def held(
    bag: TeleopBag, topic: str, at_ns: int, *, receive: bool = False
) -> tuple[int, int, int] | None:
    """The message of `topic` a hold alignment gives at `at_ns`: the latest whose header
    stamp (log stamp when `receive`) is at or before it."""
    best = None
    for m in bag.messages.get(topic, []):
        stamp = m[1] if receive else m[0]
        if stamp <= at_ns and (best is None or stamp >= (best[1] if receive else best[0])):
            best = m
    return best
