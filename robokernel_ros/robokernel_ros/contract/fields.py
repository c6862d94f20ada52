"""The message types a contract reads, and reading them: `extract(stream, msg)` -> a
float64 vector in the contract's order, `image_rgb(msg)` -> an HxWx3 uint8 RGB frame,
`header_stamp_ns(msg)`.

    from robokernel_ros.contract.fields import extract, header_stamp_ns, image_rgb
    vector = extract(contract.state[0], msg)        # msg: rosbags' or rclpy's, same attributes

Messages are read by attribute name only, so rosbags' deserialised dataclasses and rclpy's
message objects both work. `TYPES` is the table of what each supported type offers: its
fields (the `field:` a contract may select), how wide each is, and whether the entries are
picked by joint name (`names` then says which and in which order). No ROS import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

JOINT_STATE = "sensor_msgs/msg/JointState"
FLOAT64_MULTI_ARRAY = "std_msgs/msg/Float64MultiArray"
FLOAT64 = "std_msgs/msg/Float64"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
WRENCH_STAMPED = "geometry_msgs/msg/WrenchStamped"
TWIST = "geometry_msgs/msg/Twist"
TWIST_STAMPED = "geometry_msgs/msg/TwistStamped"
ODOMETRY = "nav_msgs/msg/Odometry"
IMU = "sensor_msgs/msg/Imu"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"

_XYZ = ("x", "y", "z")
_XYZW = ("x", "y", "z", "w")


@dataclass(frozen=True)
class MsgType:
    """One supported message type.

    fields: field name -> tuple of (attribute path, component names) parts it reads, in
        order; the key None is the whole message (what `field:` absent selects).
    by_name: entries are chosen by joint name (`names:` required, the contract's order).
    default_field: the field used when the contract gives none (by_name types).
    """

    name: str
    fields: dict[str | None, tuple[tuple[str, tuple[str, ...]], ...]]
    by_name: bool = False
    default_field: str | None = None

    @property
    def field_names(self) -> list[str]:
        return [f for f in self.fields if f is not None]

    def width(self, field: str | None) -> int:
        return sum(len(c) for _, c in self.fields[field])

    def component_names(self, field: str | None) -> list[str]:
        """'position.x', ... the default names of a fixed-layout type's entries."""
        return [f"{path}.{c}" if c else path for path, comps in self.fields[field] for c in comps]


def _parts(*parts: tuple[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return parts


_POSE = _parts(("position", _XYZ), ("orientation", _XYZW))
_TWIST = _parts(("linear", _XYZ), ("angular", _XYZ))

TYPES: dict[str, MsgType] = {
    t.name: t
    for t in (
        MsgType(
            JOINT_STATE,
            {f: ((f, ("",)),) for f in ("position", "velocity", "effort")},
            by_name=True,
            default_field="position",
        ),
        MsgType(
            FLOAT64_MULTI_ARRAY, {"data": (("data", ("",)),)}, by_name=True, default_field="data"
        ),  # fmt: skip
        MsgType(FLOAT64, {None: (("data", ("",)),), "data": (("data", ("",)),)}),
        MsgType(
            JOINT_TRAJECTORY,
            {f: ((f, ("",)),) for f in ("positions", "velocities", "accelerations", "effort")},
            by_name=True,
            default_field="positions",
        ),
        MsgType(
            POSE_STAMPED,
            {None: _POSE, "position": _POSE[:1], "orientation": _POSE[1:]},
        ),
        MsgType(
            WRENCH_STAMPED,
            {
                None: _parts(("force", _XYZ), ("torque", _XYZ)),
                "force": _parts(("force", _XYZ)),
                "torque": _parts(("torque", _XYZ)),
            },
        ),
        MsgType(TWIST, {None: _TWIST, "linear": _TWIST[:1], "angular": _TWIST[1:]}),
        MsgType(TWIST_STAMPED, {None: _TWIST, "linear": _TWIST[:1], "angular": _TWIST[1:]}),
        MsgType(
            ODOMETRY,
            {
                None: (*_POSE, *_TWIST),
                "pose": _POSE,
                "twist": _TWIST,
                "position": _POSE[:1],
                "orientation": _POSE[1:],
                "linear": _TWIST[:1],
                "angular": _TWIST[1:],
            },
        ),
        MsgType(
            IMU,
            {
                None: _parts(
                    ("orientation", _XYZW),
                    ("angular_velocity", _XYZ),
                    ("linear_acceleration", _XYZ),
                ),
                "orientation": _parts(("orientation", _XYZW)),
                "angular_velocity": _parts(("angular_velocity", _XYZ)),
                "linear_acceleration": _parts(("linear_acceleration", _XYZ)),
            },
        ),
    )
}
IMAGE_TYPES = (IMAGE, COMPRESSED_IMAGE)
# Where each fixed-layout type keeps the parts above (a Stamped type's body is .pose etc.).
_BODY: dict[str, Callable[[Any], Any]] = {
    POSE_STAMPED: lambda m: m.pose,
    WRENCH_STAMPED: lambda m: m.wrench,
    TWIST: lambda m: m,
    TWIST_STAMPED: lambda m: m.twist,
    IMU: lambda m: m,
    FLOAT64: lambda m: m,
}
_ODOM_PARTS = {"position": "pose", "orientation": "pose", "linear": "twist", "angular": "twist"}


def normalise_type(name: str) -> str:
    """'sensor_msgs/JointState' or 'sensor_msgs/msg/JointState' -> 'sensor_msgs/msg/JointState'."""
    parts = name.strip().split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    return name.strip()


class FieldError(ValueError):
    """A message does not hold what the contract's stream asks of it (a missing joint, a
    too-short array): the message names the topic and what is missing."""


def _joint_values(stream: Any, names_in_msg: Sequence[str], values: Any, what: str) -> np.ndarray:
    index = {str(n): i for i, n in enumerate(names_in_msg)}
    values = np.asarray(values, dtype=np.float64)
    out = np.empty(len(stream.names), dtype=np.float64)
    for k, name in enumerate(stream.names):
        i = index.get(name)
        if i is None:
            raise FieldError(
                f"topic {stream.topic}: joint {name!r} is not in the message "
                f"(it has {list(map(str, names_in_msg))})"
            )
        if i >= len(values):
            raise FieldError(
                f"topic {stream.topic}: joint {name!r} has no {what} entry "
                f"({len(values)} values for {len(names_in_msg)} names)"
            )
        out[k] = values[i]
    return out


def trajectory_point(msg: Any, time_s: float | None = None) -> Any:
    """The point of a JointTrajectory in force: the first, or at `time_s` after its start
    the last point whose time_from_start is at or before it (None when there is none)."""
    points = list(msg.points)
    if not points:
        return None
    if time_s is None:
        return points[0]
    chosen = points[0]
    for p in points:
        d = p.time_from_start
        if d.sec + d.nanosec * 1e-9 <= time_s + 1e-12:
            chosen = p
        else:
            break
    return chosen


def extract(stream: Any, msg: Any, *, time_s: float | None = None) -> np.ndarray:
    """The stream's vector from one deserialised message (float64, `len(stream.names)` long
    for by-name types, the field's width otherwise). `stream` is a `spec.Stream` with its
    type resolved. `time_s`: for a JointTrajectory, the time since its start (the point in
    force then); the first point when None. FieldError names the topic and the joint."""
    kind = stream.type
    table = TYPES.get(kind or "")
    if table is None:
        raise FieldError(f"topic {stream.topic}: type {kind!r} is not supported")
    field = stream.field if stream.field is not None else table.default_field
    if kind == JOINT_STATE:
        return _joint_values(stream, msg.name, getattr(msg, field), field)
    if kind == FLOAT64_MULTI_ARRAY:
        data = np.asarray(msg.data, dtype=np.float64)
        if len(data) < len(stream.names):
            raise FieldError(
                f"topic {stream.topic}: {len(data)} values in data, the contract names "
                f"{len(stream.names)} ({list(stream.names)})"
            )
        return data[: len(stream.names)].copy()
    if kind == JOINT_TRAJECTORY:
        point = trajectory_point(msg, time_s)
        if point is None:
            raise FieldError(f"topic {stream.topic}: the trajectory has no points")
        return _joint_values(stream, msg.joint_names, getattr(point, field), field)
    if kind == ODOMETRY:
        out: list[float] = []
        for path, comps in table.fields[field]:
            owner = _ODOM_PARTS.get(path)
            if owner is None:  # "pose" / "twist": the whole part
                continue
            body = msg.pose.pose if owner == "pose" else msg.twist.twist
            part = getattr(body, path)
            out.extend(float(getattr(part, c)) for c in comps)
        return np.asarray(out, dtype=np.float64)
    body = _BODY[kind](msg)
    out = []
    for path, comps in table.fields[field]:
        part = getattr(body, path)
        out.extend(float(part) if c == "" else float(getattr(part, c)) for c in comps)
    return np.asarray(out, dtype=np.float64)


def header_stamp_ns(msg: Any) -> int | None:
    """The message's header stamp in nanoseconds (None for a type without a header, or
    a zero stamp: a publisher that left it unset)."""
    header = getattr(msg, "header", None)
    if header is None:
        return None
    stamp = header.stamp
    ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
    return ns or None


def image_rgb(msg: Any, msgtype: str) -> np.ndarray:
    """An Image (rgb8, bgr8, mono8, rgba8, bgra8) or CompressedImage (JPEG, PNG) as an
    HxWx3 uint8 RGB array. ValueError names the encoding or format it cannot read."""
    if msgtype == COMPRESSED_IMAGE:
        return _decode_compressed(msg)
    h, w, enc = int(msg.height), int(msg.width), str(msg.encoding).lower()
    step = int(getattr(msg, "step", 0) or 0)
    data = np.frombuffer(memoryview(msg.data), dtype=np.uint8)
    channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "8uc1": 1, "8uc3": 3, "rgba8": 4, "bgra8": 4}
    c = channels.get(enc)
    if c is None:
        raise ValueError(f"encoding={enc!r}: images are read as {sorted(channels)}")
    row = step or w * c
    if data.size < row * h:
        raise ValueError(f"image of {data.size} bytes is too short for {h}x{w} {enc}")
    arr = data[: row * h].reshape(h, row)[:, : w * c].reshape(h, w, c)
    if c == 1:
        return np.repeat(arr, 3, axis=2)
    if enc in ("bgr8", "bgra8", "8uc3"):
        return np.ascontiguousarray(arr[:, :, 2::-1])
    return np.ascontiguousarray(arr[:, :, :3])


def _decode_compressed(msg: Any) -> np.ndarray:
    buf = np.frombuffer(memoryview(msg.data), dtype=np.uint8)
    try:
        import cv2
    except ImportError:  # pragma: no cover - opencv comes with lerobot
        cv2 = None
    if cv2 is not None:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"format={msg.format!r}: the compressed frame does not decode")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    import io

    from PIL import Image

    with Image.open(io.BytesIO(buf.tobytes())) as im:
        return np.asarray(im.convert("RGB"))
