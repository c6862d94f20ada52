"""EvalReport: an eval's aggregate over its finished episodes, and its JSON record.

    report = eval_report(plan, control, episodes, policy_report, chunk_prefetch=False,
                         policy_rtc=False, elapsed_s=1.2)
    report.success_rate, report.n_episodes        # typed
    report.to_dict()                              # the API's JSON names, in order

`episodes` are the episodes' JSON records (EpisodeResult.to_dict(), private fields
included) in episode order, whichever process ran them (a parallel eval's workers send
theirs back as records): the serial and the parallel path aggregate them the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from robokernel_ros.tasks.statistics import pass_hat_k, wilson_interval

from .control import RolloutControl
from .plan import RolloutPlan
from .results import BINDING_FLAGS, public, rtc_aliases


@dataclass
class EvalReport:
    """An eval's call, its finished episodes' records and its policy's report."""

    robot_name: str
    policy: str
    instruction: str
    n_episodes_requested: int
    max_steps: int
    control_frequency: float
    action_horizon: int
    seed: int | None
    async_rtc: bool
    chunk_prefetch_enabled: bool
    policy_rtc_enabled: bool
    benchmark: str | None
    stopped: bool
    elapsed_s: float
    episodes: list[Mapping[str, Any]] = field(default_factory=list)
    policy_report: Mapping[str, Any] = field(default_factory=dict)  # load fields, binding flags

    @property
    def n_episodes(self) -> int:
        return len(self.episodes)

    @property
    def successes(self) -> int:
        return sum(bool(e.get("success")) for e in self.episodes)

    @property
    def success_rate(self) -> float:
        return self.successes / self.n_episodes if self.episodes else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON record: the call, success_rate, avg_reward, pass_hat_k, total_steps, the
        folded action health and inference figures, the policy report, the episodes, the
        one-release rtc_* aliases."""
        episodes, report = self.episodes, self.policy_report
        n = len(episodes)
        successes = [bool(e.get("success")) for e in episodes]
        rewards = [float(e.get("total_reward") or 0.0) for e in episodes]
        inference = [
            e["avg_inference_ms"] for e in episodes if e.get("avg_inference_ms") is not None
        ]
        max_inf = [e["max_inference_ms"] for e in episodes if e.get("max_inference_ms") is not None]
        errors: Counter[str] = Counter()
        named = resolved = credited = partial = 0
        for e in episodes:
            errors.update(e.get("action_errors") or {})
            named += e.get("_named_keys", 0)
            resolved += e.get("_resolved_keys", 0)
            credited += e.get("action_steps_credited", 0)
            partial += e.get("action_steps_with_unresolved_keys", 0)

        def total(key: str) -> int:
            return sum(int(e.get(key) or 0) for e in episodes)

        out: dict[str, Any] = {
            "robot_name": self.robot_name,
            "policy": self.policy,
            "instruction": self.instruction,
            "n_episodes_requested": self.n_episodes_requested,
            "max_steps": self.max_steps,
            "control_frequency": self.control_frequency,
            "action_horizon": self.action_horizon,
            "seed": self.seed,
            "async_rtc": self.async_rtc,
            "chunk_prefetch_enabled": self.chunk_prefetch_enabled,
            "policy_rtc_enabled": self.policy_rtc_enabled,
            "benchmark": self.benchmark,
            "stopped": self.stopped,
            "elapsed_s": self.elapsed_s,
            "n_episodes": n,
            "successes": sum(successes),
            "success_rate": self.success_rate,
            "success_rate_ci95": list(wilson_interval(sum(successes), n)) if n else None,
            "avg_reward": (sum(rewards) / n) if n else 0.0,
            "pass_hat_k": pass_hat_k(successes),
            "total_steps": total("steps_advanced"),
            "actions_applied": total("actions_applied"),
            "actions_refused": total("actions_refused"),
            "steps_advanced": total("steps_advanced"),
            "stopped_reasons": [e.get("stopped_reason") for e in episodes],
            "outcomes": [e.get("outcome") for e in episodes],
            "video_paths": [e.get("video_path") for e in episodes if e.get("video_path")],
            "trace_paths": [e.get("trace_path") for e in episodes],
            "bag_paths": [e.get("bag_path") for e in episodes],
            "action_errors": dict(sorted(errors.items())),
            "action_resolution_rate": (resolved / named) if named else 0.0,
            "partial_action_failure_rate": (partial / credited) if credited else 0.0,
            "action_steps_credited": credited,
            "action_steps_with_unresolved_keys": partial,
            "chunk_prefetch_chunks_acquired": total("chunk_prefetch_chunks_acquired"),
            "chunk_prefetch_hits": total("chunk_prefetch_hits"),
            "chunk_prefetch_blocks": total("chunk_prefetch_blocks"),
            "avg_inference_ms": (sum(inference) / len(inference)) if inference else None,
            "max_inference_ms": max(max_inf) if max_inf else None,
            "safety_interventions": total("safety_interventions"),
            "sim_time_s": sum(float(e.get("sim_time_s") or 0.0) for e in episodes),
            **{k: bool(report.get(k, False)) for k in BINDING_FLAGS},
            "policy_load_time_s": report.get("policy_load_time_s"),
            "policy_load_cache_hit": report.get("policy_load_cache_hit"),
            "policy_resident_rss_mb": report.get("policy_resident_rss_mb"),
            "episodes": [public(e) for e in episodes],
        }
        return rtc_aliases(out)


def eval_report(plan: RolloutPlan, control: RolloutControl, episodes: Sequence[Mapping[str, Any]],
                policy_report: Mapping[str, Any], *, chunk_prefetch: bool, policy_rtc: bool,
                elapsed_s: float) -> EvalReport:  # fmt: skip
    """The report of an eval's finished episodes (their records, in episode order)."""
    return EvalReport(
        robot_name=plan.robot,
        policy=plan.policies[plan.robot][0],
        instruction=plan.instructions[plan.robot],
        n_episodes_requested=plan.n_episodes,
        max_steps=plan.n_steps,
        control_frequency=plan.control_hz,
        action_horizon=plan.action_horizons[plan.robot],
        seed=plan.seed,
        async_rtc=bool(plan.async_rtc),
        chunk_prefetch_enabled=chunk_prefetch,
        policy_rtc_enabled=policy_rtc,
        benchmark=plan.benchmark["name"] if plan.benchmark else None,
        stopped=control.stop_requested,
        elapsed_s=elapsed_s,
        episodes=list(episodes),
        policy_report=dict(policy_report),
    )
