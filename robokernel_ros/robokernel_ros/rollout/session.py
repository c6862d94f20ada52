"""An eval's session: one env and one policy shared by its episodes.

    session = EvalSession(runner.outlet(), plan, scene)
    result = session.episode(0, control)       # an EpisodeResult (seed = plan.seed + 0)
    session.close()

The serial loop of PolicyRunner.execute_eval and each Ray worker of a parallel eval
(rollout.parallel) run their episodes through a session, so both paths give each
episode the same seed and the same result; rollout.report aggregates the episodes'
records in episode order.
"""

from __future__ import annotations

from typing import Any

from robokernel_ros.kernel.events import EventBus

from . import validation as v
from .control import RolloutControl
from .episode import EpisodeOutlet, EpisodeResult, run_episode
from .errors import AsyncRtcRefused
from .parts import PolicyLoad, close_policies, kernel_timing, prepare
from .plan import RolloutPlan
from .progress import Progress


class EvalSession:
    """One eval's env and policy, built once and shared by its episodes.

    episode(i, control) runs the plan's i-th episode, numbered n = plan.first_episode + i
    (seed = plan.seed + n, video _ep<n>, as on the serial path) and returns its result; the first episode of a session carries the policy's load
    report, later ones report the cache hit. close() frees the policy built here."""

    def __init__(self, outlet: EpisodeOutlet, plan: RolloutPlan, scene: Any) -> None:
        self.outlet, self.plan, self.scene = outlet, plan, scene
        self.parts = prepare(plan, scene)
        self.policy = self.parts.policies[plan.robot]
        self.parts.agent = self.parts.agents[plan.robot]
        try:
            self.parts.timing = kernel_timing(plan, self.policy.is_chunk_emitting())
        except AsyncRtcRefused:
            close_policies(plan, self.parts.policies)
            raise
        self.chunk_prefetch = self.parts.timing.mode == "realtime"
        self.policy_rtc = bool(getattr(self.policy, "supports_rtc", False))
        self.episodes_run = 0

    def episode(self, i: int, control: RolloutControl) -> EpisodeResult:
        plan = self.plan
        n = plan.first_episode + i  # a resumed evaluation numbers its episodes on
        video_path = v.episode_video_path(plan.video["path"], n) if plan.video else None
        result = run_episode(plan, control, self.parts, self.outlet, episode=n,
                             seed=(plan.seed or 0) + n, video_path=video_path,
                             carry_state=(not plan.reset_between) and i > 0)  # fmt: skip
        # the same policy object, reused after the first episode: nothing was loaded for it
        first = self.episodes_run == 0
        result.policy_load = self.parts.loads[plan.robot] if first else PolicyLoad.reused()
        self.episodes_run += 1
        return result

    def policy_report(self) -> dict[str, Any]:
        """The aggregate's policy fields: the load report and the binding flags."""
        report = self.parts.loads[self.plan.robot].to_dict()
        for k, val in self.policy.binding_report().items():
            report[k] = bool(val)
        return report

    def close(self) -> None:
        close_policies(self.plan, self.parts.policies)


def eval_progress(plan: RolloutPlan, bus: EventBus) -> Progress:
    """The eval's progress (a bar on a terminal, `progress` events on the bus)."""
    return Progress(n_episodes=plan.n_episodes, robot_name=plan.robot, bus=bus, bar=plan.progress,
                    label=plan.benchmark["name"] if plan.benchmark else f"eval {plan.robot}")  # fmt: skip
