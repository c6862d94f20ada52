"""Batched inference: one policy serves many episodes, one forward pass for B observations.

    server = BatchServer("lerobot", {"path": ckpt}, max_batch=8, max_wait_ms=50.0)
    server.expect_callers(4)                               # 4 callers: a batch of 4 closes at once
    chunks = server.infer(observation, instruction)        # from any thread

The vla-eval design (one model server, many environments), used by a parallel eval
(rollout.parallel) with `batch_inference=True`: the server runs in one Ray actor and every
worker's episodes reach it through a `BatchedPolicy` proxy. `infer` calls from concurrent
callers are gathered into one `get_actions_batch` call of the policy; the proxy's caller
waits for its own chunk. A batch closes at the first of:
- `max_batch` requests waiting;
- every expected caller waiting: `expect_callers(n)` says how many callers can be waiting
  at once (the parallel driver sends its number of episodes in flight, one caller each),
  so a batch closes the moment the n-th of them submits, with no timer to run out;
- `max_wait_ms` since its first request: the bound for a caller whose peers are busy
  elsewhere (stepping their chunk, resetting, dead), and the only rule when no count was
  given.
Only providers whose `batch_refusal(config)` is None can serve (checked before anything
starts).

Per-episode state does not cross the batch: a batched policy is one model for all
episodes, so `reset(seed=...)` seeds nothing (the proxy keeps its instruction only), and
results are not bit-identical to an unbatched run (a batch's arithmetic differs).
`queue_wait_s` of each answer is the time from the request's arrival to its batch's forward
pass (the fill, and any pass still running before it); `stats()` gives the batch sizes and
those waits' p50 / p99 over the server's life.

Imports no ROS; imports Ray only in `BatchedPolicy` (a worker holds an actor handle).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Action, Policy, create_policy


class _Request:
    __slots__ = ("observation", "instruction", "done", "chunk", "error", "t_queued", "queue_wait_s")

    def __init__(self, observation: Mapping[str, Any], instruction: str) -> None:
        self.observation = observation
        self.instruction = instruction
        self.done = threading.Event()
        self.chunk: list[Action] | None = None
        self.error: BaseException | None = None
        self.t_queued = time.monotonic()
        self.queue_wait_s = 0.0


class BatchServer:
    """Hosts one policy and answers concurrent `infer` calls in batches (see the module docstring)."""

    def __init__(self, provider: str, config: Mapping[str, Any], *, max_batch: int,
                 max_wait_ms: float) -> None:  # fmt: skip
        self.policy: Policy = create_policy(provider, **dict(config))
        self.max_batch = int(max_batch)
        self.max_wait_s = float(max_wait_ms) / 1000.0
        self._pending: list[_Request] = []
        self._cond = threading.Condition()
        self._closed = False
        self._expected: int | None = None
        self.batch_sizes: list[int] = []
        self.queue_waits_s: list[float] = []
        self._thread = threading.Thread(target=self._serve, name="batch-server", daemon=True)
        self._thread.start()

    # -- what every proxy needs once --------------------------------------------------
    def bind(
        self, action_keys: Sequence[str], limits: Mapping[str, tuple[float, float]]
    ) -> dict[str, Any]:
        """Bind the policy to the robot (idempotent: every worker's robot is the same)."""
        if tuple(action_keys) != self.policy.action_keys:
            self.policy.set_robot_state_keys(list(action_keys))
            setter = getattr(self.policy, "set_action_limits", None)
            if callable(setter):
                setter(dict(limits))
        return {"chunk_emitting": self.policy.is_chunk_emitting(),
                "execution_horizon": int(self.policy.execution_horizon),
                "provider": self.policy.provider}  # fmt: skip

    def binding_report(self) -> dict[str, bool]:
        return self.policy.binding_report()

    def expect_callers(self, callers: int | None) -> None:
        """At most `callers` requests can be waiting at once from now on (None: unknown):
        a batch closes as soon as min(callers, max_batch) wait (see the module docstring)."""
        with self._cond:
            self._expected = None if callers is None else max(1, int(callers))
            self._cond.notify_all()

    def stats(self) -> dict[str, Any]:
        """Batches served, their mean and largest size, the queue waits' p50 / p99 (ms)."""
        sizes, waits = self.batch_sizes, sorted(self.queue_waits_s)
        return {"batches": len(sizes), "mean_batch": (sum(sizes) / len(sizes)) if sizes else 0.0,
                "max_batch_seen": max(sizes, default=0),
                "queue_wait_p50_ms": 1000 * _quantile(waits, 0.5) if waits else None,
                "queue_wait_p99_ms": 1000 * _quantile(waits, 0.99) if waits else None}  # fmt: skip

    # -- inference ------------------------------------------------------------------------
    def infer(self, observation: Mapping[str, Any], instruction: str = "") -> dict[str, Any]:
        """This observation's chunk, computed in the next batch: {"chunk", "queue_wait_s"}."""
        request = _Request(observation, instruction)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batch server is closed")
            self._pending.append(request)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return {"chunk": request.chunk, "queue_wait_s": request.queue_wait_s}

    def _take_batch(self) -> list[_Request]:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return []
            deadline = self._pending[0].t_queued + self.max_wait_s
            while len(self._pending) < self._fill() and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            return batch

    def _fill(self) -> int:
        """How many waiting requests close a batch now (under the lock: the count may change)."""
        if self._expected is None:
            return self.max_batch
        return min(self.max_batch, self._expected)

    def _serve(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return
            now = time.monotonic()
            for request in batch:
                request.queue_wait_s = now - request.t_queued
                self.queue_waits_s.append(request.queue_wait_s)
            try:
                chunks = self.policy.get_actions_batch(
                    [r.observation for r in batch], [r.instruction for r in batch]
                )
                for request, chunk in zip(batch, chunks, strict=True):
                    request.chunk = chunk
            except BaseException as exc:  # noqa: BLE001 - handed to every caller of the batch
                for request in batch:
                    request.error = exc
            self.batch_sizes.append(len(batch))
            for request in batch:
                request.done.set()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            pending, self._pending = self._pending, []
            self._cond.notify_all()
        for request in pending:
            request.error = RuntimeError("the batch server closed")
            request.done.set()
        self._thread.join(timeout=5.0)
        self.policy.close()


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class BatchedPolicy(Policy):
    """A worker's proxy of a BatchServer running as a Ray actor: get_actions asks the server."""

    provider = "batched"

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server
        self._instruction = ""
        self._chunk_emitting = True

    def set_action_limits(self, limits: Mapping[str, tuple[float, float]]) -> None:
        import ray

        super().set_action_limits(limits)
        info = ray.get(self.server.bind.remote(list(self.action_keys), dict(self.action_limits)))
        self._chunk_emitting = bool(info["chunk_emitting"])
        self.execution_horizon = int(info["execution_horizon"])

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self._instruction = instruction or ""

    def is_chunk_emitting(self) -> bool:
        return self._chunk_emitting

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        import ray

        answer = ray.get(
            self.server.infer.remote(dict(observation), instruction or self._instruction)
        )
        return answer["chunk"]

    def binding_report(self) -> dict[str, bool]:
        import ray

        return dict(ray.get(self.server.binding_report.remote()))
