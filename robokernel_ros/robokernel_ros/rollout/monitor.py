"""The episode monitor: the MuJoCo env as the kernel sees it, plus the rollout's per-step duties.

`MonitoredEnv` evaluates the call's predicates over the predicate context (privileged
state + step, robot, observation, joints, episode), ends the episode on success / failure
/ stop_when, sums dense rewards, records video frames, calls on_frame and relays a
stop of the RolloutControl to the episode's operator channel.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from robokernel_ros.policies.base import Policy
from robokernel_ros.tasks.context import SUCCESS, judge, predicate_context
from robokernel_ros.tasks.predicates import Criterion, CriterionError, total_reward

from .control import RolloutControl
from .errors import RecordingFrameError
from .plan import RolloutPlan

_log = logging.getLogger(__name__)


class MonitoredEnv:
    """The MuJoCo env as the kernel sees it, plus the rollout's per-step duties."""

    def __init__(self, env: Any, *, plan: RolloutPlan, control: RolloutControl, episode: int,
                 scene: Any, policy: Policy | None, recorder: Any, video_stride: float,
                 carry_state: bool) -> None:  # fmt: skip
        self.env = env
        self.env_spec = env.env_spec
        self.plan = plan
        self.control = control
        self.episode = episode
        self.scene = scene
        self.robot = plan.robot
        self.recorder = recorder
        self.video_stride = video_stride
        self.video_frames = 0
        self.carry_state = carry_state
        self.operator: Any = None
        self.step_count = 0
        self.fatal: BaseException | None = None
        self.stop_reason: str | None = None  # "predicate" / "success" / "failure"
        self.stop_criterion: str | None = None
        self.success: bool | None = None
        self.stop_when_true_at_reset = False
        self.stop_when_armed: list[bool] = [True] * len(plan.stop_when)
        self.sim_time_s: float | None = None
        # success: the benchmark's clauses, the success_fn, or the policy's own task criterion
        self.success_checks: list[Criterion] = list(plan.success)
        if plan.success_fn is not None:
            self.success_checks.append(plan.success_fn)
        self.failure_checks: list[Criterion] = list(plan.failure)
        if not self.success_checks and policy is not None and plan.call != "run_policy":
            for attr, target in (
                ("is_success", self.success_checks),
                ("is_failure", self.failure_checks),
            ):
                fn = getattr(policy, attr, None)
                if callable(fn):
                    target.append(Criterion(f"{type(policy).__name__}.{attr}", fn))
        elif policy is not None and plan.call != "run_policy":
            fn = getattr(policy, "is_failure", None)
            if callable(fn):
                self.failure_checks.append(Criterion(f"{type(policy).__name__}.is_failure", fn))
        self.needs_context = bool(
            plan.stop_when or self.success_checks or self.failure_checks or plan.rewards
        )
        if hasattr(env, "hold_action"):
            self.hold_action = env.hold_action
        if hasattr(env, "pacer"):
            self.pacer = env.pacer  # a robot's env's clock: the kernel paces with it
        if hasattr(env, "before_episode_end"):  # the env's account, before episode.end
            self.before_episode_end = env.before_episode_end
        # The privileged state of the current step, fetched once: the criteria and the
        # kernel's trace share it (the scene cannot change between the two in a rollout).
        self._state: Any = None
        self._state_step = -1
        if hasattr(env, "privileged_state"):
            self.privileged_state = self._privileged_state

    def _privileged_state(self) -> Any:
        if self._state is None or self._state_step != self.step_count:
            self._state, self._state_step = self.env.privileged_state(), self.step_count
        return self._state

    # the predicate context of the current step: tasks.context, the one scorers rebuild offline
    def context(self, obs: Any) -> dict[str, Any]:
        state = self._privileged_state() if hasattr(self.env, "privileged_state") else None
        return predicate_context(
            self.step_count, obs, state, robot=self.robot, episode=self.episode
        )

    def _stop_check(self) -> None:
        if (
            self.control.stop_requested
            and self.operator is not None
            and not self.operator.stop_requested
        ):
            self.operator.stop()

    def reset(self, seed: int | None = None) -> Any:
        self.step_count = 0
        self._state = None
        if self.carry_state and hasattr(self.env, "observe"):
            obs = self.env.observe()
            self._stop_check()
        else:
            obs = self._reset_env(seed)
        if self.plan.stop_when:
            try:
                ctx = self.context(obs)
                for i, c in enumerate(self.plan.stop_when):
                    if c(ctx):
                        # Already true at reset: armed only once it has been false, so the
                        # rollout does not end at its first step on the scene's initial state.
                        self.stop_when_armed[i] = False
                        self.stop_when_true_at_reset = True
            except Exception as exc:
                self.fatal = CriterionError(c.name, self.episode, 0, exc)
                raise self.fatal from exc
        return obs

    def _reset_env(self, seed: int | None) -> Any:
        """The env's reset; an env with a `set_reset_interrupt` hook (a robot's reset, which
        ramps and holds for seconds: ros.ros_env) ends it at its next tick once the
        rollout is stopped, cancelled, deactivated or e-stopped. The stop reaches the
        operator either way, so the kernel names the outcome (stopped / estopped)."""
        hook = getattr(self.env, "set_reset_interrupt", None)
        if hook is not None:
            hook(self._reset_interrupted)
        try:
            return self.env.reset(seed=seed)
        finally:
            if hook is not None:
                hook(None)
            self._stop_check()

    def _reset_interrupted(self) -> str:
        """Why the reset must end now ("" while it may go on)."""
        op = self.operator
        if (op is not None and op.estopped) or self.control.estopped:
            return "e-stop"
        if self.control.stop_requested or (op is not None and op.stop_requested):
            reason = self.control.stop_reason or (op.stop_reason if op is not None else "")
            return f"stop ({reason})" if reason else "stop"
        return ""

    def step(self, action: Mapping[str, float]) -> Any:
        control = self.control
        if control.stop_requested:
            self._stop_check()
        result = self.env.step(action)
        control.step = self.step_count = self.step_count + 1  # a new step: a new state
        info = result.info
        if not isinstance(info, dict):
            info = {}
        sim_time = info.get("sim_time_s")
        if sim_time is not None:
            self.sim_time_s = float(sim_time)
        if self.needs_context:
            try:
                self._criteria(result, info)
            except CriterionError as exc:
                self.fatal = exc
                raise
        if self.recorder is not None and self._frame_due():
            self.recorder.add_frame()
            self.video_frames += 1
        if self.plan.on_frame is not None:
            try:
                self.plan.on_frame(self.step_count, result.observation)
            except RecordingFrameError as exc:
                self.fatal = exc
                raise
            except Exception:
                _log.exception(
                    "on_frame raised at step %d; ignored (best-effort telemetry)", self.step_count
                )
        return result

    def _frame_due(self) -> bool:
        # one frame per video period: floor(step / stride) advances (stride >= 1 control steps)
        n = self.step_count
        return bool(self.video_stride) and math.floor(n / self.video_stride + 1e-9) > math.floor(
            (n - 1) / self.video_stride + 1e-9
        )

    def _criteria(self, result: Any, info: dict[str, Any]) -> None:
        ctx = self.context(result.observation)
        if self.plan.rewards:
            result.reward = total_reward(self.plan.rewards, ctx, episode=self.episode)
        if result.terminated:
            return
        verdict = judge(self.failure_checks, self.success_checks, ctx, episode=self.episode)
        if verdict is not None:
            reason, criterion = verdict
            self._end(result, info, reason, criterion.name, success=reason == SUCCESS)
            return
        for i, c in enumerate(self.plan.stop_when):
            try:
                hit = c(ctx)
            except Exception as exc:
                raise CriterionError(c.name, self.episode, self.step_count, exc) from exc
            if not self.stop_when_armed[i]:
                self.stop_when_armed[i] = not hit
                continue
            if hit:
                # stop_when ends the rollout; in an evaluation it is not a success by itself
                self._end(
                    result,
                    info,
                    "predicate",
                    c.name,
                    success=None if self.plan.call == "run_policy" else False,
                )
                return

    def _end(
        self, result: Any, info: dict[str, Any], reason: str, name: str, *, success: bool | None
    ) -> None:
        self.stop_reason = reason
        self.stop_criterion = name
        self.success = success
        result.terminated = True
        if success is not None:
            info["success"] = success
        elif "success" not in info:
            info["success"] = (
                True  # a run_policy stop predicate: the kernel records it as a success
            )
