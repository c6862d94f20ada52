"""The `lerobot` provider's policy_config: one validated dataclass, every key checked before
anything loads.

    create_policy("lerobot", path="/ckpt/pretrained_model", device="cpu")
    config = LerobotConfig.from_mapping({"path": "/ckpt/pretrained_model"})  # ValueError
    config.features, config.checkpoint_config                               # what it read

`LerobotConfig`'s fields are the policy_config keys, each documented there; its
`__post_init__` makes every refusal that needs neither torch nor lerobot (preflight runs it
before a rollout starts), reading the checkpoint folder's config.json and processor files,
and each refusal is one line naming the key and its domain (`policy_config device='gpu':
must be one of [...]`). `resolve_device` makes the ones that need torch; `require_lerobot`
refuses, with the install command, a machine without the optional extra. The provider is
`lerobot.py`, the loaded-checkpoint cache `lerobot_checkpoint.py`; see `lerobot_binding`
for how names bind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
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


def _refuse(key: str, value: Any, domain: str) -> ValueError:
    return ValueError(f"policy_config {key}={value!r}: {domain}")


def _is_names(value: Any) -> bool:
    return (
        not isinstance(value, str)
        and isinstance(value, Sequence)
        and all(isinstance(v, str) and v for v in value)
    )


@dataclass(frozen=True)
class LerobotConfig:
    """The lerobot provider's policy_config, validated on construction (ValueError, one
    line naming the key and its domain). Checked in field order, the checkpoint folder
    first; the keys that depend on the checkpoint (overrides, state_keys, action_keys,
    cameras) are checked against what it declares."""

    #: local checkpoint folder (required; hub ids are not fetched)
    path: str | os.PathLike | None = None
    #: "cpu" | "cuda" | "cuda:N" | "mps" | "auto" (CUDA when present, else CPU); CUDA
    #: asked and absent is refused by name (`resolve_device`)
    device: str = "auto"
    #: robot observation names, one per observation.state index
    state_keys: Sequence[str] | None = None
    #: robot action keys, one per action index
    action_keys: Sequence[str] | None = None
    #: {policy camera: robot camera}
    cameras: Mapping[str, str] | None = None
    #: feed 0.0 for declared state names the robot lacks (reported)
    allow_missing_state_keys: bool = False
    #: None (on when the LeRobot policy supports real-time chunking), True (required),
    #: False (off), or a dict of RTCConfig fields
    rtc: bool | Mapping[str, Any] | None = None
    #: {config field: value} applied to the checkpoint's config before the model is built
    #: (e.g. {"n_action_steps": 10})
    overrides: Mapping[str, Any] | None = None
    #: return the whole predicted chunk rather than its first n_action_steps (None: True
    #: with RTC, else False)
    full_chunk: bool | None = None
    #: modules to import first (third-party LeRobot policy plugins)
    plugins: Sequence[str] | None = None
    #: passed to the processors as LeRobot's robot_type ('': the training dataset's, when
    #: known); a LeRobot robot family's type (so101_follower) also selects its convention
    robot_type: str = ""
    #: the robot convention of the policy's vectors (`conventions.py`): "so_follower"
    #: (LeRobot 0.6 degrees mode), "so_follower_range" (-100..100 mode) or "none" (the
    #: robot's units); None: the one robot_type implies, else none
    convention: str | None = None
    #: {"observation.state": [...], "action": [...], "observation.environment_state":
    #: [...]} for a checkpoint that carries no names (its feature_names.json / training
    #: dataset win)
    feature_names: Mapping[str, Any] | None = None

    #: the checkpoint folder, its config.json and the features it declares (read here)
    folder: Path = field(init=False, repr=False, compare=False)
    checkpoint_config: dict[str, Any] = field(init=False, repr=False, compare=False)
    features: PolicyFeatures = field(init=False, repr=False, compare=False)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> LerobotConfig:
        """The policy_config mapping as a LerobotConfig; unknown keys refused by name."""
        if not isinstance(config, Mapping):
            raise ValueError(f"policy_config={config!r}: must be a dict")
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(
                f"policy_config keys {unknown}: unknown to the lerobot provider (known: {list(CONFIG_KEYS)})"
            )
        return cls(**config)

    def __post_init__(self) -> None:
        folder, cfg = self._check_folder()
        device = self.device
        if not isinstance(device, str) or not (
            device in _DEVICES or re.fullmatch(r"cuda:\d+", device)
        ):
            raise _refuse("device", device, f"must be one of {list(_DEVICES)} or 'cuda:N'")
        for flag in ("allow_missing_state_keys", "full_chunk"):
            value = getattr(self, flag)
            if not isinstance(value, bool) and not (flag == "full_chunk" and value is None):
                raise _refuse(flag, value, "must be a boolean (true or false)")
        rtc = self.rtc
        if rtc is not None and not isinstance(rtc, bool) and not isinstance(rtc, Mapping):
            raise _refuse("rtc", rtc, "must be None, a boolean, or a dict of RTCConfig fields")
        overrides = self.overrides or {}
        if not isinstance(overrides, Mapping):
            raise _refuse("overrides", overrides, "must be a dict of config fields")
        bad = sorted(
            k
            for k in overrides
            if k not in cfg or k in ("type", "input_features", "output_features")
        )
        if bad:
            raise ValueError(
                f"policy_config overrides keys {bad}: not overridable fields of this {cfg['type']} checkpoint's config.json"
            )
        plugins = self.plugins or []
        if isinstance(plugins, str) or not all(isinstance(p, str) and p for p in plugins):
            raise _refuse("plugins", plugins, "must be a list of module names")
        if not isinstance(self.robot_type, str):
            raise _refuse("robot_type", self.robot_type, "must be a string")
        convention = self.convention
        if convention is not None and convention != "none" and convention not in CONVENTIONS:
            raise _refuse("convention", convention, f"must be one of {['none', *CONVENTIONS]}")
        feature_names = self.feature_names
        if feature_names is not None and (
            not isinstance(feature_names, Mapping)
            or not all(
                isinstance(v, (Sequence, Mapping)) and not isinstance(v, str)
                for v in feature_names.get("features", feature_names).values()
            )
        ):
            raise _refuse(
                "feature_names",
                feature_names,
                f"must map feature keys ({STATE_KEY}, {ACTION_KEY}, {ENV_STATE_KEY}) to lists of names",
            )
        features = self._check_features(cfg)
        object.__setattr__(self, "folder", folder)
        object.__setattr__(self, "checkpoint_config", cfg)
        object.__setattr__(self, "features", features)

    def _check_folder(self) -> tuple[Path, dict[str, Any]]:
        """The checkpoint folder and its config.json; refused unless it has the processors."""
        raw_path = self.path
        if not isinstance(raw_path, (str, os.PathLike)) or not str(raw_path):
            raise _refuse("path", raw_path, "required, a local LeRobot checkpoint folder")
        path = Path(raw_path).expanduser()
        if not path.is_dir():
            raise _refuse(
                "path",
                str(raw_path),
                "not a folder on this machine (hub ids are not fetched: download the "
                "checkpoint first and pass its folder)",
            )
        cfg = _read_config_json(path)
        for name in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE):
            if not (path / name).is_file():
                raise ValueError(
                    f"policy_config path={str(raw_path)!r}: no {name} - save the processors with the checkpoint "
                    "(make_pre_post_processors(cfg, dataset_stats=...) then save_pretrained(path) on both)"
                )
        return path, cfg

    def _check_features(self, cfg: dict[str, Any]) -> PolicyFeatures:
        """The checkpoint's features; state_keys, action_keys and cameras checked on them."""
        raw_path = str(self.path)
        try:
            features = PolicyFeatures.from_config_json(cfg)
        except BindingError as exc:
            raise ValueError(f"policy_config path={raw_path!r}: {exc}") from exc
        if features.other_inputs:
            raise ValueError(
                f"policy_config path={raw_path!r}: the policy needs inputs {sorted(features.other_inputs)}, which "
                f"the lerobot provider cannot bind (it binds {STATE_KEY}, {ENV_STATE_KEY} and {IMAGE_PREFIX}<camera>)"
            )
        for key, dim in (("state_keys", features.state_dim), ("action_keys", features.action_dim)):
            value = getattr(self, key)
            if value is None:
                continue
            if not _is_names(value):
                raise _refuse(key, value, "must be a list of names")
            if dim is None:
                raise _refuse(key, list(value), f"this policy has no {STATE_KEY} input")
            if len(value) != dim:
                vector = STATE_KEY if key == "state_keys" else ACTION_KEY
                raise ValueError(
                    f"policy_config {key} has {len(value)} names (shape ({len(value)},)) but the policy's {vector} "
                    f"has shape ({dim},)"
                )
        cams = self.cameras
        if cams is not None:
            if not isinstance(cams, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in cams.items()
            ):
                raise _refuse("cameras", cams, "must map policy camera names to robot camera names")
            unknown_cams = [k for k in cams if k.removeprefix(IMAGE_PREFIX) not in features.cameras]
            if unknown_cams:
                raise ValueError(
                    f"policy_config cameras keys {unknown_cams}: the policy's cameras are {list(features.cameras)}"
                )
        return features

    def convention_for(self, robot_type: str) -> RobotConvention | None:
        """`convention`, else the one robot_type implies, else None."""
        if self.convention == "none":
            return None
        if self.convention is not None:
            return get_convention(self.convention)
        return convention_for_robot_type(robot_type)


#: the policy_config keys (LerobotConfig's fields)
CONFIG_KEYS = tuple(f.name for f in fields(LerobotConfig) if f.init)
