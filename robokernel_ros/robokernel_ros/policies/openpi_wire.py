"""openpi's wire format and the mapping between its observation keys and this project's.

    from robokernel_ros.policies.openpi_wire import OpenpiMapping, packb, unpackb

    mapping = OpenpiMapping.from_config({"state": "state", "images": {"images/cam_high": "front"}})
    request = mapping.to_openpi(observation, instruction, state_names=keys)   # our dict -> openpi
    observation, instruction = mapping.from_openpi(request, state_names=keys)  # openpi -> ours

The codec is openpi's (openpi_client.msgpack_numpy): msgpack, with a numpy array as the
map {b"__ndarray__": True, b"data": bytes, b"dtype": str, b"shape": list} and a numpy
scalar as {b"__npgeneric__": True, b"data": value, b"dtype": str}. Decoding here is
strict: only numeric and boolean dtypes (no object, void or complex), a shape whose size
matches the bytes, no extension types. Nothing is ever unpickled: a peer's bytes can
make a decode fail (ValueError), never run code.

The mapping (a small config, the same for the policy_server's openpi endpoint and the
`openpi` provider; every key optional):

    state:        openpi key of the state vector ("state"), or {openpi key: [joint names]}
                  for a policy whose state is split (DROID: "observation/joint_position",
                  "observation/gripper_position"); [] names: the robot's action keys
    state_names:  the joint names of a single state key's vector, in order ([]: as above)
    images:       {openpi key: camera name} ({"images/<camera>": camera} for every camera
                  the observation carries when left out)
    prompt:       openpi key of the instruction ("prompt"; "" sends none)
    actions:      key of the chunk in the server's answer ("actions")
    action_names: the chunk's columns, in order ([]: the robot's action keys)
    image_layout: "hwc" (height, width, channel: this project's and LIBERO's) or "chw"
                  (ALOHA's)
    flat_keys:    false: a key "a/b" is the nested entry obs["a"]["b"] when sent (openpi's
                  "images/<cam>" layout); true: one flat key "a/b" (LIBERO's
                  "observation/image"). Either spelling is read.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

#: dtype kinds the decoder accepts: bool, signed, unsigned, float.
_DTYPE_KINDS = frozenset("biuf")
_LAYOUTS = ("hwc", "chw")
_KEYS = frozenset(
    {"state", "state_names", "images", "prompt", "actions", "action_names", "image_layout", "flat_keys"}
)  # fmt: skip


class OpenpiWireError(ValueError):
    """A message that is not openpi's msgpack-numpy, or an array this decoder refuses."""


def _pack_default(obj: Any) -> Any:
    """msgpack's hook for what it cannot pack: numpy arrays and scalars, as openpi packs them."""
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind not in _DTYPE_KINDS:
        raise ValueError(f"unsupported dtype {obj.dtype} (openpi's wire takes numeric arrays)")
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__} on openpi's wire")


def _dtype(text: Any) -> np.dtype:
    if not isinstance(text, str | bytes):
        raise OpenpiWireError(f"array dtype {text!r} is not a string")
    dtype = np.dtype(text.decode() if isinstance(text, bytes) else text)
    if dtype.kind not in _DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise OpenpiWireError(f"array dtype {dtype} refused (only bool, int, uint and float)")
    return dtype


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    """msgpack's object hook: openpi's array and scalar maps back to numpy, checked."""
    if b"__ndarray__" in obj:
        dtype = _dtype(obj.get(b"dtype"))
        shape, data = obj.get(b"shape"), obj.get(b"data")
        if not isinstance(data, bytes) or not isinstance(shape, list | tuple):
            raise OpenpiWireError("array without bytes or shape")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise OpenpiWireError(f"array shape {shape!r} refused")
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != len(data):
            raise OpenpiWireError(
                f"array of shape {tuple(shape)} and dtype {dtype} has {len(data)} bytes"
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        return _dtype(obj.get(b"dtype")).type(obj.get(b"data"))
    return obj


packb = functools.partial(msgpack.packb, default=_pack_default)


def unpackb(data: bytes) -> Any:
    """One openpi message decoded (ValueError, naming why, for anything else)."""
    try:
        return msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)
    except OpenpiWireError:
        raise
    except Exception as exc:  # msgpack's own errors (ExtraData, FormatError, ...) and numpy's
        raise OpenpiWireError(
            f"not an openpi msgpack message ({type(exc).__name__}: {exc})"
        ) from exc


def _names(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"openpi mapping[{key!r}]={value!r}: must be a list of names")
    if not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"openpi mapping[{key!r}]={value!r}: must be non-empty strings")
    return tuple(value)


def _key(value: Any, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or not (value or empty):
        raise ValueError(f"openpi mapping[{key!r}]={value!r}: must be a non-empty string")
    return value


@dataclass(frozen=True)
class OpenpiMapping:
    """Which openpi key carries what (see the module docstring); built by `from_config`,
    which refuses a bad config naming the key."""

    state: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"state": ()})
    images: dict[str, str] | None = None
    prompt: str = "prompt"
    actions: str = "actions"
    action_names: tuple[str, ...] = ()
    image_layout: str = "hwc"
    flat_keys: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> OpenpiMapping:
        config = dict(config or {})
        unknown = sorted(set(config) - _KEYS)
        if unknown:
            raise ValueError(f"openpi mapping keys {unknown} are unknown (known: {sorted(_KEYS)})")
        state_value = config.get("state", "state")
        names = _names(config.get("state_names", ()), "state_names")
        if isinstance(state_value, str):
            state = {_key(state_value, "state"): names} if state_value else {}
        elif isinstance(state_value, Mapping):
            if names:
                raise ValueError(
                    "openpi mapping['state_names']: give the names inside 'state' when it maps several keys"
                )
            state = {_key(k, "state"): _names(v, f"state.{k}") for k, v in state_value.items()}
            if sum(not v for v in state.values()) > 1:
                raise ValueError(
                    f"openpi mapping['state']={state_value!r}: at most one key may leave its names to the robot"
                )
        else:
            raise ValueError(
                f"openpi mapping['state']={state_value!r}: must be a key or {{key: [names]}}"
            )
        images = config.get("images")
        if images is not None:
            if not isinstance(images, Mapping):
                raise ValueError(
                    f"openpi mapping['images']={images!r}: must be {{openpi key: camera}}"
                )
            images = {_key(k, "images"): _key(v, f"images.{k}") for k, v in images.items()}
        layout = config.get("image_layout", "hwc")
        if layout not in _LAYOUTS:
            raise ValueError(
                f"openpi mapping['image_layout']={layout!r}: must be one of {_LAYOUTS}"
            )
        flat = config.get("flat_keys", False)
        if not isinstance(flat, bool):
            raise ValueError(f"openpi mapping['flat_keys']={flat!r}: must be true or false")
        return cls(
            state=state,
            images=images,
            prompt=_key(config.get("prompt", "prompt"), "prompt", empty=True),
            actions=_key(config.get("actions", "actions"), "actions"),
            action_names=_names(config.get("action_names", ()), "action_names"),
            image_layout=layout,
            flat_keys=flat,
        )

    def to_dict(self) -> dict[str, Any]:
        """The mapping as its config (what the endpoint's metadata frame carries)."""
        return {
            "state": {k: list(v) for k, v in self.state.items()},
            "images": dict(self.images) if self.images is not None else None,
            "prompt": self.prompt,
            "actions": self.actions,
            "action_names": list(self.action_names),
            "image_layout": self.image_layout,
            "flat_keys": self.flat_keys,
        }

    def state_layout(self, robot_names: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """{openpi key: joint names}, the unnamed key taking `robot_names` less the names
        the other keys claim (ValueError when it would have none)."""
        claimed = {n for names in self.state.values() for n in names}
        rest = tuple(n for n in robot_names if n not in claimed)
        layout = {}
        for key, names in self.state.items():
            if not names:
                if not rest:
                    raise ValueError(
                        f"openpi mapping: state key {key!r} has no names (give state_names, or bind "
                        "the policy to action keys)"
                    )
                names = rest
            layout[key] = names
        return layout

    def columns(self, robot_names: Sequence[str]) -> tuple[str, ...]:
        """The chunk's column names: action_names, else `robot_names`."""
        return self.action_names or tuple(robot_names)

    # our observation -> openpi's ------------------------------------------------------------

    def to_openpi(
        self, observation: Mapping[str, Any], instruction: str, *, robot_names: Sequence[str]
    ) -> dict[str, Any]:
        """The openpi request for one of this project's observations: state vectors
        (float64) from `joint_positions` by name, images (uint8) by camera, the prompt.
        KeyError naming the joint or camera the observation lacks."""
        out: dict[str, Any] = {}
        positions = observation.get("joint_positions") or {}
        for key, names in self.state_layout(robot_names).items():
            missing = [n for n in names if n not in positions]
            if missing:
                raise KeyError(f"openpi state key {key!r}: the observation has no joint {missing}")
            self._put(out, key, np.array([positions[n] for n in names], dtype=np.float64))
        cameras = observation.get("images") or {}
        images = self.images if self.images is not None else {f"images/{c}": c for c in cameras}
        for key, camera in images.items():
            if camera not in cameras:
                raise KeyError(
                    f"openpi image key {key!r}: the observation has no camera {camera!r}"
                )
            image = np.asarray(cameras[camera])
            if self.image_layout == "chw" and image.ndim == 3:
                image = np.ascontiguousarray(image.transpose(2, 0, 1))
            self._put(out, key, image)
        if self.prompt:
            self._put(out, self.prompt, instruction or "")
        return out

    def _put(self, out: dict[str, Any], key: str, value: Any) -> None:
        if self.flat_keys or "/" not in key:
            out[key] = value
            return
        *parents, last = key.split("/")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    # openpi's observation -> ours -----------------------------------------------------------

    def from_openpi(
        self, request: Mapping[str, Any], *, robot_names: Sequence[str]
    ) -> tuple[dict[str, Any], str]:
        """(this project's observation, the instruction) for one openpi request:
        `joint_positions` from the state keys by name, `images` (HWC) by camera.
        ValueError naming the key that is missing or of the wrong size."""
        if not isinstance(request, Mapping):
            raise ValueError(f"an openpi observation is a map, not a {type(request).__name__}")
        positions: dict[str, float] = {}
        for key, names in self.state_layout(robot_names).items():
            vector = np.asarray(_lookup(request, key, "state"), dtype=np.float64).reshape(-1)
            if vector.size != len(names):
                raise ValueError(
                    f"openpi state key {key!r} has {vector.size} values; the mapping names {len(names)}"
                )
            positions.update(zip(names, vector.tolist(), strict=True))
        observation: dict[str, Any] = {"joint_positions": positions}
        if self.images is None:
            found = request.get("images")
            images = {f"images/{c}": c for c in found} if isinstance(found, Mapping) else {}
        else:
            images = self.images
        cameras = {}
        for key, camera in images.items():
            image = np.asarray(_lookup(request, key, "image"))
            if image.ndim != 3:
                raise ValueError(f"openpi image key {key!r} has shape {image.shape}, not 3 axes")
            if self.image_layout == "chw":
                image = image.transpose(1, 2, 0)
            cameras[camera] = np.ascontiguousarray(image)
        if cameras:
            observation["images"] = cameras
        prompt = _lookup(request, self.prompt, "prompt", required=False) if self.prompt else None
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError(
                f"openpi prompt key {self.prompt!r} is a {type(prompt).__name__}, not text"
            )
        return observation, prompt or ""


def _lookup(request: Mapping[str, Any], key: str, what: str, *, required: bool = True) -> Any:
    """request[key], or the nested entry its "/"-parts name."""
    if key in request:
        return request[key]
    node: Any = request
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            if not required:
                return None
            raise ValueError(f"the openpi observation has no {what} key {key!r}")
        node = node[part]
    return node


__all__ = ["OpenpiMapping", "OpenpiWireError", "packb", "unpackb"]
