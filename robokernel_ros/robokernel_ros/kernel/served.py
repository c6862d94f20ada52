"""Served mode: an external harness owns the loop; the kernel answers one step at a time.

    session = ServedSession(env_spec, agent, trace=TraceStore("runs"))
    session.reset(first_observation, seed=0, instruction="pick the cube")
    while not done:
        action = session.step(observation, reward=r_prev)   # shielded, every key present
        observation, r_prev, done = harness.apply(action)
    record = session.end(success=True, reward=r_prev, final_observation=observation)

The same episode code as the driven EpisodeRunner (kernel.runner's Episode: its steps
`see`, `schedule`, `review` and `account` run from step()), with sync timing: a chunk is
requested when the queue is empty and its first `execution_steps` actions are served.
`reward`/`terminated`/`truncated` given to step() or end() belong to the previous action;
its `action` event is published once they are known, so the event order matches the driven
loop's. What differs is who owns the loop: the harness steps the robot and decides when the
episode ends (end()); an e-stop or a stop makes step() hand out the hold action, and a
policy error is recorded and held from then on (reported by end()).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from . import events as ev
from .events import EventBus
from .operator import OperatorChannel
from .recorder import (
    POLICY_ERROR,
    EpisodeOutcome,
    EpisodeOver,
    EpisodeRecord,
    apply_verdict,
)
from .runner import Episode, EpisodeRunner
from .spec import Action, Agent, EnvSpec, StepResult
from .timing import Timing
from .trace import TraceStore

_log = logging.getLogger(__name__)


class _Harness:
    """The env of a served episode: the harness owns the robot, so the kernel never calls
    reset() or step(); `hold_action` is the session's, when it was given one."""

    def __init__(self, env_spec: EnvSpec) -> None:
        self.env_spec = env_spec

    def reset(self, seed: int | None = None) -> Any:
        raise RuntimeError("served mode: the harness resets the robot")

    def step(self, action: Action) -> StepResult:
        raise RuntimeError("served mode: the harness steps the robot")


class _HarnessWithHold(_Harness):
    def __init__(
        self, env_spec: EnvSpec, hold: Callable[[Mapping[str, float] | None], Mapping[str, float]]
    ) -> None:
        super().__init__(env_spec)
        self._hold = hold

    def hold_action(self, last: Mapping[str, float] | None) -> Mapping[str, float]:
        return self._hold(last)


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
        timing = timing if timing is not None else Timing()
        if not isinstance(timing, Timing) or timing.mode != "sync":
            raise ValueError(f"timing={timing!r}: served mode supports Timing(mode='sync') only")
        if hold_action is not None and not callable(hold_action):
            raise ValueError(f"hold_action={hold_action!r}: must be callable or None")
        harness = (
            _Harness(env_spec) if hold_action is None else _HarnessWithHold(env_spec, hold_action)
        )
        # The driven loop's parts (shield, operator, recorder settings), checked there.
        self._runner = runner = EpisodeRunner(
            harness,
            agent,
            trace=trace,
            bus=bus,
            safety=safety,
            image_every=image_every,
            timing=timing,
            operator=operator,
        )
        self.env_spec = env_spec
        self.agent = agent
        self.trace = trace
        self.bus = runner.bus
        self.shield = runner.shield
        self.image_every = image_every
        self.timing = runner.timing
        self.operator = runner.operator
        self._episode: Episode | None = None
        # the action handed out last, waiting for its reward: (step, observation, action,
        # when step() returned it (time.monotonic()))
        self._pending: tuple[int, Any, dict[str, float], float] | None = None
        self._error: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self._episode is not None

    def hold_action(
        self, last: Mapping[str, float] | None, observation: Any = None
    ) -> dict[str, float]:
        """The hold action: the session's hold_action(last) when it was given one, else
        kernel.hold's, as in the driven loop (`observation`: the current one)."""
        return self._runner.hold_action(last, observation)

    def reset(
        self,
        observation: Any,
        *,
        seed: int | None = None,
        instruction: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        """Start an episode at `observation` (ends an unfinished one as stopped)."""
        if self._episode is not None:
            self.end(outcome=EpisodeOutcome.STOPPED)
        if self.operator.estopped:
            raise RuntimeError("the e-stop is latched: call clear_fault() before reset()")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed={seed!r}: must be an integer or None")
        if not isinstance(instruction, str):
            raise ValueError(f"instruction={instruction!r}: must be a string")
        self.operator.begin_episode()
        self.shield.reset()
        self._pending = None
        self._error = None
        # max_steps: unused (the harness decides when the episode ends)
        episode = Episode(
            self._runner, 0, seed, instruction, {"mode": "served", **dict(meta or {})}
        )
        self._episode = episode
        episode.rec.start(episode.start_data())
        self.agent.reset(instruction=instruction, seed=seed)

    def _settle_previous(
        self, reward: float, terminated: bool, truncated: bool, info: Mapping[str, Any] | None
    ) -> None:
        """The previous action's reward and end flags are known: its accounting and action
        event (Episode.account); `info["sim_time_s"]`, when given, sets the episode clock."""
        episode = self._episode
        assert episode is not None
        pending = self._pending
        if pending is None:
            if info and info.get("sim_time_s") is not None:
                episode.sim_time = float(info["sim_time_s"])
            return
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"reward={reward!r}: must be a finite number")
        self._pending = None
        step, observation, action, handed_at = pending
        info = info if isinstance(info, Mapping) else {}
        try:
            episode.account(
                step,
                observation,
                action,
                reward,
                bool(terminated),
                bool(truncated),
                info,
                handed_at,
            )
        except EpisodeOver as over:  # agent.on_step raised
            self._fail(step + 1, over)

    def _fail(self, step: int, over: EpisodeOver) -> None:
        """A policy failure: served mode cannot end the harness's loop, so the session
        holds from now on and end() reports it."""
        episode = self._episode
        assert episode is not None
        if self._error is None:
            self._error = dict(over.error or {})
            episode.rec.emit(ev.ERROR, step, dict(self._error))

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
        episode = self._episode
        if episode is None:
            raise RuntimeError("step() before reset(): start an episode with reset(observation)")
        op = self.operator
        step = episode.steps
        self._settle_previous(reward, terminated, truncated, info)
        if op.has_notices:
            episode.publish_operator_notices(step)
        # The harness owns the loop: on an e-stop or a stop the best the kernel can do is hold.
        stopping = op.estopped or op.stop_requested
        episode.see(step, observation)
        episode.observation = observation
        if not stopping and self._error is None:
            try:
                episode.schedule(step, observation, stopping)
            except EpisodeOver as over:  # act() raised
                self._fail(step, over)
        try:
            action = episode.review(step, observation, stopping)
        except EpisodeOver as over:  # the hold_action raised: the caller's error
            raise (over.__cause__ or over) from None
        episode.steps = step + 1
        self._pending = (step, observation, action, time.monotonic())
        return dict(action)

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
        episode = self._episode
        if episode is None:
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
        rec = episode.rec
        steps = episode.steps
        self._settle_previous(reward, terminated, truncated, info)
        op = self.operator
        if final_observation is not None:
            rec.t = episode.clock(steps)
            rec.observation(steps, final_observation)
        if op.has_notices:
            episode.publish_operator_notices(steps)
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
        status = status or f"{outcome.value}: ended by the harness at step {steps}"
        verdict = op.take_verdict()
        outcome, status = apply_verdict(outcome, status, verdict)
        record = episode.end_record(outcome, status, verdict, self._error)
        self._episode = None
        episode.tell_agent(record)
        return record
