"""The episode loop's chunk steps: the policy's act() calls (inline, on the episode's act
thread, with act_timeout_s), chunk requests and their aligned merge into the queue
(kernel.timing says when; kernel.chunks what a chunk is).

`ChunkSteps` is a part of the loop's per-episode state (kernel.runner's Episode inherits
it); it reads and writes these attributes of it: r (the EpisodeRunner: agent,
supports_rtc, act_timeout_s), rec (the EpisodeRecorder), spec, timing, sync, queue,
pending, requests, chunks, last_delay, executor, execution, holds_at_merge, and calls
progress(). A failed or late act() raises EpisodeOver.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from . import events as ev
from .chunks import action_row, as_chunk
from .intervention import LoopRunner
from .recorder import POLICY_ERROR, POLICY_TIMEOUT, EpisodeOutcome, EpisodeOver, error_info
from .spec import Agent, RTCAgent
from .timing import delay_steps

if TYPE_CHECKING:
    from .recorder import EpisodeRecorder, Execution
    from .spec import EnvSpec
    from .timing import Timing


@dataclass
class PendingChunk:
    """A chunk request in flight."""

    request_id: int
    obs_step: int
    executed: int  # policy actions executed in the episode when the request was made
    arrival_step: int | None = None  # virtual clock: known at request time
    chunk: Any = None
    inference_s: float = 0.0
    future: concurrent.futures.Future | None = None  # wall clock
    submitted: float = 0.0


def _timed(act: Callable[[], Any]) -> tuple[Any, float]:
    """act() and the seconds it took (a wall-clock request, run on the act thread)."""
    start = time.monotonic()
    chunk = act()
    return chunk, time.monotonic() - start


class ActWorker:
    """One daemon thread that runs an episode's act() calls in order (a chunk each).

    One thread for the episode, started before its loop, not one per call: a thread
    started per call takes the GIL until its act() first blocks, delaying the command of
    every chunk-request step (bench/RESULTS.md, "Observations moved out of docstrings");
    a thread waiting on its queue takes the GIL when the loop next blocks (its pacer's
    sleep), after the step's command. A daemon thread: one hung act() (left behind after
    act_timeout_s) never keeps the interpreter alive, where concurrent.futures' pool
    threads are joined at exit."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="kernel-act", daemon=True).start()

    def submit(self, fn: Any, *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((future, fn, args))
        return future

    def close(self) -> None:
        """End the thread after the call it runs (if any): it takes no further call."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # delivered to the loop through the future
                future.set_exception(exc)


class ChunkRunner(LoopRunner, Protocol):
    """What the chunk steps use of the EpisodeRunner (typed so, this module does not
    import kernel.runner, which imports it); the takeover steps' LoopRunner too, since
    the Episode that inherits both steps has one runner."""

    agent: Agent
    supports_rtc: bool
    act_timeout_s: float | None


class ChunkSteps:
    """The chunk steps of one episode's loop (see the module docstring)."""

    r: ChunkRunner
    rec: EpisodeRecorder
    spec: EnvSpec
    timing: Timing
    sync: bool
    queue: collections.deque[Any]
    pending: PendingChunk | None
    requests: int
    chunks: int
    last_delay: int
    executor: ActWorker | None
    execution: Execution
    holds_at_merge: int

    if TYPE_CHECKING:  # the loop's method these steps call (kernel.runner's Episode)

        def progress(self) -> int: ...

    # -- policy calls ------------------------------------------------------------------
    def act_call(self, observation: Any, step: int) -> Callable[[], Any]:
        """The agent's act() for the request of `step`, its arguments taken now: an RTC
        agent's queued actions and delay hint are the loop's as of the request, whichever
        thread runs the call and however late (the loop pops the step's action next)."""
        if self.r.supports_rtc:
            rtc = cast(RTCAgent, self.r.agent)  # it said so: act() takes the RTC arguments
            return functools.partial(
                rtc.act,
                observation,
                step,
                queued_actions=[dict(a) if isinstance(a, Mapping) else a for a in self.queue],
                delay_steps=self.expected_delay(),
            )
        return functools.partial(self.r.agent.act, observation, step)

    def expected_delay(self) -> int:
        if self.timing.mode == "sync":
            return 0
        if self.timing.clock == "virtual" and self.timing.latency_s is not None:
            return delay_steps(self.timing.latency_s, self.spec.control_hz)
        return self.last_delay

    def act_inline(self, observation: Any, step: int) -> tuple[Any, float]:
        """act() in this thread (or a worker when act_timeout_s must be enforced)."""
        timeout = self.r.act_timeout_s
        if timeout is None:
            # Without RTC arguments, the call itself (no partial: this runs every chunk).
            act = self.act_call(observation, step) if self.r.supports_rtc else None
            start = time.monotonic()
            try:
                chunk = self.r.agent.act(observation, step) if act is None else act()
            except Exception as exc:
                raise EpisodeOver.failure(POLICY_ERROR, exc) from exc
            return chunk, time.monotonic() - start
        act = self.act_call(observation, step)
        start = time.monotonic()
        future = self.worker().submit(act)
        try:
            chunk = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            self.abandon_worker()
            raise self.timeout_error(timeout) from None
        except Exception as exc:
            raise EpisodeOver.failure(POLICY_ERROR, exc) from exc
        return chunk, time.monotonic() - start

    def timeout_error(self, timeout: float) -> EpisodeOver:
        message = f"act() took longer than act_timeout_s={timeout}"
        return EpisodeOver(
            EpisodeOutcome.ERROR,
            f"error: {POLICY_TIMEOUT}: {message}",
            error_info(POLICY_TIMEOUT, None, message),
        )

    def worker(self) -> ActWorker:
        if self.executor is None:
            self.executor = ActWorker()
        return self.executor

    def abandon_worker(self) -> None:
        """Let go of the act thread: it ends after the call it runs. A hung act() cannot be
        killed: its daemon thread is left behind, never waited for, so neither the episode
        nor the interpreter's exit hangs on it (the next request starts a fresh thread)."""
        if self.executor is not None:
            self.executor.close()
            self.executor = None

    # -- chunks ----------------------------------------------------------------------
    def request(self, step: int, observation: Any) -> None:
        """Ask for a chunk computed from the observation of `step`."""
        request_id = self.requests
        self.requests += 1
        self.rec.emit(ev.CHUNK_REQUEST, step, {"step": step, "request_id": request_id})
        timing = self.timing
        if timing.mode == "realtime" and timing.clock == "wall":
            pending = PendingChunk(request_id, step, self.progress(), submitted=time.monotonic())
            pending.future = self.worker().submit(_timed, self.act_call(observation, step))
            self.pending = pending
            return
        chunk, measured = self.act_inline(observation, step)
        if self.sync:
            self.merge(step, step, request_id, chunk, measured, 0)
            return
        latency = timing.latency_s if timing.latency_s is not None else measured
        delay = delay_steps(latency, self.spec.control_hz)  # >= 1: never this step's
        self.last_delay = delay
        self.pending = PendingChunk(request_id, step, self.progress(), step + delay, chunk, latency)

    def poll_arrival(self, step: int) -> None:
        """Merge the chunk in flight if it has arrived by `step`."""
        pending = self.pending
        if pending is None:
            return
        if pending.future is None:  # virtual clock
            if pending.arrival_step is not None and step >= pending.arrival_step:
                self.pending = None
                self.merge_pending(pending, step)
            return
        if not pending.future.done():
            timeout = self.r.act_timeout_s
            if timeout is not None and time.monotonic() - pending.submitted > timeout:
                self.abandon_worker()
                raise self.timeout_error(timeout)
            return
        self.pending = None
        try:
            pending.chunk, pending.inference_s = pending.future.result()
        except Exception as exc:
            raise EpisodeOver.failure(POLICY_ERROR, exc) from exc
        if self.r.act_timeout_s is not None and pending.inference_s > self.r.act_timeout_s:
            raise self.timeout_error(self.r.act_timeout_s)
        self.last_delay = step - pending.obs_step
        self.merge_pending(pending, step)

    def merge_pending(self, pending: PendingChunk, step: int) -> None:
        self.merge(
            step,
            pending.obs_step,
            pending.request_id,
            pending.chunk,
            pending.inference_s,
            self.progress() - pending.executed,
        )

    def merge(
        self,
        step: int,
        obs_step: int,
        request_id: int,
        chunk: Any,
        inference_s: float,
        executed: int,
    ) -> None:
        """Aligned merge at `step` of the chunk computed from the observation of `obs_step`:
        drop its first `executed` actions (the policy actions, not holds, executed since
        `obs_step`: the robot's progress along its plans, see timing.py); the rest replace
        the queue."""
        chunk = as_chunk(chunk)
        execution_steps = self.timing.execution_steps
        if execution_steps is not None and len(chunk) > execution_steps:
            chunk = chunk[:execution_steps]
        dropped = min(len(chunk), executed)
        queue = self.queue
        queue.clear()
        queue.extend(chunk[dropped:] if dropped else chunk)
        execution = self.execution
        if self.chunks:  # a seam: did the robot hold since the previous merge?
            if execution.holds != self.holds_at_merge:
                execution.seam_blocks += 1
            else:
                execution.seam_hits += 1
        self.holds_at_merge = execution.holds
        self.chunks += 1
        rec = self.rec
        if rec.traced or rec.bus.subscriber_count:
            keys = self.spec.action_keys
            rec.emit(
                ev.CHUNK_MERGE,
                step,
                {
                    "obs_step": obs_step,
                    "arrival_step": step,
                    "dropped": dropped,
                    "kept": len(queue),
                    "inference_s": inference_s,
                    "request_id": request_id,
                    "keys": list(keys),
                    "actions": [action_row(action, keys) for action in chunk],
                },
            )
        else:
            rec.skip()
