"""The `tiny_flow` policy: an MLP velocity field sampled with LeRobot's RTC-aware Euler loop.

Besides sampling, it records the keyword arguments each `predict_action_chunk` call
received (`calls`), so tests can see what a caller passed in LeRobot's call shape.
"""

from __future__ import annotations

from typing import Any

import torch
from lerobot.policies.common.flow_matching import euler_integrate
from lerobot.policies.pretrained import PreTrainedPolicy
from lerobot.policies.rtc.modeling_rtc import RTCProcessor
from torch import Tensor, nn

from .configuration_tiny_flow import TinyFlowConfig


class TinyFlowPolicy(PreTrainedPolicy):
    config_class = TinyFlowConfig
    name = "tiny_flow"

    def __init__(self, config: TinyFlowConfig, **kwargs: Any) -> None:
        super().__init__(config)
        config.validate_features()
        self.config = config
        action_dim = config.output_features["action"].shape[0]
        state_feature = config.input_features.get("observation.state")
        state_dim = state_feature.shape[0] if state_feature is not None else 0
        self.image_keys = sorted(
            k for k in config.input_features if k.startswith("observation.images.")
        )
        self.image_proj = nn.ModuleDict(
            {k.replace(".", "_"): nn.Linear(3, config.image_feature_dim) for k in self.image_keys}
        )
        cond_dim = state_dim + config.image_feature_dim * len(self.image_keys) + 1
        self.action_dim = action_dim
        self.velocity = nn.Sequential(
            nn.Linear(config.chunk_size * action_dim + cond_dim, config.hidden_dim),
            nn.GELU(),
            nn.Linear(config.hidden_dim, config.chunk_size * action_dim),
        )
        self.calls: list[dict[str, Any]] = []
        self.init_rtc_processor()

    def supports_rtc(self) -> bool:
        return True

    def init_rtc_processor(self) -> None:
        self.rtc_processor = (
            RTCProcessor(self.config.rtc_config) if self.config.rtc_config is not None else None
        )

    def _rtc_enabled(self) -> bool:
        return self.config.rtc_config is not None and self.config.rtc_config.enabled

    def get_optim_params(self) -> dict:
        return self.parameters()

    def reset(self) -> None:
        pass

    def _condition(self, batch: dict[str, Tensor]) -> Tensor:
        parts = []
        if "observation.state" in batch:
            parts.append(batch["observation.state"])
        for key in self.image_keys:
            pooled = batch[key].mean(dim=(-1, -2))  # (B, 3)
            parts.append(self.image_proj[key.replace(".", "_")](pooled))
        return torch.cat(parts, dim=-1) if parts else None

    def _velocity(self, x_t: Tensor, t: Tensor, cond: Tensor | None) -> Tensor:
        bsize = x_t.shape[0]
        inputs = [x_t.reshape(bsize, -1), t.reshape(bsize, 1).to(x_t.dtype)]
        if cond is not None:
            inputs.append(cond)
        return self.velocity(torch.cat(inputs, dim=-1)).reshape(x_t.shape)

    @torch.no_grad()
    def predict_action_chunk(
        self, batch: dict[str, Tensor], noise: Tensor | None = None, **kwargs: Any
    ) -> Tensor:
        self.eval()
        self.calls.append(
            {
                "inference_delay": kwargs.get("inference_delay"),
                "prev_chunk_left_over": None
                if kwargs.get("prev_chunk_left_over") is None
                else kwargs["prev_chunk_left_over"].detach().clone().cpu(),
                "execution_horizon": kwargs.get("execution_horizon"),
                "task": batch.get("task"),
            }
        )
        cond = self._condition(batch)
        bsize = next(v for v in batch.values() if isinstance(v, Tensor)).shape[0]
        if noise is None:
            noise = torch.randn(
                bsize, self.config.chunk_size, self.action_dim, device=self.config.device
            )
        return euler_integrate(
            lambda x_t, t: self._velocity(x_t, t, cond),
            noise,
            self.config.num_steps,
            rtc_processor=self.rtc_processor,
            rtc_enabled=self._rtc_enabled(),
            inference_delay=kwargs.get("inference_delay"),
            prev_chunk_left_over=kwargs.get("prev_chunk_left_over"),
            execution_horizon=kwargs.get("execution_horizon"),
        )

    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], **kwargs: Any) -> Tensor:
        return self.predict_action_chunk(batch, **kwargs)[:, 0]

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict | None]:
        actions = batch["action"]
        cond = self._condition(batch)
        t = torch.rand(actions.shape[0], device=actions.device)
        noise = torch.randn_like(actions)
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        loss = ((self._velocity(x_t, t, cond) - (noise - actions)) ** 2).mean()
        return loss, None
