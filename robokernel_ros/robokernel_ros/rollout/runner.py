"""PolicyRunner: policy rollouts on a MuJoCo scene through the kernel's one episode loop.

`PolicyRunner.run` (one rollout), `.evaluate` (n episodes, success rate) and
`.run_multi` (several robots, one policy each) validate every parameter first and
raise ValueError for a refused one; the SimWorkcell facade calls the same `plan_*`
checks before it claims a robot, then `execute_*` on its own thread, and reports
through the {"status", "content"} envelope.

Each episode is an `EpisodeRunner.run` of the kernel over a `_MonitoredEnv` (the
MuJoCo env plus the rollout's predicates, rewards, video frames, on_frame telemetry,
pacing and stop checks) and a `_RolloutAgent` (the policy, its inference timing and
the one synchronous re-query of an empty chunk). A collector on the episode's bus
reconstructs which proposed action each step executed, for the per-key action health.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robokernel_ros.kernel import events as ev
from robokernel_ros.kernel.events import Event, EventBus
from robokernel_ros.kernel.operator import Latch
from robokernel_ros.policies.base import Policy, PolicyAgent, batch_refusal, create_policy
from robokernel_ros.policies.base import preflight as provider_preflight
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry
from robokernel_ros.tasks.context import SUCCESS, judge, predicate_context
from robokernel_ros.tasks.goals import with_goal
from robokernel_ros.tasks.predicates import (
    Criterion,
    CriterionError,
    RewardTerm,
    compile_criteria,
    compile_rewards,
    total_reward,
)

from . import torque
from . import validation as v
from .progress import Progress
from .results import BINDING_FLAGS, ActionHealth, aggregate, health_note, public, rtc_aliases

_log = logging.getLogger(__name__)

DEFAULT_TRACE_DIR = "runs/"

#: Why a stop ended an episode, when its stopped_reason says more than "stopped": a
#: Ctrl-C of the process, or a cancel of the ROS action that ran it.
STOP_REASONS = ("interrupted", "cancelled")


class AsyncRtcRefused(RuntimeError):
    """async_rtc=True with a policy whose one-action chunks could never be applied."""


class RecordingFrameError(RuntimeError):
    """Raised by an on_frame callback when a frame could not be recorded: data loss, fatal."""


# --- the handle of an in-flight rollout ------------------------------------------------------

_ids = itertools.count(1)


class RolloutControl:
    """One in-flight rollout: what list_policies_running reads and stop_policy sets.

    state: "queued" (registered, its thread not started yet), "running", "finished".
    """

    def __init__(self, robots: Sequence[str], call: str, *, scene: str = "workcell") -> None:
        self.id = next(_ids)
        self.robots = tuple(robots)
        self.call = call
        self.scene = scene
        self.state = "queued"
        self.registered_at = time.monotonic()
        self.thread_ident: int | None = None
        self.episode = 0
        self.step = 0
        self.n_episodes = 1
        self.provider = ""
        self.result: dict[str, Any] | None = None  # the finished call's envelope
        self.done = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._operator: Any = None  # the running episode's OperatorChannel
        self._last_operator: Any = None  # the last episode's (a late verdict goes there)
        self._estop = Latch()
        self.stop_reason = ""

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def estopped(self) -> bool:
        return self._estop.latched

    def stop(self, reason: str = "stopped") -> None:
        with self._lock:
            if not self._stop.is_set():
                self.stop_reason = reason
            self._stop.set()
            op = self._operator
        if op is not None:
            op.stop(self.stop_reason)

    def estop(self) -> None:
        """E-stop: the running episode ends "estopped" at once, an episode that has not
        attached its operator yet ends so at its first step, and no further episode runs."""
        with self._lock:
            self._estop.latch("rollout estop()")
            op = self._operator
        if op is not None:
            op.estop("rollout estop()")
        self.stop("estop")

    def reset_done(self) -> bool:
        """Confirm the reset the running episode waits for; False when no episode runs."""
        with self._lock:
            op = self._operator
        if op is None:
            return False
        op.reset_done()
        return True

    def verdict(self, outcome: str, note: str = "") -> bool:
        """The operator's verdict on the running episode, or else on the one that just
        ended (its record and trace are updated); False when no episode has run."""
        with self._lock:
            op = self._operator if self._operator is not None else self._last_operator
        if op is None:
            return False
        op.verdict(outcome, note)
        return True

    def attach_operator(self, operator: Any) -> None:
        with self._lock:
            if self._operator is not None:
                self._last_operator = self._operator
            self._operator = operator
            estopped = self._estop.latched
        if operator is not None and estopped:
            operator.estop("rollout estop()")

    def describe(self) -> dict[str, Any]:
        return {
            "robots": list(self.robots),
            "call": self.call,
            "state": self.state,
            "policy": self.provider,
            "episode": self.episode,
            "n_episodes": self.n_episodes,
            "step": self.step,
            "running_s": time.monotonic() - self.registered_at,
            "stop_requested": self.stop_requested,
            "scene": self.scene,
            "rollout_id": self.id,
        }


# --- the validated request -------------------------------------------------------------------


@dataclass
class RolloutPlan:
    """Every parameter of a call, checked and normalised (see plan_run / plan_eval / plan_multi)."""

    call: str
    robots: tuple[str, ...]
    policies: dict[
        str, tuple[str, dict[str, Any], Policy | None]
    ]  # robot -> (provider, config, object)
    policy_kwargs: dict[str, Any]
    instructions: dict[str, str]
    n_steps: int
    duration: float
    control_hz: float
    action_horizons: dict[str, int]
    seed: int | None
    async_rtc: bool | None
    rtc_timeout: float | None
    stop_when: list[Criterion] = field(default_factory=list)
    success: list[Criterion] = field(default_factory=list)
    failure: list[Criterion] = field(default_factory=list)
    rewards: list[RewardTerm] = field(default_factory=list)
    success_fn: Criterion | None = None
    observers: list[Callable[..., Any]] = field(default_factory=list)
    on_frame: Callable[..., Any] | None = None
    video: dict[str, Any] | None = None
    fast_mode: bool = True
    reset_between: bool = True
    n_episodes: int = 1
    trace_dir: Path | None = None
    safety: dict[str, Any] | None = None
    progress: bool | None = None
    benchmark: dict[str, Any] | None = None
    scene_override: Any = None  # a benchmark's own scene
    bag: str | None = None  # the rosbag2 storage of each episode's <run_dir>/bag, None: no bag
    cameras: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # cameras= as asked
    image_size: tuple[int, int] | None = None  # image_size= as asked
    env_cameras: tuple[str, ...] = ()  # resolved by resolve_cameras: what the env renders
    env_image_size: tuple[int, int] | None = None
    workers: int = 1  # > 1: episodes sharded over Ray workers (rollout.parallel)
    ray_address: str | None = None  # None: a local Ray instance
    batch_inference: bool = False  # one policy actor batches every worker's inference
    max_batch: int = 8
    max_wait_ms: float = 5.0
    wbc_install_torque_control: bool = False  # the torque shim for the call (rollout.torque)
    wbc_gains: dict[str, Any] = field(default_factory=dict)  # robot -> wbc_gains as asked
    torque_gains: dict[str, Any] = field(default_factory=dict)  # robot -> resolved, by preflight
    live: Any = None  # live.LiveOptions: a Foxglove view of every episode; None: none
    live_view: Any = field(default=None, repr=False, compare=False)  # started by the first episode

    @property
    def robot(self) -> str:
        return self.robots[0]


def _provider_and_config(
    provider: Any, config: Any, obj: Any
) -> tuple[str, dict[str, Any], Policy | None]:
    policy = v.policy_object("policy_object", obj)
    cfg = v.config_dict("policy_config", config)
    if policy is not None:
        return policy.provider or type(policy).__name__, cfg, policy
    if not isinstance(provider, str) or not provider:
        raise ValueError(
            f"policy_provider={provider!r}: must be a provider name (a non-empty string)"
        )
    provider_preflight(provider, cfg)  # unknown provider and the provider's own refusals
    return provider, cfg, None


def _common(plan_kwargs: dict[str, Any], *, observer: Any, on_frame: Any, video: Any, trace_dir: Any,
            safety: Any, progress: Any, bag: Any = None, cameras: Any = None,
            image_size: Any = None) -> None:  # fmt: skip
    plan_kwargs["observers"] = v.callables("observer", observer)
    plan_kwargs["on_frame"] = v.optional_callable("on_frame", on_frame)
    plan_kwargs["video"] = v.video_config("video", video)
    plan_kwargs["trace_dir"] = v.trace_dir("trace_dir", trace_dir)
    plan_kwargs["bag"] = v.bag_option("bag", bag, plan_kwargs["trace_dir"])
    plan_kwargs["cameras"] = v.cameras_option("cameras", cameras)
    plan_kwargs["image_size"] = v.image_size_option("image_size", image_size)
    if safety is not None and not isinstance(safety, Mapping):
        raise ValueError(f"safety={safety!r}: must be a dict of shield settings or None")
    plan_kwargs["safety"] = dict(safety) if safety is not None else None
    plan_kwargs["progress"] = v.check_flag("progress", progress, allow_none=True)


def plan_run(
    robot_name: Any,
    *,
    robots: Sequence[str],
    policy_provider: Any = "mock",
    policy_config: Any = None,
    policy_object: Any = None,
    policy_kwargs: Any = None,
    instruction: Any = "",
    duration: Any = 10.0,
    control_frequency: Any = 50.0,
    action_horizon: Any = 8,
    n_steps: Any = None,
    max_steps: Any = None,
    seed: Any = None,
    async_rtc: Any = None,
    rtc_inference_timeout_s: Any = None,
    stop_when: Any = None,
    observer: Any = None,
    on_frame: Any = None,
    video: Any = None,
    fast_mode: Any = True,
    trace_dir: Any = DEFAULT_TRACE_DIR,
    bag: Any = None,
    cameras: Any = None,
    image_size: Any = None,
    safety: Any = None,
    progress: Any = None,
    live: Any = None,
    call: str = "run_policy",
    wbc_install_torque_control: Any = False,
    wbc_gains: Any = None,
) -> RolloutPlan:
    """Check a run_policy / start_policy request (raises ValueError naming the parameter)."""
    # Posture flags first: a refused flag builds no policy and touches no scene.
    v.check_flag("async_rtc", async_rtc, allow_none=True)
    v.check_flag("fast_mode", fast_mode)
    v.check_flag(torque.FLAG, wbc_install_torque_control)
    robot = _robot_name(robot_name, robots)
    steps, duration_s, hz = v.resolve_horizon(
        n_steps=n_steps, duration=duration, control_frequency=control_frequency, max_steps=max_steps
    )
    kwargs: dict[str, Any] = {}
    _common(kwargs, observer=observer, on_frame=on_frame, video=video, trace_dir=trace_dir, safety=safety,
            progress=progress, bag=bag, cameras=cameras, image_size=image_size)  # fmt: skip
    kwargs.update(torque.plan_options(wbc_install_torque_control, wbc_gains, (robot,)))
    kwargs["live"] = _live_option(live)
    return RolloutPlan(
        call=call,
        robots=(robot,),
        policies={robot: _provider_and_config(policy_provider, policy_config, policy_object)},
        policy_kwargs=v.config_dict("policy_kwargs", policy_kwargs),
        instructions={robot: v.text("instruction", instruction)},
        n_steps=steps,
        duration=duration_s,
        control_hz=hz,
        action_horizons={robot: v.positive_int("action_horizon", action_horizon)},
        seed=v.seed_value("seed", seed),
        async_rtc=async_rtc,
        rtc_timeout=v.timeout_seconds("rtc_inference_timeout_s", rtc_inference_timeout_s),
        stop_when=compile_criteria("stop_when", stop_when),
        fast_mode=fast_mode,
        **kwargs,
    )


def plan_eval(
    robot_name: Any = None,
    *,
    robots: Sequence[str],
    registry: BenchmarkRegistry | None = None,
    spec: Any = None,
    policy_provider: Any = "mock",
    policy_config: Any = None,
    policy_object: Any = None,
    policy_kwargs: Any = None,
    instruction: Any = "",
    n_episodes: Any = 1,
    max_steps: Any = None,
    control_frequency: Any = 50.0,
    action_horizon: Any = 8,
    success_fn: Any = None,
    stop_when: Any = None,
    seed: Any = None,
    async_rtc: Any = False,
    rtc_inference_timeout_s: Any = None,
    observer: Any = None,
    on_frame: Any = None,
    video: Any = None,
    fast_mode: Any = True,
    reset_between: Any = True,
    trace_dir: Any = DEFAULT_TRACE_DIR,
    bag: Any = None,
    cameras: Any = None,
    image_size: Any = None,
    safety: Any = None,
    progress: Any = None,
    workers: Any = 1,
    ray_address: Any = None,
    batch_inference: Any = False,
    max_batch: Any = 8,
    max_wait_ms: Any = 5.0,
    live: Any = None,
    call: str = "eval_policy",
    wbc_install_torque_control: Any = False,
    wbc_gains: Any = None,
) -> RolloutPlan:
    """Check an eval_policy / evaluate_benchmark request (raises ValueError naming the parameter)."""
    v.check_flag("async_rtc", async_rtc)  # eval declares a plain bool: None is refused
    v.check_flag("fast_mode", fast_mode)
    v.check_flag("reset_between", reset_between)
    v.check_flag(torque.FLAG, wbc_install_torque_control)
    episodes = v.positive_int("n_episodes", n_episodes)
    kwargs: dict[str, Any] = {}
    kwargs.update(v.parallel_options(workers=workers, ray_address=ray_address, batch_inference=batch_inference,
                                     max_batch=max_batch, max_wait_ms=max_wait_ms, policy_object=policy_object,
                                     observer=observer, on_frame=on_frame, reset_between=reset_between))  # fmt: skip
    _common(kwargs, observer=observer, on_frame=on_frame, video=video, trace_dir=trace_dir, safety=safety,
            progress=progress, bag=bag, cameras=cameras, image_size=image_size)  # fmt: skip
    kwargs["live"] = _live_option(live)
    benchmark = None
    if spec is not None:
        if registry is None:
            registry = BenchmarkRegistry()
        benchmark = registry.resolve(spec)
        if async_rtc:
            raise ValueError(
                "async_rtc=True: the benchmark/spec path stays synchronous (an observed delay of exactly 0 "
                "before every inference); use eval_policy without spec= to measure latency robustness"
            )
        if max_steps is not None:
            raise ValueError(
                f"max_steps={max_steps!r}: a spec= call takes its horizon off the benchmark "
                f"(max_steps={benchmark['max_steps']}); fork the spec to change it"
            )
        robot = benchmark["robot"]["name"]
        steps = benchmark["max_steps"]
        hz = benchmark["control_frequency"]
        text = v.text("instruction", instruction) or benchmark["instruction"]
        success = compile_criteria("spec['success']", benchmark.get("success"))
        failure = compile_criteria("spec['failure']", benchmark.get("failure"))
        rewards = compile_rewards("spec['reward']", benchmark.get("reward"))
    else:
        robot = _robot_name(robot_name, robots, auto=True)
        steps = v.positive_int("max_steps", 300 if max_steps is None else max_steps)
        hz = v.positive_number("control_frequency", control_frequency)
        text = v.text("instruction", instruction)
        success, failure, rewards = [], [], []
    policy = _provider_and_config(policy_provider, policy_config, policy_object)
    if kwargs["batch_inference"]:
        _check_batching(policy, kwargs["workers"])
    if kwargs["live"] is not None and kwargs["workers"] > 1:
        raise ValueError(
            f"live={live!r}: the live view follows the episodes of this process and workers="
            f"{kwargs['workers']} runs them in Ray workers; use workers=1 to watch an eval live"
        )
    kwargs.update(torque.plan_options(wbc_install_torque_control, wbc_gains, (robot,)))
    return RolloutPlan(
        call=call,
        robots=(robot,),
        policies={robot: policy},
        policy_kwargs=v.config_dict("policy_kwargs", policy_kwargs),
        instructions={robot: text},
        n_steps=steps,
        duration=steps / hz,
        control_hz=hz,
        action_horizons={robot: v.positive_int("action_horizon", action_horizon)},
        seed=v.seed_value("seed", seed),
        async_rtc=async_rtc,
        rtc_timeout=v.timeout_seconds("rtc_inference_timeout_s", rtc_inference_timeout_s),
        stop_when=compile_criteria("stop_when", stop_when),
        success=success,
        failure=failure,
        rewards=rewards,
        success_fn=_success_fn(success_fn),
        fast_mode=fast_mode,
        reset_between=reset_between,
        n_episodes=episodes,
        benchmark=benchmark,
        **kwargs,
    )


def plan_multi(
    policies: Any,
    *,
    robots: Sequence[str],
    instructions: Any = None,
    duration: Any = 10.0,
    n_steps: Any = None,
    max_steps: Any = None,
    control_frequency: Any = 50.0,
    action_horizon: Any = 8,
    policy_kwargs: Any = None,
    seed: Any = None,
    stop_when: Any = None,
    observer: Any = None,
    on_frame: Any = None,
    video: Any = None,
    fast_mode: Any = True,
    trace_dir: Any = DEFAULT_TRACE_DIR,
    bag: Any = None,
    cameras: Any = None,
    image_size: Any = None,
    safety: Any = None,
    live: Any = None,
    call: str = "run_multi_policy",
    wbc_install_torque_control: Any = False,
    wbc_gains: Any = None,
) -> RolloutPlan:
    """Check a run_multi_policy request: policies={robot: Policy | provider | {provider, config}}."""
    v.check_flag("fast_mode", fast_mode)
    v.check_flag(torque.FLAG, wbc_install_torque_control)
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError(f"policies={policies!r}: must be a non-empty dict {{robot_name: Policy}}")
    names = list(policies)
    for name in names:
        _robot_name(name, robots, param="policies key")
    if len(set(names)) != len(names):
        raise ValueError(f"policies={policies!r}: a robot is named twice")
    resolved: dict[str, tuple[str, dict[str, Any], Policy | None]] = {}
    seen: dict[int, str] = {}
    for name, entry in policies.items():
        where = f"policies[{name!r}]"
        if isinstance(entry, Policy):
            if id(entry) in seen:
                raise ValueError(
                    f"{where}: the same Policy object also drives {seen[id(entry)]!r}; give each robot its own"
                )
            seen[id(entry)] = name
            resolved[name] = _provider_and_config(None, None, entry)
        elif isinstance(entry, str):
            resolved[name] = _provider_and_config(entry, None, None)
        elif isinstance(entry, Mapping):
            unknown = set(entry) - {"policy_provider", "policy_config", "policy_object"}
            if unknown:
                raise ValueError(
                    f"{where}: unknown keys {sorted(unknown)} (policy_provider, policy_config, policy_object)"
                )
            resolved[name] = _provider_and_config(
                entry.get("policy_provider", "mock"),
                entry.get("policy_config"),
                entry.get("policy_object"),
            )
        else:
            raise ValueError(
                f"{where}={entry!r}: must be a Policy instance, a provider name or "
                "{'policy_provider': ..., 'policy_config': {...}}"
            )
    steps, duration_s, hz = v.resolve_horizon(
        n_steps=n_steps, duration=duration, control_frequency=control_frequency, max_steps=max_steps
    )
    if isinstance(instructions, Mapping):
        texts = v.per_robot("instructions", instructions, names, v.text)
    else:
        texts = {n: v.text("instructions", instructions) for n in names}
    horizons = v.per_robot("action_horizon", action_horizon, names, v.positive_int)
    kwargs: dict[str, Any] = {}
    _common(kwargs, observer=observer, on_frame=on_frame, video=video, trace_dir=trace_dir, safety=safety,
            progress=None, bag=bag, cameras=cameras, image_size=image_size)  # fmt: skip
    kwargs.update(torque.plan_options(wbc_install_torque_control, wbc_gains, names, per_robot=True))
    kwargs["live"] = _live_option(live)
    return RolloutPlan(
        call=call,
        robots=tuple(names),
        policies=resolved,
        policy_kwargs=v.config_dict("policy_kwargs", policy_kwargs),
        instructions={n: texts.get(n, "") for n in names},
        n_steps=steps,
        duration=duration_s,
        control_hz=hz,
        action_horizons={n: horizons.get(n, 8) for n in names},
        seed=v.seed_value("seed", seed),
        async_rtc=False,
        rtc_timeout=None,
        stop_when=compile_criteria("stop_when", stop_when),
        fast_mode=fast_mode,
        **kwargs,
    )


def _check_batching(policy: tuple[str, dict[str, Any], Policy | None], workers: int) -> None:
    """batch_inference=True needs several workers and a provider that batches."""
    if workers < 2:
        raise ValueError(
            f"batch_inference=True: one policy actor serves several Ray workers; workers={workers} "
            "has one (set workers >= 2, or batch_inference=False)"
        )
    reason = batch_refusal(policy[0], policy[1])
    if reason is not None:
        raise ValueError(
            f"batch_inference=True: policy_provider={policy[0]!r} cannot batch: {reason}"
        )


def _success_fn(fn: Any) -> Criterion | None:
    fn = v.optional_callable("success_fn", fn)
    if fn is None:
        return None
    return Criterion(f"success_fn {getattr(fn, '__name__', repr(fn))}", fn)


def _robot_name(
    value: Any, robots: Sequence[str], *, auto: bool = False, param: str = "robot_name"
) -> str:
    robots = list(robots)
    if value is None or value == "":
        if auto and len(robots) == 1:
            return robots[0]
        if auto:
            raise ValueError(
                f"{param}={value!r}: cannot auto-resolve the robot: the scene has "
                f"{len(robots)} robots {robots}; name one"
            )
        raise ValueError(f"{param}={value!r}: required; the scene's robots are {robots}")
    if not isinstance(value, str):
        raise ValueError(
            f"{param}={value!r}: must be a robot name (a string); the scene's robots are {robots}"
        )
    if value not in robots:
        raise ValueError(f"{param}={value!r}: no such robot; the scene's robots are {robots}")
    return value


# --- seeding ------------------------------------------------------------------------------------


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


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


# --- the agent and the env seen by the kernel --------------------------------------------------


class RecentChunks:
    """The chunks an agent's act() returned, by request id, for the last few requests only.

    The kernel has at most one chunk request in flight, and merges each chunk before it
    asks for the next, so the collector needs the chunk of the request being merged and
    nothing older: KEEP of them are kept, whatever the episode's length.
    """

    KEEP = 4

    def __init__(self) -> None:
        self.count = 0  # act() calls this episode: the next request id
        self._recent: deque[tuple[int, Any]] = deque(maxlen=self.KEEP)

    def add(self, chunk: Any) -> None:
        self._recent.append((self.count, chunk))
        self.count += 1

    def get(self, request_id: int) -> Any:
        recent = self._recent
        if recent and recent[-1][0] == request_id:  # the common case: the latest request
            return recent[-1][1]
        for rid, chunk in reversed(recent):
            if rid == request_id:
                return chunk
        return None

    def __len__(self) -> int:
        return len(self._recent)


class _RolloutAgent(PolicyAgent):
    """PolicyAgent + inference timing (running count, sum and max), the recent chunks (for
    action health) and one re-query of an empty chunk. Its state is bounded: nothing grows
    with the episode's length."""

    def __init__(
        self, policy: Policy, *, action_horizon: int, policy_kwargs: Mapping[str, Any]
    ) -> None:
        super().__init__(policy, action_horizon=action_horizon)
        self.policy_kwargs = dict(policy_kwargs)
        self.chunks = RecentChunks()
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.chunks = RecentChunks()
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0
        super().reset(instruction=instruction, seed=seed)

    def chunk(self, request_id: int) -> Any:
        return self.chunks.get(request_id)

    def act(self, observation: Mapping[str, Any], step: int, **rtc: Any) -> list[dict[str, float]]:
        start = time.monotonic()
        chunk = super().act(observation, step, **rtc)
        if not chunk:
            # One synchronous re-query before erroring: a transient hiccup is not fatal.
            self.empty_chunks += 1
            _log.warning("policy returned an empty chunk at step %d; re-querying once", step)
            chunk = super().act(observation, step, **rtc)
            if not chunk:
                raise RuntimeError(f"policy returned an empty chunk twice in a row at step {step}")
        elapsed = time.monotonic() - start
        self.inference_count += 1
        self.inference_total_s += elapsed
        if elapsed > self.inference_max_s:
            self.inference_max_s = elapsed
        self.chunks.add(chunk)
        return chunk


class _Collector:
    """Action health, executed holds and prefetch seams, from the chunk merges alone.

    It follows only `chunk.merge` events (one per chunk), not every step: between two
    merges the kernel's queue changes only by pops, so the steps from a merge at step s
    to the next merge at step s' execute min(len(kept), s' - s) of the kept actions and
    hold for the rest. The last segment is closed by finish(record): there the kernel's
    own hold count also accounts for the hold of an operator stop (executed with actions
    still queued), except after an e-stop or an error, where no such hold can have run
    and the kernel may have counted a hold it never executed.
    """

    def __init__(self, chunk_source: Any, health: Mapping[str, ActionHealth],
                 split: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None,
                 execution_steps: int | None) -> None:  # fmt: skip
        self.chunk_source = chunk_source  # has .chunk(request_id): the chunk act() returned
        self.health = health
        self.only = next(iter(health.values())) if split is None else None
        self.split = split
        self.execution_steps = execution_steps
        self.queue: Sequence[Any] = ()  # the kept actions of the last merge
        self.start = 0  # the step of the last merge (0: the steps before the first merge)
        self.holds = 0
        self.merges = 0
        self.hits = 0
        self.blocks = 0

    def __call__(self, event: Event) -> None:
        data = event.data
        step = event.step
        holds = self._close(step - self.start)
        if self.merges:
            if holds:
                self.blocks += 1
            else:
                self.hits += 1
        rid = int(data.get("request_id", self.merges))
        self.merges += 1
        chunk = self.chunk_source.chunk(rid) or ()  # the agent's list: read, never changed
        limit = self.execution_steps
        if limit is not None and len(chunk) > limit:
            chunk = chunk[:limit]
        dropped = int(data.get("dropped", 0))
        self.queue = chunk[dropped:] if dropped else chunk
        self.start = step

    def _close(self, steps: int, holds: int | None = None) -> int:
        """Count the segment since the last merge: `steps` executed steps, of which `holds`
        holds (None: the queue's actions first, then holds). Returns the holds."""
        steps = max(0, steps)
        if holds is None:
            executed = min(len(self.queue), steps)
        else:
            executed = min(len(self.queue), max(0, steps - holds))
        holds = steps - executed
        self.holds += holds
        if executed:
            queue = self.queue
            actions = queue if executed == len(queue) else queue[:executed]
            if self.only is not None:
                self.only.count_all(actions)
            else:
                for proposed in actions:
                    parts = self.split(proposed if isinstance(proposed, Mapping) else {})
                    for robot, part in parts.items():
                        health = self.health.get(robot)
                        if health is not None:
                            health.count(part)
        self.queue = ()
        return holds

    def finish(self, record: Any) -> None:
        """Close the last segment at the episode's end."""
        outcome = getattr(record.outcome, "value", str(record.outcome))
        steps = int(record.steps) - self.start
        holds = None
        if outcome not in ("estopped", "error"):
            holds = max(0, int(record.holds) - self.holds)
        self._close(steps, holds)


class _MonitoredEnv:
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
        self.reward_total = 0.0
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
        else:
            obs = self.env.reset(seed=seed)
        self._stop_check()
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

    def step(self, action: Mapping[str, float]) -> Any:
        self._stop_check()
        self._state = None
        result = self.env.step(action)
        self.step_count += 1
        self.control.step = self.step_count
        info = result.info if isinstance(result.info, dict) else {}
        if "sim_time_s" in info:
            self.sim_time_s = float(info["sim_time_s"])
        try:
            if self.needs_context:
                self._criteria(result, info)
        except CriterionError as exc:
            self.fatal = exc
            raise
        self.reward_total += float(result.reward)
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


# --- the runner ---------------------------------------------------------------------------------


def _attach_bag(bus: EventBus, trace_dir: Path, storage: str) -> Callable[[Any], dict[str, Any]]:
    """Mirror the episode on `bus` to <trace_dir>/<run_id>/bag; the finisher reports bag_path.

    The bag is written by a pooled writer process (bag.writer_process): serialising to
    CDR and MCAP in the loop's own process would cost about one MuJoCo step per step."""
    from robokernel_ros.bag.writer_process import ProcessBagMirror

    mirror = ProcessBagMirror(trace_dir, storage=storage)
    unsubscribe = mirror.attach(bus)

    def finish(record: Any) -> dict[str, Any]:
        unsubscribe()
        mirror.close()  # after episode.end it is closed already; a failed episode's is closed here
        path = mirror.last_bag_path
        return {"bag_path": str(path) if path is not None and path.is_dir() else None}

    return finish


def _live_option(value: Any) -> Any:
    if value is None or value is False:
        return None  # no import of foxglove-sdk for a call without a live view
    from robokernel_ros.live import live_option

    return live_option("live", value)


def _attach_live(bus: EventBus, plan: RolloutPlan, episode: int) -> Callable[[Any], dict[str, Any]]:
    """Feed the call's Foxglove view (started by its first episode) from the episode's bus;
    the finisher reports the episode's live stats (port, messages, dropped, mcap_path); the
    MCAP's counts are filled in when _close_live waits for the files (episodes do not)."""
    if plan.live_view is None:
        from robokernel_ros.live import LiveView

        plan.live_view = LiveView(plan.live).start()
    detach = plan.live_view.attach(bus, run_dir=plan.trace_dir, n_steps=plan.n_steps,
                                   n_episodes=plan.n_episodes, episode=episode)  # fmt: skip
    return lambda record: {"live": detach(wait=False)}


def _close_live(plan: RolloutPlan) -> None:
    """Stop the call's Foxglove server (frees its port); a no-op without one."""
    if plan.live_view is not None:
        plan.live_view.close()
        plan.live_view = None


@dataclass
class EpisodeSinkContext:
    """What an episode sink (e.g. the rosbag mirror) gets before each episode."""

    bus: EventBus
    trace_dir: Path | None
    robots: tuple[str, ...]
    episode: int
    call: str


EpisodeSink = Callable[[EpisodeSinkContext], Callable[[Any], Mapping[str, Any] | None] | None]
"""sink(context) -> finisher | None. The sink subscribes to context.bus; finisher(record) runs
after the episode and returns fields merged into the episode's result (e.g. {"bag_path": ...})."""


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

    # -- building ------------------------------------------------------------------------------
    def _build_policy(
        self, robot: str, plan: RolloutPlan, keys: Sequence[str], limits: Mapping[str, Any]
    ) -> tuple[Policy, dict[str, Any]]:
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
        return policy, {"policy_load_time_s": load_s, "policy_load_cache_hit": cache_hit,
                        "policy_resident_rss_mb": _rss_mb()}  # fmt: skip

    def _timing(self, plan: RolloutPlan, chunk_emitting: bool) -> tuple[Any, bool]:
        from robokernel_ros.kernel.timing import Timing

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
        if resolved:
            # Prefetch at half the horizon; the aligned merge is the seam swap. A paced call
            # (fast_mode=False: a robot's time) runs on the wall clock, else virtual time.
            clock = "virtual" if plan.fast_mode else "wall"
            return Timing(
                mode="realtime", clock=clock, execution_steps=horizon, refill_steps=horizon // 2
            ), True
        # Paced sync: the kernel's wall clock is the one pacer (the world waits for act).
        clock = "virtual" if plan.fast_mode else "wall"
        return Timing(mode="sync", clock=clock, execution_steps=horizon), False

    # -- one episode ----------------------------------------------------------------------------
    def _episode(self, *, plan: RolloutPlan, control: RolloutControl, env: Any, scene: Any,
                 agents: dict[str, _RolloutAgent], agent: Any, policies: dict[str, Policy],
                 timing: Any, episode: int, seed: int | None, video_path: str | None,
                 split: Callable[..., Any] | None, joint_names: Mapping[str, Sequence[str]],
                 carry_state: bool) -> dict[str, Any]:  # fmt: skip
        from robokernel_ros.kernel.operator import OperatorChannel
        from robokernel_ros.kernel.runner import EpisodeRunner
        from robokernel_ros.kernel.trace import TraceStore

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
                                     camera=plan.video["camera"], scene=scene)  # fmt: skip
        # a policy's own success criterion reads its robot's observation: not a composed one
        single_policy = policies[plan.robot] if split is None and len(policies) == 1 else None
        menv = _MonitoredEnv(env, plan=plan, control=control, episode=episode, scene=scene, policy=single_policy,
                             recorder=recorder, video_stride=stride, carry_state=carry_state)  # fmt: skip
        bus = EventBus()
        health = {
            r: ActionHealth(frozenset(p.action_keys), frozenset(joint_names.get(r, ())))
            for r, p in policies.items()
        }
        collector = _Collector(agent, health, split, timing.execution_steps)
        bus.subscribe(collector, (ev.CHUNK_MERGE,))  # one call per chunk, none per step
        bus.subscribe(self.bus.publish)
        for obs in plan.observers:
            bus.subscribe(obs)
        finishers = []
        trace = TraceStore(plan.trace_dir) if plan.trace_dir is not None else None
        if plan.bag is not None and plan.trace_dir is not None:
            finishers.append(_attach_bag(bus, plan.trace_dir, plan.bag))
        if plan.live is not None:
            finishers.append(_attach_live(bus, plan, episode))
        sink_ctx = EpisodeSinkContext(bus, plan.trace_dir, plan.robots, episode, plan.call)
        for sink in self.episode_sinks:
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
        runner = EpisodeRunner(menv, agent, trace=trace, bus=bus, safety=plan.safety, act_timeout_s=plan.rtc_timeout,
                               record_privileged=self.record_privileged, image_every=self.image_every,
                               privileged_every=1 if menv.needs_context or plan.benchmark is not None
                               else self.privileged_every,
                               timing=timing, operator=operator)  # fmt: skip
        if seed is not None:
            seed_everything(seed)
        meta = {"robots": list(plan.robots), "call": plan.call, "episode": episode,
                "policy": {r: p[0] for r, p in plan.policies.items()}}  # fmt: skip
        if plan.benchmark is not None:
            meta["benchmark"] = plan.benchmark["name"]
        meta.update(torque.trace_meta(plan, scene))
        t0 = time.monotonic()
        try:
            if control.stop_requested:
                operator.stop(control.stop_reason)
            record = runner.run(
                plan.n_steps, seed=seed, instruction=plan.instructions[plan.robot], meta=meta
            )
        finally:
            control.attach_operator(None)
            if recorder is not None:
                try:
                    recorder.close()
                except Exception:
                    _log.exception("closing the video %s failed", video_path)
        elapsed = time.monotonic() - t0
        collector.finish(record)
        extras: dict[str, Any] = {"bag_path": None}
        for fin in finishers:
            try:
                extras.update(fin(record) or {})
            except Exception:
                _log.exception("episode sink finisher failed; ignored")
        if menv.fatal is not None:
            raise menv.fatal
        return self._episode_result(plan, control, menv, record, collector, health, agents, policies, timing,
                                    episode, seed, elapsed, video_path, video_fps, extras)  # fmt: skip

    def _episode_result(self, plan, control, menv, record, collector, health, agents, policies, timing, episode,
                        seed, elapsed, video_path, video_fps, extras) -> dict[str, Any]:  # fmt: skip
        outcome = getattr(record.outcome, "value", str(record.outcome))
        error = record.error
        if outcome == "error":
            status = str(record.status or "")
            message = (error or {}).get("message") or status
            stopped_reason = status if status.startswith("error") else f"error: {message}"
        elif outcome == "watchdog":
            stopped_reason = f"error: {record.status}"
        elif outcome in ("stopped", "estopped"):
            # a Ctrl-C of the process (SIGINT) or a cancelled action says so; other stops
            # keep the outcome
            stopped_reason = control.stop_reason if control.stop_reason in STOP_REASONS else outcome
        elif menv.stop_reason is not None:
            stopped_reason = "predicate"
        elif outcome == "truncated" and record.steps >= plan.n_steps:
            stopped_reason = "budget"
        elif outcome == "truncated":
            stopped_reason = "env_truncated"
        else:
            stopped_reason = outcome
        if menv.success is not None:
            success = bool(menv.success) and outcome in ("success",)
        else:
            success = (
                outcome == "success"
                and plan.call != "run_policy"
                and menv.stop_reason is None
                and bool(menv.success_checks)
            )
        n_inference = sum(a.inference_count for a in agents.values())
        total_inference_s = sum(a.inference_total_s for a in agents.values())
        max_inference_s = max((a.inference_max_s for a in agents.values()), default=0.0)
        chunk_enabled = timing.mode == "realtime"
        merged: dict[str, Any] = {}
        if collector.split is None:
            merged = next(iter(health.values())).to_dict()
            named = next(iter(health.values())).named_keys
            resolved = next(iter(health.values())).resolved_keys
        else:
            per_robot = {r: h.to_dict() for r, h in health.items()}
            named = sum(h.named_keys for h in health.values())
            resolved = sum(h.resolved_keys for h in health.values())
            credited = sum(h.credited for h in health.values())
            partial = sum(h.partial for h in health.values())
            errors: dict[str, int] = {}
            for r, h in health.items():
                for k, c in h.errors.items():
                    errors[f"{r}/{k}"] = c
            merged = {
                "actions_applied": min(h.applied for h in health.values()) if health else 0,
                "actions_applied_per_robot": {
                    r: d["actions_applied"] for r, d in per_robot.items()
                },
                "action_errors": errors,
                "action_resolution_rate": resolved / named if named else 0.0,
                "partial_action_failure_rate": partial / credited if credited else 0.0,
                "action_steps_credited": credited,
                "action_steps_with_unresolved_keys": partial,
                "per_robot": per_robot,
            }
        result: dict[str, Any] = {
            "robot_name": plan.robot if len(plan.robots) == 1 else list(plan.robots),
            "policy": plan.policies[plan.robot][0]
            if len(plan.robots) == 1
            else {r: p[0] for r, p in plan.policies.items()},
            "instruction": plan.instructions[plan.robot]
            if len(plan.robots) == 1
            else dict(plan.instructions),
            "n_steps": plan.n_steps,
            "episode": episode,
            "seed": seed,
            "outcome": outcome,
            "success": success,
            "kernel_status": record.status,
            "elapsed_s": elapsed,
            "stopped_early": stopped_reason != "budget",
            "stopped_reason": stopped_reason,
            "stop_predicate": menv.stop_criterion,
            "steps_advanced": menv.step_count,
            "hold_steps": collector.holds,
            # the kernel's own counts, as the episode's meta.json has them
            "steps": record.steps,
            "holds": record.holds,
            "chunks": record.chunks,
            **merged,
            "total_reward": float(record.total_reward),
            "video_path": video_path if video_path and menv.video_frames else None,
            "video_frames": menv.video_frames,
            "video_fps": video_fps,
            "sim_time_s": menv.sim_time_s,
            "stop_when_true_at_reset": menv.stop_when_true_at_reset,
            "stop_when_reset_warning": (
                "stop_when was already true at reset; it was armed only after it first turned false"
                if menv.stop_when_true_at_reset
                else None
            ),
            "chunk_prefetch_enabled": chunk_enabled,
            "policy_rtc_enabled": any(
                bool(getattr(p, "supports_rtc", False)) for p in policies.values()
            ),
            "chunk_prefetch_chunks_acquired": n_inference,
            "chunk_prefetch_hits": collector.hits if chunk_enabled else 0,
            "chunk_prefetch_blocks": collector.blocks if chunk_enabled else 0,
            "empty_chunks_requeried": sum(a.empty_chunks for a in agents.values()),
            "avg_inference_ms": (1000 * total_inference_s / n_inference) if n_inference else None,
            "max_inference_ms": (1000 * max_inference_s) if n_inference else None,
            "safety_interventions": record.safety_interventions,
            "compat": record.compat.to_dict(),
            "trace_path": str(record.trace_path) if record.trace_path else None,
            "run_id": record.run_id or None,
            "error": error.get("message") if error else None,
            "error_category": error.get("category") if error else None,
            "_named_keys": named,
            "_resolved_keys": resolved,
            **extras,
        }
        binding: dict[str, bool] = {k: False for k in BINDING_FLAGS}
        for p in policies.values():
            for k, val in p.binding_report().items():
                binding[k] = binding.get(k, False) or bool(val)
        result.update(binding)
        return rtc_aliases(result)

    # -- execution -------------------------------------------------------------------------------
    def _prepare(self, plan: RolloutPlan, scene: Any, *, multi: bool = False):
        """Build the env, the policies and the agent (in the rollout's thread).

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
        policies: dict[str, Policy] = {}
        agents: dict[str, _RolloutAgent] = {}
        reports: dict[str, dict[str, Any]] = {}
        joint_names = {r: list(scene.robot_joint_names(r)) for r in robots}
        for r in robots:
            keys = list(scene.robot_action_keys(r))
            if multi:
                limits = {
                    k: spec.action_limits[f"{r}/{k}"]
                    for k in keys
                    if f"{r}/{k}" in spec.action_limits
                }
            else:
                limits = {k: spec.action_limits[k] for k in keys if k in spec.action_limits}
            policies[r], reports[r] = self._build_policy(r, plan, keys, limits)
            agents[r] = _RolloutAgent(
                policies[r],
                action_horizon=plan.action_horizons[r],
                policy_kwargs=plan.policy_kwargs,
            )
        return env, policies, agents, reports, joint_names

    @torque.with_torque_control
    def execute_run(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        """Run a validated single-robot plan (one episode). Raises CriterionError / RecordingFrameError."""
        control.state = "running"
        control.provider = plan.policies[plan.robot][0]
        if control.stop_requested:
            return self._never_started(plan, control)
        scene = self.scene
        env, policies, agents, reports, joints = self._prepare(plan, scene)
        if control.stop_requested:  # stopped while the policy was being built
            self._close_policies(plan, policies)
            return self._never_started(plan, control)
        try:
            policy = policies[plan.robot]
            timing, _ = self._timing(plan, policy.is_chunk_emitting())
            result = self._episode(plan=plan, control=control, env=env, scene=scene, agents=agents,
                                   agent=agents[plan.robot], policies=policies, timing=timing, episode=0,
                                   seed=plan.seed, video_path=plan.video["path"] if plan.video else None,
                                   split=None, joint_names=joints, carry_state=False)  # fmt: skip
        finally:
            self._close_policies(plan, policies)
            _close_live(plan)
        result.update(reports[plan.robot])
        result["duration"] = plan.duration
        result["control_frequency"] = plan.control_hz
        result["action_horizon"] = plan.action_horizons[plan.robot]
        return public(result)

    def _never_started(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        reason = "estopped" if control.estopped else "stopped"
        result = {
            "robot_name": plan.robot if len(plan.robots) == 1 else list(plan.robots),
            "policy": plan.policies[plan.robot][0],
            "n_steps": plan.n_steps,
            "outcome": reason,
            "stopped_early": True,
            "stopped_reason": reason,
            "stopped_before_first_frame": True,
            "steps_advanced": 0,
            "actions_applied": 0,
            "elapsed_s": 0.0,
            "episodes_run": 0,
        }
        return result

    def _close_policies(self, plan: RolloutPlan, policies: Mapping[str, Policy]) -> None:
        for r, p in policies.items():
            if plan.policies[r][2] is None:  # built here: ours to close
                try:
                    p.close()
                except Exception:
                    _log.exception("closing the %s policy failed", r)

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

            return execute_parallel_eval(self, plan, control, scene)
        session = EvalSession(self, plan, scene)
        progress = eval_progress(plan, self.bus)
        episodes: list[dict[str, Any]] = []
        t0 = time.monotonic()
        try:
            for i in range(plan.n_episodes):
                if control.stop_requested:
                    break
                result = session.episode(i, control)
                episodes.append(result)
                progress.episode_done(i, success=result["success"], steps=result["steps_advanced"],
                                      outcome=result["outcome"])  # fmt: skip
                if result["outcome"] in ("stopped", "estopped"):
                    break
        finally:
            progress.close()
            session.close()
            _close_live(plan)
        return eval_report(plan, control, episodes, session.policy_report(),
                           chunk_prefetch=session.chunk_prefetch, policy_rtc=session.policy_rtc,
                           elapsed_s=time.monotonic() - t0)  # fmt: skip

    @torque.with_torque_control
    def execute_multi(self, plan: RolloutPlan, control: RolloutControl) -> dict[str, Any]:
        control.state = "running"
        control.provider = ",".join(p[0] for p in plan.policies.values())
        if control.stop_requested:
            return self._never_started(plan, control)
        scene = self.scene
        env, policies, agents, reports, joints = self._prepare(plan, scene, multi=True)
        from .multi import MultiAgent, split_action

        agent = MultiAgent(agents, plan.robots, plan.instructions)
        from robokernel_ros.kernel.timing import Timing

        try:
            result = self._episode(plan=plan, control=control, env=env, scene=scene, agents=agents,
                                   agent=agent, policies=policies, timing=Timing(mode="sync", execution_steps=1),
                                   episode=0, seed=plan.seed, video_path=plan.video["path"] if plan.video else None,
                                   split=lambda a: split_action(a, plan.robots), joint_names=joints,
                                   carry_state=False)  # fmt: skip
        finally:
            self._close_policies(plan, policies)
            _close_live(plan)
        result["policies"] = {r: reports[r] for r in plan.robots}
        return public(result)


class EvalSession:
    """One eval's env and policy, built once and shared by its episodes: the serial loop
    of PolicyRunner.execute_eval, and each Ray worker of a parallel eval (rollout.parallel).

    episode(i, control) runs episode i of the plan (seed = plan.seed + i, as on the serial
    path) and returns its result; the first episode of a session carries the policy's load
    report, later ones report the cache hit. close() frees the policy built here."""

    def __init__(self, runner: PolicyRunner, plan: RolloutPlan, scene: Any) -> None:
        self.runner, self.plan, self.scene = runner, plan, scene
        self.env, self.policies, self.agents, self.reports, self.joints = runner._prepare(
            plan, scene
        )
        self.policy = self.policies[plan.robot]
        try:
            self.timing, _ = runner._timing(plan, self.policy.is_chunk_emitting())
        except AsyncRtcRefused:
            runner._close_policies(plan, self.policies)
            raise
        self.chunk_prefetch = self.timing.mode == "realtime"
        self.policy_rtc = bool(getattr(self.policy, "supports_rtc", False))
        self.episodes_run = 0

    def episode(self, i: int, control: RolloutControl) -> dict[str, Any]:
        plan = self.plan
        video_path = v.episode_video_path(plan.video["path"], i) if plan.video else None
        result = self.runner._episode(plan=plan, control=control, env=self.env, scene=self.scene,
                                      agents=self.agents, agent=self.agents[plan.robot], policies=self.policies,
                                      timing=self.timing, episode=i, seed=(plan.seed or 0) + i,
                                      video_path=video_path, split=None, joint_names=self.joints,
                                      carry_state=(not plan.reset_between) and i > 0)  # fmt: skip
        if self.episodes_run == 0:
            result.update(self.reports[plan.robot])
        else:  # the same policy object, reused: nothing was loaded for this episode
            result.update(
                policy_load_time_s=0.0, policy_load_cache_hit=True, policy_resident_rss_mb=_rss_mb()
            )
        self.episodes_run += 1
        return result

    def policy_report(self) -> dict[str, Any]:
        """The aggregate's policy fields: the load report and the binding flags."""
        report = dict(self.reports[self.plan.robot])
        for k, val in self.policy.binding_report().items():
            report[k] = bool(val)
        return report

    def close(self) -> None:
        self.runner._close_policies(self.plan, self.policies)


def eval_progress(plan: RolloutPlan, bus: EventBus) -> Progress:
    """The eval's progress (a bar on a terminal, `progress` events on the bus)."""
    return Progress(n_episodes=plan.n_episodes, robot_name=plan.robot, bus=bus, bar=plan.progress,
                    label=plan.benchmark["name"] if plan.benchmark else f"eval {plan.robot}")  # fmt: skip


def eval_report(plan: RolloutPlan, control: RolloutControl, episodes: Sequence[Mapping[str, Any]],
                policy_report: Mapping[str, Any], *, chunk_prefetch: bool, policy_rtc: bool,
                elapsed_s: float) -> dict[str, Any]:  # fmt: skip
    """The aggregate report of an eval's finished episodes (in episode order)."""
    base = {
        "robot_name": plan.robot,
        "policy": plan.policies[plan.robot][0],
        "instruction": plan.instructions[plan.robot],
        "n_episodes_requested": plan.n_episodes,
        "max_steps": plan.n_steps,
        "control_frequency": plan.control_hz,
        "action_horizon": plan.action_horizons[plan.robot],
        "seed": plan.seed,
        "async_rtc": bool(plan.async_rtc),
        "chunk_prefetch_enabled": chunk_prefetch,
        "policy_rtc_enabled": policy_rtc,
        "benchmark": plan.benchmark["name"] if plan.benchmark else None,
        "stopped": control.stop_requested,
        "elapsed_s": elapsed_s,
    }
    out = aggregate(episodes, base=base, policy_report=policy_report)
    out["n_episodes"] = len(episodes)
    return out


def result_status(result: Mapping[str, Any], *, aggregate_report: bool = False) -> tuple[str, str]:
    """(status, text) of a run or an eval result: error when no action was applied."""
    if result.get("stopped_before_first_frame"):
        return "success", f"stopped before the first frame ({result.get('robot_name')})"
    reason = str(result.get("stopped_reason") or "")
    applied = int(result.get("actions_applied") or 0)
    note = health_note(result)
    if aggregate_report:
        head = (
            f"{result.get('policy')} on {result.get('robot_name')}: {result.get('n_episodes')} "
            f"episode{'' if result.get('n_episodes') == 1 else 's'}, "
            f"success_rate={result.get('success_rate', 0.0):.3f}, avg_reward={result.get('avg_reward', 0.0):.3f}, "
            f"{result.get('total_steps')} steps"
        )
        errors = [r for r in result.get("stopped_reasons", []) if str(r).startswith("error")]
        if applied == 0 and result.get("n_episodes"):
            return "error", (
                head
                + "; refused: no action was applied in any episode (actions_applied=0), so success_rate, "
                "avg_reward and pass_hat_k would describe the scene's initial state"
            )
        if errors:
            return "error", head + f"; {len(errors)} episode(s) ended in error: {errors[0]}"
        return "success", head + (f"; {note}" if note else "")
    head = (
        f"{result.get('policy')} on {result.get('robot_name')}: {result.get('steps_advanced')} steps, "
        f"{applied} actions applied, stopped_reason={reason}"
    )
    if reason.startswith("error"):
        return "error", head
    if applied == 0 and reason not in ("stopped", "estopped"):
        return "error", head + (
            "; no action commanded the robot (no step resolved any of its action keys): "
            f"action_errors={result.get('action_errors')}"
        )
    return "success", head + (f"; {note}" if note else "")
