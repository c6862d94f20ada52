"""The `remote` policy provider: a policy hosted by a policy_server node, reached over ROS 2.

    create_policy("remote", namespace="/robokernel", ready_timeout_s=10.0)

The provider publishes each observation on `<ns>/observation` and waits for the
`ActionChunk` on `<ns>/action_chunk` whose `run_id` and `obs_step` answer it (mode
"topic", the default), or calls `<ns>/get_action_chunk` (mode "service", for
synchronous evaluation). Chunks that answer an older request are dropped, so the
kernel's aligned merge always works from the observation step the chunk was computed
from. The server's heartbeat (`<ns>/policy_server/status`, `PolicyServerStatus`) is
watched: creating the policy against a server that is not ready is refused with the
server's own reason, and a chunk that does not come within `chunk_timeout_s` raises
TimeoutError (the kernel's hold watchdog usually ends the episode first).

This module also holds the wire format both sides share: observation dicts to and
from `Observation` messages, action chunks to and from `ActionChunk` messages.

ROS plumbing: the provider uses one private rclpy context with a single-threaded
executor thread for the whole process (the runner node included: rclpy's
MultiThreadedExecutor delays chunks by tens of milliseconds in this build), shared by
every remote policy and released with the last.
"""

from __future__ import annotations

import array
import logging
import math
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robokernel_ros.policies.base import Action, ActionRows, Policy, register_provider

_log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "/robokernel"
STATUS_TOPIC = "policy_server/status"
OBSERVATION_TOPIC = "observation"
CHUNK_TOPIC = "action_chunk"
CHUNK_SERVICE = "get_action_chunk"
#: What a policy server's status detail says when its policy could not be loaded.
LOAD_FAILED = "failed"

# --- wire format ----------------------------------------------------------------------------

_IMAGE_ENCODINGS = {
    ("uint8", 3): "rgb8",
    ("uint8", 1): "mono8",
    ("float32", 1): "32FC1",
    ("uint16", 1): "16UC1",
}
_ENCODING_DTYPES = {
    "rgb8": (np.uint8, 3),
    "bgr8": (np.uint8, 3),
    "mono8": (np.uint8, 1),
    "32FC1": (np.float32, 1),
    "16UC1": (np.uint16, 1),
    "rgba8": (np.uint8, 4),
}


def _image_msg(name: str, image: Any, out: Any = None) -> Any:
    """`image` as a sensor_msgs/Image; `out`: an Image to fill instead of a new one."""
    from sensor_msgs.msg import Image

    array = np.ascontiguousarray(np.asarray(image))
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3:
        raise ValueError(f"image {name!r}: shape {array.shape} is not HxW or HxWxC")
    encoding = _IMAGE_ENCODINGS.get((array.dtype.name, array.shape[2]))
    if encoding is None:
        raise ValueError(
            f"image {name!r}: dtype {array.dtype} with {array.shape[2]} channels has no ROS encoding "
            f"(supported: {sorted(_IMAGE_ENCODINGS)})"
        )
    msg = Image() if out is None else out
    msg.height, msg.width = int(array.shape[0]), int(array.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(array.strides[0])
    msg.data = array.tobytes()
    return msg


def is_compressed_topic(topic: str) -> bool:
    """image_transport's naming: a topic whose last segment is `compressed` carries
    sensor_msgs/CompressedImage."""
    return topic.rstrip("/").endswith("/compressed")


def image_from_compressed(msg: Any) -> np.ndarray:
    """A sensor_msgs/CompressedImage (JPEG, PNG, ...) as an HxWx3 RGB (or HxW grey) uint8
    array. Pillow decodes it (a dependency of matplotlib, so always installed)."""
    import io

    from PIL import Image as PILImage

    try:
        with PILImage.open(io.BytesIO(bytes(msg.data))) as image:
            image = image.convert("L" if image.mode in ("1", "L", "I;16", "I") else "RGB")
            return np.asarray(image)
    except (OSError, SyntaxError) as exc:  # Pillow's errors for bytes it cannot read
        raise ValueError(f"compressed frame (format {msg.format!r}) not decodable: {exc}") from exc


def image_from_msg(msg: Any) -> np.ndarray:
    """A sensor_msgs/Image as an HxWxC (or HxW for one channel) numpy array; a
    CompressedImage is decoded (image_from_compressed)."""
    if not hasattr(msg, "encoding"):
        return image_from_compressed(msg)
    dtype, channels = _ENCODING_DTYPES.get(msg.encoding, (None, None))
    if dtype is None:
        raise ValueError(
            f"image encoding {msg.encoding!r} is not supported (supported: {sorted(_ENCODING_DTYPES)})"
        )
    row = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
    itemsize = np.dtype(dtype).itemsize
    array = (
        row[:, : msg.width * channels * itemsize]
        .copy()
        .view(dtype)
        .reshape(msg.height, msg.width, channels)
    )
    if msg.encoding == "bgr8":
        array = array[:, :, ::-1].copy()
    return array[:, :, 0] if channels == 1 else array


def observation_to_msg(
    observation: Mapping[str, Any],
    *,
    run_id: str,
    step: int,
    instruction: str = "",
    queued_actions: Sequence[Mapping[str, float]] | np.ndarray | None = None,
    queued_keys: Sequence[str] = (),
    delay_steps: int = 0,
    msg: Any = None,
) -> Any:
    """An observation dict as an `Observation` message.

    `joint_positions` / `joint_velocities` ({joint: float}) become the JointState;
    `images` ({camera: array}) the images; any other entry that is a {name: float}
    mapping becomes NamedArrays `<entry>/<name>` and any flat numeric vector a
    NamedArray `<entry>`. Anything else is not sent. `msg`: an Observation to fill
    (every field but the header is set) instead of a new one: a sender that publishes
    at once reuses one, since building the message costs more than filling it.
    """
    if msg is None:
        from robokernel_interfaces.msg import Observation

        msg = Observation()
    msg.run_id = run_id
    msg.step = int(step)
    msg.instruction = instruction or ""
    positions = observation.get("joint_positions") or {}
    velocities = observation.get("joint_velocities") or {}
    names = list(positions)
    joint_state = msg.joint_state
    joint_state.name = names
    # The common case, without a lookup per joint: the velocities name the positions'
    # joints in the same order (or there are none).
    if not velocities or list(velocities) == names:
        joint_state.position = _floats(positions.values())
        joint_state.velocity = _floats(velocities.values())
    else:
        names += [n for n in velocities if n not in positions]
        nan = math.nan
        joint_state.position = _floats([positions.get(n, nan) for n in names])
        joint_state.velocity = _floats([velocities.get(n, nan) for n in names])
    images = observation.get("images")
    if images or len(msg.images):
        images = images or {}
        msg.image_names = [str(n) for n in images]
        # A refilled Observation refills its Image messages too (building one per camera
        # and call is what an idle sender pays most for, after the pixels themselves).
        reuse = list(msg.images) if len(msg.images) == len(images) else [None] * len(images)
        msg.images = [
            _image_msg(str(n), img, out)
            for (n, img), out in zip(images.items(), reuse, strict=True)
        ]
    arrays = []
    for key, value in observation.items():
        if key in _JOINT_AND_IMAGE_KEYS:
            continue
        if isinstance(value, Mapping):
            for sub, item in value.items():
                if isinstance(item, int | float | np.number) and not isinstance(item, bool):
                    arrays.append(_named_array(f"{key}/{sub}", [float(item)]))
        elif isinstance(value, list | tuple | np.ndarray):
            vector = np.asarray(value)
            if vector.ndim == 1 and vector.dtype.kind in "fiu":
                arrays.append(_named_array(str(key), vector.astype(float).tolist()))
    if arrays or len(msg.arrays):
        msg.arrays = arrays
    if queued_actions is not None and len(queued_actions):
        msg.queued_actions = _floats(_queued_to_flat(queued_actions, queued_keys))
    elif len(msg.queued_actions):
        msg.queued_actions = _floats(())
    msg.delay_steps = max(0, int(delay_steps)) if delay_steps else 0
    return msg


_JOINT_AND_IMAGE_KEYS = frozenset(("joint_positions", "joint_velocities", "images"))


def _named_array(name: str, data: list[float]) -> Any:
    from robokernel_interfaces.msg import NamedArray

    return NamedArray(name=name, data=data)


def _floats(values: Iterable[Any]) -> array.array:
    """A float64[] field's value as an array.array('d'), which rosidl's setter stores as
    it is; a value that is not a number goes through float(), which names it. `values`:
    a list or a view (iterated again on that error path)."""
    try:
        return array.array("d", values)
    except TypeError:
        return array.array("d", [float(v) for v in values])


def _queued_to_flat(
    queued: Sequence[Mapping[str, float]] | np.ndarray, keys: Sequence[str]
) -> list[float]:
    if isinstance(queued, np.ndarray):
        return queued.astype(float).ravel().tolist()
    rows = list(queued)
    columns = list(keys) or list(rows[0])
    return [float(row.get(k, math.nan)) for row in rows for k in columns]


def msg_to_observation(msg: Any) -> dict[str, Any]:
    """The observation dict an `Observation` message carries (the inverse of observation_to_msg)."""
    joint_state = msg.joint_state
    names = joint_state.name
    observation: dict[str, Any] = {"joint_positions": _named_floats(names, joint_state.position)}
    if len(joint_state.velocity):
        observation["joint_velocities"] = _named_floats(names, joint_state.velocity)
    if len(msg.images):
        observation["images"] = _images_from_msg(msg)
    _arrays_into(observation, msg.arrays)
    return observation


_MISSING = object()


class ObservationView(MutableMapping):
    """msg_to_observation's dict of an `Observation` message, each entry converted when
    it is first read: a policy that reads only the joints does not pay for the images,
    and one that reads nothing (the mock) for nothing. Iterating, `len`, `==` and
    writing convert everything first; after that it is that dict."""

    __slots__ = ("_msg", "_entries", "_arrays", "_whole")

    def __init__(self, msg: Any) -> None:
        self._msg = msg
        self._entries: dict[str, Any] = {}  # the entries read so far
        self._arrays: dict[str, Any] | None = None  # msg.arrays as entries, once needed
        self._whole: dict[str, Any] | None = None  # every entry, once needed

    def _convert(self, key: str) -> Any:
        msg = self._msg
        if len(msg.arrays) and any(
            a.name.split("/", 1)[0] in _JOINT_AND_IMAGE_KEYS for a in msg.arrays
        ):
            return self._dict().get(key, _MISSING)  # arrays merge into the joints' entries
        if key == "joint_positions":
            return _named_floats(msg.joint_state.name, msg.joint_state.position)
        if key == "joint_velocities":
            velocity = msg.joint_state.velocity
            return _named_floats(msg.joint_state.name, velocity) if len(velocity) else _MISSING
        if key == "images":
            return _images_from_msg(msg) if len(msg.images) else _MISSING
        if self._arrays is None:
            self._arrays = {}
            _arrays_into(self._arrays, msg.arrays)
        return self._arrays.get(key, _MISSING)

    def _dict(self) -> dict[str, Any]:
        whole = self._whole
        if whole is None:
            whole = msg_to_observation(self._msg)
            # An entry read already stays the object the reader holds.
            whole.update((k, v) for k, v in self._entries.items() if k in whole)
            self._whole = whole
        return whole

    def __getitem__(self, key: str) -> Any:
        if self._whole is not None:
            return self._whole[key]
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            value = self._convert(key)
            if value is _MISSING:
                raise KeyError(key)
            self._entries[key] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __setitem__(self, key: str, value: Any) -> None:
        self._dict()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._dict()[key]

    def __repr__(self) -> str:
        return f"ObservationView({self._dict()!r})"


def _images_from_msg(msg: Any) -> dict[str, np.ndarray]:
    return {
        name: image_from_msg(img) for name, img in zip(msg.image_names, msg.images, strict=False)
    }


def _arrays_into(observation: dict[str, Any], arrays: Sequence[Any]) -> None:
    """Observation.arrays as entries of `observation`: `<entry>/<name>` into {name: float}
    mappings, any other a float vector."""
    for named in arrays:
        if "/" in named.name:
            entry, sub = named.name.split("/", 1)
            observation.setdefault(entry, {})[sub] = (
                float(named.data[0]) if len(named.data) else math.nan
            )
        else:
            observation[named.name] = np.asarray(named.data, dtype=float)


def _named_floats(names: Sequence[str], values: Sequence[Any]) -> dict[str, float]:
    """{name: value} of a float64[] field (extra names or values are dropped)."""
    if type(values) is array.array:  # what a received message holds: Python floats already
        return dict(zip(names, values, strict=False))
    return {n: float(v) for n, v in zip(names, values, strict=False)}


def queued_actions_from_msg(msg: Any, keys: Sequence[str]) -> list[Action]:
    """The RTC context's queued actions as action dicts over `keys` (the policy's action keys)."""
    flat = list(msg.queued_actions)
    if not flat or not keys:
        return []
    if len(flat) % len(keys):
        raise ValueError(
            f"queued_actions has {len(flat)} values, not a multiple of the {len(keys)} action keys {list(keys)}"
        )
    width = len(keys)
    return [dict(zip(keys, flat[i : i + width], strict=True)) for i in range(0, len(flat), width)]


def chunk_to_msg(
    actions: Sequence[Mapping[str, float]] | ActionRows,
    *,
    run_id: str,
    obs_step: int,
    inference_time_s: float,
    keys: Sequence[str] | None = None,
    msg: Any = None,
) -> Any:
    """A chunk as an `ActionChunk`: ActionRows as they are, or action dicts as
    ActionRows.from_actions makes them (columns: `keys`, else the first action's keys; a
    key a row lacks is sent as NaN and dropped again on the way back). `msg`: an
    ActionChunk to fill (every field but the header) instead of a new one."""
    rows = actions if type(actions) is ActionRows else ActionRows.from_actions(actions, keys)
    if msg is None:
        from robokernel_interfaces.msg import ActionChunk

        msg = ActionChunk()
    msg.run_id = run_id
    msg.obs_step = int(obs_step)
    msg.keys = rows.keys
    msg.horizon = rows.horizon
    msg.actions = _floats(rows.values)
    msg.inference_time_s = float(inference_time_s)
    return msg


def msg_to_chunk(msg: Any) -> list[Action]:
    """The action dicts an `ActionChunk` carries (NaN entries dropped)."""
    keys = list(msg.keys)
    flat = msg.actions  # an array.array('d'): its slices compare and zip as floats
    width = len(keys)
    horizon = msg.horizon
    if width == 0 or horizon == 0:
        return []
    if len(flat) != width * horizon:
        raise ValueError(f"ActionChunk has {len(flat)} values for horizon {horizon} x {width} keys")
    if flat == flat:  # no NaN anywhere (NaN != NaN): the common case
        # zip stops at the end of `keys` before it takes from `values`: one row each
        values = iter(flat)
        return [dict(zip(keys, values)) for _ in range(horizon)]  # noqa: B905
    chunk = []
    for i in range(0, width * horizon, width):
        chunk.append({k: v for k, v in zip(keys, flat[i : i + width], strict=True) if v == v})
    return chunk


# --- ROS plumbing ----------------------------------------------------------------------------


class _PrivateLink:
    """One rclpy context + node + executor thread for the process, reference-counted."""

    _lock = threading.Lock()
    _instance: _PrivateLink | None = None
    _refs = 0

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        name = f"remote_policy_{secrets.token_hex(3)}"
        # Own names: the process's command-line remaps (a runner's __node:=runner) are
        # not for these nodes.
        self.node = rclpy.create_node(name, context=self.context, use_global_arguments=False)
        # Subscriptions whose messages a caller takes itself (DirectReader): no executor
        # spins this node.
        self.rx_node = rclpy.create_node(
            f"{name}_rx", context=self.context, use_global_arguments=False
        )
        self.readers: weakref.WeakSet[DirectReader] = weakref.WeakSet()
        # It serves the heartbeat and the service client only (chunks are taken by the
        # waiting thread), so one thread is enough; rclpy's MultiThreadedExecutor would
        # add tens of milliseconds to the service round trip in this build.
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="remote-policy-spin", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        # A long timeout: each wake-up runs the executor's Python wait-set code, which
        # would take the GIL from a control loop in this process (_close wakes it).
        while not self._stop.is_set() and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=2.0)
            except Exception:  # noqa: BLE001 - shutdown races end the loop
                if not self.context.ok():
                    return
                _log.exception("remote policy executor")

    def _close(self) -> None:
        import rclpy

        # Stop spinning and join the thread before shutting the context down: shutting
        # rclpy down under a spinning executor aborts the process in this build.
        self._stop.set()
        self.executor.wake()
        self._thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1.0)
        for reader in list(self.readers):
            reader.close()  # a policy waiting for a chunk returns at once (closed)
        self.node.destroy_node()
        self.rx_node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    @classmethod
    def acquire(cls) -> _PrivateLink:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            cls._refs += 1
            return cls._instance

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._refs -= 1
            if cls._refs > 0 or cls._instance is None:
                return
            instance, cls._instance = cls._instance, None
        instance._close()

    @classmethod
    def close_now(cls) -> None:
        """Close the link whatever policies still hold it (a node shutting down)."""
        with cls._lock:
            instance, cls._instance, cls._refs = cls._instance, None, 0
        if instance is not None:
            instance._close()


class DirectReader:
    """One subscription whose messages the calling thread takes itself, without an executor.

    The subscription is created on a node that no executor spins (so nothing else takes
    its messages) and `take` blocks on an rcl wait set of it and a guard condition that
    `close` triggers. On a latency path this saves the executor's dispatch and the
    hand-over from the executor thread to the waiting one (bench/chunk_roundtrip.py).
    rclpy has no public API for it; this is what `rclpy.wait_for_message` does per call.
    """

    def __init__(self, node: Any, msg_type: Any, topic: str, qos: Any) -> None:
        from rclpy.guard_condition import GuardCondition
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

        self.node = node
        self._sub = node.create_subscription(msg_type, topic, _ignore, qos)
        self._wake = GuardCondition(None, None, context=node.context)
        self._wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, 0, node.context.handle)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def publisher_count(self) -> int:
        """Publishers matched with this reader."""
        return self._sub.get_publisher_count()

    def take(self, timeout_s: float) -> list[Any]:
        """Every message waiting now; if none, the first that arrives within `timeout_s`
        (an empty list once that passes, or when closed). After a wait one message is
        taken and returned at once: the caller answers it without another take first,
        and what came with it is taken by the next call, without waiting."""
        sub, handle = self._sub, self._sub.handle
        msg_type, raw = sub.msg_type, sub.raw
        messages = []
        waited = False
        with handle, self._wake.handle:
            while not self._closed:
                taken = handle.take_message(msg_type, raw)
                if taken is not None:
                    messages.append(taken[0])
                    if waited:
                        break
                    continue
                if messages or waited or timeout_s <= 0:
                    break
                ws = self._wait_set
                ws.clear_entities()
                ws.add_subscription(handle)
                ws.add_guard_condition(self._wake.handle)
                ws.wait(int(timeout_s * 1e9))
                waited = True
        return messages

    def close(self) -> None:
        """Wake a waiting `take` (it returns []) and destroy the subscription."""
        if self._closed:
            return
        self._closed = True
        self._wake.trigger()
        self.node.destroy_subscription(self._sub)  # deferred by rclpy while take() holds it
        self._wake.destroy()


def _ignore(_msg: Any) -> None:
    """The callback of a DirectReader's subscription (never called: no executor spins it)."""


def acquire_link() -> _PrivateLink:
    """This process's private link (taken with a reference: `release_link()` when done).
    Its `rx_node` is spun by no executor: DirectReaders on it are taken by their caller."""
    return _PrivateLink.acquire()


def release_link() -> None:
    """Drop a reference taken by `acquire_link()` (the last one closes the link)."""
    _PrivateLink.release()


def close_private_link() -> None:
    """Stop this process's remote-policy link (its executor thread and rclpy context),
    so a node hosting remote policies shuts down promptly and cleanly."""
    _PrivateLink.close_now()


def _join(namespace: str, name: str) -> str:
    return f"{namespace.rstrip('/')}/{name}" if namespace else name


@dataclass
class ServerState:
    ready: bool = False
    detail: str = "no heartbeat received yet"
    provider: str = ""
    action_keys: tuple[str, ...] = ()
    chunk_emitting: bool = False
    rtc_supported: bool = False
    chunks_served: int = 0
    received_at: float | None = None  # monotonic


class ServerWatch:
    """Follows a policy server's heartbeat on `<ns>/policy_server/status`."""

    def __init__(self, node: Any, namespace: str, *, stale_after_s: float = 3.0) -> None:
        from rclpy.callback_groups import ReentrantCallbackGroup
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        from robokernel_interfaces.msg import PolicyServerStatus

        self.node = node
        self.namespace = namespace
        self.stale_after_s = stale_after_s
        self.state = ServerState()
        self._cond = threading.Condition()
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self._sub = node.create_subscription(
            PolicyServerStatus,
            _join(namespace, STATUS_TOPIC),
            self._on_status,
            qos,
            callback_group=ReentrantCallbackGroup(),
        )

    def _on_status(self, msg: Any) -> None:
        with self._cond:
            self.state = ServerState(
                ready=bool(msg.ready),
                detail=msg.detail,
                provider=msg.provider,
                action_keys=tuple(msg.action_keys),
                chunk_emitting=bool(msg.chunk_emitting),
                rtc_supported=bool(msg.rtc_supported),
                chunks_served=int(msg.chunks_served),
                received_at=time.monotonic(),
            )
            self._cond.notify_all()

    def alive(self) -> bool:
        at = self.state.received_at
        return at is not None and time.monotonic() - at <= self.stale_after_s

    def ready(self) -> bool:
        return self.state.ready and self.alive()

    def wait_ready(self, timeout_s: float) -> ServerState:
        """Wait for a fresh ready heartbeat; raise RuntimeError naming why the server is not ready."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self.ready():
                if self.alive() and LOAD_FAILED in self.state.detail:
                    break  # a failed load never becomes ready: no point in waiting
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(timeout=min(left, 0.1))
            if self.ready():
                return self.state
            state = self.state
        topic = _join(self.namespace, STATUS_TOPIC)
        if state.received_at is None:
            why = f"no heartbeat on {topic} within {timeout_s:g} s (is the policy_server running on this ROS_DOMAIN_ID?)"
        elif not self.alive():
            why = (
                f"its last heartbeat on {topic} is {time.monotonic() - state.received_at:.1f} s old"
            )
        else:
            why = f"it reports not ready: {state.detail or 'no detail'}"
        raise RuntimeError(
            f"policy server {self.namespace or '/'} ({state.provider or 'unknown provider'}) is not ready: {why}"
        )

    def destroy(self) -> None:
        self.node.destroy_subscription(self._sub)


def check_server_ready(
    node: Any, namespace: str = DEFAULT_NAMESPACE, timeout_s: float = 2.0
) -> ServerState:
    """Raise RuntimeError unless the policy server at `namespace` reports ready within `timeout_s`."""
    watch = ServerWatch(node, namespace)
    try:
        return watch.wait_ready(timeout_s)
    finally:
        watch.destroy()


# --- the provider --------------------------------------------------------------------------

_CONFIG_KEYS = {"namespace", "mode", "ready_timeout_s", "chunk_timeout_s", "stale_after_s"}


class RemotePolicy(Policy):
    """A policy served by a policy_server node (see the module docstring)."""

    provider = "remote"
    wants_step = True  # the request's step is the kernel's: the chunk's obs_step answers it

    def __init__(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        mode: str = "topic",
        ready_timeout_s: float = 10.0,
        chunk_timeout_s: float = 10.0,
        stale_after_s: float = 3.0,
    ) -> None:
        super().__init__()
        self.preflight(
            {
                "namespace": namespace,
                "mode": mode,
                "ready_timeout_s": ready_timeout_s,
                "chunk_timeout_s": chunk_timeout_s,
                "stale_after_s": stale_after_s,
            }
        )
        self.namespace = namespace
        self.mode = mode
        self.chunk_timeout_s = float(chunk_timeout_s)
        self._run_id = secrets.token_hex(4)
        self._counter = 0
        self._closed = False
        self.last_inference_time_s = math.nan
        # The most recent chunks' (obs_step, inference_time_s, round_trip_s), bounded so a
        # long rollout does not grow it.
        self.chunk_log: deque[tuple[int, float, float]] = deque(maxlen=256)
        self._bound_keys: tuple[Any, Any, bool] = ((), None, False)  # _bind's last decision

        self._link = _PrivateLink.acquire()
        self.node = self._link.node
        self._private = True  # holds a reference on the shared link until close()
        try:
            self._setup_ros(stale_after_s)
            state = self._watch.wait_ready(float(ready_timeout_s))
        except BaseException:
            self.close()
            raise
        self.server_provider = state.provider
        self.server_action_keys = state.action_keys
        self.supports_rtc = state.rtc_supported
        self.execution_horizon = 2 if state.chunk_emitting else 1

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config keys {unknown} are unknown to the remote provider (known: {sorted(_CONFIG_KEYS)})"
            )
        ns = config.get("namespace", DEFAULT_NAMESPACE)
        if not isinstance(ns, str) or (ns and not ns.startswith("/")):
            raise ValueError(
                f"policy_config['namespace']={ns!r}: must be an absolute ROS namespace like '/robokernel'"
            )
        mode = config.get("mode", "topic")
        if mode not in ("topic", "service"):
            raise ValueError(f"policy_config['mode']={mode!r}: must be 'topic' or 'service'")
        for key in ("ready_timeout_s", "chunk_timeout_s", "stale_after_s"):
            if key in config:
                value = config[key]
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value <= 0
                ):
                    raise ValueError(
                        f"policy_config[{key!r}]={value!r}: must be positive finite seconds"
                    )

    def _setup_ros(self, stale_after_s: float) -> None:
        from rclpy.callback_groups import ReentrantCallbackGroup
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        from robokernel_interfaces.msg import ActionChunk, Observation
        from robokernel_interfaces.srv import GetActionChunk

        group = ReentrantCallbackGroup()
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
        )
        self._watch = ServerWatch(self.node, self.namespace, stale_after_s=stale_after_s)
        self._obs_pub = self.node.create_publisher(
            Observation, _join(self.namespace, OBSERVATION_TOPIC), qos
        )
        self._obs_msg = Observation()
        self._matched = False  # both topic ends matched with the server (_await_match)
        # get_actions takes its chunk itself (no executor hop on the latency path).
        self._chunks = DirectReader(
            self._link.rx_node, ActionChunk, _join(self.namespace, CHUNK_TOPIC), qos
        )
        self._link.readers.add(self._chunks)
        self._client = self.node.create_client(
            GetActionChunk, _join(self.namespace, CHUNK_SERVICE), callback_group=group
        )

    # Policy API -------------------------------------------------------------------------------

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        # A new run id tells the server a new episode starts (it resets its policy).
        self._run_id = secrets.token_hex(4)
        self._counter = 0

    def is_chunk_emitting(self) -> bool:
        return self.execution_horizon > 1

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        step = kwargs.get("step")
        if step is None:
            step = observation.get("step") if isinstance(observation, Mapping) else None
            if step is None:
                step = self._counter
        step = int(step)
        self._counter = step + 1
        queued = kwargs.get("queued_actions")
        msg = observation_to_msg(
            observation,
            run_id=self._run_id,
            step=step,
            instruction=instruction,
            queued_actions=queued,
            queued_keys=(self.server_action_keys or self.action_keys) if queued is not None else (),
            delay_steps=kwargs.get("delay_steps") or 0,
            # Topic mode publishes at once: one message, refilled (a new one costs ~0.1 ms).
            msg=self._obs_msg if self.mode == "topic" else None,
        )
        started = time.monotonic()
        chunk_msg = self._call_service(msg) if self.mode == "service" else self._exchange(msg)
        round_trip = time.monotonic() - started
        self.last_inference_time_s = float(chunk_msg.inference_time_s)
        self.chunk_log.append((int(chunk_msg.obs_step), self.last_inference_time_s, round_trip))
        return self._bind(msg_to_chunk(chunk_msg))

    def _exchange(self, msg: Any) -> Any:
        key = (msg.run_id, int(msg.step))
        deadline = time.monotonic() + self.chunk_timeout_s
        if not self._matched:
            self._await_match(deadline)
        self._obs_pub.publish(msg)
        while True:
            left = deadline - time.monotonic()
            if self._closed or self._chunks.closed:
                raise RuntimeError("remote policy closed while waiting for a chunk")
            if left <= 0:
                raise TimeoutError(self._timeout_message(msg.step))
            for chunk in self._chunks.take(left):
                if (chunk.run_id, int(chunk.obs_step)) == key:
                    return chunk
                # any other chunk answers an older request (or another client's): dropped

    def _await_match(self, deadline: float) -> None:
        """Before the first observation: wait until the server's observation reader and our
        chunk reader are matched. A volatile topic drops what is published before discovery
        has matched the two ends, and the request would then wait out chunk_timeout_s."""
        while time.monotonic() < deadline and not self._closed:
            if self._obs_pub.get_subscription_count() and self._chunks.publisher_count():
                self._matched = True
                return
            time.sleep(0.005)

    def _call_service(self, msg: Any) -> Any:
        from robokernel_interfaces.srv import GetActionChunk

        if not self._client.wait_for_service(timeout_sec=min(self.chunk_timeout_s, 5.0)):
            raise TimeoutError(self._timeout_message(msg.step))
        done = threading.Event()
        future = self._client.call_async(GetActionChunk.Request(observation=msg))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(self.chunk_timeout_s):
            future.cancel()
            raise TimeoutError(self._timeout_message(msg.step))
        response = future.result()
        if not response.ok:
            raise RuntimeError(
                f"policy server {self.namespace} refused the observation of step {msg.step}: {response.message}"
            )
        return response.chunk

    def _timeout_message(self, step: int) -> str:
        alive = "alive" if self._watch.alive() else "silent (no recent heartbeat)"
        return (
            f"no action chunk from the policy server at {self.namespace} for the observation of step {step} "
            f"within chunk_timeout_s={self.chunk_timeout_s:g} (server {alive})"
        )

    def _bind(self, chunk: list[Action]) -> list[Action]:
        """Chunk keys are bound by name; a chunk naming none of the robot's keys but of the
        same width is bound by position (and reported as positional_fallback_used)."""
        if not chunk or not self.action_keys:
            return chunk
        keys = tuple(chunk[0])
        seen = self._bound_keys  # the last decision: (chunk keys, action keys, by position)
        if seen[0] == keys and seen[1] is self.action_keys:
            by_position = seen[2]
        else:
            by_position = not (set(keys) & set(self.action_keys)) and len(keys) == len(
                self.action_keys
            )
            self._bound_keys = (keys, self.action_keys, by_position)
        if not by_position:
            return chunk
        self.positional_fallback_used = True
        return [dict(zip(self.action_keys, row.values(), strict=False)) for row in chunk]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        node = getattr(self, "node", None)
        if node is not None:
            for attr, destroy in (
                ("_watch", lambda w: w.destroy()),
                ("_chunks", lambda r: r.close()),
                ("_obs_pub", node.destroy_publisher),
                ("_client", node.destroy_client),
            ):
                obj = getattr(self, attr, None)
                if obj is None:
                    continue
                try:
                    destroy(obj)
                except Exception:  # noqa: BLE001 - best effort during teardown
                    _log.debug("remote policy: destroying %s failed", attr, exc_info=True)
        if getattr(self, "_private", False):
            self._private = False
            _PrivateLink.release()

    def __del__(self) -> None:  # a policy dropped without close() must not keep the link alive
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


register_provider("remote", RemotePolicy, replace=True)
