"""Served mode: an external harness owns the loop; the kernel answers one step at a time.

    session = ServedSession(env_spec, agent, trace=TraceStore("runs"))
    session.reset(first_observation, seed=0, instruction="pick the cube")
    while not done:
        action = session.step(observation, reward=r_prev)   # shielded, every key present
        observation, r_prev, done = harness.apply(action)
    record = session.end(success=True, reward=r_prev, final_observation=observation)

The same Agent, SafetyShield, events and run directory as the driven EpisodeRunner,
with sync timing: a chunk is requested when the queue is empty and its first
`execution_steps` actions are served. `reward`/`terminated`/`truncated` given to step()
or end() belong to the previous action; its `action` event is published once they are
known, so the event order matches the driven loop's.
"""

from __future__ import annotations

import collections
import datetime
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import events as ev
from .chunks import action_row, as_chunk
from .events import EventBus
from .hold import hold_action as default_hold
from .operator import OperatorChannel
from .recorder import (
    POLICY_ERROR,
    EpisodeOutcome,
    EpisodeRecord,
    EpisodeRecorder,
    apply_verdict,
    check_episode_parts,
    env_description,
    episode_summary,
    error_info,
)
from .shield import make_shield
from .spec import Agent, EnvSpec
from .timing import Timing
from .trace import TraceStore

_log = logging.getLogger(__name__)


class ServedSession:
    """The kernel's agent + shield + trace behind a step() call.

    ServedSession(env_spec, agent, *, trace=None, bus=None, safety=None, image_every=1,
    timing=None (sync only), operator=None, hold_action=None (a callable last -> action;
    default: kernel.hold's, as in the driven loop)).
    """

    def __init__(
        self,
        env_spec: EnvSpec,
        agent: Agent,
        *,
        trace: TraceStore | None = None,
        bus: EventBus | None = None,
        safety: Mapping[str, Any] | None = None,
        image_every: int = 1,
        timing: Timing | None = None,
        operator: OperatorChannel | None = None,
        hold_action: Callable[[Mapping[str, float] | None], Mapping[str, float]] | None = None,
    ) -> None:
        if not isinstance(env_spec, EnvSpec):
            raise ValueError(f"env_spec={env_spec!r}: must be an EnvSpec")
        check_episode_parts(agent, trace, bus, safety, image_every, operator)
        timing = timing if timing is not None else Timing()
        if not isinstance(timing, Timing) or timing.mode != "sync":
            raise ValueError(f"timing={timing!r}: served mode supports Timing(mode='sync') only")
        if hold_action is not None and not callable(hold_action):
            raise ValueError(f"hold_action={hold_action!r}: must be callable or None")
        self.env_spec = env_spec
        self.agent = agent
        self.trace = trace
        self.bus = bus if bus is not None else EventBus()
        self.shield = make_shield(env_spec, safety)
        self.image_every = image_every
        self.timing = timing
        self.operator = operator if operator is not None else OperatorChannel()
        self._hold = hold_action
        self._rec: EpisodeRecorder | None = None
        self._queue: collections.deque[Any] = collections.deque()
        self._step = 0
        self._pending_action: dict[str, Any] | None = (
            None  # the action event waiting for its reward
        )
        self._handed_at = 0.0  # when step() returned that action (time.monotonic())
        self._last_sent: dict[str, float] | None = None
        self._holds = 0
        self._chunks = 0
        self._total_reward = 0.0
        self._sim_time: float | None = None
        self._error: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self._rec is not None

    def hold_action(
        self, last: Mapping[str, float] | None, observation: Any = None
    ) -> dict[str, float]:
        """The hold action: the session's hold_action(last) when it was given one, else
        kernel.hold's, as in the driven loop (`observation`: the current one)."""
        if self._hold is not None:
            return dict(self._hold(last))
        return default_hold(self.env_spec, last, observation)

    def reset(
        self,
        observation: Any,
        *,
        seed: int | None = None,
        instruction: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Start an episode at `observation` (ends an unfinished one as stopped)."""
        if self._rec is not None:
            self.end(outcome=EpisodeOutcome.STOPPED)
        if self.operator.estopped:
            raise RuntimeError("the e-stop is latched: call clear_fault() before reset()")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed={seed!r}: must be an integer or None")
        if not isinstance(instruction, str):
            raise ValueError(f"instruction={instruction!r}: must be a string")
        self.operator.begin_episode()
        self.shield.reset()
        self._queue.clear()
        self._step = 0
        self._pending_action = None
        self._last_sent = None
        self._holds = self._chunks = 0
        self._total_reward = 0.0
        self._sim_time = None
        self._error = None
        rec = self._rec = EpisodeRecorder(self.bus, self.trace, image_every=self.image_every)
        rec.start(
            {
                "env": env_description(self.env_spec),
                "timing": self.timing.to_dict(),
                "instruction": instruction,
                "seed": seed,
                "agent": type(self.agent).__name__,
                "started_at": datetime.datetime.now(datetime.UTC).isoformat(
                    timespec="milliseconds"
                ),
                "mode": "served",
                **dict(meta or {}),
            }
        )
        self.agent.reset(instruction=instruction, seed=seed)

    def _clock(self) -> float:
        return (
            self._sim_time if self._sim_time is not None else self._step / self.env_spec.control_hz
        )

    def _settle_previous(
        self, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any] | None
    ) -> None:
        if info and info.get("sim_time_s") is not None:
            self._sim_time = float(info["sim_time_s"])
        pending = self._pending_action
        if pending is None:
            return
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"reward={reward!r}: must be a finite number")
        self._total_reward += reward
        pending.update(reward=reward, terminated=bool(terminated), truncated=bool(truncated))
        assert self._rec is not None
        self._rec.emit(ev.ACTION, pending["step"], pending, self._handed_at)
        self._pending_action = None

    def step(
        self,
        observation: Any,
        *,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        info: Mapping[str, Any] | None = None,
    ) -> dict[str, float]:
        """The shielded action for `observation` (reward etc. belong to the previous action)."""
        rec = self._rec
        if rec is None:
            raise RuntimeError("step() before reset(): start an episode with reset(observation)")
        op = self.operator
        step = self._step
        self._settle_previous(reward, terminated, truncated, info)
        if op.has_notices:
            for kind, data in op.take_notices():
                rec.emit(kind, step, dict(data))
        rec.t = self._clock()
        rec.observation(step, observation)
        hold = self.hold_action(self._last_sent, observation)
        if op.estopped or op.stop_requested:
            # The harness owns the loop: the best the kernel can do is hold.
            result = self.shield.review(hold, hold=hold)
            is_hold = True
        else:
            if not self._queue and self._error is None:
                self._request(step, observation)
            if self._queue:
                proposed = self._queue.popleft()
                result = self.shield.review(proposed, hold=hold)
                rec.compat.count(result, isinstance(proposed, Mapping))
                is_hold = False
            else:
                result = self.shield.review(hold, hold=hold)
                is_hold = True
        if is_hold:
            self._holds += 1
        if result.interventions:
            rec.interventions(step, result.interventions)
        self._last_sent = result.action
        self._pending_action = {"step": step, "action": result.action, "hold": is_hold}
        self._handed_at = time.monotonic()  # its event's wall: when the caller got it
        self._step = step + 1
        return dict(result.action)

    def _request(self, step: int, observation: Any) -> None:
        rec = self._rec
        assert rec is not None
        request_id = self._chunks
        rec.emit(ev.CHUNK_REQUEST, step, {"step": step, "request_id": request_id})
        start = time.monotonic()
        try:
            chunk = self.agent.act(observation, step)
        except Exception as exc:
            # Served mode cannot end the harness's loop: hold from now on, report at end().
            self._error = error_info(POLICY_ERROR, exc)
            rec.emit(ev.ERROR, step, dict(self._error))
            return
        chunk = as_chunk(chunk)
        if self.timing.execution_steps is not None:
            chunk = chunk[: self.timing.execution_steps]
        self._queue = collections.deque(chunk)
        self._chunks += 1
        keys = self.env_spec.action_keys
        rec.emit(
            ev.CHUNK_MERGE,
            step,
            {
                "obs_step": step,
                "arrival_step": step,
                "dropped": 0,
                "kept": len(chunk),
                "inference_s": time.monotonic() - start,
                "request_id": request_id,
                "keys": list(keys),
                "actions": [action_row(a, keys) for a in chunk],
            },
        )

    def end(
        self,
        *,
        success: bool | None = None,
        outcome: EpisodeOutcome | str | None = None,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        info: Mapping[str, Any] | None = None,
        final_observation: Any = None,
    ) -> EpisodeRecord:
        """End the episode: success (bool) or an explicit outcome; returns its record."""
        rec = self._rec
        if rec is None:
            raise RuntimeError("end() without an episode: call reset() first")
        if success is not None and not isinstance(success, bool):
            raise ValueError(f"success={success!r}: must be a bool or None")
        if outcome is not None:
            try:
                outcome = EpisodeOutcome(outcome)
            except ValueError:
                raise ValueError(
                    f"outcome={outcome!r}: must be one of {[o.value for o in EpisodeOutcome]}"
                ) from None
        self._settle_previous(reward, terminated, truncated, info)
        op = self.operator
        if final_observation is not None:
            rec.t = self._clock()
            rec.observation(self._step, final_observation)
        if op.has_notices:
            for kind, data in op.take_notices():
                rec.emit(kind, self._step, dict(data))
        status = ""
        if self._error is not None:
            outcome, status = (
                EpisodeOutcome.ERROR,
                f"error: {POLICY_ERROR}: {self._error['type']}: {self._error['message']}",
            )
        elif op.estopped:
            outcome, status = (
                EpisodeOutcome.ESTOPPED,
                "estopped: e-stop; call clear_fault() before the next episode",
            )
        elif op.stop_requested:
            outcome, status = EpisodeOutcome.STOPPED, "stopped: operator stop"
        elif outcome is None:
            if success is not None:
                outcome = EpisodeOutcome.SUCCESS if success else EpisodeOutcome.FAILURE
            elif terminated:
                outcome = EpisodeOutcome.SUCCESS
            else:
                outcome = EpisodeOutcome.TRUNCATED
        status = status or f"{outcome.value}: ended by the harness at step {self._step}"
        verdict = op.take_verdict()
        outcome, status = apply_verdict(outcome, status, verdict)
        record = EpisodeRecord(
            outcome=outcome,
            safety_interventions=rec.safety_interventions,
            events=rec.seq + 1,
            compat=rec.compat,
            holds=self._holds,
            chunks=self._chunks,
            verdict=verdict,
            status=status,
            steps=self._step,
            trace_path=rec.trace_path,
            run_id=rec.run_id,
            total_reward=self._total_reward,
            elapsed_s=time.monotonic() - rec.t0,
            error=self._error,
        )
        rec.t = self._clock()
        rec.end(episode_summary(record), self._step)
        self._rec = None
        on_end = getattr(self.agent, "on_episode_end", None)
        if on_end is not None:
            try:
                on_end(record)
            except Exception:
                _log.exception("agent.on_episode_end raised; ignored")
        return record
