"""The kernel Agent of a rollout: a policy plus its inference timing and recent chunks.

`RolloutAgent` is PolicyAgent + running inference counts (for the result's
avg/max_inference_ms) + one synchronous re-query of an empty chunk; `RecentChunks`
keeps the last few chunks act() returned, by request id, for the action-health
collector (rollout.health). Nothing here grows with the episode's length.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from robokernel_ros.policies.base import Policy, PolicyAgent

_log = logging.getLogger(__name__)


class RecentChunks:
    """The chunks an agent's act() returned, by request id, for the last few requests only.

    The kernel has at most one chunk request in flight, and merges each chunk before it
    asks for the next, so the collector needs the chunk of the request being merged and
    nothing older: KEEP of them are kept, whatever the episode's length.
    """

    KEEP = 4

    def __init__(self) -> None:
        self.count = 0  # act() calls this episode: the next request id
        self._recent: deque[tuple[int, Any]] = deque(maxlen=self.KEEP)

    def add(self, chunk: Any) -> None:
        self._recent.append((self.count, chunk))
        self.count += 1

    def get(self, request_id: int) -> Any:
        recent = self._recent
        if recent and recent[-1][0] == request_id:  # the common case: the latest request
            return recent[-1][1]
        for rid, chunk in reversed(recent):
            if rid == request_id:
                return chunk
        return None

    def __len__(self) -> int:
        return len(self._recent)


class RolloutAgent(PolicyAgent):
    """PolicyAgent + inference timing (running count, sum and max), the recent chunks (for
    action health) and one re-query of an empty chunk. Its state is bounded: nothing grows
    with the episode's length."""

    def __init__(
        self, policy: Policy, *, action_horizon: int, policy_kwargs: Mapping[str, Any]
    ) -> None:
        super().__init__(policy, action_horizon=action_horizon)
        self.policy_kwargs = dict(policy_kwargs)
        self.chunks = RecentChunks()
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.chunks = RecentChunks()
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0
        super().reset(instruction=instruction, seed=seed)

    def chunk(self, request_id: int) -> Any:
        return self.chunks.get(request_id)

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
        self.chunks.add(chunk)
        return chunk
