"""One episode of a rollout: the kernel's EpisodeRunner over the monitored env, and its result.

    result = run_episode(plan, control, parts, outlet, episode=0, seed=0, video_path=None)
    result.outcome, result.steps_advanced, result.success     # typed fields
    result.to_dict()                                          # the API's JSON names, in order

The episode runs the kernel over a `MonitoredEnv` (rollout.monitor) and the call's agent;
the action health of what it executed comes from the kernel's own counts
(rollout.health.ExecutedHealth). Its events go to the trace, the call's observers, the runner's bus, the bag, the
live view and the episode sinks (rollout.sinks). A fatal error of the monitor (a criterion
that raised, a frame that could not be recorded) is raised after the trace is closed.
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robokernel_ros.kernel.events import EventBus

from . import sentry, torque
from .control import STOP_REASONS, RolloutControl
from .health import ActionHealth, ExecutedHealth, RefusalTally
from .monitor import MonitoredEnv
from .parts import EpisodeParts, PolicyLoad, Split
from .plan import RolloutPlan
from .results import BINDING_FLAGS, rtc_aliases
from .sinks import EpisodeSink, EpisodeSinkContext, attach_bag, attach_live

_log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Python, NumPy and (when the process has loaded it) torch + cuDNN."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
        if cudnn is not None:
            cudnn.deterministic = True
            cudnn.benchmark = False


@dataclass(frozen=True)
class EpisodeOutlet:
    """Where an episode's events go and how densely its trace samples (PolicyRunner's settings;
    a parallel eval's worker gets the driver's, with a bus of its own)."""

    bus: EventBus = field(default_factory=EventBus)
    sinks: Sequence[EpisodeSink] = ()
    record_privileged: bool = True
    image_every: int = 1
    privileged_every: int = 10


@dataclass
class EpisodeResult:
    """One episode's result. to_dict() gives the API's JSON record: these fields in this
    order (health's and extras' keys spliced in), the binding flags, the one-release rtc_*
    aliases, then the policy load fields when set; `_named_keys` / `_resolved_keys` are
    private (the aggregate folds them; `results.public` drops them)."""

    robot_name: str | list[str]
    policy: str | dict[str, str]
    instruction: str | dict[str, str]
    n_steps: int
    episode: int
    seed: int | None
    outcome: str
    success: bool
    kernel_status: Any
    elapsed_s: float
    stopped_reason: str
    stop_predicate: str | None
    steps_advanced: int
    hold_steps: int
    steps: int  # the kernel's own counts, as the episode's meta.json has them
    holds: int
    chunks: int
    health: dict[str, Any]  # the action-health fields (per robot too for a multi-robot call)
    total_reward: float
    video_path: str | None
    video_frames: int
    video_fps: float | None
    sim_time_s: float | None
    stop_when_true_at_reset: bool
    chunk_prefetch_enabled: bool
    policy_rtc_enabled: bool
    chunk_prefetch_chunks_acquired: int
    chunk_prefetch_hits: int
    chunk_prefetch_blocks: int
    empty_chunks_requeried: int
    avg_inference_ms: float | None
    max_inference_ms: float | None
    safety_interventions: int
    compat: dict[str, Any]
    trace_path: str | None
    run_id: str | None
    error: str | None
    error_category: str | None
    named_keys: int
    resolved_keys: int
    extras: dict[str, Any] = field(default_factory=dict)  # bag_path, live, the sinks' fields
    binding: dict[str, bool] = field(default_factory=dict)
    policy_load: PolicyLoad | None = None

    @property
    def stopped_early(self) -> bool:
        return self.stopped_reason != "budget"

    @property
    def stop_when_reset_warning(self) -> str | None:
        if not self.stop_when_true_at_reset:
            return None
        return "stop_when was already true at reset; it was armed only after it first turned false"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "robot_name": self.robot_name,
            "policy": self.policy,
            "instruction": self.instruction,
            "n_steps": self.n_steps,
            "episode": self.episode,
            "seed": self.seed,
            "outcome": self.outcome,
            "success": self.success,
            "kernel_status": self.kernel_status,
            "elapsed_s": self.elapsed_s,
            "stopped_early": self.stopped_early,
            "stopped_reason": self.stopped_reason,
            "stop_predicate": self.stop_predicate,
            "steps_advanced": self.steps_advanced,
            "hold_steps": self.hold_steps,
            "steps": self.steps,
            "holds": self.holds,
            "chunks": self.chunks,
            **self.health,
            "total_reward": self.total_reward,
            "video_path": self.video_path,
            "video_frames": self.video_frames,
            "video_fps": self.video_fps,
            "sim_time_s": self.sim_time_s,
            "stop_when_true_at_reset": self.stop_when_true_at_reset,
            "stop_when_reset_warning": self.stop_when_reset_warning,
            "chunk_prefetch_enabled": self.chunk_prefetch_enabled,
            "policy_rtc_enabled": self.policy_rtc_enabled,
            "chunk_prefetch_chunks_acquired": self.chunk_prefetch_chunks_acquired,
            "chunk_prefetch_hits": self.chunk_prefetch_hits,
            "chunk_prefetch_blocks": self.chunk_prefetch_blocks,
            "empty_chunks_requeried": self.empty_chunks_requeried,
            "avg_inference_ms": self.avg_inference_ms,
            "max_inference_ms": self.max_inference_ms,
            "safety_interventions": self.safety_interventions,
            "compat": self.compat,
            "trace_path": self.trace_path,
            "run_id": self.run_id,
            "error": self.error,
            "error_category": self.error_category,
            "_named_keys": self.named_keys,
            "_resolved_keys": self.resolved_keys,
            **self.extras,
        }
        out.update(self.binding)
        rtc_aliases(out)
        if self.policy_load is not None:
            out.update(self.policy_load.to_dict())
        return out


def run_episode(plan: RolloutPlan, control: RolloutControl, parts: EpisodeParts,
                outlet: EpisodeOutlet, *, episode: int, seed: int | None, video_path: str | None,
                carry_state: bool = False) -> EpisodeResult:  # fmt: skip
    """Run episode `episode` of a validated plan (carry_state: continue the scene's state
    instead of resetting it). Raises the monitor's fatal error (CriterionError,
    RecordingFrameError) after the episode's trace, video and sinks are closed."""
    from robokernel_ros.kernel.operator import OperatorChannel
    from robokernel_ros.kernel.runner import EpisodeRunner
    from robokernel_ros.kernel.trace import TraceStore

    timing = parts.timing
    assert timing is not None, "EpisodeParts.timing is set before an episode runs"
    control.episode = episode
    control.step = 0
    recorder = None
    stride = 0.0
    video_fps = None
    if video_path is not None:
        from robokernel_ros.envs import VideoRecorder

        video_fps = min(plan.video["fps"], plan.control_hz)
        stride = plan.control_hz / video_fps
        recorder = VideoRecorder(video_path, fps=video_fps, width=plan.video["width"], height=plan.video["height"],
                                 camera=plan.video["camera"], scene=parts.scene)  # fmt: skip
    # a policy's own success criterion reads its robot's observation: not a composed one
    single_policy = (
        parts.policies[plan.robot] if parts.split is None and len(parts.policies) == 1 else None
    )
    menv = MonitoredEnv(parts.env, plan=plan, control=control, episode=episode, scene=parts.scene,
                         policy=single_policy, recorder=recorder, video_stride=stride,
                         carry_state=carry_state)  # fmt: skip
    bus = EventBus()
    health = {
        r: ActionHealth(frozenset(p.action_keys), frozenset(parts.joint_names.get(r, ())))
        for r, p in parts.policies.items()
    }
    executed = ExecutedHealth(health, parts.split, menv.env_spec.action_keys)
    # to the runner's bus while it has listeners, for good: a verdict given right after
    # the episode is published here too (the outlet holds this bus weakly)
    bus.forward_to(outlet.bus)
    for obs in plan.observers:
        bus.subscribe(obs)
    finishers = []
    trace = TraceStore(plan.trace_dir) if plan.trace_dir is not None else None
    if plan.bag is not None and plan.trace_dir is not None:
        finishers.append(attach_bag(bus, plan.trace_dir, plan.bag))
    if plan.live is not None:
        finishers.append(attach_live(bus, plan, episode))
    sink_ctx = EpisodeSinkContext(bus, plan.trace_dir, plan.robots, episode, plan.call)
    for sink in outlet.sinks:
        try:
            fin = sink(sink_ctx)
        except Exception:
            _log.exception("episode sink %r failed to attach; ignored", sink)
            fin = None
        if fin is not None:
            finishers.append(fin)
    operator = OperatorChannel()
    menv.operator = operator
    control.attach_operator(operator)
    # the plan's teleop source (an in-process simulated operator), else the env's (ROS)
    teleop = plan.teleop if plan.teleop is not None else getattr(parts.env, "teleop_source", None)
    if callable(getattr(teleop, "attach", None)):
        teleop.attach(operator)  # a simulated operator calls correct()/resume() on it
    runner = EpisodeRunner(menv, parts.agent, trace=trace, bus=bus, safety=plan.safety,
                           act_timeout_s=plan.rtc_timeout, record_privileged=outlet.record_privileged,
                           image_every=outlet.image_every,
                           privileged_every=1 if menv.needs_context or plan.benchmark is not None
                           else outlet.privileged_every,
                           timing=timing, operator=operator,
                           count_action=executed.count_action,
                           teleop=teleop)  # fmt: skip
    # what the shield refused is not applied (health.RefusalTally)
    runner.shield = executed.tally = RefusalTally(runner.shield)
    if seed is not None:
        seed_everything(seed)
    meta = {"robots": list(plan.robots), "call": plan.call, "episode": episode,
            "policy": {r: p[0] for r, p in plan.policies.items()}}  # fmt: skip
    if plan.benchmark is not None:
        meta["benchmark"] = plan.benchmark["name"]
    meta.update(torque.trace_meta(plan, parts.scene))
    t0 = time.monotonic()
    try:
        if control.stop_requested:
            operator.stop(control.stop_reason)
        if plan.sentry_rotate_s is None:
            record = runner.run(
                plan.n_steps, seed=seed, instruction=plan.instructions[plan.robot], meta=meta
            )
        else:  # one continuous run, an episode every sentry_rotate_s (rollout.sentry)
            records = runner.run_sentry(plan.n_steps, rotate_every_s=plan.sentry_rotate_s,
                                        seed=seed, instruction=plan.instructions[plan.robot],
                                        meta=meta)  # fmt: skip
            record = sentry.run_record(records)
    finally:
        control.attach_operator(None)
        if recorder is not None:
            try:
                recorder.close()
            except Exception:
                _log.exception("closing the video %s failed", video_path)
    elapsed = time.monotonic() - t0
    executed.finish(record)
    extras: dict[str, Any] = {"bag_path": None}
    for fin in finishers:
        try:
            extras.update(fin(record) or {})
        except Exception:
            _log.exception("episode sink finisher failed; ignored")
    if plan.sentry_rotate_s is not None:
        extras["sentry"] = sentry.episodes(records, plan.sentry_rotate_s, plan.trace_dir)
    if menv.fatal is not None:
        raise menv.fatal
    run = _EpisodeRun(parts, menv, executed, seed=seed, video_path=video_path, video_fps=video_fps)
    return run.result(record, elapsed_s=elapsed, extras=extras)


def _stopped_reason(record: Any, outcome: str, plan: RolloutPlan, control: RolloutControl,
                    menv: MonitoredEnv) -> str:  # fmt: skip
    if outcome == "error":
        status = str(record.status or "")
        message = (record.error or {}).get("message") or status
        return status if status.startswith("error") else f"error: {message}"
    if outcome == "watchdog":
        return f"error: {record.status}"
    if outcome in ("stopped", "estopped"):
        # a Ctrl-C of the process (SIGINT) or a cancelled action says so; other stops
        # keep the outcome
        return control.stop_reason if control.stop_reason in STOP_REASONS else outcome
    if menv.stop_reason is not None:
        return "predicate"
    if outcome == "truncated" and record.steps >= plan.n_steps:
        return "budget"
    if outcome == "truncated":
        return "env_truncated"
    return outcome


def _success(outcome: str, plan: RolloutPlan, menv: MonitoredEnv) -> bool:
    if menv.success is not None:
        return bool(menv.success) and outcome in ("success",)
    return (
        outcome == "success"
        and plan.call != "run_policy"
        and menv.stop_reason is None
        and bool(menv.success_checks)
    )


def _health_fields(health: Mapping[str, ActionHealth], split: Split | None) -> tuple[dict[str, Any], int, int]:  # fmt: skip
    """(the result's action-health fields, keys named, keys resolved)."""
    if split is None:
        only = next(iter(health.values()))
        fields = only.to_dict()
        applied = fields.pop("actions_applied")
        fields = {"actions_applied": applied, "actions_refused": only.refused, **fields}
        return fields, only.named_keys, only.resolved_keys
    per_robot = {r: h.to_dict() for r, h in health.items()}
    named = sum(h.named_keys for h in health.values())
    resolved = sum(h.resolved_keys for h in health.values())
    credited = sum(h.credited for h in health.values())
    partial = sum(h.partial for h in health.values())
    errors: dict[str, int] = {}
    for r, h in health.items():
        for k, c in h.errors.items():
            errors[f"{r}/{k}"] = c
    fields = {
        "actions_applied": min(h.applied for h in health.values()) if health else 0,
        "actions_applied_per_robot": {r: d["actions_applied"] for r, d in per_robot.items()},
        "actions_refused": max(h.refused for h in health.values()) if health else 0,
        "action_errors": errors,
        "action_resolution_rate": resolved / named if named else 0.0,
        "partial_action_failure_rate": partial / credited if credited else 0.0,
        "action_steps_credited": credited,
        "action_steps_with_unresolved_keys": partial,
        "per_robot": per_robot,
    }
    return fields, named, resolved


@dataclass
class _EpisodeRun:
    """The pieces of one episode that its result is read from (after the kernel's run)."""

    parts: EpisodeParts
    menv: MonitoredEnv
    health: ExecutedHealth
    seed: int | None
    video_path: str | None
    video_fps: float | None

    def result(self, record: Any, *, elapsed_s: float, extras: dict[str, Any]) -> EpisodeResult:
        """The episode's result from the kernel's record, the monitor and the action health."""
        parts, menv = self.parts, self.menv
        plan, video_path = menv.plan, self.video_path
        outcome = getattr(record.outcome, "value", str(record.outcome))
        error = record.error
        agents = parts.agents.values()
        n_inference = sum(a.inference_count for a in agents)
        total_inference_s = sum(a.inference_total_s for a in agents)
        max_inference_s = max((a.inference_max_s for a in agents), default=0.0)
        chunk_enabled = parts.timing is not None and parts.timing.mode == "realtime"
        health_fields, named, resolved = _health_fields(self.health.health, self.health.split)
        tally = self.health.tally
        health_fields["first_refusal"] = tally.first_refusal if tally is not None else None
        execution = record.execution
        binding: dict[str, bool] = {k: False for k in BINDING_FLAGS}
        for p in parts.policies.values():
            for k, val in p.binding_report().items():
                binding[k] = binding.get(k, False) or bool(val)
        one = len(plan.robots) == 1
        return EpisodeResult(
            robot_name=plan.robot if one else list(plan.robots),
            policy=plan.policies[plan.robot][0]
            if one
            else {r: p[0] for r, p in plan.policies.items()},
            instruction=plan.instructions[plan.robot] if one else dict(plan.instructions),
            n_steps=plan.n_steps,
            episode=menv.episode,
            seed=self.seed,
            outcome=outcome,
            success=_success(outcome, plan, menv),
            kernel_status=record.status,
            elapsed_s=elapsed_s,
            stopped_reason=_stopped_reason(record, outcome, plan, menv.control, menv),
            stop_predicate=menv.stop_criterion,
            steps_advanced=menv.step_count,
            hold_steps=execution.holds if execution is not None else 0,
            steps=record.steps,
            holds=record.holds,
            chunks=record.chunks,
            health=health_fields,
            total_reward=float(record.total_reward),
            video_path=video_path if video_path and menv.video_frames else None,
            video_frames=menv.video_frames,
            video_fps=self.video_fps,
            sim_time_s=menv.sim_time_s,
            stop_when_true_at_reset=menv.stop_when_true_at_reset,
            chunk_prefetch_enabled=chunk_enabled,
            policy_rtc_enabled=any(
                bool(getattr(p, "supports_rtc", False)) for p in parts.policies.values()
            ),
            chunk_prefetch_chunks_acquired=n_inference,
            chunk_prefetch_hits=execution.seam_hits if chunk_enabled and execution else 0,
            chunk_prefetch_blocks=execution.seam_blocks if chunk_enabled and execution else 0,
            empty_chunks_requeried=sum(a.empty_chunks for a in agents),
            avg_inference_ms=(1000 * total_inference_s / n_inference) if n_inference else None,
            max_inference_ms=(1000 * max_inference_s) if n_inference else None,
            safety_interventions=record.safety_interventions,
            compat=record.compat.to_dict(),
            trace_path=str(record.trace_path) if record.trace_path else None,
            run_id=record.run_id or None,
            error=error.get("message") if error else None,
            error_category=error.get("category") if error else None,
            named_keys=named,
            resolved_keys=resolved,
            extras=extras,
            binding=binding,
        )
