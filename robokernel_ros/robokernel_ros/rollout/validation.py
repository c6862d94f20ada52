"""Refusals of the rollout API, checked at the entry point before anything starts.

Every check raises ValueError with a message naming the parameter, the value and the
domain, so the facade can report it as `status="error"` and `PolicyRunner` can raise
it as is. Nothing here touches a scene or builds a policy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

from robokernel_ros.kernel.domains import is_number, positive_int, positive_number
from robokernel_ros.policies.base import Policy


def boolean_flag_error(name: str, value: Any, *, allow_none: bool = False) -> str | None:
    """The shared domain of posture flags: a real bool (or None where that means "resolve").

    A string is refused rather than read by truthiness: "false" is truthy.
    """
    if isinstance(value, bool):
        return None
    if allow_none and value is None:
        return None
    domain = "True, False or None" if allow_none else "True or False"
    return f"{name}={value!r}: must be a boolean ({domain}), got {type(value).__name__}"


def check_flag(name: str, value: Any, *, allow_none: bool = False) -> bool | None:
    error = boolean_flag_error(name, value, allow_none=allow_none)
    if error:
        raise ValueError(error)
    return value


def optional_positive_int(name: str, value: Any) -> int | None:
    return None if value is None else positive_int(name, value)


def non_negative_int(name: str, value: Any) -> int:
    """A whole number >= 0 (bools refused)."""
    return 0 if value == 0 and not isinstance(value, bool) else positive_int(name, value)


def timeout_seconds(name: str, value: Any) -> float | None:
    """Positive finite seconds, or None to wait without a deadline."""
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(
            f"{name}={value!r}: must be positive finite seconds, or None for no deadline"
        )
    return float(value)


def seed_value(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 0:
        raise ValueError(f"{name}={value!r}: must be a non-negative integer or None")
    return int(value)


def config_dict(name: str, value: Any) -> dict[str, Any]:
    """A dict (None means {}); splatted into create_policy or get_actions."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{name}={value!r}: must be a dict, got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ValueError(f"{name}={dict(value)!r}: keys must be strings, got {bad!r}")
    return dict(value)


def text(name: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r}: must be a string, got {type(value).__name__}")
    return value


def optional_callable(name: str, value: Any) -> Callable[..., Any] | None:
    if value is None:
        return None
    if not callable(value) or isinstance(value, type):
        raise ValueError(
            f"{name}={value!r}: must be a callable (a function), got {type(value).__name__}"
        )
    return value


def callables(name: str, value: Any) -> list[Callable[..., Any]]:
    """None, one callable, or a list of callables."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [optional_callable(f"{name}[{i}]", v) for i, v in enumerate(value)]  # type: ignore[misc]
    return [optional_callable(name, value)]  # type: ignore[list-item]


def policy_object(name: str, value: Any) -> Policy | None:
    """A Policy instance: a provider name or the class is refused by name."""
    if value is None:
        return None
    if isinstance(value, Policy):
        return value
    if isinstance(value, str):
        raise ValueError(
            f"{name}={value!r}: must be a Policy instance; a provider name goes in policy_provider="
        )
    if isinstance(value, type):
        raise ValueError(
            f"{name}={value.__name__}: must be a Policy instance, not the class (instantiate it)"
        )
    raise ValueError(f"{name}={value!r}: must be a Policy instance, got {type(value).__name__}")


def trace_dir(name: str, value: Any) -> Path | None:
    """A folder for run directories, or None to record no trace."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or str(value) == "":
        raise ValueError(f"{name}={value!r}: must be a non-empty path or None")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}={str(value)!r}: exists and is not a folder")
    writable_folder(name, path)
    return path


def writable_folder(name: str, path: Path) -> None:
    """Refuse a folder that cannot be created or written, probed with a temporary folder in
    its nearest existing ancestor (nothing is left behind)."""
    import tempfile

    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(f"{probe} is not a folder")
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".robokernel-probe-"))
    except OSError as exc:
        raise ValueError(
            f"{name}={str(path)!r}: cannot create or write a folder there ({exc.strerror or exc})"
        ) from None


def resolve_horizon(
    *, n_steps: Any, duration: Any, control_frequency: Any, max_steps: Any = None
) -> tuple[int, float, float]:
    """(n_steps, duration_s, control_hz). n_steps wins over duration; max_steps is its legacy alias."""
    hz = positive_number("control_frequency", control_frequency)
    duration_s = positive_number("duration", duration)
    steps = optional_positive_int("n_steps", n_steps)
    legacy = optional_positive_int("max_steps", max_steps)
    if steps is not None and legacy is not None and steps != legacy:
        raise ValueError(
            f"n_steps={n_steps!r} and max_steps={max_steps!r}: max_steps is a legacy alias of n_steps; give one"
        )
    if steps is None:
        steps = legacy
    if steps is None:
        steps = max(1, round(duration_s * hz))
    else:
        duration_s = steps / hz
    return steps, duration_s, hz


def per_robot(
    name: str, value: Any, robots: Sequence[str], check: Callable[[str, Any], Any]
) -> dict[str, Any]:
    """A value for every robot, or a {robot: value} mapping whose keys name robots of the call."""
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in robots]
        if unknown:
            raise ValueError(
                f"{name}={dict(value)!r}: keys {unknown!r} name no robot of this call (robots: {list(robots)})"
            )
        return {r: check(f"{name}[{r!r}]", value[r]) for r in robots if r in value}
    return {r: check(name, value) for r in robots}


# --- video ---------------------------------------------------------------------------------

VIDEO_ALIASES: dict[str, str] = {
    "path": "path",
    "file": "path",
    "fps": "fps",
    "frame_rate": "fps",
    "camera": "camera",
    "camera_name": "camera",
    "width": "width",
    "w": "width",
    "height": "height",
    "h": "height",
}
VIDEO_DEFAULTS: dict[str, Any] = {"fps": 30.0, "camera": None, "width": 320, "height": 240}


def video_config(name: str, value: Any) -> dict[str, Any] | None:
    """Normalise video={path, fps, camera, width, height}; None disables recording.

    An unknown key, a non-positive size, or one field spelled twice with two values
    is refused. The camera is probed later, against the scene, before the first episode.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{name}={value!r}: must be a dict like {{'path': 'out.mp4', 'fps': 30}} or None"
        )
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, item in value.items():
        canonical = VIDEO_ALIASES.get(key) if isinstance(key, str) else None
        if canonical is None:
            raise ValueError(
                f"{name}[{key!r}]: unknown key; must be one of path, fps, camera, width, height"
            )
        if canonical in out and out[canonical] != item:
            raise ValueError(
                f"{name}: {canonical!r} given twice with two values "
                f"({spelled[canonical]}={out[canonical]!r}, {key}={item!r})"
            )
        out[canonical] = item
        spelled[canonical] = key
    if (
        "path" not in out
        or not isinstance(out["path"], str | os.PathLike)
        or str(out["path"]) == ""
    ):
        raise ValueError(
            f"{name}['path']={out.get('path')!r}: a non-empty file path is required to record"
        )
    path = Path(out["path"])
    if path.suffix.lower() != ".mp4":
        if path.suffix:
            raise ValueError(f"{name}['path']={str(path)!r}: must be an .mp4 file or a folder")
        path = path / "rollout.mp4"
    if path.exists() and path.is_dir():
        raise ValueError(f"{name}['path']={str(path)!r}: is a folder")
    result = {**VIDEO_DEFAULTS, **{k: v for k, v in out.items() if k != "path"}, "path": str(path)}
    result["fps"] = positive_number(f"{name}['fps']", result["fps"])
    result["width"] = positive_int(f"{name}['width']", result["width"])
    result["height"] = positive_int(f"{name}['height']", result["height"])
    if result["camera"] is not None and not isinstance(result["camera"], str):
        raise ValueError(
            f"{name}['camera']={result['camera']!r}: must be a camera name or None (free camera)"
        )
    return result


def episode_video_path(path: str, episode: int) -> str:
    """eval.mp4 -> eval_ep0.mp4, eval_ep1.mp4, ..."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}_ep{episode}{p.suffix}"))


# --- rosbag mirror ----------------------------------------------------------------------------

BAG_STORAGES = ("mcap", "sqlite3")


def bag_option(name: str, value: Any, trace_path: Path | None) -> str | None:
    """bag="mcap" (True too) | "sqlite3" | False; None: "mcap" when there is a trace_dir.

    Returns the storage, or None for no bag. A bag lives inside its episode's run
    directory (<trace_dir>/<run_id>/bag), so an explicit storage needs a trace_dir.
    """
    if value is None:
        return BAG_STORAGES[0] if trace_path is not None else None
    if value is False:
        return None
    storage = BAG_STORAGES[0] if value is True else value
    if not isinstance(storage, str) or storage not in BAG_STORAGES:
        raise ValueError(
            f"{name}={value!r}: must be 'mcap' (the default), 'sqlite3', or False for no bag"
        )
    if trace_path is None:
        raise ValueError(
            f"{name}={value!r} with trace_dir=None: a bag is written inside the episode's run directory "
            "(<trace_dir>/<run_id>/bag); give a trace_dir, or bag=False"
        )
    import importlib.util

    if importlib.util.find_spec("rosbags") is None:
        raise ValueError(
            f"{name}={value!r}: the rosbags library is not installed (pip install rosbags); or pass bag=False"
        )
    return storage


# --- cameras ----------------------------------------------------------------------------------

CAMERA_SPEC_KEYS = ("pos", "lookat", "xyaxes", "fovy")


def cameras_option(name: str, value: Any) -> dict[str, dict[str, Any] | None]:
    """cameras=[scene camera names] or {name: None | {pos, lookat | xyaxes, fovy}}.

    Returns {name: spec or None}; None names a camera the scene must already have,
    a spec adds the camera (or matches the one of that name already added).
    """
    if value is None:
        return {}
    if isinstance(value, str) or not isinstance(value, Sequence | Mapping):
        raise ValueError(
            f"{name}={value!r}: must be a list of scene camera names or "
            "{name: {'pos': [x, y, z], 'lookat': [x, y, z]}}"
        )
    items = value.items() if isinstance(value, Mapping) else ((c, None) for c in value)
    out: dict[str, dict[str, Any] | None] = {}
    for cam, spec in items:
        if not isinstance(cam, str) or not cam:
            raise ValueError(f"{name}: camera name {cam!r} must be a non-empty string")
        if cam in out:
            raise ValueError(f"{name}: camera {cam!r} is named twice")
        if spec is None:
            out[cam] = None
            continue
        if not isinstance(spec, Mapping):
            raise ValueError(
                f"{name}[{cam!r}]={spec!r}: must be None (a scene camera) or a dict of "
                f"{', '.join(CAMERA_SPEC_KEYS)}"
            )
        unknown = sorted(str(k) for k in spec if k not in CAMERA_SPEC_KEYS)
        if unknown:
            raise ValueError(
                f"{name}[{cam!r}]: unknown keys {unknown}; must be among {', '.join(CAMERA_SPEC_KEYS)}"
            )
        if "pos" not in spec:
            raise ValueError(f"{name}[{cam!r}]={dict(spec)!r}: 'pos' is required to add a camera")
        out[cam] = dict(spec)
    return out


def image_size_option(name: str, value: Any) -> tuple[int, int] | None:
    """image_size=N (square) or (height, width), positive whole numbers; None: the policy's."""
    if value is None:
        return None
    if isinstance(value, Integral) and not isinstance(value, bool):
        size = positive_int(name, value)
        return size, size
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(
            f"{name}={value!r}: must be (height, width), two positive whole numbers, or one number"
        )
    try:
        return positive_int(f"{name}[0]", value[0]), positive_int(f"{name}[1]", value[1])
    except ValueError:
        raise ValueError(
            f"{name}={value!r}: must be (height, width), two positive whole numbers"
        ) from None


def parallel_options(
    *, workers: Any, ray_address: Any, batch_inference: Any, max_batch: Any, max_wait_ms: Any,
    policy_object: Any, observer: Any, on_frame: Any, reset_between: Any,
) -> dict[str, Any]:  # fmt: skip
    """The RolloutPlan fields of a parallel eval (workers > 1 runs episodes on Ray), checked
    before anything starts: what cannot cross a process boundary is refused by name."""
    n = positive_int("workers", workers)
    if ray_address is not None and (not isinstance(ray_address, str) or not ray_address.strip()):
        raise ValueError(
            f"ray_address={ray_address!r}: must be a Ray cluster address such as 'auto' or "
            "'ray://head:10001', or None for a local Ray instance"
        )
    check_flag("batch_inference", batch_inference)
    batch = positive_int("max_batch", max_batch)
    if not is_number(max_wait_ms) or not math.isfinite(float(max_wait_ms)) or max_wait_ms < 0:
        raise ValueError(
            f"max_wait_ms={max_wait_ms!r}: must be a finite number of milliseconds >= 0"
        )
    if n > 1:
        reason = "the episodes run in Ray worker processes"
        if policy_object is not None:
            raise ValueError(
                f"policy_object={policy_object!r}: a live object of this process cannot be shared with "
                f"workers={n} ({reason}); give policy_provider and policy_config instead"
            )
        if observer is not None or on_frame is not None:
            name = "observer" if observer is not None else "on_frame"
            raise ValueError(
                f"{name}: callbacks run in this process and workers={n} runs {reason}; read the run "
                "directories (trace_dir) or use workers=1"
            )
        if reset_between is False:
            raise ValueError(
                f"reset_between=False: each episode continues the previous one's state, so the episodes "
                f"cannot run in parallel (workers={n}); use workers=1"
            )
    return {
        "workers": n,
        "ray_address": ray_address.strip() if isinstance(ray_address, str) else None,
        "batch_inference": batch_inference,
        "max_batch": batch,
        "max_wait_ms": float(max_wait_ms),
    }
