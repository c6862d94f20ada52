"""Execution kernel: the one episode loop, used for evaluation, learning rollouts and deployment.

    env.reset -> [wait for reset_done] -> agent.reset -> loop[ request a chunk (when the
      queue runs low) -> merge it when it arrives -> SafetyShield.review -> env.step ->
      agent.on_step ] -> episode.end -> agent.on_episode_end

Timing (see timing.py) decides when chunks are requested and merged. Events published
at step s, in this order:
    observation(s) [privileged(s)] [chunk.merge (a chunk arriving at s)]
    [chunk.request(s) [chunk.merge (when it arrives at once)]] safety.intervention(s)*
    action(s)
then, after the last step, observation(steps), the env's own account of the episode
(`env.before_episode_end(steps)`, optional: (kind, data) events, e.g. what a shield node
did with the episode's commands, settled once it confirmed them) and episode.end, so the
trace and every subscriber (the bag) hold that account. Operator calls seen at a
step boundary are published there as operator.* events; errors as an `error` event. On
the wall clock a step's events reach the bus together, right after its command (each
stamped when it happened), and the episode's thread (reset and steps) runs under the
pacer's real-time priority (kernel.scheduling).

Takeover (docs/operator.md): with a teleop source, the operator's mode is read at each
step boundary (after the source's observe()): paused holds, correcting executes the
source's command through the handover limiter and the shield while the policy infers in
the shadow, resume flushes the queue; intervention.* events and the action events'
intervention fields record it. run_sentry() records one continuous run as an episode
every N seconds (no reset, no step lost).

Outcome: terminated -> success (failure when info["success"] is False); env truncation or
max_steps -> truncated; operator stop -> stopped; e-stop -> estopped; max_hold_steps
consecutive holds -> watchdog; an exception in act/on_step/agent.reset (policy_error), an
act slower than act_timeout_s (policy_timeout), an exception in env.reset/env.step
(env_error) -> error. An operator verdict turns success/failure/truncated/stopped into
the verdict's outcome.

`Episode` holds one episode's state and its named steps (observe -> schedule -> review ->
execute -> decide); `EpisodeRunner.run` drives them in `Episode.loop`, and the served
session (kernel.served) calls the same steps one at a time from its step().
"""

from __future__ import annotations

import collections
import datetime
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from . import events as ev
from .chunk_steps import ActWorker, ChunkSteps, PendingChunk
from .events import Event, EventBus
from .handover import HandoverLimiter
from .hold import hold_action as default_hold
from .intervention import InterventionSteps
from .operator import AUTONOMOUS, PAUSED, OperatorChannel
from .recorder import (
    ENV_ERROR,
    POLICY_ERROR,
    TELEOP_ERROR,
    CompatReport,
    EpisodeOutcome,
    EpisodeOver,
    EpisodeRecord,
    EpisodeRecorder,
    Execution,
    apply_verdict,
    check_episode_parts,
    env_description,
    episode_summary,
    error_info,
)
from .scheduling import realtime_priority
from .shield import ShieldResult, make_shield
from .spec import (
    Agent,
    Environment,
    EnvSpec,
    HoldActionSource,
    PrivilegedStateSource,
    TeleopSource,
    is_int,
)
from .timing import Pacer, Timing
from .trace import TraceStore, append_event, snapshot

_log = logging.getLogger(__name__)


class EpisodeRunner:
    """Runs an environment and an agent through the SafetyShield, one episode per run().

    EpisodeRunner(env, agent, *, trace=None, bus=None, safety=None, act_timeout_s=None,
    record_privileged=True, image_every=1, timing=None, operator=None, privileged_every=1)

    trace: a TraceStore: each run() writes one run directory.
    bus: an EventBus to publish on (a fresh one when None): subscribe for per-step callbacks.
    safety: build_guards() config; clip_tolerance for the limit guard (default 0.05).
    act_timeout_s: an act() slower than this ends the episode (policy_timeout).
    record_privileged: record the env's privileged_state() (when it offers one and its
        spec's capabilities say so) as `privileged` events next to the observations.
    privileged_every (extra): record it on every n-th step's observation (default 1: every
        step) and always with the final observation (after the last step), so offline
        predicates see every step by default and the final state always. Privileged state
        is the largest per-step record: a caller that evaluates no predicate over the trace
        step by step can sample it (the rollout API records every 10th step unless a
        benchmark or predicate needs every step). It is fetched only when someone listens.
    image_every: record images on every n-th step's observation (0: never).
    timing: Timing() (sync) when None.
    operator: an OperatorChannel (a fresh one when None; reachable as .operator).
    reset_timeout_s (extra): how long to wait for reset_done() (None: forever).
    count_action (extra): called with each executed policy action that the shield's fast
        review did not pass (not exactly the action keys, or a guard acted): a caller that
        tallies the keys policies name (the rollout's action health) sees those, and
        counts the rest from the record's `execution.exact`.
    teleop (extra): a TeleopSource (kernel.spec): what drives the robot while the
        operator's mode is "correcting" (docs/operator.md); None: pause/correct are
        refused. Settable as `.teleop` between episodes.
    handover (extra): {"max_velocity": ..., "max_acceleration": ...} (a number, or one
        per action key) for the handover limiter (kernel.handover); a key left out takes
        the shield's own bound from `safety` when it has one, else the limiter's default.
    """

    def __init__(
        self,
        env: Environment,
        agent: Agent,
        *,
        trace: TraceStore | None = None,
        bus: EventBus | None = None,
        safety: Mapping[str, Any] | None = None,
        act_timeout_s: float | None = None,
        record_privileged: bool = True,
        image_every: int = 1,
        timing: Timing | None = None,
        operator: OperatorChannel | None = None,
        reset_timeout_s: float | None = None,
        privileged_every: int = 1,
        count_action: Callable[[Any], Any] | None = None,
        teleop: TeleopSource | None = None,
        handover: Mapping[str, Any] | None = None,
    ) -> None:
        spec = _env_spec(env)
        check_episode_parts(agent, trace, bus, safety, image_every, operator)
        _check_settings(
            record_privileged,
            privileged_every,
            act_timeout_s,
            reset_timeout_s,
            timing,
            count_action,
            handover,
        )

        self.env = env
        self.agent = agent
        self.env_spec: EnvSpec = spec
        self.trace = trace
        self.bus = bus if bus is not None else EventBus()
        self.shield = make_shield(spec, safety)
        self.act_timeout_s = act_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.record_privileged = (
            record_privileged
            and isinstance(env, PrivilegedStateSource)
            and self.env_spec.capabilities.privileged_state
        )
        self.privileged_every = privileged_every
        self.image_every = image_every
        self.timing = timing if timing is not None else Timing()
        self.operator = operator if operator is not None else OperatorChannel()
        self.supports_rtc = getattr(agent, "supports_rtc", False) is True
        self.count_action = count_action
        self._teleop: TeleopSource | None = None
        self.teleop = teleop  # checked, and attached to the operator channel
        bounds = {
            key: (handover or {}).get(key, (safety or {}).get(key))
            for key in ("max_velocity", "max_acceleration")
        }
        self.handover = HandoverLimiter(spec.action_keys, spec.control_hz, **bounds)
        self._on_step = getattr(agent, "on_step", None)
        self._env_hold = env.hold_action if isinstance(env, HoldActionSource) else None
        # The wall clock's one pacer: the env's own when it has one of this period (a
        # robot's env guards its commands with it), else the kernel's.
        env_pacer = getattr(env, "pacer", None)
        period = 1.0 / spec.control_hz
        self.pacer = (
            env_pacer
            if isinstance(env_pacer, Pacer) and abs(env_pacer.period - period) <= 1e-9 * period
            else Pacer(period)
        )
        self.last_record: EpisodeRecord | None = None

    @property
    def teleop(self) -> TeleopSource | None:
        """The TeleopSource that drives while correcting (None: none; set between episodes)."""
        return self._teleop

    @teleop.setter
    def teleop(self, source: TeleopSource | None) -> None:
        _check_teleop(source)
        self._teleop = source
        self.operator.attach_teleop(None if source is None else source.name)

    # -- hold action -----------------------------------------------------------------
    def hold_action(
        self, last: Mapping[str, float] | None, observation: Any = None
    ) -> dict[str, float]:
        """What to execute when no action is queued: the env's own hold_action(last), else
        kernel.hold's (the last target for absolute control, zero motion with the grippers
        kept for delta / velocity control; without a last action, the action keys' values
        in `observation`, the current one, when it has them)."""
        if self._env_hold is not None:
            return dict(self._env_hold(last))
        return default_hold(self.env_spec, last, observation)

    # -- the episode -----------------------------------------------------------------
    def run(
        self,
        max_steps: int,
        *,
        seed: int | None = None,
        instruction: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> EpisodeRecord:
        """Run one episode of at most max_steps steps; never raises for agent/env failures."""
        _check_run(max_steps, seed, instruction, meta)
        refused = self._refused_while_latched()
        if refused is not None:
            return refused
        return Episode(self, max_steps, seed, instruction, dict(meta or {})).run()

    def run_sentry(
        self,
        max_steps: int,
        *,
        rotate_every_s: float,
        seed: int | None = None,
        instruction: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> list[EpisodeRecord]:
        """Sentry mode: one continuous run of at most max_steps steps (one env.reset, one
        agent.reset), recorded as a new episode every `rotate_every_s` seconds of robot
        time (round(rotate_every_s x control_hz) steps, at least 1), without a reset and
        without losing a step: episode k+1's step 0 is the observation that was episode
        k's final one, every executed step is in exactly one episode, and the robot, the
        policy's queue and chunk in flight, the shield's history and the operator's mode
        go on across the boundary. A boundary never falls inside an intervention: it waits
        for the first step boundary after a step the policy drove. Each episode ends truncated ("sentry
        rotation") but the last, which ends as run() would (stop, e-stop, error,
        terminated, max_steps). Each carries meta["sentry"] {index, rotate_every_s,
        first_step} (first_step: the run's step its step 0 is). agent.on_episode_end is
        called per episode. Returns the episodes' records, in order."""
        _check_run(max_steps, seed, instruction, meta)
        if not (
            isinstance(rotate_every_s, int | float)
            and not isinstance(rotate_every_s, bool)
            and math.isfinite(rotate_every_s)
            and rotate_every_s > 0
        ):
            raise ValueError(f"rotate_every_s={rotate_every_s!r}: must be a positive number")
        refused = self._refused_while_latched()
        if refused is not None:
            return [refused]
        rotate = max(1, round(rotate_every_s * self.env_spec.control_hz))
        records: list[EpisodeRecord] = []
        before: Episode | None = None
        done = 0
        while True:
            sentry = {"index": len(records), "rotate_every_s": rotate_every_s, "first_step": done}
            episode = Episode(
                self,
                max_steps - done,
                seed,
                instruction,
                {**(meta or {}), "sentry": sentry},
                rotate_steps=rotate,
                carry=before,
            )
            records.append(episode.run())
            done += episode.steps
            if not episode.rotated:
                return records
            before = episode

    def _refused_while_latched(self) -> EpisodeRecord | None:
        """The record of a run refused because the e-stop is latched (None: not latched)."""
        op = self.operator
        if op.estopped:
            record = EpisodeRecord(
                outcome=EpisodeOutcome.ESTOPPED,
                safety_interventions=0,
                events=0,
                compat=CompatReport(),
                status="estopped: the e-stop is latched; call clear_fault() before running",
            )
            self.last_record = record
            return record
        return None


class Episode(ChunkSteps, InterventionSteps):
    """One episode's state and its named steps, on `runner`'s parts (env, agent, shield,
    operator, recorder settings). EpisodeRunner.run makes a fresh one per episode and
    drives it (run -> loop); a ServedSession makes one per reset() and calls observe's
    `see`, `schedule`, `review` and execute's `account` from its step(), the harness
    stepping the robot in between. A step that ends the episode raises EpisodeOver."""

    r: EpisodeRunner

    def __init__(
        self,
        runner: EpisodeRunner,
        max_steps: int,
        seed: int | None,
        instruction: str,
        meta: dict[str, Any],
        rotate_steps: int | None = None,
        carry: Episode | None = None,
    ) -> None:
        self.r = runner
        # Sentry (EpisodeRunner.run_sentry): end this episode at the first autonomous step
        # boundary at or after `rotate_steps` (self.rotated), and go on from `carry`.
        self.rotate_steps = rotate_steps
        self.rotated = False
        self.carry = carry
        self.max_steps = max_steps
        self.seed = seed
        self.instruction = instruction
        self.meta = meta
        self.timing = runner.timing
        self.sync = runner.timing.mode == "sync"
        self.spec = runner.env_spec
        self.rec = EpisodeRecorder(runner.bus, runner.trace, image_every=runner.image_every)
        self.queue: collections.deque[Any] = collections.deque()
        self.pending: PendingChunk | None = None
        self.requests = 0
        self.chunks = 0
        self.holds = 0
        # what the loop executed (counted after env.step); the merge aligns by its actions
        self.execution = Execution()
        self.holds_at_merge = 0  # execution.holds at the last merge
        self.consecutive_holds = 0
        self.total_reward = 0.0
        self.steps = 0
        self.last_sent: dict[str, float] | None = None
        self.last_delay = 0  # steps the previous request took (for RTC's delay hint)
        self.executor: ActWorker | None = None
        self.sim_time: float | None = None
        # The observation of the step being run; after the last step, the final one.
        self.observation: Any = None
        # The loop's settings (kernel.timing) and what each step sets for the next of its
        # named steps (observe -> schedule -> review -> execute -> decide).
        timing = runner.timing
        self.wall = timing.clock == "wall"
        self.refill = timing.refill_steps if timing.mode == "realtime" else 0
        self.max_holds = timing.max_hold_steps
        self.plain_absolute_hold = self.spec.control == "absolute" and runner._env_hold is None
        self.estop_latch = runner.operator.estop_latch
        self.operated = False  # the step's command was the operator's (paused or correcting)
        self.is_hold = False
        self.exact = False
        self.proposed: Any = None
        self.fields: dict[str, Any] = {}
        self.terminated = False
        self.truncated = False
        self.info: Mapping[str, Any] = {}
        if carry is not None:
            self.continue_from(carry)
        # Takeover (docs/operator.md): the mode the loop runs in, the open intervention.
        self.teleop = runner.teleop
        self.mode = AUTONOMOUS
        self.shadow = 0  # policy actions consumed while correcting (not executed)
        self.handing_back = False  # the limiter still leads the policy's commands
        self.interventions = 0
        self.intervention_steps = 0
        self.first_intervention_step: int | None = None
        self.intervention_start: tuple[int, float] | None = None  # (step, monotonic)

    def continue_from(self, before: Episode) -> None:
        """Take over the loop state of the episode `before` rotated out of (sentry): the
        queued actions, the chunk in flight (its steps renumbered: this episode's step 0 is
        `before`'s step `before.steps`), the last command, the act thread, the sim clock."""
        self.queue = before.queue
        offset, consumed = before.steps, before.progress()
        pending = before.pending
        if pending is not None:
            pending.obs_step -= offset
            pending.executed -= consumed
            if pending.arrival_step is not None:
                pending.arrival_step -= offset
        self.pending = pending
        self.requests = before.requests
        self.last_sent = before.last_sent
        self.last_delay = before.last_delay
        self.consecutive_holds = before.consecutive_holds
        self.executor, before.executor = before.executor, None
        self.sim_time = before.sim_time
        self.handing_back = before.handing_back

    # -- helpers -----------------------------------------------------------------------
    def progress(self) -> int:
        """Policy actions consumed: executed, or passed in the shadow of a correction (the
        aligned merge drops as many of a late chunk's leading actions)."""
        return self.execution.actions + self.shadow

    def clock(self, step: int) -> float:
        return self.sim_time if self.sim_time is not None else step / self.spec.control_hz

    def publish_operator_notices(self, step: int) -> None:
        for kind, data in self.r.operator.take_notices():
            self.rec.emit(kind, step, dict(data))

    def start_data(self) -> dict[str, Any]:
        return {
            "env": env_description(self.spec),
            "timing": self.timing.to_dict(),
            "instruction": self.instruction,
            "seed": self.seed,
            "agent": type(self.r.agent).__name__,
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            **self.meta,
        }

    # -- takeover (docs/operator.md; the steps themselves: kernel.intervention) ---------
    def teleop_failure(self, exc: BaseException, where: str) -> EpisodeOver:
        return EpisodeOver.failure(TELEOP_ERROR, exc, f"teleop {self.source.name!r}: {where}")

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> EpisodeRecord:
        r = self.r
        op = r.operator
        continued = self.carry is not None
        if continued:  # sentry: the robot, the shield's history, the operator's mode go on
            op.begin_episode(continued=True)
        else:
            op.attach_teleop(None if r.teleop is None else r.teleop.name)
            op.begin_episode()
            r.shield.reset()
            r.handover.stop()
        outcome = EpisodeOutcome.TRUNCATED
        status = ""
        error: dict[str, Any] | None = None
        final_observation_due = False
        observation: Any = None
        self.rec.start(self.start_data())
        wall = self.wall
        if wall and self.timing.mode == "realtime":
            self.worker()  # started before the loop's first tick, and at normal priority
        # On the wall clock the reset and the steps drive the robot: their thread runs under
        # the pacer's real-time priority (kernel.scheduling; what it starts runs at normal).
        with realtime_priority(r.pacer.priority if wall else 0):
            try:
                carry = self.carry
                observation = carry.observation if carry is not None else self.reset()
                self.carry = None  # nothing more is taken from it
                final_observation_due = True
                outcome, status = self.loop(observation, restart=not continued)
            except EpisodeOver as over:
                outcome, status, error = over.outcome, over.status, over.error
                final_observation_due = outcome in (
                    EpisodeOutcome.STOPPED,
                    EpisodeOutcome.WATCHDOG,
                )
            except Exception as exc:  # a kernel bug must still close the trace and leave a record
                _log.exception("episode loop failed")
                outcome, status, error = (
                    EpisodeOutcome.ERROR,
                    f"error: kernel: {type(exc).__name__}: {exc}",
                    error_info("kernel_error", exc),
                )
            finally:
                if not self.rotated:  # a rotated episode hands its act thread on
                    self.abandon_worker()
                self.rec.deliver()  # a step the episode ended in held its events
        if final_observation_due and self.observation is not None:
            self.record_observation(self.steps, self.observation, final=True)
        return self.finish(outcome, status, error)

    def reset(self) -> Any:
        r = self.r
        op = r.operator
        needs_confirmation = self.spec.capabilities.requires_reset_confirmation
        if needs_confirmation:
            op.clear_reset_confirmation()
        try:
            observation = r.env.reset(seed=self.seed)
        except Exception as exc:
            # An env whose reset ends early on a stop or an e-stop (a robot's reset ramp:
            # ros.ros_env's reset_interrupt) raises: the operator's call decides the outcome.
            self.publish_operator_notices(0)
            if op.estopped:
                raise EpisodeOver(
                    EpisodeOutcome.ESTOPPED,
                    f"estopped: e-stop during env.reset() ({exc}); call clear_fault() before "
                    "the next run",
                ) from exc
            if op.stop_requested:
                why = f" ({op.stop_reason})" if op.stop_reason else ""
                raise EpisodeOver(
                    EpisodeOutcome.STOPPED,
                    f"stopped: operator stop{why} during env.reset() ({exc})",
                ) from exc
            raise EpisodeOver.failure(ENV_ERROR, exc) from exc
        if needs_confirmation:
            confirmed = op.wait_reset_done(r.reset_timeout_s)
            self.publish_operator_notices(0)
            if not confirmed:
                if op.estopped:
                    raise EpisodeOver(
                        EpisodeOutcome.ESTOPPED,
                        "estopped: e-stop while waiting for reset_done(); call clear_fault() before the next run",
                    )
                if op.stop_requested:
                    raise EpisodeOver(
                        EpisodeOutcome.STOPPED,
                        "stopped: operator stop while waiting for reset_done()",
                    )
                raise EpisodeOver(
                    EpisodeOutcome.STOPPED,
                    f"stopped: no reset_done() within reset_timeout_s={r.reset_timeout_s}",
                )
        try:
            r.agent.reset(instruction=self.instruction, seed=self.seed)
        except Exception as exc:
            raise EpisodeOver.failure(POLICY_ERROR, exc, "agent.reset") from exc
        reset_teleop = getattr(self.teleop, "reset", None)
        if reset_teleop is not None:
            try:
                reset_teleop(seed=self.seed)
            except Exception as exc:
                raise self.teleop_failure(exc, "reset") from exc
        return observation

    def record_observation(self, step: int, observation: Any, *, final: bool = False) -> None:
        """The observation event of `step`, and the privileged event on its sampled steps
        (every `privileged_every`-th and the final observation); the env is asked for its
        privileged state only when someone listens."""
        rec = self.rec
        rec.t = self.clock(step)
        rec.observation(step, observation)
        r = self.r
        if r.record_privileged and (final or step % r.privileged_every == 0):
            if not (rec.traced or rec.bus.subscriber_count):
                rec.skip()  # counted all the same, like every other event
                return
            try:
                # record_privileged: the env is a PrivilegedStateSource
                state = cast(PrivilegedStateSource, r.env).privileged_state()
            except Exception as exc:
                raise EpisodeOver.failure(ENV_ERROR, exc, "privileged_state") from exc
            rec.emit(ev.PRIVILEGED, step, {"state": snapshot(state)})

    def hold(self) -> Any:
        """The hold action for this step (an env error when the env's hold_action raises)."""
        last = self.last_sent
        # Absolute control without an env hold holds the last target: no copy needed.
        if self.plain_absolute_hold and last is not None:
            return last
        try:
            return self.r.hold_action(last, self.observation)
        except Exception as exc:
            raise EpisodeOver.failure(ENV_ERROR, exc, "hold_action") from exc

    def estopped(self, step: int) -> EpisodeOver:
        return EpisodeOver(
            EpisodeOutcome.ESTOPPED,
            f"estopped: e-stop at step {step}; call clear_fault() before the next run",
        )

    def loop(self, observation: Any, restart: bool = True) -> tuple[EpisodeOutcome, str]:
        """The steps, each: observe -> schedule -> review -> execute -> decide (-> the
        pacer's tick on the wall clock). On the wall clock the events of a step are held
        until its command is out (EpisodeRecorder.defer): whatever listens (the trace, the
        bag, ROS) does not delay the command, and sees the same order; run() delivers what
        an ended step held."""
        if restart:  # a sentry episode keeps its predecessor's schedule
            self.r.pacer.restart()
        step = 0
        self.observation = observation
        while step < self.max_steps:
            stopping = self.observe(step, observation)
            if self.rotated:
                return (
                    EpisodeOutcome.TRUNCATED,
                    f"truncated: sentry rotation after {step} steps (rotate every {self.rotate_steps})",
                )
            self.schedule(step, observation, stopping)
            action = self.review(step, observation, stopping)
            observation = self.execute(step, observation, action)
            step += 1
            self.steps = step
            self.observation = observation
            ended = self.decide(step, stopping)
            if ended is not None:
                return ended
            if self.wall:
                # Tick at control_hz against absolute deadlines; a late step does not
                # sleep, and one more than a period late (a slow step, a descheduled
                # process) restarts the schedule a period from now rather than catching
                # up, since catching up would send a burst of commands that the robot's
                # controller, and the shield's rate guards, would see as a jump.
                self.r.pacer.wait()
        return EpisodeOutcome.TRUNCATED, f"truncated: max_steps={self.max_steps} reached"

    def observe(self, step: int, observation: Any) -> bool:
        """The step boundary: the operator's notices and e-stop (an EpisodeOver), the
        sentry's rotation (sets `rotated`: the step does not run), the observation's events,
        and the operator's mode (with a teleop source). Returns whether a stop was asked."""
        rec = self.rec
        if self.wall:
            rec.defer()
        op = self.r.operator
        if op.has_notices:
            self.publish_operator_notices(step)
        if self.estop_latch.latched:
            raise self.estopped(step)
        stopping = op.stop_requested
        rotate = self.rotate_steps
        if rotate is not None and step >= rotate and not stopping and self.mode == AUTONOMOUS:
            # Sentry: the next episode starts from this observation (never inside an
            # intervention: the boundary lands on a step the policy drives).
            self.rotated = True
            return stopping
        self.see(step, observation)
        return stopping

    def see(self, step: int, observation: Any) -> None:
        """The observation's events of `step` (counted, not built, when nobody listens),
        and the operator's mode at this step boundary (with a teleop source)."""
        rec = self.rec
        if rec.traced or rec.bus.subscriber_count:
            self.record_observation(step, observation)
        else:  # nobody listens: count the events, build nothing
            rec.skip(2 if self.r.record_privileged and step % self.r.privileged_every == 0 else 1)
        if self.teleop is not None:
            self.operator_mode(step, observation)

    def schedule(self, step: int, observation: Any, stopping: bool) -> None:
        """Chunks: merge what has arrived, then ask for more when the queue runs low (while
        correcting too: the policy infers in the shadow; not while paused or stopping)."""
        if stopping or self.mode == PAUSED:
            return
        if self.pending is not None:
            self.poll_arrival(step)
        if self.pending is None and len(self.queue) <= self.refill:
            self.request(step, observation)

    def review(self, step: int, observation: Any, stopping: bool) -> Any:
        """The shield's review of this step's command: the operator's (paused or
        correcting), the policy's next queued action, or the hold action. Sets the step's
        `operated`, `is_hold`, `exact` (the fast review passed it), `proposed` and
        `fields` (the action event's takeover fields); returns the action to execute. The
        hold action is computed only when the review needs it: the fast review (a
        complete, finite, in-limits action and no extra guards) does not."""
        shield = self.r.shield
        result: ShieldResult | None
        self.operated = self.mode != AUTONOMOUS
        if self.operated:
            result, self.is_hold, self.fields = self.operator_step(self.mode, observation, stopping)
        elif self.queue and not stopping:
            proposed = self.queue.popleft()
            if self.handing_back:
                proposed = self.lead(proposed)
            self.proposed = proposed
            result = shield.review_fast(proposed)
            self.exact = result is not None
            if result is None:
                result = shield.review(proposed, hold=self.hold())
                self.rec.count_reviewed(result, proposed)
            else:
                self.rec.count_exact()
            self.is_hold = False
            self.consecutive_holds = 0
        else:
            hold = self.hold()
            result = shield.review(self.lead(None) if self.handing_back else hold, hold=hold)
            self.is_hold = True
            self.holds += 1
            self.consecutive_holds += 1
        if result.interventions:
            self.rec.interventions(step, result.interventions)
        return result.action

    def execute(self, step: int, observation: Any, action: Any) -> Any:
        """env.step(action) (nothing once the e-stop latched: an e-stop during act()), its
        count and action event, then agent.on_step. Sets the step's `terminated`,
        `truncated` and `info`; returns the next observation."""
        if self.estop_latch.latched:
            raise self.estopped(step)
        handed_at = time.monotonic()  # the action event's wall: its command, not what follows
        try:
            stepped = self.r.env.step(action)
            next_observation = stepped.observation
            reward = float(stepped.reward)
            terminated = bool(stepped.terminated)
            truncated = bool(stepped.truncated)
            info = stepped.info
            if type(info) is not dict and not isinstance(info, Mapping):
                info = {}
        except Exception as exc:
            raise EpisodeOver.failure(ENV_ERROR, exc) from exc
        self.account(step, observation, action, reward, terminated, truncated, info, handed_at)
        return next_observation

    def account(
        self,
        step: int,
        observation: Any,
        action: Any,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any],
        handed_at: float,
    ) -> None:
        """What follows the robot's step of `action` (reviewed at `step`, handed out at
        `handed_at`, a time.monotonic() reading): its count and action event with the
        reward and end flags, the sim clock from info["sim_time_s"], agent.on_step. Sets
        the step's `terminated`, `truncated` and `info`."""
        self.terminated = terminated
        self.truncated = truncated
        self.info = info
        self.last_sent = action
        self.total_reward += reward
        self.count_execution(step)
        rec = self.rec
        if rec.traced or rec.bus.subscriber_count:
            data = {
                "step": step,
                "action": action,
                "hold": self.is_hold,
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
            }
            if self.teleop is not None:
                data["intervention"] = self.operated
                if self.operated:
                    data.update(self.fields)
            rec.emit(ev.ACTION, step, data, handed_at)
        else:
            rec.skip()
        if self.wall:  # the command is out: deliver what the step held
            rec.deliver()
        sim_time = info.get("sim_time_s")
        if sim_time is not None:
            self.sim_time = float(sim_time)
        on_step = self.r._on_step
        if on_step is not None:
            try:
                on_step(step, observation, action, reward)
            except Exception as exc:
                raise EpisodeOver.failure(POLICY_ERROR, exc, "on_step") from exc

    def count_execution(self, step: int) -> None:
        """Count the executed step by what drove it (Execution); a policy action the fast
        review did not pass goes to the runner's count_action too."""
        execution = self.execution
        if self.operated:
            execution.operator += 1
            self.intervention_steps += 1
        elif self.is_hold:
            execution.holds += 1
        elif self.exact:
            execution.exact += 1
        else:
            execution.other += 1
            count_action = self.r.count_action
            if count_action is not None:
                try:
                    count_action(self.proposed)
                except Exception:
                    _log.exception("count_action raised at step %d; ignored", step)

    def decide(self, step: int, stopping: bool) -> tuple[EpisodeOutcome, str] | None:
        """After `step` steps: the episode's outcome and status when it ends here (the env
        terminated or truncated, a stop, the hold watchdog), else None."""
        if self.terminated:
            success = self.info.get("success")
            if success is not None and not success:
                return (
                    EpisodeOutcome.FAILURE,
                    f"failure: terminated at step {step} with info['success'] False",
                )
            return EpisodeOutcome.SUCCESS, f"success: terminated at step {step}"
        if self.truncated:
            return EpisodeOutcome.TRUNCATED, f"truncated: the env truncated at step {step}"
        if stopping:
            op = self.r.operator
            if op.has_notices:
                self.publish_operator_notices(step)
            why = f" ({op.stop_reason})" if op.stop_reason else ""
            return (
                EpisodeOutcome.STOPPED,
                f"stopped: operator stop{why}; hold action executed at step {step - 1}",
            )
        if self.consecutive_holds >= self.max_holds:
            return (
                EpisodeOutcome.WATCHDOG,
                f"watchdog: {self.consecutive_holds} consecutive hold steps (max_hold_steps={self.max_holds}) at step {step}",
            )
        return None

    def finish(
        self, outcome: EpisodeOutcome, status: str, error: dict[str, Any] | None
    ) -> EpisodeRecord:
        r = self.r
        op = r.operator
        rec = self.rec
        step = self.steps
        if op.has_notices:
            self.publish_operator_notices(step)
        if error is not None:
            rec.emit(ev.ERROR, step, dict(error))
        self.close_intervention(step, f"episode end ({outcome.value})")
        if not self.rotated:
            op.end_episode()
        verdict = op.take_verdict()
        outcome, status = apply_verdict(outcome, status, verdict)
        self.settle_env_accounts(step)
        record = self.end_record(
            outcome,
            status,
            verdict,
            error,
            execution=self.execution,
            takeover=None
            if self.teleop is None
            else {
                "interventions": self.interventions,
                "intervention_steps": self.intervention_steps,
                "first_intervention_step": self.first_intervention_step,
            },
        )
        op.set_late_verdict_handler(lambda v: _late_verdict(r, record, v))
        r.last_record = record
        self.tell_agent(record)
        return record

    def end_record(
        self,
        outcome: EpisodeOutcome,
        status: str,
        verdict: dict[str, Any] | None,
        error: dict[str, Any] | None,
        **extra: Any,
    ) -> EpisodeRecord:
        """The episode's record after `self.steps` steps (`extra`: more EpisodeRecord
        fields), emitted as episode.end, which closes the trace."""
        rec = self.rec
        step = self.steps
        record = EpisodeRecord(
            outcome=outcome,
            safety_interventions=rec.safety_interventions,
            events=rec.events_at_end,
            compat=rec.compat,
            holds=self.holds,
            chunks=self.chunks,
            verdict=verdict,
            status=status,
            steps=step,
            trace_path=rec.trace_path,
            run_id=rec.run_id,
            total_reward=self.total_reward,
            elapsed_s=time.monotonic() - rec.t0,
            error=error,
            **extra,
        )
        rec.t = self.clock(step)
        rec.end(episode_summary(record), step)
        return record

    def tell_agent(self, record: EpisodeRecord) -> None:
        """agent.on_episode_end(record), when the agent has it (what it raises is logged)."""
        on_end = getattr(self.r.agent, "on_episode_end", None)
        if on_end is not None:
            try:
                on_end(record)
            except Exception:
                _log.exception("agent.on_episode_end raised; ignored")

    def settle_env_accounts(self, step: int) -> None:
        """The env's account of the episode, emitted before episode.end: its optional
        `before_episode_end(step)` returns (kind, data) events (or None). It may block
        while the env settles (e.g. until the last commands are confirmed). A hook that
        raises, or returns something else, is logged and ignored: the episode still ends."""
        settle = getattr(self.r.env, "before_episode_end", None)
        if settle is None:
            return
        try:
            accounts = [(str(kind), dict(data)) for kind, data in (settle(step) or ())]
        except Exception:
            _log.exception("env.before_episode_end failed; ignored")
            return
        self.rec.t = self.clock(step)
        for kind, data in accounts:
            self.rec.emit(kind, step, data)


def _env_spec(env: Environment) -> EnvSpec:
    """The env's EnvSpec (ValueError naming the env when it has none, or no reset/step)."""
    spec = getattr(env, "env_spec", None)
    if not isinstance(spec, EnvSpec):
        raise ValueError(f"env={type(env).__name__}: env.env_spec must be an EnvSpec, got {spec!r}")
    for name in ("reset", "step"):
        if not callable(getattr(env, name, None)):
            raise ValueError(f"env={type(env).__name__}: has no {name}() method")
    return spec


def _check_settings(
    record_privileged: bool,
    privileged_every: int,
    act_timeout_s: float | None,
    reset_timeout_s: float | None,
    timing: Timing | None,
    count_action: Callable[[Any], Any] | None,
    handover: Mapping[str, Any] | None,
) -> None:
    """EpisodeRunner's settings within their domains (ValueError naming the first outside)."""
    if not isinstance(record_privileged, bool):
        raise ValueError(f"record_privileged={record_privileged!r}: must be a bool")
    if not (is_int(privileged_every) and privileged_every >= 1):
        raise ValueError(
            f"privileged_every={privileged_every!r}: must be an integer >= 1 (1: every step)"
        )
    for name, value in (("act_timeout_s", act_timeout_s), ("reset_timeout_s", reset_timeout_s)):
        if value is not None and not (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            raise ValueError(f"{name}={value!r}: must be a positive number or None")
    if timing is not None and not isinstance(timing, Timing):
        raise ValueError(f"timing={timing!r}: must be a Timing or None")
    if count_action is not None and not callable(count_action):
        raise ValueError(f"count_action={count_action!r}: must be callable or None")
    if handover is not None and not isinstance(handover, Mapping):
        raise ValueError(f"handover={handover!r}: must be a mapping or None")
    unknown = set(handover or ()) - {"max_velocity", "max_acceleration"}
    if unknown:
        raise ValueError(
            f"handover: unknown keys {sorted(unknown)}; known: max_acceleration, max_velocity"
        )


def _check_run(max_steps: Any, seed: Any, instruction: Any, meta: Any) -> None:
    if not (is_int(max_steps) and max_steps >= 0):
        raise ValueError(f"max_steps={max_steps!r}: must be an integer >= 0")
    if seed is not None and not is_int(seed):
        raise ValueError(f"seed={seed!r}: must be an integer or None")
    if not isinstance(instruction, str):
        raise ValueError(f"instruction={instruction!r}: must be a string")
    if meta is not None and not isinstance(meta, Mapping):
        raise ValueError(f"meta={meta!r}: must be a mapping or None")


def _check_teleop(teleop: Any) -> None:
    """A TeleopSource (kernel.spec) or None; anything else is refused by name."""
    if teleop is None:
        return
    name = getattr(teleop, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"teleop={teleop!r}: must have a non-empty str `name` (a TeleopSource)")
    if not callable(getattr(teleop, "teleop_action", None)):
        raise ValueError(f"teleop={teleop!r}: has no teleop_action(observation) method")
    for member in ("reset", "observe"):
        if getattr(teleop, member, None) is not None and not callable(getattr(teleop, member)):
            raise ValueError(f"teleop={teleop!r}: its {member} must be callable")


def _late_verdict(runner: EpisodeRunner, record: EpisodeRecord, verdict: dict[str, Any]) -> None:
    """A verdict given right after the episode: update the record, the trace and the bus."""
    record.verdict = verdict
    record.outcome, record.status = apply_verdict(record.outcome, record.status, verdict)
    event = Event(
        ev.OPERATOR_VERDICT, record.steps, dict(verdict), seq=record.events, run_id=record.run_id
    )
    record.events += 1
    runner.bus.publish(event)
    if record.trace_path is not None:
        append_event(
            record.trace_path,
            event,
            {
                "outcome": record.outcome.value,
                "status": record.status,
                "verdict": verdict,
                "events": record.events,
            },
        )
