"""The kernel Agent of a rollout: a policy plus its inference timing.

`RolloutAgent` is PolicyAgent + running inference counts (for the result's
avg/max_inference_ms) + one synchronous re-query of an empty chunk. Nothing here grows
with the episode's length.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from robokernel_ros.policies.base import Policy, PolicyAgent

_log = logging.getLogger(__name__)


class RolloutAgent(PolicyAgent):
    """PolicyAgent + inference timing (running count, sum and max) and one re-query of an
    empty chunk. Its state is bounded: nothing grows with the episode's length."""

    def __init__(
        self, policy: Policy, *, action_horizon: int, policy_kwargs: Mapping[str, Any]
    ) -> None:
        super().__init__(policy, action_horizon=action_horizon)
        self.policy_kwargs = dict(policy_kwargs)
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0
        super().reset(instruction=instruction, seed=seed)

    def act(self, observation: Mapping[str, Any], step: int, **rtc: Any) -> list[dict[str, float]]:
        start = time.monotonic()
        chunk = super().act(observation, step, **rtc)
        if not chunk:
            # One synchronous re-query before erroring: a transient hiccup is not fatal.
            self.empty_chunks += 1
            _log.warning("policy returned an empty chunk at step %d; re-querying once", step)
            chunk = super().act(observation, step, **rtc)
            if not chunk:
                raise RuntimeError(f"policy returned an empty chunk twice in a row at step {step}")
        elapsed = time.monotonic() - start
        self.inference_count += 1
        self.inference_total_s += elapsed
        if elapsed > self.inference_max_s:
            self.inference_max_s = elapsed
        return chunk
