"""bag_recorder: records a live graph's episodes to bags in the in-process mirror's layout,
or (`contract_file`) the topics a topic contract names, as `ros2 bag record` would.

    python -m robokernel_ros.nodes.bag_recorder --ros-args \\
        --params-file config/bag_recorder_so101.yaml -p trace_dir:=recorded
    python -m robokernel_ros.nodes.bag_recorder --ros-args -p trace_dir:=recorded \\
        -p contract_file:=config/contract_so101_arm_gripper.yaml -p bag_name:=teleop-1

Contract mode (`contract_file` set). A teleop session on machines without `ros2 bag`:
every state, action and image topic of the contract, each command's topic and the
episode marker topic are recorded, their messages as they were on the wire (serialised
bytes, header stamps inside, logged at their receipt time), to one bag
`<trace_dir>/<bag_name>` (default `contract-<local time>`) from the node's start to its
end (ros.contract_recorder). `robokernel import-bag BAG --contract FILE` makes run
directories of it (split into episodes by the contract's `episodes` rule). A contract
with a mistake, or a stream without a type whose topic is not on the graph within 10 s,
ends the node with status 2 and a line naming `contract_file`. The parameters below
about events and cameras are not used in this mode.

Subscribes to `<namespace>/events` (robokernel_interfaces/msg/KernelEvent, the runner's
`~/events`) and to the workcell's camera topics, and writes each episode to
`<trace_dir>/<run_id>/bag` through the same BagMirror the in-process runner uses, so
every topic and stamp is the mirror's: `/robokernel/events`, `/robokernel/joint_states`,
`/robokernel/action`, `/robokernel/action_chunk`, `/robokernel/camera/<name>/image`,
shield interventions and operator commands (see `recording.mirror`). `load_trace`,
`robokernel score` and `robokernel export-lerobot` read the result like a mirrored bag.

Cameras. The runner publishes its observations without the pixels (an image becomes its
shape and dtype), so the recorder takes the frames from the camera topics: for every
observation event that names camera C, the latest frame of C's topic received before
the event was received (the middleware's receipt times, so a recorder that processes
the event late still picks the frame of its time; the frames the middleware holds but the
executor has not handed over yet are taken first) is written to
`/robokernel/camera/C/image`, stamped with the observation's episode clock (as the
mirror stamps it), and the event's `images` refers to it. That frame can differ from
the one the runner's policy saw by a camera period or so (the runner does not publish
its frame). The runner decides which observations carry images (its image_every), the
recorder which cameras it can record: a camera the event names that the recorder has no
topic or no frame for is dropped from that event (logged), so every reference in the
bag has its frame; the log says when each camera's first frame arrives. A topic whose
last segment is `compressed` (image_transport's naming) is subscribed as
sensor_msgs/CompressedImage and decoded (JPEG/PNG) to rgb8/mono8 when written; any
other as sensor_msgs/Image (rgb8, bgr8, mono8, rgba8 without its alpha).

Event fields. The runner's KernelEvent carries the event's data as data_json and its
episode clock as stamp; a KernelEvent whose data_json is a whole events.jsonl line (a
mirrored bag played back) is read as that line. The runner does not publish the
events' wall clock: `wall` is the event's receipt time since episode.start's. A bag
starts at episode.start: an episode whose start the recorder did not receive (it was
started, or matched the runner, mid-episode) is not recorded (logged); the log says
when the runner's events publisher is matched.

Memory is bounded: messages are written as they arrive (the mirror flushes at least
every flush_interval_s); the recorder keeps camera_buffer_s seconds of frames per
camera (at most 256, and the camera subscription's history of 10), decoding only the
frames it writes.

Parameters: `RecorderParams` (name, type, default, domain, doc; `ros2 param describe`
shows them). A value outside its domain ends the node with status 2 and a line naming
the parameter.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile

from robokernel_ros.kernel.events import EPISODE_END, EPISODE_START, OBSERVATION, Event
from robokernel_ros.recording import types as bag_types
from robokernel_ros.recording.mirror import STORAGES, EpisodeBagMirror, camera_topic
from robokernel_ros.ros.node import exit_main, run_node
from robokernel_ros.ros.params import ParameterError, declare_params, param
from robokernel_ros.ros.qos import EVENTS_QOS, SENSOR_QOS
from robokernel_ros.ros.wire import is_compressed_topic

#: Camera frames: best effort (matches reliable and best-effort drivers), and deeper than
#: SENSOR_QOS so that a short stall of this node does not drop the frames the events
#: waiting behind it need (the DDS history is the only buffer while no callback runs).
CAMERA_QOS = QoSProfile(
    history=SENSOR_QOS.history,
    depth=10,
    reliability=SENSOR_QOS.reliability,
    durability=SENSOR_QOS.durability,
)

_LINE_KEYS = frozenset(("seq", "kind", "step", "data"))  # a whole events.jsonl line
_MAX_FRAMES = 256  # per camera, whatever camera_buffer_s (a bound on memory)


@dataclass(frozen=True)
class RecorderParams:
    """The recorder's parameters, as declared."""

    namespace: str = param("/robokernel", "the runner's namespace (<ns>/events)")
    trace_dir: str = param("runs", "bags go to <trace_dir>/<run_id>/bag")
    storage: str = param("mcap", "bag storage", choices=STORAGES)
    contract_file: str = param("", "record the topics of this contract instead ('' = events)")
    bag_name: str = param("", "contract_file: the bag's folder in trace_dir ('' = contract-<time>)")
    camera_names: tuple[str, ...] = param((), "cameras to record, by name", array_type=str)
    camera_topics: tuple[str, ...] = param(
        (),
        "one topic per camera name (Image; CompressedImage when it ends in /compressed)",
        array_type=str,
    )
    camera_buffer_s: float = param(
        1.0,
        "seconds of frames kept per camera to match events that are processed late",
        min_value=0.0,
        max_value=10.0,
    )
    flush_interval_s: float = param(
        0.5,
        "longest time written messages stay in memory before they reach the file",
        min_value=0.0,
    )

    def check(self) -> None:
        """What one parameter's domain cannot say; ParameterError naming the parameter."""
        from rclpy.exceptions import InvalidNamespaceException
        from rclpy.validate_namespace import validate_namespace

        try:
            validate_namespace(self.namespace)
        except InvalidNamespaceException as exc:
            raise ParameterError(
                "namespace", self.namespace, "must be an absolute ROS namespace like '/robokernel'"
            ) from exc
        if not self.trace_dir:
            raise ParameterError("trace_dir", self.trace_dir, "must be a non-empty folder path")

    def check_cameras(self) -> None:
        """One topic per camera name, distinct names mapping to distinct bag topics."""
        names, topics = list(self.camera_names), list(self.camera_topics)
        if len(names) != len(topics):
            raise ParameterError(
                "camera_topics", topics, f"must have one topic per camera name ({names})"
            )
        if not all(names) or len(set(names)) != len(names):
            raise ParameterError("camera_names", names, "must be distinct non-empty names")
        bag_topics = [camera_topic(n) for n in names]
        if len(set(bag_topics)) != len(bag_topics):
            raise ParameterError(
                "camera_names",
                names,
                f"must map to distinct bag topics (they map to {bag_topics})",
            )


class BagRecorderNode(Node):
    """See the module docstring."""

    def __init__(self, node_name: str = "bag_recorder", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        params = declare_params(self, RecorderParams)
        params.check()
        self.sink: EpisodeBagMirror | None = None
        self.contract_recorder: Any = None
        if params.contract_file:
            self._record_contract(params)
            return
        params.check_cameras()
        self.sink = EpisodeBagMirror(
            Path(params.trace_dir), storage=params.storage, flush_interval_s=params.flush_interval_s
        )
        self.frames_written: dict[str, int] = {}  # this episode's, per camera
        self.dropped: dict[str, int] = {}  # frames named by events but not recorded
        self.late = 0  # frames newer than their event (the recorder fell behind the buffer)
        self._buffer_ns = round(params.camera_buffer_s * 1e9)
        # camera -> (receipt ns, message), oldest first; decoded only when written
        self._frames: dict[str, deque[tuple[int, Any]]] = {
            n: deque(maxlen=_MAX_FRAMES) for n in params.camera_names
        }
        self._decoded: dict[str, tuple[Any, np.ndarray | None]] = {}  # camera -> (msg, array)
        self._t0_ns = 0  # receipt of episode.start
        self._skipped_run: str | None = None
        self._warned: set[str] = set()
        self._camera_subs: list[tuple[str, Any]] = []  # (camera, subscription)
        self._receiving: set[str] = set()  # cameras whose first frame came
        self._subscribe(params)
        # Built now, not on the first episode.start: a stall there delays the events past
        # the frames they need (the bag's typestore takes 0.2-1 s to build).
        bag_types.typestore()
        if params.camera_names:
            import PIL.Image  # noqa: F401

            import robokernel_ros.ros.wire  # noqa: F401
        cameras = zip(params.camera_names, params.camera_topics, strict=True)
        self.get_logger().info(
            f"recording {params.namespace.rstrip('/')}/events"
            + "".join(f", camera {n} <- {t}" for n, t in cameras)
            + f" to {params.trace_dir}/<run_id>/bag ({params.storage})"
        )

    def _subscribe(self, params: RecorderParams) -> None:
        """The runner's events and each camera's topic."""
        from rclpy.event_handler import SubscriptionEventCallbacks
        from rclpy.exceptions import InvalidTopicNameException
        from sensor_msgs.msg import CompressedImage, Image

        from robokernel_interfaces.msg import KernelEvent

        self.create_subscription(
            KernelEvent,
            f"{params.namespace.rstrip('/')}/events",
            self._on_event,
            EVENTS_QOS,
            event_callbacks=SubscriptionEventCallbacks(matched=self._on_events_matched),
        )
        for name, topic in zip(params.camera_names, params.camera_topics, strict=True):
            msg_type = CompressedImage if is_compressed_topic(topic) else Image
            try:
                sub = self.create_subscription(
                    msg_type,
                    topic,
                    lambda msg, info, n=name: self._on_frame(n, msg, info),
                    CAMERA_QOS,
                )
            except InvalidTopicNameException as exc:
                raise ParameterError(
                    "camera_topics",
                    list(params.camera_topics),
                    f"{topic!r} is not a valid topic name ({exc})",
                ) from exc
            self._camera_subs.append((name, sub))

    def _record_contract(self, params: RecorderParams) -> None:
        """Contract mode (see the module docstring)."""
        from robokernel_ros.contract import ContractError, load_contract
        from robokernel_ros.ros.contract_recorder import ContractRecorder

        bag_name, contract_file = params.bag_name, params.contract_file
        name = bag_name or time.strftime("contract-%Y%m%d-%H%M%S")
        path = Path(params.trace_dir) / name
        if "/" in name or name in (".", ".."):
            raise ParameterError("bag_name", bag_name, "must be a folder name (no '/')")
        if path.exists():
            raise ParameterError("bag_name", name, f"{path} exists already: give another")
        try:
            contract = load_contract(contract_file)
            self.contract_recorder = ContractRecorder(
                self,
                contract,
                path,
                storage=params.storage,
                flush_interval_s=params.flush_interval_s,
            )
        except (ContractError, ValueError) as exc:
            raise ParameterError("contract_file", contract_file, str(exc)) from None
        self.get_logger().info(
            f"recording the {len(self.contract_recorder.topics)} topics of {contract_file} to "
            f"{path} ({params.storage}): "
            + ", ".join(f"{t} ({k})" for t, k in self.contract_recorder.topics.items())
        )

    def _on_events_matched(self, status: Any) -> None:
        # Events published before a runner is matched are lost (volatile): say when it is.
        self.get_logger().info(f"events: {status.current_count} publisher(s) matched")

    # -- cameras ------------------------------------------------------------------------

    def _on_frame(self, camera: str, msg: Any, info: Any) -> None:
        frames = self._frames[camera]
        received = _received_ns(info)
        if camera not in self._receiving:
            self._receiving.add(camera)
            self.get_logger().info(f"camera {camera!r}: first frame received")
        frames.append((received, msg))
        while len(frames) > 1 and received - frames[0][0] > self._buffer_ns:
            frames.popleft()

    def _take_received_frames(self) -> None:
        """Take every frame the middleware has received and the executor not handed over.

        The executor takes one message per ready subscription in turn, the events' first:
        after a stall of this node, an observation event was processed while the frames
        received before it still waited in their reader's history, and it was given an
        older frame, or none (its camera dropped) at an episode's start."""
        from rclpy.exceptions import InvalidHandle

        for camera, sub in self._camera_subs:
            while True:
                try:
                    with sub.handle:  # as the executor takes a message (rclpy.executors)
                        taken = sub.handle.take_message(sub.msg_type, sub.raw)
                except InvalidHandle:  # destroyed: the node is going away
                    break
                if taken is None:
                    break
                self._on_frame(camera, *taken)

    def _frame(self, camera: str, arrival_ns: int) -> tuple[np.ndarray | None, str]:
        """The frame of `camera` to write for an event received at `arrival_ns`: the
        latest received before it (the recorder may take the event later than that)."""
        frames = self._frames.get(camera)
        if frames is None:
            return None, f"not in camera_names {sorted(self._frames)}"
        if not frames:
            return None, "no frame received on its topic yet"
        msg = None
        for received, candidate in reversed(frames):
            if received <= arrival_ns:
                msg = candidate
                break
        if msg is None:  # every buffered frame came after the event: the closest one
            msg = frames[0][1]
            self.late += 1
            if "late" not in self._warned:
                self._warned.add("late")
                self.get_logger().warning(
                    f"camera {camera!r}: the recorder runs more than camera_buffer_s behind "
                    "the events; frames newer than their observation are written"
                )
        cached = self._decoded.get(camera)
        if cached is not None and cached[0] is msg:  # the camera is slower than the loop
            array = cached[1]
        else:
            try:
                array = _decode(msg)
            except ValueError as exc:
                array = None
                self.get_logger().warning(f"camera {camera!r}: {exc}", throttle_duration_sec=5.0)
            self._decoded[camera] = (msg, array)
        if array is None:
            return None, "its frame could not be decoded"
        return array, ""

    # -- events -------------------------------------------------------------------------

    def _on_event(self, msg: Any, info: Any) -> None:
        arrival = _received_ns(info)
        try:
            record = json.loads(msg.data_json)
        except json.JSONDecodeError:
            self.get_logger().warning(f"event seq {msg.seq}: data_json is not JSON; skipped")
            return
        if not isinstance(record, dict):
            record = {}
        if record.keys() >= _LINE_KEYS:  # a whole line (a mirrored bag played back)
            data = record["data"] if isinstance(record["data"], dict) else {}
            t = float(record.get("t", 0.0))
            wall = record.get("wall")
        else:  # the runner's form: the data, with the clock in the stamp
            data = record
            t = msg.stamp.sec + msg.stamp.nanosec * 1e-9
            wall = None
        if msg.kind == EPISODE_START:
            self._t0_ns = arrival
            self.frames_written, self.dropped, self.late, self._warned = {}, {}, 0, set()
        elif self.sink.current is None:  # a bag starts at episode.start
            if msg.run_id != self._skipped_run:
                self._skipped_run = msg.run_id
                self.get_logger().warning(
                    f"run {msg.run_id!r}: its episode.start was not received (the recorder "
                    "joined mid-episode); this episode is not recorded"
                )
            return
        if msg.kind == OBSERVATION and isinstance(data.get("images"), dict):
            data = {**data, "images": self._images(data["images"], int(msg.step), arrival)}
            if not data["images"]:
                del data["images"]
        if not isinstance(wall, int | float):
            wall = (arrival - self._t0_ns) * 1e-9
        self.sink(Event(msg.kind, int(msg.step), data, t, float(wall), int(msg.seq), msg.run_id))
        if msg.kind == EPISODE_END:
            written = ", ".join(f"{c} {n}" for c, n in self.frames_written.items()) or "none"
            dropped = ", ".join(f"{c} {n}" for c, n in self.dropped.items())
            self.get_logger().info(
                f"episode {msg.run_id}: {self.sink.last_bag_path}; frames: {written}"
                + (f"; not recorded: {dropped}" if dropped else "")
                + (f"; {self.late} newer than their observation" if self.late else "")
            )

    def _images(self, named: dict[str, Any], step: int, arrival_ns: int) -> dict[str, np.ndarray]:
        """The frames to write for the cameras an observation names (see the docstring)."""
        images: dict[str, np.ndarray] = {}
        self._take_received_frames()
        for camera in named:
            array, why = self._frame(camera, arrival_ns)
            if array is None:
                self.dropped[camera] = self.dropped.get(camera, 0) + 1
                if camera not in self._warned:  # once per camera and episode
                    self._warned.add(camera)
                    self.get_logger().warning(
                        f"camera {camera!r} (step {step}): {why}; not recorded"
                    )
                continue
            images[camera] = array
            self.frames_written[camera] = self.frames_written.get(camera, 0) + 1
        return images

    def destroy_node(self) -> None:
        # (also called on a node whose constructor refused a parameter: nothing built yet)
        if getattr(self, "contract_recorder", None) is not None:
            self.contract_recorder.close()  # a complete bag (metadata.yaml)
        if getattr(self, "sink", None) is not None:
            self.sink.close()  # an episode cut short keeps a complete bag (metadata.yaml)
        super().destroy_node()


def _received_ns(info: Any) -> int:
    """When the middleware received a message (rclpy's MessageInfo; the host's clock)."""
    return int(info["received_timestamp"] or info["source_timestamp"] or time.time_ns())


def _decode(msg: Any) -> np.ndarray:
    """A camera message as the HxWx3 / HxW uint8 array the mirror writes (rgb8 / mono8)."""
    from robokernel_ros.ros.wire import image_from_msg

    array = image_from_msg(msg)  # bgr8 -> RGB and compressed decoded, as the runner reads them
    if array.ndim == 3 and array.shape[2] == 4:
        array = array[:, :, :3]
    if (
        array.dtype != np.uint8
        or array.ndim not in (2, 3)
        or array.ndim == 3
        and array.shape[2] != 3
    ):
        raise ValueError(f"frame of shape {array.shape} dtype {array.dtype} is not HxW(x3) uint8")
    return np.ascontiguousarray(array)


def main(args: Sequence[str] | None = None) -> int:
    return run_node(BagRecorderNode, args=args)


if __name__ == "__main__":
    exit_main(main)
