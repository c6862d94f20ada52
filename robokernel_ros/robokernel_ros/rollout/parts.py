"""What the episodes of a call share: its env, policies, agents and kernel timing.

    parts = prepare(plan, scene)                  # the env, the policies (built), their agents
    parts.agent = parts.agents[plan.robot]
    parts.timing = kernel_timing(plan, parts.policies[plan.robot].is_chunk_emitting())
    ...                                           # rollout.episode.run_episode(..., parts, ...)
    close_policies(plan, parts.policies)          # the ones built here; a policy_object stays open

Built in the rollout's own thread (a policy may load a checkpoint), once per call or per
eval session.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from robokernel_ros.kernel.timing import Timing
from robokernel_ros.policies.base import Policy, PolicyAgent, create_policy
from robokernel_ros.tasks.goals import with_goal

from .errors import AsyncRtcRefused
from .plan import RolloutPlan

_log = logging.getLogger(__name__)

Split = Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]]
"""A composed multi-robot action -> {robot: its part, prefix stripped} (rollout.multi)."""


def rss_mb() -> float | None:
    """This process's resident memory in MiB (None where /proc is not readable)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class PolicyLoad:
    """How a call got its policy: load time, whether a cache served it, resident memory."""

    time_s: float
    cache_hit: bool
    resident_rss_mb: float | None

    @classmethod
    def reused(cls) -> PolicyLoad:
        """The same policy object again: nothing was loaded."""
        return cls(0.0, True, rss_mb())

    def to_dict(self) -> dict[str, Any]:
        return {"policy_load_time_s": self.time_s, "policy_load_cache_hit": self.cache_hit,
                "policy_resident_rss_mb": self.resident_rss_mb}  # fmt: skip


@dataclass
class EpisodeParts:
    """What the episodes of one call share, built once by PolicyRunner.prepare."""

    scene: Any
    env: Any
    policies: dict[str, Policy]
    agents: dict[str, PolicyAgent]
    loads: dict[str, PolicyLoad]
    joint_names: dict[str, list[str]]
    agent: Any = None  # the kernel Agent: the robot's PolicyAgent or a MultiAgent
    timing: Timing | None = None
    split: Split | None = None  # set for a composed (multi-robot) agent


def _build_policy(
    robot: str, plan: RolloutPlan, keys: Sequence[str], limits: Mapping[str, Any]
) -> tuple[Policy, PolicyLoad]:
    provider, config, obj = plan.policies[robot]
    start = time.monotonic()
    if obj is not None:
        policy, cache_hit = obj, True
    else:
        policy = create_policy(provider, **config)
        # A provider with its own checkpoint cache (lerobot) says whether it reloaded.
        cache_hit = bool(getattr(policy, "load_cache_hit", False))
    load_s = time.monotonic() - start
    policy.set_robot_state_keys(list(keys))
    setter = getattr(policy, "set_action_limits", None)
    if callable(setter):
        setter(dict(limits))
    return policy, PolicyLoad(load_s, cache_hit, rss_mb())


def kernel_timing(plan: RolloutPlan, chunk_emitting: bool) -> Timing:
    """The kernel timing of a plan whose policy is (or is not) chunk-emitting; raises
    AsyncRtcRefused for async_rtc=True with a one-action policy."""
    horizon = max(plan.action_horizons.values())
    resolved = chunk_emitting if plan.async_rtc is None else plan.async_rtc
    if plan.async_rtc is True and not chunk_emitting:
        # realtime drops the actions a chunk's latency overran: a one-action chunk always
        # arrives after its step, so nothing would ever be applied
        raise AsyncRtcRefused(
            f"async_rtc=True (--async-rtc): the {plan.policies[plan.robot][0]!r} policy returns "
            "one action per call, which always arrives a step late and is dropped; give it "
            "chunks (--policy-config '{\"execution_horizon\": 8}', policy_config= in Python) "
            "or leave async_rtc off"
        )
    # A paced call (fast_mode=False: a robot's time) runs on the wall clock, else virtual time.
    clock = "virtual" if plan.fast_mode else "wall"
    if resolved:
        # Prefetch at half the horizon; the aligned merge is the seam swap.
        return Timing(
            mode="realtime",
            clock=clock,
            execution_steps=horizon,
            refill_steps=horizon // 2,
            latency_s=plan.latency_s if clock == "virtual" else None,
        )
    # Paced sync: the kernel's wall clock is the one pacer (the world waits for act).
    return Timing(mode="sync", clock=clock, execution_steps=horizon)


def prepare(plan: RolloutPlan, scene: Any, *, multi: bool = False) -> EpisodeParts:
    """Build the env, the policies and their agents (in the rollout's thread); the
    caller sets the parts' kernel agent and timing.

    multi: the env of run_multi_policy, keyed "robot/actuator" even for one robot (the
    keys MultiAgent composes); otherwise one robot's env, keyed by its actuator names."""
    robots = list(plan.robots)
    multi = multi or len(robots) > 1
    target = robots if multi else robots[0]
    if plan.env_cameras:
        env = scene.make_env(target, control_hz=plan.control_hz, cameras=plan.env_cameras,
                             image_size=plan.env_image_size)  # fmt: skip
    else:
        env = scene.make_env(target, control_hz=plan.control_hz)
    env = with_goal(env, plan.benchmark)  # a benchmark's per-episode goal, observed
    spec = env.env_spec
    parts = EpisodeParts(scene=scene, env=env, policies={}, agents={}, loads={},
                         joint_names={r: list(scene.robot_joint_names(r)) for r in robots})  # fmt: skip
    for r in robots:
        keys = list(scene.robot_action_keys(r))
        if multi:
            limits = {
                k: spec.action_limits[f"{r}/{k}"] for k in keys if f"{r}/{k}" in spec.action_limits
            }
        else:
            limits = {k: spec.action_limits[k] for k in keys if k in spec.action_limits}
        parts.policies[r], parts.loads[r] = _build_policy(r, plan, keys, limits)
        parts.agents[r] = PolicyAgent(
            parts.policies[r],
            action_horizon=plan.action_horizons[r],
            policy_kwargs=plan.policy_kwargs,
            requery_empty=True,
        )
    return parts


def close_policies(plan: RolloutPlan, policies: Mapping[str, Policy]) -> None:
    """Close the policies built for the plan (a caller's policy_object stays open)."""
    for r, p in policies.items():
        if plan.policies[r][2] is None:  # built here: ours to close
            try:
                p.close()
            except Exception:
                _log.exception("closing the %s policy failed", r)
