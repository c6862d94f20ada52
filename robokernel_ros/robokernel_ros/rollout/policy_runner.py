"""PolicyRunner: policy rollouts on a MuJoCo scene through the kernel's one episode loop.

    runner = PolicyRunner(scene)
    result = runner.run("arm", policy_provider="mock", n_steps=20)   # raises ValueError
    report = runner.evaluate("arm", n_episodes=5, seed=0)

`run` (one rollout), `evaluate` (n episodes, success rate) and `run_multi` (several
robots, one policy each) check every parameter first (rollout.requests) and raise
ValueError for a refused one; the SimWorkcell facade calls the same `plan_*` checks and
`preflight` before it claims a robot, then `execute_*` on its own thread, and reports
through the {"status", "content"} envelope. Each episode is a rollout.episode.run_episode;
an eval's episodes share one EvalSession (rollout.session).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.timing import Timing
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry

from . import torque
from . import validation as v
from .control import STOP_REASONS, RolloutControl
from .episode import EpisodeOutlet, run_episode
from .multi import MultiAgent, split_action
from .parts import close_policies, kernel_timing, prepare
from .plan import RolloutPlan
from .report import eval_report
from .requests import plan_eval, plan_multi, plan_run
from .results import public
from .session import EvalSession, eval_progress
from .sinks import EpisodeSink, close_live

_log = logging.getLogger(__name__)


class PolicyRunner:
    """Runs policies on the robots of a MujocoScene through the kernel.

    PolicyRunner(scene, *, bus=None, episode_sinks=(), registry=None, record_privileged=True,
                 privileged_every=10)

    bus: an EventBus every episode's events are forwarded to (plus `progress` events).
    episode_sinks: callables attached to each episode's own bus (see EpisodeSink).
    record_privileged / privileged_every: the privileged state is recorded in the trace at
        every step when the rollout evaluates criteria over it (a benchmark, stop_when,
        success/failure checks, dense rewards), else on every `privileged_every`-th step
        and always at the final observation (it is the largest per-step record).
    """

    def __init__(
        self,
        scene: Any,
        *,
        bus: EventBus | None = None,
        episode_sinks: Sequence[EpisodeSink] = (),
        registry: BenchmarkRegistry | None = None,
        record_privileged: bool = True,
        image_every: int = 1,
        privileged_every: int = 10,
    ) -> None:
        self.scene = scene
        self.bus = bus if bus is not None else EventBus()
        self.episode_sinks: list[EpisodeSink] = list(episode_sinks)
        self.registry = registry if registry is not None else BenchmarkRegistry()
        self.record_privileged = v.check_flag("record_privileged", record_privileged)
        self.image_every = image_every
        if (
            isinstance(privileged_every, bool)
            or not isinstance(privileged_every, int)
            or privileged_every < 1
        ):
            raise ValueError(
                f"privileged_every={privileged_every!r}: must be a whole number >= 1 (1: every step)"
            )
        self.privileged_every = privileged_every

    def _robots(self) -> list[str]:
        return list(self.scene.robots())

    # -- the public, raising entry points --------------------------------------------------
    def run(self, robot_name: str, **kwargs: Any) -> dict[str, Any]:
        """One rollout; returns the result dict (raises ValueError for a refused parameter)."""
        plan = plan_run(robot_name, robots=self._robots(), **kwargs)
        self.preflight(plan)
        return self.execute_run(plan, RolloutControl(plan.robots, "run_policy"))

    def evaluate(self, robot_name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """n episodes; returns the aggregate report (raises ValueError for a refused parameter)."""
        plan = plan_eval(robot_name, robots=self._robots(), registry=self.registry, **kwargs)
        self.preflight(plan)
        return self.execute_eval(plan, RolloutControl(plan.robots, plan.call))

    def run_multi(self, policies: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        plan = plan_multi(policies, robots=self._robots(), **kwargs)
        self.preflight(plan)
        return self.execute_multi(plan, RolloutControl(plan.robots, "run_multi_policy"))

    # -- up-front checks that need the scene ------------------------------------------------
    def preflight(self, plan: RolloutPlan, scene: Any = None) -> None:
        """Every check that needs the scene, before the robot is claimed: the cameras the
        policy needs and the call asks for (added to the scene when defined), then the video."""
        from .cameras import resolve_cameras

        torque.preflight(plan, scene or plan.scene_override or self.scene)
        resolve_cameras(plan, scene or plan.scene_override or self.scene)
        self.probe_video(plan, scene)

    def probe_video(self, plan: RolloutPlan, scene: Any = None) -> None:
        """Validate the video folder and render one frame from the camera before anything runs."""
        if plan.video is None:
            return
        scene = scene or plan.scene_override or self.scene
        path = Path(plan.video["path"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(
                f"video['path']={str(path)!r}: cannot create its folder ({exc})"
            ) from None
        if not os.access(path.parent, os.W_OK):
            raise ValueError(f"video['path']={str(path)!r}: the folder is not writable")
        camera = plan.video["camera"]
        if camera is not None and camera not in list(scene.cameras()):
            raise ValueError(
                f"video['camera']={camera!r}: no such camera; the scene's cameras are {list(scene.cameras())}"
            )
        try:
            frame = scene.render(camera, plan.video["width"], plan.video["height"])
        except Exception as exc:
            raise ValueError(
                f"video={plan.video!r}: rendering a probe frame failed: {type(exc).__name__}: {exc}"
            ) from None
        if getattr(frame, "shape", (0,))[:2] != (plan.video["height"], plan.video["width"]):
            raise ValueError(
                f"video={plan.video!r}: the probe frame has shape {getattr(frame, 'shape', None)}"
            )

    def outlet(self) -> EpisodeOutlet:
        """Where this runner's episodes send their events (sinks added later apply too)."""
        return EpisodeOutlet(bus=self.bus, sinks=self.episode_sinks,
                             record_privileged=self.record_privileged, image_every=self.image_every,
                             privileged_every=self.privileged_every)  # fmt: skip

    # -- execution -------------------------------------------------------------------------------
    @torque.with_torque_control
    def execute_run(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        """Run a validated single-robot plan (one episode). Raises CriterionError / RecordingFrameError."""
        control.state = "running"
        control.provider = plan.policies[plan.robot][0]
        if control.stop_requested:
            return self._never_started(plan, control)
        parts = prepare(plan, self.scene)
        if control.stop_requested:  # stopped while the policy was being built
            close_policies(plan, parts.policies)
            return self._never_started(plan, control)
        try:
            parts.agent = parts.agents[plan.robot]
            parts.timing = kernel_timing(plan, parts.policies[plan.robot].is_chunk_emitting())
            result = run_episode(plan, control, parts, self.outlet(), episode=0, seed=plan.seed,
                                 video_path=plan.video["path"] if plan.video else None)  # fmt: skip
        finally:
            close_policies(plan, parts.policies)
            close_live(plan)
        result.policy_load = parts.loads[plan.robot]
        out = result.to_dict()
        out["duration"] = plan.duration
        out["control_frequency"] = plan.control_hz
        out["action_horizon"] = plan.action_horizons[plan.robot]
        return public(out)

    def _never_started(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        outcome = "estopped" if control.estopped else "stopped"
        # as an episode's stop says (rollout.episode): a Ctrl-C, a cancel or a deactivate
        # that came before the first frame names itself
        reason = control.stop_reason if control.stop_reason in STOP_REASONS else outcome
        return {
            "robot_name": plan.robot if len(plan.robots) == 1 else list(plan.robots),
            "policy": plan.policies[plan.robot][0],
            "n_steps": plan.n_steps,
            "outcome": outcome,
            "stopped_early": True,
            "stopped_reason": reason,
            "stopped_before_first_frame": True,
            "steps_advanced": 0,
            "actions_applied": 0,
            "elapsed_s": 0.0,
            "episodes_run": 0,
        }

    @torque.with_torque_control
    def execute_eval(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        """Run a validated eval plan: n episodes, one policy object, aggregate report.
        With plan.workers > 1 the episodes are sharded over Ray workers (rollout.parallel)."""
        control.state = "running"
        control.n_episodes = plan.n_episodes
        control.provider = plan.policies[plan.robot][0]
        if control.stop_requested:
            return self._never_started(plan, control)
        scene = plan.scene_override or self.scene
        if plan.workers > 1:
            from .parallel import execute_parallel_eval

            return execute_parallel_eval(self.outlet(), plan, control, scene)
        session = EvalSession(self.outlet(), plan, scene)
        progress = eval_progress(plan, self.bus)
        episodes: list[dict[str, Any]] = []
        t0 = time.monotonic()
        try:
            for i in range(plan.n_episodes):
                if control.stop_requested:
                    break
                result = session.episode(i, control)
                episodes.append(result.to_dict())
                progress.episode_done(i, success=result.success, steps=result.steps_advanced,
                                      outcome=result.outcome)  # fmt: skip
                if result.outcome in ("stopped", "estopped"):
                    break
        finally:
            progress.close()
            session.close()
            close_live(plan)
        report = eval_report(plan, control, episodes, session.policy_report(),
                             chunk_prefetch=session.chunk_prefetch, policy_rtc=session.policy_rtc,
                             elapsed_s=time.monotonic() - t0)  # fmt: skip
        return report.to_dict()

    @torque.with_torque_control
    def execute_multi(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        """Run a validated multi-robot plan: one episode, one MultiAgent over the robots' agents."""
        control.state = "running"
        control.provider = ",".join(p[0] for p in plan.policies.values())
        if control.stop_requested:
            return self._never_started(plan, control)
        parts = prepare(plan, self.scene, multi=True)
        parts.agent = MultiAgent(parts.agents, plan.robots, plan.instructions)
        parts.timing = Timing(mode="sync", execution_steps=1)
        parts.split = lambda a: split_action(a, plan.robots)
        try:
            result = run_episode(plan, control, parts, self.outlet(), episode=0, seed=plan.seed,
                                 video_path=plan.video["path"] if plan.video else None)  # fmt: skip
        finally:
            close_policies(plan, parts.policies)
            close_live(plan)
        out = result.to_dict()
        out["policies"] = {r: parts.loads[r].to_dict() for r in plan.robots}
        return public(out)
