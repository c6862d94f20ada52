"""The `lerobot` provider's policy_config: every key, checked before anything loads.

    create_policy("lerobot", path="/ckpt/pretrained_model", device="cpu")

policy_config keys (all checked by `preflight` before anything starts):
  path (required)      local checkpoint folder
  device               "cpu" | "cuda" | "cuda:N" | "mps" | "auto" (default "auto": CUDA
                       when present, else CPU); CUDA asked and absent is refused by name
  state_keys           robot observation names, one per observation.state index
  action_keys          robot action keys, one per action index
  cameras              {policy camera: robot camera}
  allow_missing_state_keys  feed 0.0 for declared state names the robot lacks (reported)
  rtc                  None (on when the LeRobot policy supports real-time chunking),
                       True (required), False (off), or a dict of RTCConfig fields
  overrides            {config field: value} applied to the checkpoint's config before
                       the model is built (e.g. {"n_action_steps": 10})
  full_chunk           return the whole predicted chunk rather than its first
                       n_action_steps (default: True with RTC, else False)
  plugins              modules to import first (third-party LeRobot policy plugins)
  robot_type           passed to the processors as LeRobot's robot_type (default: the
                       training dataset's, when known); a LeRobot robot family's type
                       (so101_follower) also selects its convention
  convention           the robot convention of the policy's vectors (`conventions.py`):
                       "so_follower" (LeRobot 0.6 degrees mode), "so_follower_range"
                       (-100..100 mode) or "none" (the robot's units); default: the one
                       robot_type implies, else none
  feature_names        {"observation.state": [...], "action": [...],
                       "observation.environment_state": [...]} for a checkpoint that
                       carries no names (its feature_names.json / training dataset win)

`check_config` makes every refusal that needs neither torch nor lerobot (preflight runs
it before a rollout starts); `resolve_device` the ones that need torch; `require_lerobot`
refuses, with the install command, a machine without the optional extra. The provider
is `lerobot.py`, the loaded-checkpoint cache `lerobot_checkpoint.py`; see
`lerobot_binding` for how names bind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from robokernel_ros.policies.conventions import (
    CONVENTIONS,
    RobotConvention,
    convention_for_robot_type,
    get_convention,
)
from robokernel_ros.policies.lerobot_binding import (
    ACTION_KEY,
    ENV_STATE_KEY,
    IMAGE_PREFIX,
    STATE_KEY,
    BindingError,
    PolicyFeatures,
)

INSTALL_HINT = "pip install 'lerobot[diffusion]==0.6.1' (or `make setup`)"
PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
CONFIG_KEYS = (
    "path",
    "device",
    "state_keys",
    "action_keys",
    "cameras",
    "allow_missing_state_keys",
    "rtc",
    "overrides",
    "full_chunk",
    "plugins",
    "robot_type",
    "convention",
    "feature_names",
)
_DEVICES = ("auto", "cpu", "cuda", "mps")


class LerobotNotInstalledError(ImportError, ValueError):
    """torch / lerobot are missing: the optional extra is not installed."""


def require_lerobot() -> None:
    """Refuse, with the install command, when torch or lerobot cannot be imported."""
    missing = []
    for name in ("torch", "lerobot"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    if missing:
        raise LerobotNotInstalledError(
            f"policy_provider='lerobot' needs {' and '.join(missing)}, which are not installed "
            f"(an optional extra of about 5 GB): {INSTALL_HINT}"
        )


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _read_config_json(path: Path) -> dict[str, Any]:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(
            f"policy_config path={str(path)!r}: no config.json - must be a LeRobot checkpoint folder "
            "(what save_pretrained writes: config.json, model.safetensors, policy_*processor.json)"
        )
    try:
        data = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"policy_config path={str(path)!r}: config.json is not valid JSON ({exc})"
        ) from exc
    if not isinstance(data, dict) or not data.get("type"):
        raise ValueError(f"policy_config path={str(path)!r}: config.json names no policy 'type'")
    return data


def resolve_device(device: Any) -> str:
    """The torch device for a policy_config device; refuses an absent accelerator by name."""
    if not isinstance(device, str) or not (device in _DEVICES or re.fullmatch(r"cuda:\d+", device)):
        raise ValueError(
            f"policy_config device={device!r}: must be one of {list(_DEVICES)} or 'cuda:N'"
        )
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"policy_config device={device!r}: CUDA is not available on this machine "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); use device='cpu' or 'auto'"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"policy_config device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    if device == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise ValueError(
            f"policy_config device={device!r}: MPS is not available on this machine; use 'cpu'"
        )
    return device


def check_config(config: Mapping[str, Any]) -> tuple[Path, dict[str, Any], PolicyFeatures]:
    """Every refusal that needs neither torch nor lerobot; returns what it read."""
    if not isinstance(config, Mapping):
        raise ValueError(f"policy_config={config!r}: must be a dict")
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"policy_config keys {unknown}: unknown to the lerobot provider (known: {list(CONFIG_KEYS)})"
        )
    raw_path = config.get("path")
    if not isinstance(raw_path, (str, os.PathLike)) or not str(raw_path):
        raise ValueError(
            f"policy_config path={raw_path!r}: required, a local LeRobot checkpoint folder"
        )
    path = Path(raw_path).expanduser()
    if not path.is_dir():
        raise ValueError(
            f"policy_config path={str(raw_path)!r}: not a folder on this machine (hub ids are not fetched: "
            "download the checkpoint first and pass its folder)"
        )
    cfg = _read_config_json(path)
    for name in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE):
        if not (path / name).is_file():
            raise ValueError(
                f"policy_config path={str(raw_path)!r}: no {name} - save the processors with the checkpoint "
                "(make_pre_post_processors(cfg, dataset_stats=...) then save_pretrained(path) on both)"
            )
    device = config.get("device", "auto")
    if not isinstance(device, str) or not (device in _DEVICES or re.fullmatch(r"cuda:\d+", device)):
        raise ValueError(
            f"policy_config device={device!r}: must be one of {list(_DEVICES)} or 'cuda:N'"
        )
    for flag in ("allow_missing_state_keys", "full_chunk"):
        if flag in config and not _is_bool(config[flag]):
            raise ValueError(
                f"policy_config {flag}={config[flag]!r}: must be a boolean (true or false)"
            )
    rtc = config.get("rtc")
    if rtc is not None and not _is_bool(rtc) and not isinstance(rtc, Mapping):
        raise ValueError(
            f"policy_config rtc={rtc!r}: must be None, a boolean, or a dict of RTCConfig fields"
        )
    overrides = config.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise ValueError(f"policy_config overrides={overrides!r}: must be a dict of config fields")
    bad = sorted(
        k for k in overrides if k not in cfg or k in ("type", "input_features", "output_features")
    )
    if bad:
        raise ValueError(
            f"policy_config overrides keys {bad}: not overridable fields of this {cfg['type']} checkpoint's config.json"
        )
    plugins = config.get("plugins") or []
    if isinstance(plugins, str) or not all(isinstance(p, str) and p for p in plugins):
        raise ValueError(f"policy_config plugins={plugins!r}: must be a list of module names")
    robot_type = config.get("robot_type", "")
    if not isinstance(robot_type, str):
        raise ValueError(f"policy_config robot_type={robot_type!r}: must be a string")
    convention = config.get("convention")
    if convention is not None and convention != "none" and convention not in CONVENTIONS:
        raise ValueError(
            f"policy_config convention={convention!r}: must be one of {['none', *CONVENTIONS]}"
        )
    feature_names = config.get("feature_names")
    if feature_names is not None and (
        not isinstance(feature_names, Mapping)
        or not all(
            isinstance(v, (Sequence, Mapping)) and not isinstance(v, str)
            for v in feature_names.get("features", feature_names).values()
        )
    ):
        raise ValueError(
            f"policy_config feature_names={feature_names!r}: must map feature keys "
            f"({STATE_KEY}, {ACTION_KEY}, {ENV_STATE_KEY}) to lists of names"
        )
    try:
        features = PolicyFeatures.from_config_json(cfg)
    except BindingError as exc:
        raise ValueError(f"policy_config path={str(raw_path)!r}: {exc}") from exc
    if features.other_inputs:
        raise ValueError(
            f"policy_config path={str(raw_path)!r}: the policy needs inputs {sorted(features.other_inputs)}, which "
            f"the lerobot provider cannot bind (it binds {STATE_KEY}, {ENV_STATE_KEY} and {IMAGE_PREFIX}<camera>)"
        )
    for key, dim in (("state_keys", features.state_dim), ("action_keys", features.action_dim)):
        value = config.get(key)
        if value is None:
            continue
        if (
            isinstance(value, str)
            or not isinstance(value, Sequence)
            or not all(isinstance(v, str) and v for v in value)
        ):
            raise ValueError(f"policy_config {key}={value!r}: must be a list of names")
        if dim is None:
            raise ValueError(
                f"policy_config {key}={list(value)!r}: this policy has no {STATE_KEY} input"
            )
        if len(value) != dim:
            vector = STATE_KEY if key == "state_keys" else ACTION_KEY
            raise ValueError(
                f"policy_config {key} has {len(value)} names (shape ({len(value)},)) but the policy's {vector} "
                f"has shape ({dim},)"
            )
    cams = config.get("cameras")
    if cams is not None:
        if not isinstance(cams, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in cams.items()
        ):
            raise ValueError(
                f"policy_config cameras={cams!r}: must map policy camera names to robot camera names"
            )
        unknown_cams = [k for k in cams if k.removeprefix(IMAGE_PREFIX) not in features.cameras]
        if unknown_cams:
            raise ValueError(
                f"policy_config cameras keys {unknown_cams}: the policy's cameras are {list(features.cameras)}"
            )
    return path, cfg, features


def convention_of(config: Mapping[str, Any], robot_type: str) -> RobotConvention | None:
    """policy_config convention, else the one robot_type implies, else None."""
    name = config.get("convention")
    if name == "none":
        return None
    if name is not None:
        return get_convention(name)
    return convention_for_robot_type(robot_type)
