"""The rosbag2 mirror: an EventBus subscriber that writes each episode to a bag as it runs.

    mirror = BagMirror(run_dir / "bag")          # or BagMirror.for_run_dir(run_dir)
    unsubscribe = mirror.attach(bus)              # closes itself after episode.end
    ...
    mirror.close()                                # idempotent; also when the episode failed

Topics (names fixed by the project; `prefix` is "/robokernel"):

    <prefix>/events              robokernel_interfaces/msg/KernelEvent   every kernel event, in order;
                                 data_json is the run directory's events.jsonl line of the event
    <prefix>/joint_states        sensor_msgs/msg/JointState              observed joints (obs
                                 "joint_positions"/"joint_velocities"/"joint_efforts")
    <prefix>/action              sensor_msgs/msg/JointState              the executed action of every step:
                                 name = action keys, position = values (in the env's control space),
                                 header.frame_id = "hold" for a hold, "teleop" for the
                                 teleop source's command while correcting, "policy" otherwise
    <prefix>/action_chunk        robokernel_interfaces/msg/ActionChunk   every merged chunk
    <prefix>/camera/<name>/image sensor_msgs/msg/Image (rgb8/mono8)      recorded camera frames
    <prefix>/shield/intervention robokernel_interfaces/msg/ShieldIntervention
    <prefix>/operator            std_msgs/msg/String                     operator command (stop, estop, ...)
    <prefix>/operator/verdict    robokernel_interfaces/msg/Verdict

Every message is stamped with the episode clock (Event.t: sim time or robot time), and
the bag's log time is the same, so playback is in step. metadata.yaml carries the run's
metadata (the meta.json of the run directory) in custom_data.

The bag is written through rosbags' Writer API (`add_connection`, `write`,
`set_custom_data`, `close`) on `recording.bag_writer.BagWriter`, rosbags' Writer with its
MCAP per-message path in fewer calls (the same bytes, tested); metadata.yaml is written
once, at close (a bag without it is what `recover` reads).

Memory is bounded: messages are serialised as they arrive and rosbags closes the MCAP
chunk past 1 MiB; the mirror closes it and flushes the file at least every
`flush_interval_s` (sqlite3: commits), so a process killed mid-episode leaves every
flushed chunk readable (`robokernel_ros.recording.recover`). rosbags has no public flush:
`bag_writer.flush_storage` is the one place that reaches into its storage.

Cost: messages are serialised by the hand-written CDR encoders of `recording.cdr` (byte for
byte what rosbags' serialize_cdr writes, without building message objects) through
per-topic templates (a KernelEvent layout per kind; a JointState layout per name list
and column sizes, so the names are serialised once; an ActionChunk layout per key list
and chunk size, its rows packed in one call); the KernelEvent's data_json is the
trace's own line (`kernel.trace.event_line`: encoded once per event, shared with the
run directory's writer). Each topic's message definition and hash are generated once
per process and given to `add_connection`.

Why one module of ~650 lines: the templates, the topics and the mirror that uses them
are one mapping (event kind -> topic -> message layout); the writer process, the reader
and recovery are modules of their own.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import StoragePlugin

from ..kernel.events import (
    ACTION,
    CHUNK_MERGE,
    EPISODE_END,
    EPISODE_START,
    OBSERVATION,
    OPERATOR_VERDICT,
    SAFETY_INTERVENTION,
    Event,
)
from ..kernel.trace import IMAGES_DIR, dumps_text, event_line, line_with_data, to_jsonable
from . import cdr
from . import types as T
from .bag_writer import BagWriter, flush_storage, message_definition

_log = logging.getLogger(__name__)

BAG_DIR = "bag"  # a mirrored run directory holds its bag at <run_dir>/bag/
DEFAULT_PREFIX = "/robokernel"
STORAGES = ("mcap", "sqlite3")
META_KEY = "robokernel.meta"  # custom_data key: the run's meta.json as JSON
FORMAT_KEY = "robokernel.format"
FORMAT_VERSION = "1"


def _qos(reliable: bool, transient_local: bool = False, depth: int = 10) -> Qos:
    zero = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST,
        depth,
        QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        QosDurability.TRANSIENT_LOCAL if transient_local else QosDurability.VOLATILE,
        zero,
        zero,
        QosLiveliness.AUTOMATIC,
        zero,
        False,
    )


QOS_RELIABLE = _qos(True, depth=100)
QOS_SENSOR = _qos(False, depth=5)  # rclpy's qos_profile_sensor_data
QOS_LATCHED = _qos(True, transient_local=True, depth=1)


def camera_folder(camera: str) -> str:
    """The folder name the run directory uses for a camera (kernel.trace's rule)."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(camera)) or "camera"


def image_relative_path(camera: str, step: int) -> str:
    """The run directory's relative path of a frame: images/<camera>/<step:06d>.npy."""
    return f"{IMAGES_DIR}/{camera_folder(camera)}/{step:06d}.npy"


def camera_topic(camera: str, prefix: str = DEFAULT_PREFIX) -> str:
    name = "".join(ch if (ch.isalnum() or ch == "_") else "_" for ch in str(camera)) or "camera"
    if name[0].isdigit():
        name = "c" + name
    return f"{prefix}/camera/{name}/image"


def bag_path_for(run_dir: str | Path) -> Path:
    """Where a mirrored run directory keeps its bag: <run_dir>/bag."""
    return Path(run_dir) / BAG_DIR


class BagMirror:
    """Writes one episode's events to a rosbag2 as they are published.

    path: the bag folder to create (it must not exist; its parent is created).
    storage: "mcap" (default) or "sqlite3".
    flush_interval_s: the longest time written messages stay in memory before they
        reach the file (the MCAP chunk is closed and flushed; sqlite3 commits).
    prefix: the topic namespace ("/robokernel").
    image_loader: for events whose images are already relative paths (a loaded run
        directory being converted), a callable relative_path -> array; None skips them.

    A disk error is logged once and stops the mirror; the episode goes on.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        storage: str = "mcap",
        flush_interval_s: float = 0.5,
        prefix: str = DEFAULT_PREFIX,
        image_loader: Callable[[str], np.ndarray] | None = None,
    ) -> None:
        if not isinstance(path, str | Path) or str(path) == "":
            raise ValueError(f"path={path!r}: must be a non-empty path")
        if storage not in STORAGES:
            raise ValueError(f"storage={storage!r}: must be one of {', '.join(STORAGES)}")
        if not (
            isinstance(flush_interval_s, int | float)
            and not isinstance(flush_interval_s, bool)
            and flush_interval_s >= 0
        ):
            raise ValueError(f"flush_interval_s={flush_interval_s!r}: must be a number >= 0")
        if not (isinstance(prefix, str) and prefix.startswith("/") and not prefix.endswith("/")):
            raise ValueError(
                f"prefix={prefix!r}: must be an absolute ROS namespace like '/robokernel'"
            )
        self.path = Path(path)
        if self.path.exists():
            raise ValueError(f"path={str(path)!r}: already exists (a bag is never overwritten)")
        self.storage = storage
        self.flush_interval_s = float(flush_interval_s)
        self.prefix = prefix
        self.image_loader = image_loader
        self.failed = False
        self.closed = False
        self.events_written = 0
        self.messages_written = 0
        self._lock = threading.Lock()
        self._meta: dict[str, Any] = {}
        self._connections: dict[str, Any] = {}
        self._run_id = ""  # the run_id of the cached KernelEvent layouts
        self._run_id_bytes = b""
        self._event_layouts: dict[str, tuple[Any, bytes]] = {}  # kind -> layout
        self._joint_states: tuple[Any, cdr.JointStateTemplate] | None = None
        self._actions: dict[str, tuple[Any, cdr.JointStateTemplate]] = {}  # by frame_id
        self._chunk_conn: Any = None
        self._chunk_raw_keys: list[Any] = []
        self._chunk_keys: tuple[str, ...] = ()
        self._unsubscribe: Callable[[], None] | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = BagWriter(self.path, version=9, storage_plugin=plugin)
        self._writer.open()
        self._write_message = self._writer.write
        self._writer.set_custom_data(FORMAT_KEY, FORMAT_VERSION)
        self._events_topic = f"{prefix}/events"
        self._joint_states_topic = f"{prefix}/joint_states"
        self._action_topic = f"{prefix}/action"
        self._chunk_topic = f"{prefix}/action_chunk"
        self._events = self._connection(self._events_topic, T.KERNEL_EVENT, QOS_RELIABLE)
        self._last_flush = time.monotonic()

    @classmethod
    def for_run_dir(cls, run_dir: str | Path, **kwargs: Any) -> BagMirror:
        """A mirror writing to <run_dir>/bag."""
        return cls(bag_path_for(run_dir), **kwargs)

    # -- subscription -------------------------------------------------------------

    def attach(self, bus: Any) -> Callable[[], None]:
        """Subscribe to every event of `bus`; returns the unsubscribe callable.

        The mirror closes itself (writing metadata.yaml) after episode.end.
        """
        self._unsubscribe = bus.subscribe(self.write)
        return self._unsubscribe

    def __call__(self, event: Event) -> None:
        self.write(event)

    def __enter__(self) -> BagMirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------

    def _connection(self, topic: str, msgtype: str, qos: Qos) -> Any:
        conn = self._connections.get(topic)
        if conn is None:
            msgdef, rihs01 = message_definition(msgtype)
            conn = self._writer.add_connection(
                topic, msgtype, msgdef=msgdef, rihs01=rihs01, offered_qos_profiles=[qos]
            )
            self._connections[topic] = conn
        return conn

    def _put(self, topic: str, msgtype: str, qos: Qos, data: bytes, ns: int) -> None:
        """Write one serialised message (CDR bytes of `msgtype`) to `topic`."""
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._connection(topic, msgtype, qos)
        self._write_message(conn, ns, data)
        self.messages_written += 1

    def write(self, event: Event) -> None:
        """Mirror one event (a bus callback)."""
        if self.failed or self.closed:
            return
        try:
            with self._lock:
                if self.closed:
                    return
                self._write(event)
                now = time.monotonic()
                if now - self._last_flush >= self.flush_interval_s:
                    self._flush()
                    self._last_flush = now
        except OSError:
            self.failed = True
            _log.exception(
                "bag mirror %s failed; the rest of the episode is not mirrored", self.path
            )
            return
        if event.kind == EPISODE_END:
            self.close()

    def _write(self, event: Event) -> None:
        t = event.t
        ns = round((t if type(t) is float else float(t)) * 1e9)
        if ns < 0:
            ns = 0
        sec, nanosec = divmod(ns, 1_000_000_000)
        data = event.data
        kind = event.kind
        images: Mapping[str, Any] | None = None
        if kind == OBSERVATION and data.get("images"):
            images = data["images"]
            data = {
                **data,
                "images": {str(c): self._image_path(c, v, event.step) for c, v in images.items()},
            }
            line = line_with_data(event, data)
        else:
            line = event_line(event)  # the run directory's line: encoded once per event
        if event.run_id != self._run_id:  # the layouts hold the run_id
            self._run_id = event.run_id
            self._run_id_bytes = event.run_id.encode()
            self._event_layouts = {}
        layout = self._event_layouts.get(kind)
        if layout is None:
            template = cdr.KernelEventTemplate(self._run_id_bytes)
            layout = self._event_layouts[kind] = template.layout(kind)
        pack, kind_bytes = layout
        size = len(line)
        seq = event.seq
        if type(seq) is not int:
            seq = int(seq)
        step = event.step
        if type(step) is not int:
            step = int(step)
        run_id = self._run_id_bytes
        if line.endswith(b"\n"):  # the newline becomes the NUL
            head = pack(cdr.HEADER, sec, nanosec, len(run_id) + 1, run_id, seq if seq > 0 else 0,
                        len(kind_bytes) + 1, kind_bytes, step, size)  # fmt: skip
            msg = b"".join((head, line[:-1], b"\0"))
        else:
            head = pack(cdr.HEADER, sec, nanosec, len(run_id) + 1, run_id, seq if seq > 0 else 0,
                        len(kind_bytes) + 1, kind_bytes, step, size + 1)  # fmt: skip
            msg = b"".join((head, line, b"\0"))
        self._write_message(self._events, ns, msg)
        self.messages_written += 1
        self.events_written += 1

        if kind == OBSERVATION:
            self._joint_state(event.data.get("obs"), sec, nanosec, ns)
            if images:
                for camera, image in images.items():
                    self._image(str(camera), image, event.step, (sec, nanosec), ns)
        elif kind == ACTION:
            self._action(data, sec, nanosec, ns)
        elif kind == CHUNK_MERGE:
            self._chunk(event, data, sec, nanosec, ns)
        elif kind == SAFETY_INTERVENTION:
            self._intervention(data, (sec, nanosec), ns)
        elif kind.startswith("operator."):
            self._operator(kind, data, (sec, nanosec), ns)
        elif kind == EPISODE_START:
            self._meta = {
                "run_id": event.run_id or str(data.get("run_id", "")),
                **to_jsonable(data),
            }
        elif kind == EPISODE_END:
            self._meta.update(to_jsonable(data))

    def _image_path(self, camera: Any, value: Any, step: int) -> str:
        return value if isinstance(value, str) else image_relative_path(str(camera), step)

    def _joint_state(self, obs: Any, sec: int, nanosec: int, ns: int) -> None:
        if type(obs) is not dict and not isinstance(obs, Mapping):  # dict: the fast common case
            return
        positions = obs.get("joint_positions")
        if (type(positions) is not dict and not isinstance(positions, Mapping)) or not positions:
            return
        names = tuple(positions)
        velocity = obs.get("joint_velocities")
        if velocity is not None:
            velocity = _column(velocity, names)
        else:
            velocity = ()
        effort = obs.get("joint_efforts")
        effort = () if effort is None else _column(effort, names)
        found = self._joint_states
        if found is None or found[1].names != names:
            conn = self._connection(self._joint_states_topic, T.JOINT_STATE, QOS_SENSOR)
            found = self._joint_states = (conn, cdr.JointStateTemplate("", names))
        conn, template = found
        try:
            msg = template.pack(sec, nanosec, positions.values(), velocity, effort)
        except (struct.error, TypeError):  # not all plain numbers: convert as float() does
            msg = template.pack(
                sec,
                nanosec,
                [float(positions[n]) for n in names],
                [float(v) for v in velocity],
                [float(v) for v in effort],
            )
        self._write_message(conn, ns, msg)
        self.messages_written += 1

    def _image(self, camera: str, image: Any, step: int, stamp: tuple[int, int], ns: int) -> None:
        if isinstance(image, str):
            if self.image_loader is None:
                return
            try:
                image = self.image_loader(image)
            except OSError:
                _log.warning(
                    "camera %s step %d: frame %s not readable; skipped", camera, step, image
                )
                return
        array = np.ascontiguousarray(np.asarray(image))
        if (
            array.dtype != np.uint8
            or array.ndim not in (2, 3)
            or (array.ndim == 3 and array.shape[2] not in (1, 3))
        ):
            _log.warning(
                "camera %s: frame of shape %s dtype %s is not HxW(x1|x3) uint8; skipped",
                camera,
                array.shape,
                array.dtype,
            )
            return
        data = cdr.image(*stamp, camera, array)
        self._put(camera_topic(camera, self.prefix), T.IMAGE, QOS_SENSOR, data, ns)

    def _action(self, data: Mapping[str, Any], sec: int, nanosec: int, ns: int) -> None:
        action = data.get("action")
        if type(action) is not dict and not isinstance(action, Mapping):
            return
        frame_id = (
            "hold"
            if data.get("hold", False)
            else "teleop"
            if data.get("intervention", False)  # docs/operator.md: the operator's command
            else "policy"
        )
        names = tuple(action)
        found = self._actions.get(frame_id)
        if found is None or found[1].names != names:
            conn = self._connection(self._action_topic, T.JOINT_STATE, QOS_RELIABLE)
            found = self._actions[frame_id] = (conn, cdr.JointStateTemplate(frame_id, names))
        conn, template = found
        try:
            msg = template.pack(sec, nanosec, action.values())
        except (struct.error, TypeError):  # not all plain numbers: NaN for what is not one
            msg = template.pack(sec, nanosec, [_float(v) for v in action.values()])
        self._write_message(conn, ns, msg)
        self.messages_written += 1

    def _chunk(
        self, event: Event, data: Mapping[str, Any], sec: int, nanosec: int, ns: int
    ) -> None:
        raw_keys = data.get("keys") or ()
        if raw_keys == self._chunk_raw_keys:  # the same key list as the last chunk's
            keys = self._chunk_keys
        else:
            keys = tuple(k if type(k) is str else str(k) for k in raw_keys)
            self._chunk_raw_keys, self._chunk_keys = list(raw_keys), keys
        rows = data.get("actions")
        if isinstance(rows, np.ndarray):
            values: Any = np.asarray(rows, dtype=np.float64).reshape(-1).tolist()
            horizon = len(rows) if rows.ndim else 0
        else:
            rows = rows or []
            horizon = len(rows)
            values = None
            if horizon == 1 and type(rows[0]) is list:
                values = rows[0]
            elif all(type(row) is list or type(row) is tuple for row in rows):
                values = [v for row in rows for v in row]
        obs_step = max(0, int(data.get("obs_step", event.step) or 0))
        inference = data.get("inference_s")
        if type(inference) is not float:
            inference = _float(inference)
        conn = self._chunk_conn
        if conn is None:
            conn = self._chunk_conn = self._connection(self._chunk_topic, T.ACTION_CHUNK, QOS_RELIABLE)  # fmt: skip
        args = (sec, nanosec, event.run_id, obs_step, keys, horizon)
        try:
            if values is None:
                raise TypeError
            msg = cdr.action_chunk_of_values(*args, values, inference)
        except (struct.error, TypeError, OverflowError):  # as numpy converts them
            msg = cdr.action_chunk_of_values(*args, _flat_rows(rows, list(keys)).tolist(), inference)  # fmt: skip
        self._write_message(conn, ns, msg)
        self.messages_written += 1

    def _intervention(self, data: Mapping[str, Any], stamp: tuple[int, int], ns: int) -> None:
        detail = {
            k: v for k, v in data.items() if k not in ("guard", "key", "value", "limit", "action")
        }
        msg = cdr.shield_intervention(
            *stamp,
            guard=str(data.get("guard", "")),
            joint=str(data.get("key") or ""),
            value=_float(data.get("value")),
            limit=_float(data.get("limit")),
            action=str(data.get("action", "")),
            detail=dumps_text(detail) if detail else "",
        )
        self._put(
            f"{self.prefix}/shield/intervention", T.SHIELD_INTERVENTION, QOS_RELIABLE, msg, ns
        )

    def _operator(
        self, kind: str, data: Mapping[str, Any], stamp: tuple[int, int], ns: int
    ) -> None:
        command = kind.split(".", 1)[1]
        self._put(f"{self.prefix}/operator", T.STRING, QOS_RELIABLE, cdr.string(command), ns)
        if kind == OPERATOR_VERDICT:
            msg = cdr.verdict(str(data.get("outcome", "")), str(data.get("note", "") or ""))
            self._put(f"{self.prefix}/operator/verdict", T.VERDICT, QOS_LATCHED, msg, ns)

    # -- durability -----------------------------------------------------------------

    def _flush(self) -> None:
        if self._writer.storage is not None:
            flush_storage(self._writer.storage)

    def flush(self) -> None:
        """Push everything written so far to the file."""
        with self._lock:
            if not self.closed and not self.failed:
                self._flush()
                self._last_flush = time.monotonic()

    def close(self) -> None:
        """Finish the bag (index, metadata.yaml); idempotent. Unsubscribes when attached."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._unsubscribe is not None:
                self._unsubscribe()
            try:
                if self._meta:
                    self._writer.set_custom_data(META_KEY, dumps_text(self._meta))
                self._writer.set_custom_data("robokernel.events", str(self.events_written))
                self._writer.close()
            except OSError:
                self.failed = True
                _log.exception("closing bag %s failed", self.path)


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _column(values: Any, names: tuple[Any, ...]) -> Any:
    """The values of `names` from a mapping holding all of them, else an empty column."""
    if type(values) is dict:
        if tuple(values) == names:  # the common case: the positions' keys, in order
            return values.values()
    elif values is None or not isinstance(values, Mapping):
        return ()
    if tuple(values) == names:
        return values.values()
    if all(n in values for n in names):
        return [values[n] for n in names]
    return ()


def _flat_rows(rows: Any, keys: list[str]) -> np.ndarray:
    """An action chunk's rows (mappings by key, or sequences) flattened row-major."""
    if not any(isinstance(row, Mapping) for row in rows):
        try:
            array = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            pass
        else:
            if array.ndim == 2 or array.size == 0:
                return array.reshape(-1)
    flat: list[float] = []
    for row in rows:
        if isinstance(row, Mapping):
            flat.extend(_float(row.get(k)) for k in keys)
        else:
            flat.extend(_float(v) for v in row)
    return np.asarray(flat, dtype=np.float64)


def mirror_trace(trace: Any, path: str | Path | None = None, **kwargs: Any) -> Path:
    """Write a bag of an already recorded episode (a loaded Trace or a run directory).

    path: the bag folder (default <run_dir>/bag). Frames referenced by the run
    directory are read back from it. Returns the bag path.
    """
    if isinstance(trace, str | Path):
        from ..kernel.trace import load_trace

        trace = load_trace(trace)
    out = Path(path) if path is not None else bag_path_for(trace.path)
    mirror = BagMirror(out, image_loader=trace.image, **kwargs)
    try:
        for event in trace.events:
            mirror.write(event)
    finally:
        mirror.close()
    return out


class EpisodeBagMirror:
    """Mirrors every episode published on a bus to <root>/<run_id>/bag.

    For a runner that records to a TraceStore: give it the store's root, and each
    episode's bag lands inside its run directory (the run directory's name is the
    episode's run_id). Attach once; it opens a BagMirror on each episode.start and
    closes it after episode.end.

        sink = EpisodeBagMirror(store.root)          # storage="sqlite3" on request
        sink.attach(runner_bus)
        record = runner.run()
        sink.last_bag_path                           # <root>/<record.run_id>/bag
    """

    def __init__(self, root: str | Path, *, storage: str = "mcap", **mirror_kwargs: Any) -> None:
        if not isinstance(root, str | Path) or str(root) == "":
            raise ValueError(f"root={root!r}: must be a non-empty path")
        if storage not in STORAGES:
            raise ValueError(f"storage={storage!r}: must be one of {', '.join(STORAGES)}")
        self.root = Path(root)
        self.storage = storage
        self.mirror_kwargs = mirror_kwargs
        self.current: BagMirror | None = None
        self.bag_paths: list[Path] = []
        self.failed = False  # a mirror of one of its episodes hit a storage error
        self._lock = threading.Lock()

    @property
    def last_bag_path(self) -> Path | None:
        return self.bag_paths[-1] if self.bag_paths else None

    def attach(self, bus: Any) -> Callable[[], None]:
        return bus.subscribe(self)

    def __call__(self, event: Event) -> None:
        if event.kind == EPISODE_START:
            with self._lock:
                if self.current is not None:
                    self.current.close()  # the previous episode never ended
                from ..kernel.trace import new_run_id

                run_id = event.run_id or str(event.data.get("run_id") or "") or new_run_id()
                path = bag_path_for(self.root / run_id)
                self.current = BagMirror(path, storage=self.storage, **self.mirror_kwargs)
                self.bag_paths.append(path)
        mirror = self.current
        if mirror is not None:
            mirror.write(event)
            if event.kind == EPISODE_END:
                self.failed = self.failed or mirror.failed
                self.current = None

    def close(self) -> None:
        with self._lock:
            if self.current is not None:
                self.current.close()
                self.failed = self.failed or self.current.failed
                self.current = None
