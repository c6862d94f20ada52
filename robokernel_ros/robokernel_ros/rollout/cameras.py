"""The cameras a rollout's environment renders: what the policy needs plus what was asked.

A policy that reads images says which robot cameras it needs and at which size: a
Policy object through `required_cameras()` ({camera: (height, width)}), a provider
class through a `required_cameras_for(config)` class method, and the lerobot provider
from its checkpoint's config.json (`observation.images.<camera>` input features, the
policy_config / feature_names.json camera mapping applied) without loading the weights.
The call's own `cameras=` (scene camera names, or {name: {pos, lookat | xyaxes, fovy}}
to add a camera) and `image_size=` come on top.

`resolve_cameras(plan, scene)` runs at the entry point, before the robot is claimed:
it refuses a camera the scene lacks (naming it), sizes that disagree, and adds the
cameras the call defines. The environment then renders every camera at one size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_IMAGE_SIZE = (96, 96)  # MujocoEnv's default (height, width)

# Fixed cameras for the packaged robots, by name (the shell's --add-camera NAME): a robot
# at the origin, seen from its front (+x), from above and from its left (+y).
CAMERA_PRESETS: dict[str, dict[str, dict[str, list[float]]]] = {
    "so101": {
        "front": {"pos": [0.55, 0.0, 0.35], "lookat": [0.1, 0.0, 0.1]},
        "top": {"pos": [0.15, 0.0, 0.8], "lookat": [0.15, 0.0, 0.0]},
        "side": {"pos": [0.15, 0.55, 0.3], "lookat": [0.15, 0.0, 0.1]},
    },
    "panda": {
        "front": {"pos": [1.8, 0.0, 1.2], "lookat": [0.3, 0.0, 0.5]},
        "top": {"pos": [0.4, 0.0, 2.0], "lookat": [0.4, 0.0, 0.0]},
        "side": {"pos": [0.3, 1.8, 1.0], "lookat": [0.3, 0.0, 0.5]},
    },
    "go2": {
        "front": {"pos": [1.5, 0.0, 0.6], "lookat": [0.0, 0.0, 0.25]},
        "top": {"pos": [0.0, 0.0, 2.5], "lookat": [0.0, 0.0, 0.0]},
        "side": {"pos": [0.0, 1.8, 0.6], "lookat": [0.0, 0.0, 0.25]},
    },
}


def camera_option(model: str, text: str) -> tuple[str, dict[str, Any] | None]:
    """One --add-camera value -> (name, cameras= spec).

    NAME: the preset of that name for the packaged `model` (CAMERA_PRESETS), else a camera
    the scene already has (spec None); NAME={"pos": [x, y, z], "lookat": [x, y, z],
    "fovy": 45} (or "xyaxes") defines a camera."""
    name, sep, spec = str(text).partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f'--add-camera={text!r}: give NAME or NAME={{"pos": [...], ...}}')
    if sep:
        try:
            parsed = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--add-camera={text!r}: the spec is not JSON ({exc})") from None
        if not isinstance(parsed, dict) or "pos" not in parsed:
            raise ValueError(
                f"--add-camera={text!r}: the spec must be an object with pos and lookat "
                '(or xyaxes), e.g. {"pos": [0.5, 0, 0.3], "lookat": [0, 0, 0.1]}'
            )
        return name, parsed
    preset = CAMERA_PRESETS.get(str(model), {}).get(name)
    return name, (dict(preset) if preset is not None else None)


def policy_camera_needs(
    provider: str, config: Mapping[str, Any], obj: Any
) -> dict[str, tuple[int, int]]:
    """{robot camera: (height, width)} the policy reads ({} for a policy without images)."""
    if obj is not None:
        fn = getattr(obj, "required_cameras", None)
        return _sizes(fn()) if callable(fn) else {}
    from robokernel_ros.policies.base import provider_class

    cls = provider_class(provider)
    fn = getattr(cls, "required_cameras_for", None)
    if callable(fn):
        return _sizes(fn(dict(config)))
    if provider == "lerobot":
        return _lerobot_needs(config)
    return {}


def _sizes(raw: Any) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for cam, size in dict(raw or {}).items():
        h, w = size[-2], size[-1]  # (h, w) or (c, h, w)
        out[str(cam)] = (int(h), int(w))
    return out


def _lerobot_needs(config: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """The checkpoint's image inputs, as robot cameras (config.json only: no torch, no weights)."""
    from robokernel_ros.policies.lerobot_binding import (
        PolicyFeatures,
        merge_explicit,
        read_checkpoint_names,
    )

    path = Path(str(config["path"])).expanduser()  # the provider's preflight checked it
    cfg = json.loads((path / "config.json").read_text())
    features = PolicyFeatures.from_config_json(cfg)
    names = merge_explicit(read_checkpoint_names(path, cfg), config)
    return {
        names.camera_map.get(cam, cam): (int(h), int(w))
        for cam, (_c, h, w) in features.cameras.items()
    }


def resolve_cameras(plan: Any, scene: Any) -> None:
    """Fill plan.env_cameras / plan.env_image_size; add the cameras the call defines.

    Raises ValueError naming the camera, the parameter and what the scene offers.
    """
    needs: dict[str, tuple[int, int]] = {}
    needed_by: dict[str, str] = {}
    for robot, (provider, config, obj) in plan.policies.items():
        for cam, size in policy_camera_needs(provider, config, obj).items():
            if cam in needs and needs[cam] != size:
                raise ValueError(
                    f"camera {cam!r}: the policies of {needed_by[cam]!r} and {robot!r} need it at "
                    f"{needs[cam]} and {size} (height, width); the environment renders one size"
                )
            needs[cam] = size
            needed_by[cam] = robot
    asked = dict(plan.cameras)
    if not needs and not asked:
        if plan.image_size is not None:
            raise ValueError(
                f"image_size={plan.image_size!r}: no camera is rendered (the policy reads no images "
                "and cameras= is empty); give cameras= too"
            )
        plan.env_cameras, plan.env_image_size = (), None
        return
    sizes = sorted(set(needs.values()))
    if len(sizes) > 1:
        raise ValueError(
            f"the policy needs cameras at different sizes {needs} (height, width); the environment "
            "renders every camera at one image_size"
        )
    image_size = plan.image_size
    if sizes:
        if image_size is not None and tuple(image_size) != sizes[0]:
            raise ValueError(
                f"image_size={plan.image_size!r}: the policy needs {sizes[0]} (height, width) for "
                f"cameras {sorted(needs)}"
            )
        image_size = sizes[0]
    names = list(asked) + [c for c in needs if c not in asked]
    can_add = callable(getattr(scene, "add_camera", None))
    existing = list(scene.cameras())
    missing = [c for c in names if c not in existing and asked.get(c) is None]
    if missing:
        cam = missing[0]
        if cam in needs:
            h, w = needs[cam]
            raise ValueError(
                f"camera {cam!r}: the {plan.policies[needed_by[cam]][0]} policy of {needed_by[cam]!r} needs it "
                f"({h}x{w}) and the scene has no such camera (its cameras: {existing}); add it with "
                f"add_camera({cam!r}, pos=..., lookat=...) or cameras={{{cam!r}: {{'pos': [...], 'lookat': [...]}}}}, "
                "or map the policy's camera to a scene camera in policy_config"
                f"{_shell_hint(cam)}"
            )
        raise ValueError(
            f"cameras: {cam!r} is not a camera of the scene (its cameras: {existing}); "
            f"define it as cameras={{{cam!r}: {{'pos': [...], 'lookat': [...]}}}}{_shell_hint(cam)}"
        )
    for cam, spec in asked.items():
        if spec is None:
            continue
        if not can_add:
            raise ValueError(
                f"cameras[{cam!r}]={spec!r}: this workcell cannot add cameras (a ROS robot's cameras are its "
                "camera topics); name existing cameras only"
            )
        if cam in existing:
            _same_camera(scene, cam, spec)
            continue
        try:
            scene.add_camera(cam, **spec)
        except ValueError as exc:
            raise ValueError(f"cameras[{cam!r}]={spec!r}: {exc}") from None
        existing.append(cam)
    if not can_add:
        # a robot whose camera topics fill its observation: nothing to render or size
        plan.env_cameras, plan.env_image_size = (), None
        return
    plan.env_cameras = tuple(names)
    plan.env_image_size = tuple(image_size) if image_size is not None else DEFAULT_IMAGE_SIZE


def _shell_hint(cam: str) -> str:
    presets = sorted({name for cams in CAMERA_PRESETS.values() for name in cams})
    return (
        f"; from the shell: --add-camera {cam} on a packaged robot when {cam!r} is one of its "
        f'presets ({", ".join(presets)}), else --add-camera \'{cam}={{"pos": [x, y, z], '
        '"lookat": [x, y, z]}\''
    )


def _same_camera(scene: Any, cam: str, spec: Mapping[str, Any]) -> None:
    """A defined camera already in the scene is reused only when it is the same camera."""
    entry = getattr(scene, "_cameras", {}).get(cam)
    if entry is None:
        raise ValueError(
            f"cameras[{cam!r}]: the scene already has a camera {cam!r} (of a robot or a loaded scene); "
            f"name it without a definition, or define another name"
        )
    from robokernel_ros.envs.geometry import xyaxes_from_lookat

    pos = tuple(float(v) for v in spec["pos"])
    if spec.get("xyaxes") is not None:
        axes = tuple(float(v) for v in spec["xyaxes"])
    else:
        axes = xyaxes_from_lookat(pos, spec.get("lookat") or (0.0, 0.0, 0.0))
    fovy = float(spec.get("fovy", 45.0))
    same = _close(pos, entry.pos) and _close(axes, entry.xyaxes) and math.isclose(fovy, entry.fovy)
    if not same:
        raise ValueError(
            f"cameras[{cam!r}]={dict(spec)!r}: the scene already has a camera {cam!r} placed differently "
            f"(pos={list(entry.pos)}); remove_camera({cam!r}) first or use another name"
        )


def _close(a: Any, b: Any) -> bool:
    a, b = tuple(a), tuple(b)
    return len(a) == len(b) and all(
        math.isclose(x, y, abs_tol=1e-9) for x, y in zip(a, b, strict=True)
    )
