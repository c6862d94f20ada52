"""Tiny LeRobot checkpoints built offline for tests and benchmarks (no hub, random weights).

    from robokernel_ros.policies.lerobot_fixtures import build_tiny_checkpoint
    path = build_tiny_checkpoint(tmp / "act", kind="act")

Each checkpoint is what LeRobot's `save_pretrained` writes (config.json,
model.safetensors, policy_preprocessor/postprocessor with normalisation stats), plus a
`feature_names.json` declaring the joint names when `declare_names=True`. Kinds:
`act`, `diffusion`, `tiny_flow` (a flow-matching plugin policy with LeRobot's RTC; load
it with policy_config plugins=[TINY_FLOW_PLUGIN]). Needs torch and lerobot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SO101_JOINTS = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
TINY_FLOW_PLUGIN = "robokernel_ros.policies.lerobot_fixtures.configuration_tiny_flow"
KINDS = ("act", "diffusion", "tiny_flow")


def _stats(dim: int, low: float, high: float) -> dict[str, Any]:
    import torch

    return {
        "mean": torch.full((dim,), (low + high) / 2),
        "std": torch.full((dim,), (high - low) / 4),
        "min": torch.full((dim,), low),
        "max": torch.full((dim,), high),
    }


def _image_stats() -> dict[str, Any]:
    import torch

    return {
        "mean": torch.full((3, 1, 1), 0.5),
        "std": torch.full((3, 1, 1), 0.25),
        "min": torch.zeros((3, 1, 1)),
        "max": torch.ones((3, 1, 1)),
    }


def build_tiny_checkpoint(
    out_dir: str | Path,
    *,
    kind: str = "act",
    state_names: Sequence[str] | None = SO101_JOINTS,
    action_names: Sequence[str] | None = None,
    state_dim: int | None = None,
    action_dim: int | None = None,
    cameras: Mapping[str, tuple[int, int]] | None = None,
    declare_names: bool = True,
    chunk_size: int = 10,
    n_action_steps: int | None = None,
    seed: int = 0,
    overrides: Mapping[str, Any] | None = None,
    action_mean: Sequence[float] | None = None,
) -> Path:
    """Build a small random-weight LeRobot policy and save it as a checkpoint folder.

    `state_names`/`action_names` (default: the state names) fix the vector sizes and,
    with `declare_names`, are written to feature_names.json in LeRobot dataset spelling
    (`<joint>.pos`). `cameras` maps camera name -> (height, width) (default one 64x64
    camera `front`). `action_mean` with a zero action std makes the policy emit exactly
    that action (the postprocessor's unnormalisation is `x * std + mean`). Returns the folder.
    """
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature

    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: must be one of {KINDS}")
    state_names = list(state_names) if state_names is not None else None
    action_names = list(action_names) if action_names is not None else state_names
    s_dim = state_dim if state_dim is not None else len(state_names or ())
    a_dim = action_dim if action_dim is not None else len(action_names or ())
    if a_dim <= 0:
        raise ValueError("the action vector needs at least one entry (action_names or action_dim)")
    cameras = dict(cameras) if cameras is not None else {"front": (64, 64)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    inputs: dict[str, PolicyFeature] = {}
    if s_dim:
        inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(s_dim,))
    for cam, (h, w) in cameras.items():
        inputs[f"observation.images.{cam}"] = PolicyFeature(
            type=FeatureType.VISUAL, shape=(3, h, w)
        )
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(a_dim,))}
    common: dict[str, Any] = {"input_features": inputs, "output_features": outputs, "device": "cpu"}

    torch.manual_seed(seed)
    if kind == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        cfg = ACTConfig(
            **common,
            pretrained_backbone_weights=None,
            vision_backbone="resnet18",
            dim_model=64,
            n_heads=2,
            dim_feedforward=128,
            n_encoder_layers=1,
            n_decoder_layers=1,
            n_vae_encoder_layers=1,
            latent_dim=8,
            chunk_size=chunk_size,
            n_action_steps=n_action_steps or chunk_size,
            **dict(overrides or {}),
        )
        policy = ACTPolicy(cfg)
    elif kind == "diffusion":
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        horizon = max(8, ((chunk_size + 3) // 4) * 4)
        cfg = DiffusionConfig(
            **common,
            pretrained_backbone_weights=None,
            n_obs_steps=2,
            horizon=horizon,
            n_action_steps=n_action_steps or min(8, horizon - 1),
            drop_n_last_frames=0,
            crop_shape=None,
            down_dims=(32, 64),
            kernel_size=3,
            n_groups=8,
            diffusion_step_embed_dim=32,
            spatial_softmax_num_keypoints=8,
            noise_scheduler_type="DDIM",
            num_train_timesteps=20,
            num_inference_steps=4,
            **dict(overrides or {}),
        )
        policy = DiffusionPolicy(cfg)
    else:
        from robokernel_ros.policies.lerobot_fixtures.configuration_tiny_flow import TinyFlowConfig
        from robokernel_ros.policies.lerobot_fixtures.modeling_tiny_flow import TinyFlowPolicy

        cfg = TinyFlowConfig(
            **common,
            chunk_size=chunk_size,
            n_action_steps=n_action_steps or max(1, chunk_size // 2),
            **dict(overrides or {}),
        )
        policy = TinyFlowPolicy(cfg)

    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.processor.factory import make_default_pre_post_processors

    stats: dict[str, Any] = {"action": _stats(a_dim, -1.0, 1.0)}
    if action_mean is not None:
        if len(action_mean) != a_dim:
            raise ValueError(f"action_mean has {len(action_mean)} entries; the action has {a_dim}")
        mean = torch.tensor([float(v) for v in action_mean])
        stats["action"] = {"mean": mean, "std": torch.zeros(a_dim), "min": mean, "max": mean}
    if s_dim:
        stats["observation.state"] = _stats(s_dim, -1.5, 1.5)
    for cam in cameras:
        stats[f"observation.images.{cam}"] = _image_stats()
    if kind == "tiny_flow":
        pre, post = make_default_pre_post_processors(cfg, stats, normalizer_device="cpu")
    else:
        pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    if declare_names:
        names: dict[str, Any] = {}
        if state_names is not None and s_dim:
            names["observation.state"] = [f"{n}.pos" for n in state_names]
        if action_names is not None:
            names["action"] = [f"{n}.pos" for n in action_names]
        (out / "feature_names.json").write_text(json.dumps(names, indent=2))
    return out


__all__ = ["KINDS", "SO101_JOINTS", "TINY_FLOW_PLUGIN", "build_tiny_checkpoint"]
