"""The wire format the policy server, its clients and the bag recorder share: the names
of the policy-server protocol, observation dicts to and from `Observation` messages,
action chunks to and from `ActionChunk` messages, images to and from
`sensor_msgs/Image` (and `CompressedImage`), kernel events as `KernelEvent` messages.

    msg = observation_to_msg(observation, run_id="ab12", step=7)
    chunk = msg_to_chunk(chunk_msg)

Conversions only: nothing here creates a node or imports rclpy (message classes are
imported where a message is built). The transport is `ros.transport`.
"""

from __future__ import annotations

import array
import math
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from robokernel_ros.policies.base import Action, ActionRows

# --- the policy server's names (relative to its namespace) -----------------------------------

DEFAULT_NAMESPACE = "/robokernel"
STATUS_TOPIC = "policy_server/status"
OBSERVATION_TOPIC = "observation"
CHUNK_TOPIC = "action_chunk"
CHUNK_SERVICE = "get_action_chunk"
#: What a policy server's status detail says when its policy could not be loaded.
LOAD_FAILED = "failed"


def join(namespace: str, name: str) -> str:
    """`name` under `namespace` ('' = the name as it is)."""
    return f"{namespace.rstrip('/')}/{name}" if namespace else name


# --- observations, images, chunks -----------------------------------------------------------

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

    frame = np.ascontiguousarray(np.asarray(image))
    if frame.ndim == 2:
        frame = frame[:, :, None]
    if frame.ndim != 3:
        raise ValueError(f"image {name!r}: shape {frame.shape} is not HxW or HxWxC")
    encoding = _IMAGE_ENCODINGS.get((frame.dtype.name, frame.shape[2]))
    if encoding is None:
        raise ValueError(
            f"image {name!r}: dtype {frame.dtype} with {frame.shape[2]} channels has no ROS encoding "
            f"(supported: {sorted(_IMAGE_ENCODINGS)})"
        )
    msg = Image() if out is None else out
    msg.height, msg.width = int(frame.shape[0]), int(frame.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(frame.strides[0])
    # One copy of the pixels: into the refilled message's own buffer when it has the
    # size, else into a new array('B') the setter keeps as it is (tobytes() and the
    # setter's array('B', bytes) were two).
    pixels = memoryview(frame).cast("B")
    data = msg.data
    if isinstance(data, array.array) and len(data) == pixels.nbytes:
        np.frombuffer(data, dtype=np.uint8)[:] = pixels
    else:
        data = array.array("B")
        data.frombytes(pixels)
        msg.data = data
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
    row = np.frombuffer(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)
    itemsize = np.dtype(dtype).itemsize
    pixels = row[:, : msg.width * channels * itemsize]
    if msg.step != msg.width * channels * itemsize or not pixels.flags.writeable:
        # padded rows, or read-only bytes: a copy of the pixels, the caller's own
        pixels = pixels.copy()
    # else a view of the message's own array('B') (writable, and kept alive by the
    # view): no copy of the frame on the way in
    array = pixels.view(dtype).reshape(msg.height, msg.width, channels)
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
    `images` ({camera: array}) the images; any top-level number (a contract's non-joint
    state stream such as `ft_wrench.force.x`, a task's `goal.<joint>`) a `value_names` /
    `values` pair, read back as a float; any other entry that is a {name: float}
    mapping becomes NamedArrays `<entry>/<name>` and any flat numeric vector a
    NamedArray `<entry>`. Anything else (a bool, a string) is not sent. `msg`: an Observation to fill
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
    value_names: list[str] = []
    values: list[float] = []
    for key, value in observation.items():
        if key in _JOINT_AND_IMAGE_KEYS:
            continue
        if isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
            value_names.append(str(key))
            values.append(float(value))
        elif isinstance(value, Mapping):
            for sub, item in value.items():
                if isinstance(item, int | float | np.number) and not isinstance(item, bool):
                    arrays.append(_named_array(f"{key}/{sub}", [float(item)]))
        elif isinstance(value, list | tuple | np.ndarray):
            vector = np.asarray(value)
            if vector.ndim == 1 and vector.dtype.kind in "fiu":
                arrays.append(_named_array(str(key), vector.astype(float).tolist()))
    if arrays or len(msg.arrays):
        msg.arrays = arrays
    if value_names or len(msg.value_names):
        msg.value_names = value_names
        msg.values = _floats(values)
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
    observation.update(_named_floats(msg.value_names, msg.values))
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
            self._arrays.update(_named_floats(msg.value_names, msg.values))
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


# --- kernel events as messages ----------------------------------------------------------------


def event_json(data: Mapping[str, Any]) -> str:
    """An event's data as a JSON object, encoded by the kernel's encoder (non-finite
    numbers as null, as in the trace); images (arrays of 2+ dimensions) become their
    shape and dtype."""
    import numpy as np

    from robokernel_ros.kernel.trace import dumps_text

    def strip(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim >= 2:
            return {"shape": list(value.shape), "dtype": str(value.dtype)}
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        return value

    return dumps_text(strip(dict(data)))


def kernel_event_msg(event: Any) -> Any:
    """A kernel Event as a robokernel_interfaces/KernelEvent (stamp = the episode clock)."""
    from robokernel_interfaces.msg import KernelEvent

    msg = KernelEvent()
    # rounded to the nanosecond as the bag mirror stamps it, so both agree exactly
    msg.stamp.sec, msg.stamp.nanosec = divmod(max(0, round(float(event.t) * 1e9)), 1_000_000_000)
    msg.run_id = event.run_id
    msg.seq = int(event.seq)
    msg.kind = event.kind
    msg.step = int(event.step)
    msg.data_json = event_json(event.data)
    return msg
