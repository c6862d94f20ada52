"""The `lerobot` policy provider: a local LeRobot checkpoint folder as a Policy.

    create_policy("lerobot", path="/ckpt/pretrained_model", device="cpu")

The folder is what LeRobot's `save_pretrained` writes: `config.json`,
`model.safetensors`, and the processor pipelines `policy_preprocessor.json` /
`policy_postprocessor.json` (with their state files). It is loaded once per process for
each (folder, device) (`lerobot_checkpoint`): a second policy on the same checkpoint
reuses the loaded weights and reports `load_cache_hit=True`. Its policy_config keys are
listed and checked in `lerobot_config` (preflight runs those checks before anything
starts); `lerobot_binding` binds the robot's names to the policy's features.

LerobotPolicy binds, predicts (a chunk, one action, or a batch of observations) and hands
LeRobot's real-time chunking the kernel's queued actions; those are one concept, the
policy's inference state, and stay whole here. torch and lerobot are imported lazily:
the module imports without them, and using the provider without them is refused with the
install command.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from robokernel_ros.policies.base import Action, ActionRows, Policy, register_provider
from robokernel_ros.policies.conventions import RobotConvention
from robokernel_ros.policies.lerobot_binding import (
    ENV_STATE_KEY,
    IMAGE_PREFIX,
    STATE_KEY,
    ActionBinding,
    BindingError,
    CameraBinding,
    DeclaredNames,
    StateBinding,
    bind_actions,
    bind_cameras,
    bind_env_state,
    bind_state,
    merge_explicit,
    read_checkpoint_names,
)
from robokernel_ros.policies.lerobot_checkpoint import (
    LoadedCheckpoint,
    cached_checkpoints,
    clear_cache,
    load_checkpoint,
    resident_rss_mb,
)
from robokernel_ros.policies.lerobot_config import (
    INSTALL_HINT,
    LerobotConfig,
    LerobotNotInstalledError,
    require_lerobot,
    resolve_device,
)

logger = logging.getLogger(__name__)


class LerobotPolicy(Policy):
    """A LeRobot checkpoint behind the Policy protocol, bound to a robot by name."""

    provider = "lerobot"

    def __init__(self, **config: Any) -> None:
        super().__init__()
        require_lerobot()
        checked = LerobotConfig.from_mapping(config)
        for module in checked.plugins or []:
            importlib.import_module(module)
        self.config = dict(config)
        self.path = path = checked.folder
        self.features = checked.features
        self.policy_type = checked.features.policy_type
        self.device = resolve_device(checked.device)
        self.allow_missing_state_keys = checked.allow_missing_state_keys
        try:
            declared = read_checkpoint_names(path, checked.checkpoint_config)
        except BindingError as exc:
            raise ValueError(f"policy_config path={str(path)!r}: {exc}") from exc
        self.names: DeclaredNames = merge_explicit(declared, config)
        self.robot_type = checked.robot_type or self.names.robot_type or ""
        self.convention: RobotConvention | None = checked.convention_for(self.robot_type)

        create_start = time.monotonic()
        self._loaded, self.load_cache_hit = load_checkpoint(
            path, self.device, checked.overrides or {}, checked.rtc
        )
        self.load_time_s = time.monotonic() - create_start
        self.checkpoint_load_time_s = self._loaded.load_time_s
        self.resident_rss_mb = resident_rss_mb()
        lr_cfg = self._loaded.config

        self.supports_rtc = bool(self._loaded.rtc_signature)
        # RTC merges the whole predicted chunk (as LeRobot's RTC engine does), so its
        # tail is there to blend with and to cover the inference delay.
        self.full_chunk = self.supports_rtc if checked.full_chunk is None else checked.full_chunk
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
        checked = LerobotConfig.from_mapping(config)
        if checked.device not in ("auto", "cpu"):
            resolve_device(checked.device)

    @classmethod
    def batch_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """Chunk policies without per-episode state batch: ACT-style predict_action_chunk.
        Diffusion keeps an observation history per episode, RTC blends each episode's
        own queue, and a temporal ensemble accumulates per episode: those cannot."""
        checked = LerobotConfig.from_mapping(config)
        cfg_json = checked.checkpoint_config
        if checked.features.policy_type == "diffusion":
            return "a diffusion checkpoint keeps a per-episode observation history (n_obs_steps)"
        if checked.rtc or cfg_json.get("rtc_config"):
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
