"""SimWorkcell: the simulated workcell's rollout API (run/start/stop/list/eval/benchmark/replay).

Every call returns the envelope {"status": "success" | "error", "content": [{"text"},
{"json"}]}, with JSON-friendly inputs and a JSON-serialisable report, so the ROS
runner node can serve each call as a service. Refusals are checked at the entry point,
before the robot is claimed: a refused call starts nothing and leaves the robot startable.

The in-flight population (`RolloutControl`s: queued or running, blocking calls
included) is the one source of truth that list_policies_running, stop_policy, the
operator channel (workcell_operator) and the scene-mutation guard read. This module holds
that population and the rollout calls that claim and release it (one lock, one in-flight
set); the operator calls and the scene / benchmark calls are mixins in their own modules.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from robokernel_ros.envs import MujocoScene
from robokernel_ros.kernel.events import Event, EventBus
from robokernel_ros.kernel.operator import Latch
from robokernel_ros.kernel.spec import TeleopSource
from robokernel_ros.policies.base import Policy
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry
from robokernel_ros.tasks.predicates import CriterionError

from . import validation as v
from .control import STOP_REASONS, RolloutControl
from .errors import AsyncRtcRefused, RecordingFrameError
from .plan import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_WAIT_MS,
    DEFAULT_TRACE_DIR,
    DEFAULT_WORKERS,
    RolloutPlan,
)
from .policy_runner import PolicyRunner
from .replay import ReplayPolicy, annotate_replay, replay_actions, resolve_recording
from .requests import EvalRequest, MultiRequest, RunRequest
from .results import (
    CallResult,
    EvalResult,
    ListResult,
    MultiResult,
    RunResult,
    StartResult,
    StopResult,
    episode_table,
    result_status,
)
from .signatures import WORKCELL, Settings, Workcell, api_call, parameters_of
from .sinks import EpisodeSink
from .workcell_operator import OperatorChannel
from .workcell_scene import SCENE_MUTATIONS, SceneBusyError, SceneCalls

_log = logging.getLogger(__name__)

__all__ = ["SCENE_MUTATIONS", "WORKCELL", "SceneBusyError", "SimWorkcell"]

RequestT = TypeVar("RequestT", RunRequest, EvalRequest, MultiRequest)
R = TypeVar("R", bound=CallResult)
#: stop_when: a predicate name, {predicate: args}, a callable of the context, or a list of them
StopWhen = str | Settings | Callable[..., bool] | Sequence[object] | None
#: observer: callables of each kernel Event of the episode
Observers = Callable[[Event], object] | Sequence[Callable[[Event], object]] | None


class SimWorkcell(OperatorChannel, SceneCalls):
    """A MuJoCo scene with the policy-rollout API.

    SimWorkcell(scene=None, *, trace_dir="runs/", bag="mcap", max_concurrent=4, bus=None,
                episode_sinks=(), record_privileged=True, privileged_every=10)

    trace_dir: the default folder of run directories for every call (None: no trace).
    bag: the default rosbag2 mirror of every episode, written to <run_dir>/bag: "mcap",
        "sqlite3", or False for none (a call's bag= overrides it; no trace, no bag).
    max_concurrent: rollouts that run at once; further start_policy calls queue.
    bus: an EventBus every episode's events (and eval `progress` events) are forwarded to.
    episode_sinks: per-episode bus subscribers (e.g. the rosbag mirror); see EpisodeSink.
    record_privileged / privileged_every: the privileged state in the trace, on every
        privileged_every-th step (a positive whole number) and the final one, or on every
        step when the rollout evaluates criteria over it (see PolicyRunner).

    Operator channel (thread-safe, for a UI or the ROS runner node): estop() latches the
    e-stop for the workcell (running episodes end "estopped"; every rollout call is refused
    until clear_fault()), reset_done() and verdict() reach the running episodes.
    """

    def __init__(
        self,
        scene: MujocoScene | None = None,
        *,
        trace_dir: str | Path | None = DEFAULT_TRACE_DIR,
        bag: str | bool = "mcap",
        max_concurrent: int = 4,
        bus: EventBus | None = None,
        episode_sinks: Sequence[EpisodeSink] = (),
        record_privileged: bool = True,
        privileged_every: int = 10,
    ) -> None:
        privileged_every = v.positive_int("privileged_every", privileged_every)
        self.scene = scene if scene is not None else MujocoScene()
        self.trace_dir = v.trace_dir("trace_dir", trace_dir)
        if bag is not False:
            v.bag_option("bag", bag, Path("."))  # the domain, whatever the trace_dir
        self.bag = bag
        self.bus = bus if bus is not None else EventBus()
        self.episode_sinks: list[EpisodeSink] = list(episode_sinks)
        self.benchmarks = BenchmarkRegistry()
        self.runner = PolicyRunner(
            self.scene,
            bus=self.bus,
            episode_sinks=self.episode_sinks,
            registry=self.benchmarks,
            record_privileged=record_privileged,
            privileged_every=privileged_every,
        )
        self.episode_sinks = self.runner.episode_sinks  # one list: sinks added later apply too
        self._lock = threading.RLock()
        self._inflight: dict[int, RolloutControl] = {}
        self._last: dict[str, dict[str, Any]] = {}  # robot -> its last call's status, text, result
        self._last_control: dict[str, RolloutControl] = {}
        self._estop = Latch()  # the workcell's latched e-stop (estop() / clear_fault())
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=v.positive_int("max_concurrent", max_concurrent),
            thread_name_prefix="rollout",
        )
        self.scene.set_mutation_guard(self._guard)
        self._closed = False

    # ------------------------------------------------------------------ population

    def _driving(self, scene: str = "workcell") -> list[RolloutControl]:
        with self._lock:
            return [c for c in self._inflight.values() if c.scene == scene]

    def _guard(self, operation: str) -> None:
        """The scene's mutation guard: refuse while a rollout drives it (its own thread exempt)."""
        me = threading.get_ident()
        driving = self._driving()
        if not driving or any(c.thread_ident == me for c in driving):
            return
        raise SceneBusyError(
            f"{operation} refused: {self._in_flight_text(driving)}; {self._remedy(driving)}"
        )

    @classmethod
    def _in_flight_text(cls, controls: Sequence[RolloutControl]) -> str:
        return f"a rollout is driving the scene {cls._robots_in_flight(controls)}"

    @staticmethod
    def _robots_in_flight(controls: Sequence[RolloutControl]) -> str:
        names = ", ".join(
            f"{'+'.join(repr(r) for r in c.robots)} ({c.call}, {c.state})" for c in controls
        )
        return f"(robots in flight: {names})"

    @staticmethod
    def _remedy(controls: Sequence[RolloutControl]) -> str:
        calls = " or ".join(f"stop_policy(robot_name={c.robots[0]!r})" for c in controls)
        return f"stop it first with {calls}, or stop_policy() to stop every rollout"

    def _claim(self, plan: RolloutPlan, scene: str = "workcell") -> RolloutControl:
        with self._lock:
            if self._closed:
                raise ValueError("the workcell is closed")
            if self._estop.latched:
                raise ValueError(
                    f"{plan.call} refused: the e-stop is latched on this workcell; "
                    "call clear_fault() to release it first"
                )
            for c in self._inflight.values():
                if c.scene != scene:
                    continue
                busy = sorted(set(c.robots) & set(plan.robots))
                if busy:
                    raise ValueError(
                        f"robot_name={busy[0]!r}: already running a policy ({c.call}, {c.state}); "
                        f"stop it with stop_policy(robot_name={busy[0]!r}) or wait for it to finish"
                    )
            control = RolloutControl(plan.robots, plan.call, scene=scene)
            control.provider = ",".join(p[0] for p in plan.policies.values())
            control.n_episodes = plan.n_episodes
            self._inflight[control.id] = control
            return control

    def _release(self, control: RolloutControl, out: CallResult) -> None:
        with self._lock:
            control.state = "finished"
            control.result = out
            self._inflight.pop(control.id, None)
            for robot in control.robots:
                self._last[robot] = {
                    "status": out.status.value,
                    "text": out.text,
                    "call": control.call,
                    "finished_at": time.monotonic(),
                    "envelope": out,
                }
                self._last_control[robot] = control  # a late verdict reaches its last episode
        control.done.set()

    # ------------------------------------------------------------------ helpers

    def _request(self, cls: type[RequestT], given: Settings, call: str | None = None) -> RequestT:
        """The typed request of a call's arguments (`given`: its parameters by name, self
        left out): trace_dir and bag not given are the workcell's (no trace, no bag)."""
        fields = {k: v for k, v in given.items() if k != "self"}
        if fields.get("trace_dir", WORKCELL) is WORKCELL:
            fields["trace_dir"] = self.trace_dir
        if fields.get("bag", WORKCELL) is WORKCELL:  # the workcell's bag, with a trace
            fields["bag"] = self.bag if fields["trace_dir"] is not None else False
        if call is not None:
            fields["call"] = call
        return cls(**fields)

    def _execute(
        self,
        control: RolloutControl,
        plan: RolloutPlan,
        runner: PolicyRunner,
        kind: type[R],
        annotate: Callable[[dict[str, Any]], str] | None = None,
    ) -> R:
        """Run a claimed plan in this thread and build its result (never raises);
        annotate(report) adds a call's own fields to its report and returns its text's tail."""
        control.thread_ident = threading.get_ident()
        try:
            if kind is EvalResult:
                report = runner.execute_eval(plan, control)
                status, text = result_status(
                    report, aggregate_report=not report.get("stopped_before_first_frame")
                )
                if status == "success" and len(report.get("episodes", [])) > 0:
                    text += "\n" + episode_table(report)
            elif kind is MultiResult:
                report = runner.execute_multi(plan, control)
                status, text = result_status(report)
            else:
                report = runner.execute_run(plan, control)
                status, text = result_status(report)
            out = kind.of(status, text, report)
        except (CriterionError, RecordingFrameError, AsyncRtcRefused) as exc:
            out = kind.refused(
                f"{plan.call} failed: {exc}", {"robot_name": plan.robot, "error": str(exc)}
            )
        except Exception as exc:
            _log.exception("%s on %s failed", plan.call, plan.robots)
            out = kind.refused(
                f"{plan.call} failed: {type(exc).__name__}: {exc}",
                {"robot_name": plan.robot, "error": f"{type(exc).__name__}: {exc}"},
            )
        finally:
            control.thread_ident = None
        if annotate is not None and out.report is not None:
            report = dict(out.report)
            out = kind.of(out.status, out.text + annotate(report), report)
        self._release(control, out)
        return out

    def _start(
        self, plan: RolloutPlan, runner: PolicyRunner, scene: str = "workcell"
    ) -> RolloutControl:
        """Preflight and claim a checked plan (ValueError / SceneBusyError: refused)."""
        runner.preflight(plan)
        return self._claim(plan, scene=scene)

    # ------------------------------------------------------------------ rollouts

    @api_call
    def run_policy(
        self,
        robot_name: str | None = None,
        *,
        policy_provider: str = "mock",
        policy_config: Settings | None = None,
        policy_object: Policy | None = None,
        policy_kwargs: Settings | None = None,
        instruction: str = "",
        duration: float = 10.0,
        control_frequency: float = 50.0,
        action_horizon: int = 8,
        n_steps: int | None = None,
        max_steps: int | None = None,
        seed: int | None = None,
        async_rtc: bool | None = None,
        rtc_inference_timeout_s: float | None = None,
        stop_when: StopWhen = None,
        fast_mode: bool = True,
        progress: bool | None = None,
        observer: Observers = None,
        on_frame: Callable[[int, Settings], object] | None = None,
        video: Settings | str | None = None,
        trace_dir: str | Path | None | Workcell = WORKCELL,
        bag: str | bool | None | Workcell = WORKCELL,
        cameras: Sequence[str] | Settings | None = None,
        image_size: int | Sequence[int] | None = None,
        safety: Settings | None = None,
        live: bool | int | Settings | None = None,
        wbc_install_torque_control: bool = False,
        wbc_gains: Mapping[str, Mapping[str, float]] | None = None,
        teleop: TeleopSource | None = None,
        sentry_rotate_s: float | None = None,
    ) -> RunResult:
        """Run a policy on a robot and return when its episode ends.

        robot_name: a robot of the scene (required). policy_provider / policy_config, or
        policy_object (a Policy), with policy_kwargs for its get_actions. n_steps wins over
        duration x control_frequency (max_steps: its legacy alias). seed: the episode's.
        async_rtc: None resolves from policy.is_chunk_emitting(); rtc_inference_timeout_s
        bounds each inference. stop_when: a predicate name, {predicate: args}, a callable or
        a list of them. fast_mode False paces the loop at control_frequency. observer:
        callables subscribed to the episode's events; on_frame(step, observation) after each
        step; video {path, fps, camera, width, height}. trace_dir / bag: the workcell's
        unless given (None / False: none). cameras / image_size: the observation's cameras;
        safety: shield settings; live: a Foxglove view (True, a port, or options);
        wbc_install_torque_control: the robot's torque motors track the policy's joint
        targets through a PD shim (gains wbc_gains={joint: {"kp", "kd"}}; rollout.torque);
        teleop: a TeleopSource that takes over when the operator corrects.
        sentry_rotate_s: sentry mode, a new episode every that many s (rollout.sentry).
        A refusal (status error) names the parameter and its domain; nothing ran.
        """
        try:
            request = self._request(RunRequest, locals())
            plan = request.plan(robots=self.scene.robots())
            control = self._start(plan, self.runner)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return RunResult.refused(str(exc))
        return self._execute(control, plan, self.runner, RunResult)

    @api_call
    @parameters_of(run_policy)
    def start_policy(self, robot_name: str | None = None, **fields: Any) -> StartResult:
        """run_policy's arguments; refusals are synchronous, then the rollout runs in the
        background and this returns at once. wait_policy() returns its result."""
        try:
            request = self._request(
                RunRequest, {"robot_name": robot_name, **fields}, "start_policy"
            )
            plan = request.plan(robots=self.scene.robots())
            control = self._start(plan, self.runner)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return StartResult.refused(str(exc))
        try:
            self._executor.submit(self._execute, control, plan, self.runner, RunResult)
        except RuntimeError as exc:  # executor shut down
            self._release(control, RunResult.refused(str(exc)))
            return StartResult.refused(f"start_policy failed: {exc}")
        return StartResult.of(
            "success",
            f"started {plan.policies[plan.robot][0]} on {plan.robot!r} ({plan.n_steps} steps); "
            f"stop it with stop_policy(robot_name={plan.robot!r})",
            {
                "robot_name": plan.robot,
                "rollout_id": control.id,
                "state": control.state,
                "n_steps": plan.n_steps,
            },
        )

    def wait_policy(self, robot_name: str, timeout_s: float | None = None) -> CallResult:
        """Wait for the robot's in-flight rollout and return its result (or the last one)."""
        try:
            timeout = v.timeout_seconds("timeout_s", timeout_s)
        except ValueError as exc:
            return CallResult.refused(str(exc))
        with self._lock:
            controls = [c for c in self._inflight.values() if robot_name in c.robots]
        for c in controls:
            if not c.done.wait(timeout):
                return CallResult.refused(
                    f"timeout_s={timeout}: the rollout on {robot_name!r} is still {c.state}"
                )
            if c.result is not None:
                return c.result
        with self._lock:
            last = self._last.get(robot_name)
        if last is None:
            return CallResult.refused(f"robot_name={robot_name!r}: no rollout has run on it")
        return last["envelope"]

    def stop_policy(self, robot_name: str | None = "") -> StopResult:
        """Stop the rollout on `robot_name`, or every rollout when it is "" (or None).

        Honoured at any point after start_policy returns, before the first frame and
        while queued. Reads the same population as list_policies_running.
        """
        if robot_name is None:
            robot_name = ""
        if not isinstance(robot_name, str):
            return StopResult.refused(
                f"robot_name={robot_name!r}: must be a robot name or '' for every rollout"
            )
        with self._lock:
            inflight = list(self._inflight.values())
            targets = [c for c in inflight if not robot_name or robot_name in c.robots]
            for c in targets:
                c.stop("stop_policy")
            last = self._last.get(robot_name) if robot_name else None
        if targets:
            stopped = sorted({r for c in targets for r in c.robots})
            states = {"+".join(c.robots): c.state for c in targets}
            return StopResult.of(
                "success",
                f"stopping {', '.join(repr(r) for r in stopped)} ({', '.join(f'{k}: {s}' for k, s in states.items())})",
                {"stopped": stopped, "states": states, "rollout_ids": [c.id for c in targets]},
            )
        if not robot_name:
            return StopResult.of(
                "success", "no policies running: nothing to stop", {"stopped": [], "states": {}}
            )
        if robot_name not in self.scene.robots() and not any(
            robot_name in c.robots for c in inflight
        ):
            return StopResult.refused(
                f"robot_name={robot_name!r}: no such robot; the scene's robots are {self.scene.robots()}"
            )
        text = f"policy was not running on {robot_name!r}"
        if inflight:
            text += f"; {self._robots_in_flight(inflight)}: {self._remedy(inflight)}"
        if last is not None and last["status"] == "error":
            text += f"; its last rollout ({last['call']}) ended in error: {last['text']}"
        return StopResult.refused(
            text, {"stopped": [], "running": [c.describe() for c in inflight], "last": last}
        )

    def interrupt(self, reason: str = "interrupted") -> None:
        """Stop every rollout because the process was interrupted (Ctrl-C), or with
        reason "cancelled" because its ROS action was: the running episode ends "stopped"
        at its next step boundary with that stopped_reason (its trace and bag closed as
        after any stop), and no further episode starts."""
        if reason not in STOP_REASONS:
            raise ValueError(f"reason={reason!r}: must be one of {STOP_REASONS}")
        with self._lock:
            targets = list(self._inflight.values())
        for c in targets:
            c.stop(reason)

    def list_policies_running(self) -> ListResult:
        """The robots being driven now (queued or running, any launch shape)."""
        with self._lock:
            controls = list(self._inflight.values())
        running = [c.describe() for c in controls]
        robots = sorted({r for c in controls for r in c.robots})
        if not running:
            return ListResult.of(
                "success", "no policies running", {"running": [], "robots": [], "count": 0}
            )
        text = "running: " + "; ".join(
            f"{'+'.join(c.robots)} ({c.call}, {c.provider}, {c.state}, episode {c.episode}, step {c.step})"
            for c in controls
        )
        return ListResult.of(
            "success", text, {"running": running, "robots": robots, "count": len(running)}
        )

    @api_call
    def run_multi_policy(
        self,
        policies: Mapping[str, Policy | str | Settings],
        *,
        instructions: str | Mapping[str, str] | None = None,
        duration: float = 10.0,
        n_steps: int | None = None,
        max_steps: int | None = None,
        control_frequency: float = 50.0,
        action_horizon: int | Mapping[str, int] = 8,
        policy_kwargs: Settings | None = None,
        seed: int | None = None,
        stop_when: StopWhen = None,
        fast_mode: bool = True,
        observer: Observers = None,
        on_frame: Callable[[int, Settings], object] | None = None,
        video: Settings | str | None = None,
        trace_dir: str | Path | None | Workcell = WORKCELL,
        bag: str | bool | None | Workcell = WORKCELL,
        cameras: Sequence[str] | Settings | None = None,
        image_size: int | Sequence[int] | None = None,
        safety: Settings | None = None,
        live: bool | int | Settings | None = None,
        wbc_install_torque_control: bool = False,
        wbc_gains: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
        teleop: TeleopSource | None = None,
    ) -> MultiResult:
        """Run several robots at once, one policy each: policies={robot: Policy | provider |
        {"policy_provider", "policy_config", "policy_object"}}, instructions=str | {robot:
        str}, action_horizon=int | {robot: int}; duration / n_steps and the rest as
        run_policy; wbc_install_torque_control shims every robot of the call (wbc_gains=
        {robot: {joint: {"kp", "kd"}}})."""
        try:
            request = self._request(MultiRequest, locals())
            plan = request.plan(robots=self.scene.robots())
            control = self._start(plan, self.runner)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return MultiResult.refused(str(exc))
        return self._execute(control, plan, self.runner, MultiResult)

    @api_call
    def eval_policy(
        self,
        robot_name: str | None = None,
        *,
        spec: str | Settings | None = None,
        policy_provider: str = "mock",
        policy_config: Settings | None = None,
        policy_object: Policy | None = None,
        policy_kwargs: Settings | None = None,
        instruction: str = "",
        n_episodes: int = 1,
        max_steps: int | None = None,
        control_frequency: float = 50.0,
        action_horizon: int = 8,
        success_fn: Callable[[Settings], bool] | None = None,
        stop_when: StopWhen = None,
        seed: int | None = None,
        async_rtc: bool = False,
        rtc_inference_timeout_s: float | None = None,
        latency_s: float | None = None,
        fast_mode: bool = True,
        reset_between: bool = True,
        progress: bool | None = None,
        workers: int = DEFAULT_WORKERS,
        ray_address: str | None = None,
        batch_inference: bool = False,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
        first_episode: int = 0,
        observer: Observers = None,
        on_frame: Callable[[int, Settings], object] | None = None,
        video: Settings | str | None = None,
        trace_dir: str | Path | None | Workcell = WORKCELL,
        bag: str | bool | None | Workcell = WORKCELL,
        cameras: Sequence[str] | Settings | None = None,
        image_size: int | Sequence[int] | None = None,
        safety: Settings | None = None,
        live: bool | int | Settings | None = None,
        wbc_install_torque_control: bool = False,
        wbc_gains: Mapping[str, Mapping[str, float]] | None = None,
        teleop: TeleopSource | None = None,
    ) -> EvalResult:
        """Evaluate a policy over n_episodes (robot_name: None resolves the sole robot).

        n_episodes (episode i runs with seed + i), max_steps=None (300), success_fn
        (fn(context) -> bool, else the policy's own is_success, e.g. the scripted task's),
        stop_when; async_rtc=False (True measures robustness to inference latency; None is
        refused); latency_s (with async_rtc on the virtual clock: every inference takes this
        long, so its chunk merges floor(latency_s x rate) + 1 steps after its observation;
        None: measured); video (one MP4 per episode, _ep{i}); reset_between; spec (a
        benchmark: evaluate_benchmark runs it); progress (a bar on a terminal); workers > 1
        shards the episodes over Ray workers (ray_address; batch_inference, max_batch,
        max_wait_ms: one policy actor serves them); first_episode numbers a resumed
        evaluation's episodes on; the rest as run_policy.
        """
        if spec is not None:
            fields = {k: v for k, v in locals().items() if k not in ("self", "spec", "robot_name")}
            return self.evaluate_benchmark(spec, **fields)
        try:
            request = self._request(EvalRequest, locals())
            plan = request.plan(robots=self.scene.robots(), registry=self.benchmarks)
            control = self._start(plan, self.runner)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return EvalResult.refused(str(exc))
        return self._execute(control, plan, self.runner, EvalResult)

    @api_call
    @parameters_of(eval_policy, first="spec")
    def evaluate_benchmark(self, spec: str | Settings, **fields: Any) -> EvalResult:
        """Evaluate a policy on a benchmark (a registered name or a spec dict) in its own scene.

        Takes eval_policy's arguments except max_steps (the spec's horizon) and
        async_rtc=True (the benchmark path stays synchronous); robot_name is refused (a
        benchmark brings its own robot).
        """
        try:
            if fields.get("robot_name") is not None:
                raise ValueError(
                    f"robot_name={fields['robot_name']!r}: a benchmark brings its own robot; it is not run on the workcell's"
                )
            fields.pop("robot_name", None)
            request = self._request(EvalRequest, {"spec": spec, **fields}, "evaluate_benchmark")
            plan = request.plan(robots=[], registry=self.benchmarks)
            scene = self._benchmark_scene(plan.benchmark)
            runner = PolicyRunner(
                scene,
                bus=self.bus,
                episode_sinks=self.episode_sinks,
                registry=self.benchmarks,
                record_privileged=self.runner.record_privileged,
                privileged_every=self.runner.privileged_every,
            )
            control = self._start(plan, runner, scene=f"benchmark:{plan.benchmark['name']}")
        except (ValueError, TypeError, SceneBusyError) as exc:
            return EvalResult.refused(str(exc))
        return self._execute(control, plan, runner, EvalResult)

    @staticmethod
    def _benchmark_scene(spec: Settings) -> MujocoScene:
        scene = MujocoScene()
        robot = dict(spec["robot"])
        name = robot.pop("name")
        model = robot.pop("model")
        try:
            scene.add_robot(name, model, **robot)
            for obj in spec.get("objects", []):
                obj = dict(obj)
                scene.add_object(obj.pop("name"), **obj)
        except TypeError as exc:
            raise ValueError(f"spec {spec['name']!r}: bad robot/object fields: {exc}") from None
        return scene

    @api_call
    def replay_episode(
        self,
        repo_id: str | Path,
        robot_name: str | None = None,
        episode: int = 0,
        *,
        convention: str = "auto",
        seed: int | None = None,
        trace_dir: str | Path | None | Workcell = WORKCELL,
        bag: str | bool | None | Workcell = WORKCELL,
        video: Settings | str | None = None,
        safety: Settings | None = None,
        observer: Observers = None,
    ) -> RunResult:
        """Replay the executed actions of a recorded episode through the shield, as a new
        episode with its own trace (and bag).

        repo_id: a run directory, a folder of them (episode picks one, oldest first), a bag
        folder, a path another trace loader reads, or a local LeRobotDataset root (episode =
        the dataset's episode index; its action names bind to the robot's action keys).
        robot_name: defaults to the recorded robot when the scene has it, else the sole
        robot. convention (a dataset's units): "auto" (what its robot_type implies: an
        so101_follower dataset is in degrees), "none", "so_follower", "so_follower_range".
        seed: default the recorded seed. trace_dir, bag, video, safety, observer: as
        run_policy.
        """
        final: dict[str, Any] = {}

        def watch(event: Event) -> None:
            if event.kind == "privileged":
                final["qpos"] = (event.data.get("state") or {}).get("qpos")

        try:
            recording = resolve_recording(repo_id, episode, convention)
            robots = self.scene.robots()
            robot, actions = replay_actions(
                recording, robot_name, robots, self.scene.robot_action_keys, repo_id
            )
            observers = [*v.callables("observer", observer), watch]
            request = self._request(
                RunRequest,
                {
                    "robot_name": robot,
                    "policy_object": ReplayPolicy(actions),
                    "n_steps": len(actions),
                    "control_frequency": recording.control_hz or 50.0,
                    "action_horizon": 1,
                    "seed": recording.seed if seed is None else seed,
                    "async_rtc": False,
                    "instruction": recording.instruction,
                    "trace_dir": trace_dir,
                    "bag": bag,
                    "video": video,
                    "safety": safety,
                    "observer": observers,  # watch: the episode's own bus, no other rollout's
                },
                "replay_episode",
            )
            plan = request.plan(robots=robots)
            control = self._start(plan, self.runner)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return RunResult.refused(str(exc))
        return self._execute(
            control,
            plan,
            self.runner,
            RunResult,
            lambda report: annotate_replay(
                report, recording, episode, len(actions), final.get("qpos")
            ),
        )

    # ------------------------------------------------------------------ lifecycle

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop every rollout, wait for them (up to timeout_s), free the renderers."""
        with self._lock:
            self._closed = True
            controls = list(self._inflight.values())
        for c in controls:
            c.stop("close")
        deadline = time.monotonic() + timeout_s
        for c in controls:
            c.done.wait(max(0.0, deadline - time.monotonic()))
        self._executor.shutdown(wait=False, cancel_futures=False)
        self.scene.set_mutation_guard(None)
        self.scene.close()

    def __enter__(self) -> SimWorkcell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
