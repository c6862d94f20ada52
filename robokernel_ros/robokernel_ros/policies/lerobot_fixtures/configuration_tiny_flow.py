"""`tiny_flow`: a small flow-matching LeRobot policy with real-time chunking, for tests.

A third-party LeRobot policy plugin in LeRobot's own convention (a config class
registered with `PreTrainedConfig.register_subclass`, its `<Name>Policy` in the sibling
`modeling_*` module), so `get_policy_class("tiny_flow")` and `from_pretrained` load it
like any built-in policy. Its sampler is LeRobot's `euler_integrate` with LeRobot's
`RTCProcessor` guidance - the RTC code SmolVLA and pi0 run - around a small MLP
velocity field instead of a VLM, so RTC can be exercised offline in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs import NormalizationMode, PreTrainedConfig
from lerobot.optim import AdamWConfig
from lerobot.policies.rtc.configuration_rtc import RTCConfig


@PreTrainedConfig.register_subclass("tiny_flow")
@dataclass
class TinyFlowConfig(PreTrainedConfig):
    n_obs_steps: int = 1
    chunk_size: int = 16
    n_action_steps: int = 8
    hidden_dim: int = 64
    image_feature_dim: int = 8
    num_steps: int = 5
    normalization_mapping: dict[str, NormalizationMode] = field(
        default_factory=lambda: {
            "VISUAL": NormalizationMode.IDENTITY,
            "STATE": NormalizationMode.MEAN_STD,
            "ACTION": NormalizationMode.MEAN_STD,
        }
    )
    rtc_config: RTCConfig | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps={self.n_action_steps} exceeds chunk_size={self.chunk_size}"
            )

    def get_optimizer_preset(self) -> AdamWConfig:
        return AdamWConfig(lr=1e-4)

    def get_scheduler_preset(self) -> None:
        return None

    def validate_features(self) -> None:
        if self.output_features.get("action") is None:
            raise ValueError("tiny_flow needs an 'action' output feature")

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.chunk_size))

    @property
    def reward_delta_indices(self) -> None:
        return None
