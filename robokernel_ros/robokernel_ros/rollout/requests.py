"""The typed requests of the rollout API, checked where they are built.

    request = EvalRequest(n_episodes=5, seed=0)       # ValueError naming a refused field
    plan = request.plan(robots=scene.robots(), registry=registry)   # the scene's checks
    plan = plan_eval("arm", robots=scene.robots(), n_episodes=5)    # both in one call

`RunRequest` (run_policy, start_policy, replay_episode), `EvalRequest` (eval_policy,
evaluate_benchmark) and `MultiRequest` (run_multi_policy) hold a call's parameters as
asked; `__post_init__` refuses a bad value by name with the checks of rollout.validation
(booleans are booleans, numbers in their domain, callables callable, a policy provider
that exists) and replaces each field by its normalised value (a Path, a dict, compiled
criteria: each field's comment says what it holds once checked). `plan(robots=...)` adds
the checks that need the scene (the robot name, a benchmark spec) and returns the
RolloutPlan the runner executes. An unknown parameter is a ValueError naming it, the
nearest valid field, and every valid field (`unknown_fields`). A checked
request is not checked again: build a new one from the caller's values to change one.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from robokernel_ros.policies.base import Policy, batch_refusal
from robokernel_ros.policies.base import preflight as provider_preflight
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry
from robokernel_ros.tasks.predicates import Criterion, compile_criteria, compile_rewards

from . import sentry, torque
from . import validation as v
from .plan import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_WAIT_MS,
    DEFAULT_TRACE_DIR,
    DEFAULT_WORKERS,
    RolloutPlan,
)

PolicyChoice = tuple[str, dict[str, Any], Policy | None]  # (provider, config, a caller's object)


@dataclass
class _Outputs:
    """The fields every call shares: callbacks, video, trace, bag, cameras, shield, live."""

    observer: Callable[..., Any] | Sequence[Callable[..., Any]] | None = None  # checked: a list
    on_frame: Callable[..., Any] | None = None
    video: Mapping[str, Any] | str | None = None  # checked: the full video dict, or None
    trace_dir: str | Path | None = DEFAULT_TRACE_DIR  # checked: a Path, or None
    bag: str | bool | None = None  # checked: the storage ("mcap", "sqlite3"), or None
    cameras: Any = None  # a name list or {name: pose}; checked: {name: pose or None}
    image_size: int | Sequence[int] | None = None  # checked: (height, width), or None
    safety: Mapping[str, Any] | None = None  # checked: a dict, or None
    live: Any = None  # True, a port, or a live.LiveOptions mapping; checked: LiveOptions or None
    wbc_install_torque_control: bool = False
    wbc_gains: Mapping[str, Any] | None = None
    teleop: Any = None  # a kernel TeleopSource (takes over when the operator corrects); checked

    def _check_outputs(self) -> None:
        self.observer = v.callables("observer", self.observer)
        self.on_frame = v.optional_callable("on_frame", self.on_frame)
        self.video = v.video_config("video", self.video)
        self.trace_dir = v.trace_dir("trace_dir", self.trace_dir)
        self.bag = v.bag_option("bag", self.bag, self.trace_dir)
        self.cameras = v.cameras_option("cameras", self.cameras)
        self.image_size = v.image_size_option("image_size", self.image_size)
        if self.safety is not None and not isinstance(self.safety, Mapping):
            raise ValueError(f"safety={self.safety!r}: must be a dict of shield settings or None")
        self.safety = dict(self.safety) if self.safety is not None else None
        self.live = _live_option(self.live)
        self.teleop = _teleop_option(self.teleop)

    def _plan_outputs(self, progress: bool | None) -> dict[str, Any]:
        """The RolloutPlan fields of the checked outputs."""
        return {"observers": self.observer, "on_frame": self.on_frame, "video": self.video,
                "trace_dir": self.trace_dir, "bag": self.bag, "cameras": self.cameras,
                "image_size": self.image_size, "safety": self.safety, "progress": progress,
                "live": self.live, "teleop": self.teleop}  # fmt: skip


class _OneRobot:
    """What RunRequest and EvalRequest share: one robot's policy, and its plan."""

    call: str
    policy_provider: str
    policy_config: Mapping[str, Any] | None
    policy_object: Policy | None
    policy_kwargs: Mapping[str, Any] | None
    action_horizon: int
    seed: int | None
    async_rtc: bool | None
    rtc_inference_timeout_s: float | None
    stop_when: Any
    fast_mode: bool
    progress: bool | None
    wbc_install_torque_control: bool
    wbc_gains: Mapping[str, Any] | None
    _plan_outputs: Callable[[bool | None], dict[str, Any]]

    def _check_policy(self) -> None:
        """policy_provider / policy_config / policy_object: the provider resolved (an object's own
        name when one is given), the config a dict."""
        self.policy_provider, self.policy_config, self.policy_object = _provider_and_config(
            self.policy_provider, self.policy_config, self.policy_object
        )

    def _check_rollout(self) -> None:
        """policy_kwargs, action_horizon, seed, rtc_inference_timeout_s, stop_when."""
        self.policy_kwargs = v.config_dict("policy_kwargs", self.policy_kwargs)
        self.action_horizon = v.positive_int("action_horizon", self.action_horizon)
        self.seed = v.seed_value("seed", self.seed)
        self.rtc_inference_timeout_s = v.timeout_seconds(
            "rtc_inference_timeout_s", self.rtc_inference_timeout_s
        )
        self.stop_when = compile_criteria("stop_when", self.stop_when)

    @property
    def policy(self) -> PolicyChoice:
        """(provider, config, object) once checked."""
        return self.policy_provider, dict(self.policy_config or {}), self.policy_object

    def _plan_on(
        self, robot: str, *, instruction: str, n_steps: int, duration: float, control_hz: float,
        **fields: Any,
    ) -> RolloutPlan:  # fmt: skip
        """The RolloutPlan of this checked request on `robot`, with a call's own `fields`."""
        return RolloutPlan(
            call=self.call,
            robots=(robot,),
            policies={robot: self.policy},
            policy_kwargs=dict(self.policy_kwargs or {}),
            instructions={robot: instruction},
            n_steps=n_steps,
            duration=duration,
            control_hz=control_hz,
            action_horizons={robot: self.action_horizon},
            seed=self.seed,
            async_rtc=self.async_rtc,
            rtc_timeout=self.rtc_inference_timeout_s,
            stop_when=self.stop_when,
            fast_mode=self.fast_mode,
            **fields,
            **self._plan_outputs(self.progress),
            **torque.plan_options(self.wbc_install_torque_control, self.wbc_gains, (robot,)),
        )


@dataclass
class RunRequest(_Outputs, _OneRobot):
    """A run_policy / start_policy / replay_episode request (one robot, one episode).

    Once built, every field holds its checked value: the horizon resolved (n_steps, duration
    and control_frequency agree; max_steps, n_steps's legacy alias, folded into n_steps and
    None), stop_when compiled to criteria, the dicts plain dicts (see _Outputs for the rest)."""

    robot_name: str | None = None
    policy_provider: str = "mock"
    policy_config: Mapping[str, Any] | None = None  # checked: a dict
    policy_object: Policy | None = None
    policy_kwargs: Mapping[str, Any] | None = None  # checked: a dict
    instruction: str = ""
    duration: float = 10.0
    control_frequency: float = 50.0
    action_horizon: int = 8
    n_steps: int | None = None  # checked: an int
    max_steps: int | None = None  # n_steps's legacy alias
    seed: int | None = None
    async_rtc: bool | None = None  # None: from policy.is_chunk_emitting()
    rtc_inference_timeout_s: float | None = None
    stop_when: Any = None  # a name, a {predicate: args}, a callable, a list; checked: criteria
    fast_mode: bool = True
    progress: bool | None = None
    sentry_rotate_s: float | None = None  # rollout.sentry: a new episode every N s (None: one)
    call: str = "run_policy"

    def __post_init__(self) -> None:
        # Posture flags first: a refused flag builds no policy and touches no scene.
        v.check_flag("async_rtc", self.async_rtc, allow_none=True)
        v.check_flag("fast_mode", self.fast_mode)
        v.check_flag(torque.FLAG, self.wbc_install_torque_control)
        self.n_steps, self.duration, self.control_frequency = v.resolve_horizon(
            n_steps=self.n_steps, duration=self.duration,
            control_frequency=self.control_frequency, max_steps=self.max_steps,
        )  # fmt: skip
        self.max_steps = None
        self._check_outputs()
        self.progress = v.check_flag("progress", self.progress, allow_none=True)
        self.instruction = v.text("instruction", self.instruction)
        self._check_policy()
        self._check_rollout()
        self.sentry_rotate_s = sentry.rotate_option("sentry_rotate_s", self.sentry_rotate_s)

    def plan(self, *, robots: Sequence[str]) -> RolloutPlan:
        """The RolloutPlan on a scene with these robots (ValueError: no such robot)."""
        robot = _robot_name(self.robot_name, robots)
        return self._plan_on(robot, instruction=self.instruction, n_steps=self.n_steps,
                             duration=self.duration, control_hz=self.control_frequency,
                             sentry_rotate_s=self.sentry_rotate_s)  # fmt: skip


@dataclass
class EvalRequest(_Outputs, _OneRobot):
    """An eval_policy / evaluate_benchmark request: n episodes, an aggregate report.

    spec: a benchmark (a registered name or a spec dict) brings its robot, horizon, rate,
    instruction and success / failure / reward criteria; max_steps and async_rtc=True are
    refused with it. workers > 1 shards the episodes over Ray workers (rollout.parallel).
    Once built, every field holds its checked value (success_fn a Criterion, stop_when
    criteria, ray_address stripped) but max_steps and control_frequency, which plan()
    checks against the spec."""

    robot_name: str | None = None  # None: the scene's sole robot
    spec: str | Mapping[str, Any] | None = None
    policy_provider: str = "mock"
    policy_config: Mapping[str, Any] | None = None  # checked: a dict
    policy_object: Policy | None = None
    policy_kwargs: Mapping[str, Any] | None = None  # checked: a dict
    instruction: str = ""
    n_episodes: int = 1
    max_steps: int | None = None  # None: 300, or the benchmark's
    control_frequency: float = 50.0
    action_horizon: int = 8
    success_fn: Callable[[Mapping[str, Any]], bool] | None = None  # checked: a Criterion
    stop_when: Any = None  # checked: criteria
    seed: int | None = None
    async_rtc: bool = False  # eval declares a plain bool: None is refused
    rtc_inference_timeout_s: float | None = None
    latency_s: float | None = None  # the virtual clock's inference latency (async_rtc only)
    fast_mode: bool = True
    reset_between: bool = True
    progress: bool | None = None
    workers: int = DEFAULT_WORKERS
    ray_address: str | None = None
    batch_inference: bool = False
    max_batch: int = DEFAULT_MAX_BATCH
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    first_episode: int = 0  # episodes first_episode.. of an evaluation (a resumed one)
    call: str = "eval_policy"

    def __post_init__(self) -> None:
        v.check_flag("async_rtc", self.async_rtc)
        v.check_flag("fast_mode", self.fast_mode)
        v.check_flag("reset_between", self.reset_between)
        v.check_flag(torque.FLAG, self.wbc_install_torque_control)
        self.n_episodes = v.positive_int("n_episodes", self.n_episodes)
        self.first_episode = v.non_negative_int("first_episode", self.first_episode)
        parallel = v.parallel_options(workers=self.workers, ray_address=self.ray_address,
                                      batch_inference=self.batch_inference, max_batch=self.max_batch,
                                      max_wait_ms=self.max_wait_ms, policy_object=self.policy_object,
                                      observer=self.observer, on_frame=self.on_frame,
                                      reset_between=self.reset_between)  # fmt: skip
        self.workers, self.ray_address = parallel["workers"], parallel["ray_address"]
        self.max_batch, self.max_wait_ms = parallel["max_batch"], parallel["max_wait_ms"]
        live_asked = self.live
        self._check_outputs()
        self.progress = v.check_flag("progress", self.progress, allow_none=True)
        if self.spec is not None and self.async_rtc:
            raise ValueError(
                "async_rtc=True: the benchmark/spec path stays synchronous (an observed delay of exactly 0 "
                "before every inference); use eval_policy without spec= to measure latency robustness"
            )
        self.instruction = v.text("instruction", self.instruction)
        self._check_policy()
        if self.batch_inference:
            _check_batching(self.policy, self.workers)
        if self.live is not None and self.workers > 1:
            raise ValueError(
                f"live={live_asked!r}: the live view follows the episodes of this process and workers="
                f"{self.workers} runs them in Ray workers; use workers=1 to watch an eval live"
            )
        if self.teleop is not None and self.workers > 1:
            raise ValueError(
                f"teleop={self.teleop.name!r}: a teleop source drives the episodes of this process "
                f"and workers={self.workers} runs them in Ray workers; use workers=1"
            )
        self._check_rollout()
        self.success_fn = _success_fn(self.success_fn)
        self.latency_s = _latency(self.latency_s, self.async_rtc, self.fast_mode)

    def plan(
        self, *, robots: Sequence[str], registry: BenchmarkRegistry | None = None
    ) -> RolloutPlan:
        """The RolloutPlan on a scene with these robots; a spec resolves in `registry`."""
        benchmark = None
        if self.spec is not None:
            benchmark = (registry if registry is not None else BenchmarkRegistry()).resolve(
                self.spec
            )
            if self.max_steps is not None:
                raise ValueError(
                    f"max_steps={self.max_steps!r}: a spec= call takes its horizon off the benchmark "
                    f"(max_steps={benchmark['max_steps']}); fork the spec to change it"
                )
            robot = benchmark["robot"]["name"]
            steps = benchmark["max_steps"]
            hz = benchmark["control_frequency"]
            text = self.instruction or benchmark["instruction"]
            success = compile_criteria("spec['success']", benchmark.get("success"))
            failure = compile_criteria("spec['failure']", benchmark.get("failure"))
            rewards = compile_rewards("spec['reward']", benchmark.get("reward"))
        else:
            robot = _robot_name(self.robot_name, robots, auto=True)
            steps = v.positive_int("max_steps", 300 if self.max_steps is None else self.max_steps)
            hz = v.positive_number("control_frequency", self.control_frequency)
            text = self.instruction
            success, failure, rewards = [], [], []
        return self._plan_on(
            robot, instruction=text, n_steps=steps, duration=steps / hz, control_hz=hz,
            success=success, failure=failure, rewards=rewards, success_fn=self.success_fn,
            reset_between=self.reset_between, n_episodes=self.n_episodes, benchmark=benchmark,
            workers=self.workers, ray_address=self.ray_address,
            batch_inference=self.batch_inference, max_batch=self.max_batch,
            max_wait_ms=self.max_wait_ms, latency_s=self.latency_s,
            first_episode=self.first_episode,
        )  # fmt: skip


@dataclass
class MultiRequest(_Outputs):
    """A run_multi_policy request: policies={robot: Policy | provider | {policy_provider,
    policy_config, policy_object}}; instructions and action_horizon per robot or for all.

    Once built, every field holds its checked value: policies {robot: (provider, config,
    object)}, instructions and action_horizon {robot: value} for every robot, the horizon
    resolved as in RunRequest."""

    policies: Mapping[str, Any] = field(default_factory=dict)
    instructions: str | Mapping[str, str] | None = None
    duration: float = 10.0
    n_steps: int | None = None
    max_steps: int | None = None
    control_frequency: float = 50.0
    action_horizon: int | Mapping[str, int] = 8
    policy_kwargs: Mapping[str, Any] | None = None
    seed: int | None = None
    stop_when: Any = None
    fast_mode: bool = True
    call: str = "run_multi_policy"

    def __post_init__(self) -> None:
        v.check_flag("fast_mode", self.fast_mode)
        v.check_flag(torque.FLAG, self.wbc_install_torque_control)
        policies = self.policies
        if not isinstance(policies, Mapping) or not policies:
            raise ValueError(
                f"policies={policies!r}: must be a non-empty dict {{robot_name: Policy}}"
            )
        self.policies = _policy_choices(policies)
        names = list(policies)
        self.n_steps, self.duration, self.control_frequency = v.resolve_horizon(
            n_steps=self.n_steps, duration=self.duration,
            control_frequency=self.control_frequency, max_steps=self.max_steps,
        )  # fmt: skip
        self.max_steps = None
        if isinstance(self.instructions, Mapping):
            texts = v.per_robot("instructions", self.instructions, names, v.text)
        else:
            texts = {n: v.text("instructions", self.instructions) for n in names}
        self.instructions = {n: texts.get(n, "") for n in names}
        horizons = v.per_robot("action_horizon", self.action_horizon, names, v.positive_int)
        self.action_horizon = {n: horizons.get(n, 8) for n in names}
        self._check_outputs()
        self.policy_kwargs = v.config_dict("policy_kwargs", self.policy_kwargs)
        self.seed = v.seed_value("seed", self.seed)
        self.stop_when = compile_criteria("stop_when", self.stop_when)

    def plan(self, *, robots: Sequence[str]) -> RolloutPlan:
        """The RolloutPlan on a scene with these robots (ValueError: a robot it lacks)."""
        names = list(self.policies)
        for name in names:
            _robot_name(name, robots, param="policies key")
        return RolloutPlan(
            call=self.call,
            robots=tuple(names),
            policies=dict(self.policies),
            policy_kwargs=dict(self.policy_kwargs or {}),
            instructions=dict(self.instructions or {}),
            n_steps=self.n_steps,
            duration=self.duration,
            control_hz=self.control_frequency,
            action_horizons=dict(self.action_horizon),
            seed=self.seed,
            async_rtc=False,
            rtc_timeout=None,
            stop_when=self.stop_when,
            fast_mode=self.fast_mode,
            **self._plan_outputs(None),
            **torque.plan_options(
                self.wbc_install_torque_control, self.wbc_gains, names, per_robot=True
            ),  # fmt: skip
        )


def unknown_fields(request: type, kwargs: Mapping[str, Any], call: str, *,
                   also: Sequence[str] = ()) -> None:  # fmt: skip
    """Refuse keyword arguments that are no field of `request` (nor in `also`) in one line:
    the unknown name, the nearest valid one, and every valid field."""
    valid = sorted({f.name for f in fields(request) if f.name != "call"} | set(also))
    unknown = sorted(k for k in kwargs if k not in valid and k != "call")  # call: internal
    if not unknown:
        return
    name = unknown[0]
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    more = f" (and {unknown[1:]})" if len(unknown) > 1 else ""
    raise ValueError(
        f"{call}: unknown field {name!r}{hint}{more}; its fields are: {', '.join(valid)}"
    )


def plan_run(robot_name: Any, *, robots: Sequence[str], **kwargs: Any) -> RolloutPlan:
    """Check a run_policy / start_policy request (raises ValueError naming the parameter)."""
    unknown_fields(RunRequest, kwargs, str(kwargs.get("call") or "run_policy"))
    return RunRequest(robot_name=robot_name, **kwargs).plan(robots=robots)


def plan_eval(robot_name: Any = None, *, robots: Sequence[str],
              registry: BenchmarkRegistry | None = None, **kwargs: Any) -> RolloutPlan:  # fmt: skip
    """Check an eval_policy / evaluate_benchmark request (raises ValueError naming the parameter)."""
    unknown_fields(EvalRequest, kwargs, str(kwargs.get("call") or "eval_policy"))
    return EvalRequest(robot_name=robot_name, **kwargs).plan(robots=robots, registry=registry)


def plan_multi(policies: Any, *, robots: Sequence[str], **kwargs: Any) -> RolloutPlan:
    """Check a run_multi_policy request: policies={robot: Policy | provider | {provider, config}}."""
    unknown_fields(MultiRequest, kwargs, str(kwargs.get("call") or "run_multi_policy"))
    return MultiRequest(policies=policies, **kwargs).plan(robots=robots)


# --- the checks the requests share -----------------------------------------------------------


def _provider_and_config(provider: Any, config: Any, obj: Any) -> PolicyChoice:
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


def _policy_choices(policies: Mapping[str, Any]) -> dict[str, PolicyChoice]:
    """run_multi_policy's policies={robot: entry}, each entry resolved; one object per robot."""
    resolved: dict[str, PolicyChoice] = {}
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
    return resolved


def _teleop_option(teleop: Any) -> Any:
    """None, or a kernel TeleopSource: a non-empty `name` and a callable `teleop_action`."""
    if teleop is None:
        return None
    name = getattr(teleop, "name", None)
    if not (isinstance(name, str) and name and callable(getattr(teleop, "teleop_action", None))):
        raise ValueError(
            f"teleop={teleop!r}: must be a teleop source (a non-empty `name` and "
            "teleop_action(observation)), e.g. rollout.takeover.SimulatedOperator, or None"
        )
    return teleop


def _check_batching(policy: PolicyChoice, workers: int) -> None:
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


def _latency(value: Any, async_rtc: bool, fast_mode: bool) -> float | None:
    """latency_s: finite seconds >= 0 that the virtual clock's realtime mode takes every
    inference to last (kernel.timing.delay_steps: the chunk merges floor(latency_s x rate)
    + 1 steps after its observation), or None to use the measured time of each act()."""
    if value is None:
        return None
    if not v.is_number(value) or not math.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"latency_s={value!r}: must be finite seconds >= 0, or None (measured)")
    if not async_rtc:
        raise ValueError(
            f"latency_s={value!r}: only the realtime mode (async_rtc=True) runs the robot on "
            "while the policy computes; a synchronous eval waits for every chunk"
        )
    if not fast_mode:
        raise ValueError(
            f"latency_s={value!r}: a paced call (fast_mode=False) runs on the wall clock, "
            "which measures each inference; latency_s is the virtual clock's model of it"
        )
    return float(value)


def _success_fn(fn: Any) -> Criterion | None:
    fn = v.optional_callable("success_fn", fn)
    if fn is None:
        return None
    return Criterion(f"success_fn {getattr(fn, '__name__', repr(fn))}", fn)


def _live_option(value: Any) -> Any:
    if value is None or value is False:
        return None  # no import of foxglove-sdk for a call without a live view
    from robokernel_ros.live import live_option

    return live_option("live", value)


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
