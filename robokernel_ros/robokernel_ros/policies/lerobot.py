"""The `lerobot` policy provider: a local LeRobot checkpoint folder as a Policy.

    create_policy("lerobot", path="/ckpt/pretrained_model", device="cpu")

The folder is what LeRobot's `save_pretrained` writes: `config.json`,
`model.safetensors`, and the processor pipelines `policy_preprocessor.json` /
`policy_postprocessor.json` (with their state files). It is loaded the way LeRobot
loads it (`PreTrainedConfig.from_pretrained`, the policy class's `from_pretrained`,
`make_pre_post_processors(cfg, pretrained_path=...)`), once per process for each
(folder, device): a second policy on the same checkpoint reuses the loaded weights and
reports `load_cache_hit=True`.

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

See `lerobot_binding` for how names bind. torch and lerobot are imported lazily: the
module imports without them, and using the provider without them is refused with the
install command.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.policies.base import Action, ActionRows, Policy, register_provider
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
    ActionBinding,
    BindingError,
    CameraBinding,
    DeclaredNames,
    PolicyFeatures,
    StateBinding,
    bind_actions,
    bind_cameras,
    bind_env_state,
    bind_state,
    merge_explicit,
    read_checkpoint_names,
)

logger = logging.getLogger(__name__)

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


def _check_config(config: Mapping[str, Any]) -> tuple[Path, dict[str, Any], PolicyFeatures]:
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


# ---------------------------------------------------------------------------------
# The process-wide cache of loaded checkpoints
# ---------------------------------------------------------------------------------


@dataclass
class LoadedCheckpoint:
    """A checkpoint loaded once: model, config, processors; shared by policies on it."""

    key: tuple[Any, ...]
    path: Path
    device: str
    model: Any
    config: Any
    preprocessor: Any
    postprocessor: Any
    load_time_s: float
    rss_after_mb: float
    lock: threading.RLock = field(default_factory=threading.RLock)
    rtc_signature: bool = False


_CACHE: dict[tuple[Any, ...], LoadedCheckpoint] = {}
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every loaded checkpoint (the next create_policy loads again)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def cached_checkpoints() -> list[tuple[str, str]]:
    with _CACHE_LOCK:
        return [(str(v.path), v.device) for v in _CACHE.values()]


def resident_rss_mb() -> float:
    """Resident set size of this process, in MiB (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cache_key(path: Path, device: str, overrides: Mapping[str, Any], rtc: Any) -> tuple[Any, ...]:
    stamps = []
    for name in ("config.json", "model.safetensors"):
        f = path / name
        stamps.append(f.stat().st_mtime_ns if f.exists() else 0)
    return (
        str(path.resolve()),
        device,
        tuple(stamps),
        json.dumps(dict(overrides), sort_keys=True, default=str),
        json.dumps(rtc, sort_keys=True, default=str) if isinstance(rtc, Mapping) else rtc,
    )


def _lerobot_supports_rtc(model: Any) -> bool:
    """LeRobot's own test (lerobot.rollout.inference.rtc.supports_rtc_inference)."""
    import inspect

    probe = getattr(model, "supports_rtc", None)
    if not callable(probe) or not probe():
        return False
    try:
        inspect.signature(model.predict_action_chunk).bind(
            object(), inference_delay=0, prev_chunk_left_over=None
        )
    except (TypeError, ValueError):
        return False
    return True


def _load_checkpoint(
    path: Path, device: str, overrides: Mapping[str, Any], rtc: Any
) -> tuple[LoadedCheckpoint, bool]:
    key = _cache_key(path, device, overrides, rtc)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit, True
        start = time.monotonic()
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        cfg = PreTrainedConfig.from_pretrained(str(path))
        cfg.device = device
        if hasattr(cfg, "pretrained_path"):
            cfg.pretrained_path = path
        for name, value in overrides.items():
            setattr(cfg, name, value)
        policy_cls = get_policy_class(cfg.type)
        model = policy_cls.from_pretrained(str(path), config=cfg)
        model.to(device)
        model.eval()
        rtc_capable = _lerobot_supports_rtc(model)
        if rtc is True and not rtc_capable:
            raise ValueError(
                f"policy_config rtc=True: the {cfg.type} policy does not support real-time chunking in lerobot "
                "(supports_rtc() is False or predict_action_chunk takes no inference_delay/prev_chunk_left_over)"
            )
        if rtc_capable and rtc is not False:
            from lerobot.policies.rtc.configuration_rtc import RTCConfig

            if isinstance(rtc, Mapping):
                cfg.rtc_config = RTCConfig(**dict(rtc))
            elif getattr(cfg, "rtc_config", None) is None:
                cfg.rtc_config = RTCConfig(
                    execution_horizon=int(getattr(cfg, "n_action_steps", 10) or 10)
                )
            if hasattr(model, "init_rtc_processor"):
                model.init_rtc_processor()
        elif rtc is False and getattr(cfg, "rtc_config", None) is not None:
            cfg.rtc_config = None
            if hasattr(model, "init_rtc_processor"):
                model.init_rtc_processor()
        pre, post = make_pre_post_processors(
            cfg,
            pretrained_path=str(path),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
        loaded = LoadedCheckpoint(
            key=key,
            path=path,
            device=device,
            model=model,
            config=cfg,
            preprocessor=pre,
            postprocessor=post,
            load_time_s=time.monotonic() - start,
            rss_after_mb=resident_rss_mb(),
            rtc_signature=rtc_capable and rtc is not False,
        )
        _CACHE[key] = loaded
        return loaded, False


# ---------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------


class LerobotPolicy(Policy):
    """A LeRobot checkpoint behind the Policy protocol, bound to a robot by name."""

    provider = "lerobot"

    def __init__(self, **config: Any) -> None:
        super().__init__()
        require_lerobot()
        path, cfg_json, features = _check_config(config)
        for module in config.get("plugins") or []:
            importlib.import_module(module)
        self.config = dict(config)
        self.path = path
        self.features = features
        self.policy_type = features.policy_type
        self.device = resolve_device(config.get("device", "auto"))
        self.allow_missing_state_keys = bool(config.get("allow_missing_state_keys", False))
        try:
            declared = read_checkpoint_names(path, cfg_json)
        except BindingError as exc:
            raise ValueError(f"policy_config path={str(path)!r}: {exc}") from exc
        self.names: DeclaredNames = merge_explicit(declared, config)
        self.robot_type = config.get("robot_type") or self.names.robot_type or ""
        self.convention: RobotConvention | None = _convention(config, self.robot_type)

        create_start = time.monotonic()
        self._loaded, self.load_cache_hit = _load_checkpoint(
            path, self.device, config.get("overrides") or {}, config.get("rtc")
        )
        self.load_time_s = time.monotonic() - create_start
        self.checkpoint_load_time_s = self._loaded.load_time_s
        self.resident_rss_mb = resident_rss_mb()
        lr_cfg = self._loaded.config

        self.supports_rtc = bool(self._loaded.rtc_signature)
        # RTC merges the whole predicted chunk (as LeRobot's RTC engine does), so its
        # tail is there to blend with and to cover the inference delay.
        self.full_chunk = bool(config.get("full_chunk", self.supports_rtc))
        n_action_steps = int(getattr(lr_cfg, "n_action_steps", 1) or 1)
        ensembling = getattr(lr_cfg, "temporal_ensemble_coeff", None) is not None
        self.chunk_mode = (n_action_steps > 1 or self.supports_rtc) and not ensembling
        self.execution_horizon = n_action_steps if self.chunk_mode else 1
        # Diffusion keeps an observation history (n_obs_steps) that its select_action
        # fills and its predict_action_chunk only reads: fill it here, once per chunk.
        self._feeds_history = self.policy_type == "diffusion" and hasattr(
            self._loaded.model, "_queues"
        )
        self._unnormalizer = next(
            (
                s
                for s in self._loaded.postprocessor.steps
                if type(s).__name__ == "UnnormalizerProcessorStep"
            ),
            None,
        )
        self._action_binding: ActionBinding | None = None
        self._state_binding: StateBinding | None = None
        self._env_state_binding: StateBinding | None = None
        self._camera_binding: CameraBinding | None = None
        self._instruction = ""
        self.last_rtc_call: dict[str, Any] | None = None
        self.last_inference_s = 0.0

    # -- Policy protocol ---------------------------------------------------------

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        require_lerobot()
        _check_config(config)
        device = config.get("device", "auto")
        if isinstance(device, str) and device not in ("auto", "cpu"):
            resolve_device(device)

    @classmethod
    def batch_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """Chunk policies without per-episode state batch: ACT-style predict_action_chunk.
        Diffusion keeps an observation history per episode, RTC blends each episode's
        own queue, and a temporal ensemble accumulates per episode: those cannot."""
        _, cfg_json, features = _check_config(config)
        if features.policy_type == "diffusion":
            return "a diffusion checkpoint keeps a per-episode observation history (n_obs_steps)"
        if config.get("rtc") or cfg_json.get("rtc_config"):
            return "RTC guidance blends each episode's own queued actions"
        if cfg_json.get("temporal_ensemble_coeff") is not None:
            return "a temporal ensemble accumulates per episode"
        if int(cfg_json.get("n_action_steps") or 1) <= 1:
            return "a single-step (select_action) checkpoint queues actions per episode"
        return None

    def get_actions_batch(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> list[list[Action]]:
        """One predict_action_chunk over all observations (each bound as get_actions binds
        it); returns each observation's chunk. See batch_refusal for who may call it."""
        if not observations:
            return []
        if self._state_binding is None and self._camera_binding is None:
            self.bind_observation(observations[0])
        assert self._action_binding is not None
        import torch

        loaded = self._loaded
        parts = [
            self._batch(o, t or self._instruction)
            for o, t in zip(observations, instructions, strict=True)
        ]
        batch: dict[str, Any] = {
            k: torch.cat([p[k] for p in parts]) for k in parts[0] if k not in ("task", "robot_type")
        }
        batch["task"] = [p["task"] for p in parts]
        batch["robot_type"] = self.robot_type
        start = time.monotonic()
        with loaded.lock, torch.inference_mode():
            actions = loaded.model.predict_action_chunk(loaded.preprocessor(batch))
            if not self.full_chunk:
                actions = actions[:, : self.execution_horizon]
            actions = loaded.postprocessor(actions)
        self.last_inference_s = time.monotonic() - start
        array = actions.detach().to("cpu", torch.float32).numpy()
        return [_as_actions(self._action_binding.keys, self._to_robot(chunk)) for chunk in array]

    def set_robot_state_keys(self, action_keys: Sequence[str]) -> None:
        """Bind the action vector to the robot's action keys; refuses a mismatch now."""
        super().set_robot_state_keys(action_keys)
        try:
            self._action_binding = bind_actions(
                self.features, self.names, self.action_keys, convention=self.convention
            )
        except BindingError:
            self._action_binding = None
            raise
        if self._action_binding.positional:
            self._flag_positional("action", self._action_binding.keys)
        if self._action_binding.generic:
            self.generic_state_keys_used = True
        if self._action_binding.unbound_robot_keys:
            logger.warning(
                "lerobot policy %s drives %s; robot action keys %s are not commanded by it",
                self.path,
                self._action_binding.keys,
                self._action_binding.unbound_robot_keys,
            )
        self._state_binding = None
        self._env_state_binding = None
        self._camera_binding = None

    def bind_observation(self, observation: Mapping[str, Any]) -> None:
        """Bind observation.state and the cameras; refuses a mismatch before any inference.

        get_actions calls it on the first observation; a runner may call it right
        after env.reset to refuse before the first step.
        """
        if self._action_binding is None:
            if not self.action_keys:
                raise BindingError(
                    "the lerobot policy has no robot action keys: call set_robot_state_keys(robot action keys) first"
                )
            self.set_robot_state_keys(self.action_keys)
        state = bind_state(
            self.features,
            self.names,
            observation,
            robot_action_keys=self.action_keys,
            allow_missing=self.allow_missing_state_keys,
            convention=self.convention,
        )
        env_state = bind_env_state(self.features, self.names, observation)
        cameras = bind_cameras(self.features, self.names, observation)
        self._state_binding = state
        self._env_state_binding = env_state
        self._camera_binding = cameras
        if state is not None:
            if state.positional:
                self._flag_positional("state", state.sources)
            self.generic_state_keys_used |= state.generic
            self.missing_state_keys_used |= bool(state.missing)
        if cameras.positional:
            self._flag_positional("camera", cameras.robot_camera)

    def _flag_positional(self, what: str, bound: Any) -> None:
        """Report (and warn once) that a vector was bound by position, not by name."""
        if not self.positional_fallback_used:
            logger.warning(
                "lerobot policy %s: no %s names are known (checkpoint, training dataset, "
                "policy_config feature_names); bound by position to %s - correct only if the "
                "orders match (positional_fallback_used)",
                self.path,
                what,
                list(bound),
            )
        self.positional_fallback_used = True

    def required_cameras(self) -> dict[str, tuple[int, int]]:
        """Robot camera name (as bound so far) -> (height, width) the policy expects."""
        out = {}
        for cam, (_c, h, w) in self.features.cameras.items():
            robot_cam = self.names.camera_map.get(cam, cam)
            if self._camera_binding is not None:
                robot_cam = self._camera_binding.robot_camera[cam]
            out[robot_cam] = (h, w)
        return out

    def binding_description(self) -> dict[str, Any]:
        return {
            "state": None if self._state_binding is None else list(self._state_binding.sources),
            "state_source": self.names.state_source,
            "actions": None if self._action_binding is None else list(self._action_binding.keys),
            "action_source": self.names.action_source,
            "environment_state": None
            if self._env_state_binding is None
            else list(self._env_state_binding.sources),
            "convention": None if self.convention is None else self.convention.name,
            "robot_type": self.robot_type or None,
            "cameras": None
            if self._camera_binding is None
            else dict(self._camera_binding.robot_camera),
        }

    def load_report(self) -> dict[str, Any]:
        """The rollout report's policy_* fields."""
        return {
            "policy_load_time_s": self.load_time_s,
            "policy_load_cache_hit": self.load_cache_hit,
            "policy_resident_rss_mb": self.resident_rss_mb,
            "policy_rtc_enabled": self.supports_rtc,
        }

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        import torch

        self._instruction = instruction or ""
        if seed is not None:
            torch.manual_seed(int(seed))
        loaded = self._loaded
        with loaded.lock:
            loaded.model.reset()
            loaded.preprocessor.reset()
            loaded.postprocessor.reset()

    def is_chunk_emitting(self) -> bool:
        return self.chunk_mode and (self.execution_horizon > 1 or self.supports_rtc)

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        return _as_actions(*self._predict(observation, instruction, kwargs))

    def get_action_rows(
        self,
        observation: Mapping[str, Any],
        instruction: str = "",
        *,
        keys: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> ActionRows:
        own, array = self._predict(observation, instruction, kwargs)
        if keys is not None and tuple(keys) != tuple(own):  # other columns: NaN-filled
            return ActionRows.from_actions(_as_actions(own, array), keys)
        return ActionRows(list(own), array.ravel().tolist(), len(array))

    def _predict(
        self, observation: Mapping[str, Any], instruction: str, kwargs: Mapping[str, Any]
    ) -> tuple[Sequence[str], Any]:
        """One inference: the action keys and the chunk as a (steps, keys) float32 array."""
        unknown = sorted(set(kwargs) - {"queued_actions", "delay_steps"})
        if unknown:
            raise ValueError(f"lerobot policy get_actions: unknown keyword arguments {unknown}")
        if self._state_binding is None and self._camera_binding is None:
            self.bind_observation(observation)
        assert self._action_binding is not None
        import torch

        loaded = self._loaded
        batch = self._batch(observation, instruction or self._instruction)
        start = time.monotonic()
        # RTC guidance takes a gradient inside the sampler (torch.enable_grad), which
        # inference_mode forbids; no_grad allows it.
        grad_mode = torch.no_grad() if self.supports_rtc else torch.inference_mode()
        with loaded.lock, grad_mode:
            processed = loaded.preprocessor(batch)
            if self.chunk_mode:
                rtc_kwargs = self._rtc_kwargs(
                    kwargs.get("queued_actions"), kwargs.get("delay_steps")
                )
                if self._feeds_history:
                    processed = self._push_history(processed)
                actions = loaded.model.predict_action_chunk(processed, **rtc_kwargs)
                if not self.full_chunk:
                    actions = actions[:, : self.execution_horizon]
            else:
                actions = loaded.model.select_action(processed)
            actions = loaded.postprocessor(actions)
        self.last_inference_s = time.monotonic() - start
        array = actions.detach().to("cpu", torch.float32).numpy()
        if array.ndim == 3:
            array = array[0]
        elif array.ndim == 1:
            array = array[None]
        return self._action_binding.keys, self._to_robot(array)

    def _to_robot(self, chunk: Any) -> Any:
        """A (steps, keys) chunk in the robot's units (the binding's convention, if any)."""
        assert self._action_binding is not None
        return self._action_binding.to_robot(chunk.copy()) if self._action_binding.units else chunk

    # -- internals ---------------------------------------------------------------

    def _batch(self, observation: Mapping[str, Any], task: str) -> dict[str, Any]:
        import numpy as np
        import torch

        batch: dict[str, Any] = {}
        if self._state_binding is not None:
            state = self._state_binding.vector(observation)
            batch[STATE_KEY] = torch.tensor(state, dtype=torch.float32).unsqueeze(0)
        if self._env_state_binding is not None:
            env_state = self._env_state_binding.vector(observation)
            batch[ENV_STATE_KEY] = torch.tensor(env_state, dtype=torch.float32).unsqueeze(0)
        images = observation.get("images") or {}
        assert self._camera_binding is not None
        for cam, robot_cam in self._camera_binding.robot_camera.items():
            try:
                frame = images[robot_cam]
            except KeyError:
                raise BindingError(
                    f"observation lacks camera '{robot_cam}' (bound to {IMAGE_PREFIX}{cam})"
                ) from None
            arr = np.asarray(frame)
            h, w = self._camera_binding.sizes[cam]
            if arr.shape != (h, w, 3):
                raise BindingError(
                    f"robot camera '{robot_cam}' gave shape {arr.shape}; {IMAGE_PREFIX}{cam} needs ({h}, {w}, 3)"
                )
            tensor = torch.from_numpy(np.ascontiguousarray(arr))
            tensor = (
                tensor.to(torch.float32) / 255.0
                if arr.dtype == np.uint8
                else tensor.to(torch.float32)
            )
            batch[IMAGE_PREFIX + cam] = tensor.permute(2, 0, 1).unsqueeze(0).contiguous()
        batch["task"] = task
        batch["robot_type"] = self.robot_type
        return batch

    def _push_history(self, processed: dict[str, Any]) -> dict[str, Any]:
        """What DiffusionPolicy.select_action does before predict_action_chunk."""
        import torch
        from lerobot.policies.utils import populate_queues

        model = self._loaded.model
        batch = {k: v for k, v in processed.items() if k != "action"}
        image_keys = list(getattr(model.config, "image_features", {}) or {})
        if image_keys:
            batch["observation.images"] = torch.stack([batch[k] for k in image_keys], dim=-4)
        model._queues = populate_queues(model._queues, batch)
        return batch

    def _rtc_kwargs(self, queued: Any, delay: Any) -> dict[str, Any]:
        """LeRobot's RTC call shape: inference_delay and prev_chunk_left_over (model space)."""
        if not self.supports_rtc:
            return {}
        import torch

        delay_steps = 0 if delay is None else int(delay)
        if delay_steps < 0:
            raise ValueError(f"delay_steps={delay}: must be >= 0")
        prev = None
        if queued:
            assert self._action_binding is not None
            keys = self._action_binding.keys
            rows = []
            for i, action in enumerate(queued):
                missing = [k for k in keys if k not in action]
                if missing:
                    raise ValueError(
                        f"queued_actions[{i}] lacks the policy's action keys {missing}"
                    )
                rows.append(self._action_binding.to_policy([float(action[k]) for k in keys]))
            prev = torch.tensor(rows, dtype=torch.float32, device=self.device)
            if self._unnormalizer is not None:
                # The queue holds robot-space actions; LeRobot's RTC guides in the space the
                # model emits (normalised), as its ActionQueue.get_left_over() does.
                prev = self._unnormalizer._normalize_action(prev, inverse=False)
            # At most one chunk long. A shorter leftover is passed as it is: LeRobot's
            # RTCProcessor then caps the guided horizon at its length (LeRobot's own RTC
            # engine zero-pads it to execution_horizon, which guides the padded steps
            # towards the mean action).
            chunk_size = int(getattr(self._loaded.config, "chunk_size", 0) or prev.shape[0])
            prev = prev[:chunk_size]
        self.last_rtc_call = {
            "inference_delay": delay_steps,
            "queued": 0 if not queued else len(queued),
            "prev_chunk_left_over_shape": None if prev is None else tuple(prev.shape),
        }
        return {"inference_delay": delay_steps, "prev_chunk_left_over": prev}


def _convention(config: Mapping[str, Any], robot_type: str) -> RobotConvention | None:
    """policy_config convention, else the one robot_type implies, else None."""
    name = config.get("convention")
    if name == "none":
        return None
    if name is not None:
        return get_convention(name)
    return convention_for_robot_type(robot_type)


def _as_actions(keys: Sequence[str], array: Any) -> list[Action]:
    """A (steps, keys) chunk array as one action dict per step."""
    return [dict(zip(keys, row, strict=True)) for row in array.tolist()]


register_provider("lerobot", LerobotPolicy, replace=True)

__all__ = [
    "INSTALL_HINT",
    "LerobotNotInstalledError",
    "LerobotPolicy",
    "LoadedCheckpoint",
    "cached_checkpoints",
    "clear_cache",
    "require_lerobot",
    "resident_rss_mb",
    "resolve_device",
]
