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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from robokernel_ros.envs import MujocoScene
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.operator import Latch
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry
from robokernel_ros.tasks.predicates import CriterionError

from . import validation as v
from .control import STOP_REASONS, RolloutControl
from .errors import AsyncRtcRefused, RecordingFrameError
from .plan import DEFAULT_TRACE_DIR, RolloutPlan
from .policy_runner import PolicyRunner
from .replay import ReplayPolicy, annotate_replay, replay_actions, resolve_recording
from .requests import plan_eval, plan_multi, plan_run
from .results import envelope, episode_table, error_envelope, result_status
from .sinks import EpisodeSink
from .workcell_operator import OperatorChannel
from .workcell_scene import SCENE_MUTATIONS, SceneBusyError, SceneCalls

_log = logging.getLogger(__name__)

__all__ = ["SCENE_MUTATIONS", "SceneBusyError", "SimWorkcell"]


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
        trace_dir: Any = DEFAULT_TRACE_DIR,
        bag: Any = "mcap",
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
        self._last: dict[str, dict[str, Any]] = {}
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

    @staticmethod
    def _in_flight_text(controls: Sequence[RolloutControl]) -> str:
        names = ", ".join(
            f"{'+'.join(repr(r) for r in c.robots)} ({c.call}, {c.state})" for c in controls
        )
        return f"a rollout is driving the scene (robots in flight: {names})"

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

    def _release(self, control: RolloutControl, out: dict[str, Any]) -> None:
        with self._lock:
            control.state = "finished"
            control.result = out
            self._inflight.pop(control.id, None)
            for robot in control.robots:
                self._last[robot] = {
                    "status": out["status"],
                    "text": out["content"][0]["text"],
                    "call": control.call,
                    "finished_at": time.monotonic(),
                    "envelope": out,
                }
                self._last_control[robot] = control  # a late verdict reaches its last episode
        control.done.set()

    # ------------------------------------------------------------------ helpers

    def _with_defaults(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.setdefault("trace_dir", self.trace_dir)
        if "bag" not in kwargs:  # the workcell's bag, for the calls that record a trace
            kwargs["bag"] = self.bag if kwargs["trace_dir"] is not None else False
        return kwargs

    def _execute(
        self, control: RolloutControl, plan: RolloutPlan, runner: PolicyRunner, kind: str
    ) -> dict[str, Any]:
        """Run a claimed plan in this thread and build its envelope (never raises)."""
        control.thread_ident = threading.get_ident()
        try:
            if kind == "eval":
                result = runner.execute_eval(plan, control)
                status, text = result_status(
                    result, aggregate_report=not result.get("stopped_before_first_frame")
                )
                if status == "success" and len(result.get("episodes", [])) > 0:
                    text += "\n" + episode_table(result)
            elif kind == "multi":
                result = runner.execute_multi(plan, control)
                status, text = result_status(result)
            else:
                result = runner.execute_run(plan, control)
                status, text = result_status(result)
            out = envelope(status, text, result)
        except (CriterionError, RecordingFrameError, AsyncRtcRefused) as exc:
            out = error_envelope(
                f"{plan.call} failed: {exc}", {"robot_name": plan.robot, "error": str(exc)}
            )
        except Exception as exc:
            _log.exception("%s on %s failed", plan.call, plan.robots)
            out = error_envelope(
                f"{plan.call} failed: {type(exc).__name__}: {exc}",
                {"robot_name": plan.robot, "error": f"{type(exc).__name__}: {exc}"},
            )
        finally:
            control.thread_ident = None
        self._release(control, out)
        return out

    # ------------------------------------------------------------------ rollouts

    def run_policy(self, robot_name: str, **kwargs: Any) -> dict[str, Any]:
        """Run a policy on a robot and return when it ends (see PolicyRunner / plan_run).

        Parameters: robot_name (required), policy_provider="mock", policy_config={},
        policy_object=None, policy_kwargs={}, instruction="", duration=10.0,
        control_frequency=50.0, action_horizon=8, n_steps=None (wins over duration;
        max_steps is its legacy alias), seed=None, async_rtc=None (resolve from
        policy.is_chunk_emitting()), rtc_inference_timeout_s=None, stop_when=None,
        observer=None (callables subscribed to the episode's events), on_frame=None
        (on_frame(step, observation) after each step), video=None ({path, fps, camera,
        width, height}), fast_mode=True (False: paced at control_frequency),
        trace_dir="runs/", safety=None (shield settings), wbc_install_torque_control=False
        (True: the robot's torque motors track the policy's joint targets through a PD
        shim for the call, gains wbc_gains={joint: {"kp", "kd"}} over the model's
        defaults; see rollout.torque).
        """
        try:
            plan = plan_run(robot_name, robots=self.scene.robots(), **self._with_defaults(kwargs))
            self.runner.preflight(plan)
            control = self._claim(plan)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        return self._execute(control, plan, self.runner, "run")

    def start_policy(self, robot_name: str, **kwargs: Any) -> dict[str, Any]:
        """run_policy's arguments; refusals are synchronous, then the rollout runs in the
        background and this returns at once. wait_policy() returns its result."""
        try:
            plan = plan_run(
                robot_name,
                robots=self.scene.robots(),
                call="start_policy",
                **self._with_defaults(kwargs),
            )
            self.runner.preflight(plan)
            control = self._claim(plan)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        try:
            self._executor.submit(self._execute, control, plan, self.runner, "run")
        except RuntimeError as exc:  # executor shut down
            self._release(control, error_envelope(str(exc)))
            return error_envelope(f"start_policy failed: {exc}")
        return envelope(
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

    def wait_policy(self, robot_name: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Wait for the robot's in-flight rollout and return its envelope (or the last one)."""
        try:
            timeout = v.timeout_seconds("timeout_s", timeout_s)
        except ValueError as exc:
            return error_envelope(str(exc))
        with self._lock:
            controls = [c for c in self._inflight.values() if robot_name in c.robots]
        for c in controls:
            if not c.done.wait(timeout):
                return error_envelope(
                    f"timeout_s={timeout}: the rollout on {robot_name!r} is still {c.state}"
                )
            if c.result is not None:
                return c.result
        with self._lock:
            last = self._last.get(robot_name)
        if last is None:
            return error_envelope(f"robot_name={robot_name!r}: no rollout has run on it")
        return last["envelope"]

    def stop_policy(self, robot_name: str | None = "") -> dict[str, Any]:
        """Stop the rollout on `robot_name`, or every rollout when it is "" (or None).

        Honoured at any point after start_policy returns, before the first frame and
        while queued. Reads the same population as list_policies_running.
        """
        if robot_name is None:
            robot_name = ""
        if not isinstance(robot_name, str):
            return error_envelope(
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
            return envelope(
                "success",
                f"stopping {', '.join(repr(r) for r in stopped)} ({', '.join(f'{k}: {s}' for k, s in states.items())})",
                {"stopped": stopped, "states": states, "rollout_ids": [c.id for c in targets]},
            )
        if not robot_name:
            return envelope(
                "success", "no policies running: nothing to stop", {"stopped": [], "states": {}}
            )
        if robot_name not in self.scene.robots() and not any(
            robot_name in c.robots for c in inflight
        ):
            return error_envelope(
                f"robot_name={robot_name!r}: no such robot; the scene's robots are {self.scene.robots()}"
            )
        text = f"policy was not running on {robot_name!r}"
        if inflight:
            text += f"; {self._in_flight_text(inflight).replace('a rollout is driving the scene ', '')}: {self._remedy(inflight)}"
        if last is not None and last["status"] == "error":
            text += f"; its last rollout ({last['call']}) ended in error: {last['text']}"
        return error_envelope(
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

    def list_policies_running(self) -> dict[str, Any]:
        """The robots being driven now (queued or running, any launch shape)."""
        with self._lock:
            controls = list(self._inflight.values())
        running = [c.describe() for c in controls]
        robots = sorted({r for c in controls for r in c.robots})
        if not running:
            return envelope(
                "success", "no policies running", {"running": [], "robots": [], "count": 0}
            )
        text = "running: " + "; ".join(
            f"{'+'.join(c.robots)} ({c.call}, {c.provider}, {c.state}, episode {c.episode}, step {c.step})"
            for c in controls
        )
        return envelope(
            "success", text, {"running": running, "robots": robots, "count": len(running)}
        )

    def run_multi_policy(self, policies: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Run several robots at once, one policy each: policies={robot: Policy | provider |
        {"policy_provider", "policy_config"}}, instructions=str | {robot: str},
        action_horizon=int | {robot: int}, duration / n_steps as run_policy;
        wbc_install_torque_control shims every robot of the call (wbc_gains={robot:
        {joint: {"kp", "kd"}}})."""
        try:
            plan = plan_multi(policies, robots=self.scene.robots(), **self._with_defaults(kwargs))
            self.runner.preflight(plan)
            control = self._claim(plan)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        return self._execute(control, plan, self.runner, "multi")

    def eval_policy(self, robot_name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """Evaluate a policy over n_episodes (robot_name auto-resolves the sole robot).

        Parameters: n_episodes=1, max_steps=300, success_fn=None (fn(context) -> bool,
        else the policy's own is_success, e.g. the scripted task's), stop_when=None,
        seed=None (episode i runs with seed + i), async_rtc=False (True measures
        robustness to inference latency; None is refused), latency_s=None (with
        async_rtc on the virtual clock: every inference takes this long, so its chunk
        merges floor(latency_s x rate) + 1 steps after its observation; None: measured),
        rtc_inference_timeout_s,
        video=None (one MP4 per episode, _ep{i}), reset_between=True, spec=None (a
        benchmark: its horizon and criteria), progress=None (a bar on a terminal),
        plus run_policy's policy_* / instruction / action_horizon / trace_dir /
        wbc_install_torque_control / wbc_gains.
        """
        if kwargs.get("spec") is not None:
            return self.evaluate_benchmark(kwargs.pop("spec"), **kwargs)
        try:
            plan = plan_eval(
                robot_name,
                robots=self.scene.robots(),
                registry=self.benchmarks,
                **self._with_defaults(kwargs),
            )
            self.runner.preflight(plan)
            control = self._claim(plan)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        return self._execute(control, plan, self.runner, "eval")

    def evaluate_benchmark(self, spec: Any, **kwargs: Any) -> dict[str, Any]:
        """Evaluate a policy on a benchmark (a registered name or a spec dict) in its own scene.

        Takes eval_policy's arguments except max_steps (the spec's horizon) and
        async_rtc=True (the benchmark path stays synchronous).
        """
        try:
            if "robot_name" in kwargs:
                raise ValueError(
                    f"robot_name={kwargs['robot_name']!r}: a benchmark brings its own robot; it is not run on the workcell's"
                )
            plan = plan_eval(None, robots=[], registry=self.benchmarks, spec=spec, call="evaluate_benchmark",
                             **self._with_defaults(kwargs))  # fmt: skip
            scene = self._benchmark_scene(plan.benchmark)
            runner = PolicyRunner(scene, bus=self.bus, episode_sinks=self.episode_sinks, registry=self.benchmarks,
                                  record_privileged=self.runner.record_privileged,
                                  privileged_every=self.runner.privileged_every)  # fmt: skip
            runner.preflight(plan)
            control = self._claim(plan, scene=f"benchmark:{plan.benchmark['name']}")
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        return self._execute(control, plan, runner, "eval")

    @staticmethod
    def _benchmark_scene(spec: Mapping[str, Any]) -> MujocoScene:
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

    def replay_episode(
        self, repo_id: Any, robot_name: str | None = None, episode: int = 0, **kwargs: Any
    ) -> dict[str, Any]:
        """Replay the executed actions of a recorded episode through the shield, as a new
        episode with its own trace (and bag).

        repo_id: a run directory, a folder of them (episode picks one, oldest first), a bag
        folder, a path another trace loader reads, or a local LeRobotDataset root (episode =
        the dataset's episode index; its action names bind to the robot's action keys).
        robot_name: defaults to the recorded robot when the scene has it, else the sole
        robot. convention (a dataset's units): "auto" (what its robot_type implies: an
        so101_follower dataset is in degrees), "none", "so_follower", "so_follower_range".
        Also takes trace_dir, bag, video, seed (default: the recorded seed), safety,
        observer.
        """
        try:
            unknown = set(kwargs) - {"trace_dir", "bag", "video", "seed", "safety", "observer", "convention"}  # fmt: skip
            if unknown:
                raise ValueError(f"replay_episode: unknown parameters {sorted(unknown)}")
            recording = resolve_recording(repo_id, episode, kwargs.pop("convention", "auto"))
            robots = self.scene.robots()
            robot_name, actions = replay_actions(
                recording, robot_name, robots, self.scene.robot_action_keys, repo_id
            )
            hz = recording.control_hz or 50.0
            seed = kwargs.pop("seed", None)
            if seed is None:
                seed = recording.seed
            plan = plan_run(robot_name, robots=robots, policy_object=ReplayPolicy(actions), n_steps=len(actions),
                            control_frequency=hz, action_horizon=1, seed=seed, async_rtc=False,
                            instruction=recording.instruction, call="replay_episode",
                            **self._with_defaults(kwargs))  # fmt: skip
            self.runner.preflight(plan)
            control = self._claim(plan)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        final: dict[str, Any] = {}

        def watch(event: Any) -> None:
            if event.kind == "privileged":
                final["qpos"] = (event.data.get("state") or {}).get("qpos")

        plan.observers.append(watch)  # the episode's own bus: no other rollout's events
        out = self._execute(control, plan, self.runner, "run")
        annotate_replay(out, recording, episode, len(actions), final.get("qpos"))
        return out

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
