"""runner node: the rollout API and the kernel's episode loop as ROS 2 services.

    python -m robokernel_ros.nodes.runner --ros-args -r __ns:=/robokernel \\
        --params-file config/runner_sim.yaml

A thin adapter: every service request becomes one call of the rollout API's facade
(`robokernel_ros.rollout`), whose envelope becomes the response (`ok` = status was
"success", `message` = its text, `report_json` = its JSON block). Refusals are the
facade's own, plus the ROS-only ones checked here before anything starts (a field
outside its wire domain, JSON that is not an object, a latched e-stop, a policy server
that is not ready).

Names (relative to the node's namespace, `/robokernel` in the launch files):
  services  run_policy, start_policy, stop_policy, list_policies_running, eval_policy,
            evaluate_benchmark, replay_episode, run_multi_policy   (robokernel_interfaces)
            stop, clear_fault, reset_done (std_srvs/Trigger), verdict (SubmitVerdict)
  actions   run_policy, eval_policy, evaluate_benchmark, replay_episode, run_multi_policy
            (robokernel_interfaces/action: the service's fields as goal and result,
            progress as feedback, cancel stops with hold; robokernel_ros.ros.actions).
            The blocking services stay as thin wrappers of the same calls, without
            feedback or cancel (stop_policy stops them).
  topics    estop (std_msgs/Bool, reliable + transient_local depth 1: the one the shield
            listens to, from the estop_panel node; true latches the e-stop; with
            `estop_required`, default for env=ros, rollouts start only while its source is
            live and released, and a source silent for `estop_timeout_s` latches it: the
            shield's EstopCircuit), verdict (robokernel_interfaces/Verdict),
            events (KernelEvent, every kernel event live, reliable depth 100)

Environment (`env` parameter): "sim" hosts the MuJoCo workcell in-process with the
robot `robot` (a packaged model name or an MJCF path) named `robot_name`; "ros" drives
a robot through ROS (`RosRobotEnv`: `joints`, `joint_states_topic`, camera topics,
`command_topic` = the shield's input), in the kernel's realtime wall-clock mode.

Thread model. The episode loop of a call owns its time: each long call (run_policy,
eval_policy, ...) runs the rollout in a thread of its own ("runner-control"), while the
service callback that received it waits (without the GIL) for its answer. With env=ros
that loop takes the joint states and camera frames itself from rcl wait sets
(`RosRobotEnv`: DirectReaders on a node no executor spins), publishes its commands
itself and is paced by one clock against absolute deadlines (the env's `Pacer`); the
remote policy's chunks are taken the same way. No subscription of this node runs at the
robot's rate, so the executor only wakes for service calls and the operator channel:
a MultiThreadedExecutor of 4 threads (a waiting long call, a refused second one, a quick
call, and clear_fault's wait for the shield's answer) keeps stop_policy,
list_policies_running and the operator channel answering during a run.
With env=ros, run_policy, start_policy and eval_policy are paced (fast_mode false by
default: a robot's time is the wall clock) at the robot's rate (control_frequency
defaults to the node's parameter); anything else stepping the robot (a replay) is held
to that rate by the env's pacer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robokernel_interfaces.msg import KernelEvent, Verdict
from robokernel_interfaces.srv import (
    EvalPolicy,
    EvaluateBenchmark,
    ListPoliciesRunning,
    ReplayEpisode,
    RunMultiPolicy,
    RunPolicy,
    StartPolicy,
    StopPolicy,
    SubmitVerdict,
)
from robokernel_ros.kernel.trace import dumps_text
from robokernel_ros.ros.actions import RunnerActions
from robokernel_ros.ros.node import run_multithreaded
from robokernel_ros.ros.params import ParameterError, declare
from robokernel_ros.ros.qos import ESTOP_QOS, EVENTS_QOS
from robokernel_ros.ros.remote_policy import RemotePolicy
from robokernel_ros.ros.transport import ServerWatch, close_private_link
from robokernel_ros.ros.wire import kernel_event_msg
from robokernel_ros.safety.estop import EstopCircuit

ENVS = ("sim", "ros")


class Refused(ValueError):
    """A request field outside its domain (the message names field, value and domain)."""


def _json_object(field: str, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise Refused(f"{field}={text!r}: must be a JSON object ({exc})") from exc
    if not isinstance(value, dict):
        raise Refused(f"{field}={text!r}: must be a JSON object, got {type(value).__name__}")
    return value


def _async_rtc(value: int) -> bool | None:
    mapping = {-1: None, 0: False, 1: True}
    if value not in mapping:
        raise Refused(f"async_rtc={value!r}: must be -1 (auto), 0 (off) or 1 (on)")
    return mapping[value]


def _optional(field: str, value: int, unset: int = -1) -> int | None:
    """-1 means unset; any other value goes to the API as is (which refuses non-positive ones)."""
    return None if value == unset else value


def _timeout(value: float) -> float | None:
    # 0 means no deadline; a negative or non-finite value goes on to be refused by the API.
    return None if value == 0.0 else value


# How long after the node's start a rollout start waits for the e-stop source to be discovered.
_ESTOP_DISCOVERY_GRACE_S = 15.0


class RunnerNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("runner", **kwargs)
        self._started_at = time.monotonic()
        self._watches: dict[str, ServerWatch] = {}  # policy servers' heartbeats, by namespace
        self._watches_lock = threading.Lock()
        self.env_kind = declare(
            self, "env", "sim", "environment: sim (MuJoCo in-process) or ros", choices=ENVS
        )
        self.robot = declare(self, "robot", "so101", "sim: a packaged model name or an MJCF path")
        self.robot_name = declare(self, "robot_name", "arm", "the robot's name in service calls")
        self.trace_dir = declare(
            self, "trace_dir", "runs", "folder of run directories and bags ('' = none)"
        )
        self.control_hz = declare(
            self,
            "control_frequency",
            50.0,
            "ros: the robot's control rate (Hz)",
            min_value=0.0,
            min_exclusive=True,
            max_value=10000.0,
        )
        self.joints = list(
            declare(self, "joints", [], "ros: joint names, the command order", array_type=str)
        )
        self.joint_states_topic = declare(
            self, "joint_states_topic", "/joint_states", "ros: measured joints"
        )
        self.command_topic = declare(
            self,
            "command_topic",
            "safety_shield/commands",
            "ros: where commands go (the shield's input topic)",
        )
        self.controller = declare(
            self,
            "controller",
            "forward_command",
            "ros: command message type",
            choices=("forward_command", "joint_trajectory"),
        )
        self.camera_names = list(
            declare(self, "camera_names", [], "ros: camera names", array_type=str)
        )
        self.camera_topics = list(
            declare(
                self,
                "camera_topics",
                [],
                "ros: one Image topic per camera name (CompressedImage when it ends in /compressed)",
                array_type=str,
            )
        )
        self.reset_positions = list(
            declare(
                self,
                "reset_positions",
                [],
                "ros: joint targets at reset, one per joint ([] = start where the robot is)",
                array_type=float,
            )
        )
        self.state_timeout_s = declare(
            self,
            "state_timeout_s",
            2.0,
            "ros: joint states older than this end the episode",
            min_value=0.0,
            min_exclusive=True,
        )
        self.shield_clear_fault = declare(
            self,
            "shield_clear_fault_service",
            "safety_shield/clear_fault",
            "the shield's clear_fault service ('' = no shield)",
        )
        self.server_ready_timeout_s = declare(
            self,
            "server_ready_timeout_s",
            3.0,
            "how long a call with policy_provider remote waits for a ready policy server",
            min_value=0.0,
            min_exclusive=True,
        )
        self.publish_events = declare(
            self, "publish_events", True, "publish kernel events on events"
        )
        # env=ros drives a robot: fail closed on the e-stop source like the shield does;
        # env=sim (MuJoCo in-process, no robot) keeps the optional e-stop topic.
        estop_required = declare(
            self,
            "estop_required",
            self.env_kind == "ros",
            "rollouts start only while the estop source is live and released, and latch "
            "when it goes silent (default: true for env=ros, false for env=sim)",
        )
        estop_timeout_s = declare(
            self,
            "estop_timeout_s",
            0.5,
            "estop_required: the e-stop source is lost (latched) when silent this long",
            min_value=0.0,
            min_exclusive=True,
            max_value=60.0,
        )
        self.foxglove_port = declare(
            self,
            "foxglove_port",
            -1,
            "a live Foxglove WebSocket view of every episode on this port (-1: none, 0: any free port)",
            min_value=-1,
            max_value=65535,
        )
        if len(self.camera_names) != len(self.camera_topics):
            raise ParameterError(
                "camera_topics",
                self.camera_topics,
                f"must have one topic per camera name ({len(self.camera_names)} names)",
            )
        if self.env_kind == "ros":
            if not self.joints:
                raise ParameterError("joints", self.joints, "env=ros needs the joint names")
            if self.reset_positions and len(self.reset_positions) != len(self.joints):
                raise ParameterError(
                    "reset_positions",
                    self.reset_positions,
                    f"must be [] or one value per joint ({len(self.joints)})",
                )

        # The e-stop decision, the shield's (robokernel_ros.safety.estop), under this lock.
        self._estop = EstopCircuit(
            required=estop_required, timeout_s=estop_timeout_s, wait_s=0.0, now=time.monotonic()
        )
        self._estop_lock = threading.Lock()
        self.cell = self._make_workcell()

        self._events_pub = self.create_publisher(KernelEvent, "events", EVENTS_QOS)
        bus = getattr(self.cell, "bus", None)
        self._unsubscribe = (
            bus.subscribe(self._on_event) if (bus is not None and self.publish_events) else None
        )

        long_calls = ReentrantCallbackGroup()  # each long call holds one executor thread
        quick = ReentrantCallbackGroup()
        for srv_type, name, handler in (
            (RunPolicy, "run_policy", self._on_run_policy),
            (StartPolicy, "start_policy", self._on_start_policy),
            (EvalPolicy, "eval_policy", self._on_eval_policy),
            (EvaluateBenchmark, "evaluate_benchmark", self._on_evaluate_benchmark),
            (ReplayEpisode, "replay_episode", self._on_replay_episode),
            (RunMultiPolicy, "run_multi_policy", self._on_run_multi_policy),
        ):
            self.create_service(srv_type, name, handler, callback_group=long_calls)
        # The same long calls as actions (goal, feedback, cancel: robokernel_ros.ros.actions).
        self._actions = RunnerActions(
            self,
            {
                "run_policy": self._on_run_policy,
                "eval_policy": self._on_eval_policy,
                "evaluate_benchmark": self._on_evaluate_benchmark,
                "replay_episode": self._on_replay_episode,
                "run_multi_policy": self._on_run_multi_policy,
            },
            bus=bus,
            cancel=lambda: self.cell.interrupt("cancelled"),
            callback_group=long_calls,
        )
        self.create_service(StopPolicy, "stop_policy", self._on_stop_policy, callback_group=quick)
        self.create_service(
            ListPoliciesRunning, "list_policies_running", self._on_list, callback_group=quick
        )
        self.create_service(Trigger, "stop", self._on_stop, callback_group=quick)
        self.create_service(Trigger, "clear_fault", self._on_clear_fault, callback_group=quick)
        self.create_service(Trigger, "reset_done", self._on_reset_done, callback_group=quick)
        self.create_service(
            SubmitVerdict, "verdict", self._on_verdict_service, callback_group=quick
        )
        self.create_subscription(
            Bool,
            "estop",
            self._on_estop,
            ESTOP_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        # The source's liveness is checked by a thread, not an executor timer: a 20 Hz timer
        # would wake this node's MultiThreadedExecutor for nothing but the clock.
        self._estop_stop = threading.Event()
        if estop_required:
            period = max(0.005, min(0.05, estop_timeout_s / 10))
            threading.Thread(
                target=self._estop_watch, args=(period,), name="estop_watch", daemon=True
            ).start()
        self.create_subscription(
            Verdict, "verdict", self._on_verdict_topic, 10, callback_group=quick
        )
        self._shield_client = (
            self.create_client(Trigger, self.shield_clear_fault, callback_group=quick)
            if self.shield_clear_fault
            else None
        )
        # The remote provider is not hosted on this node: chunks delivered through
        # rclpy's MultiThreadedExecutor (which this node needs for its long service
        # calls) arrive tens of milliseconds late; its private link spins a
        # single-threaded executor of its own.
        self.get_logger().info(
            f"runner ready: env={self.env_kind} robot_name={self.robot_name} trace_dir={self.trace_dir or '-'}"
        )

    # environment ---------------------------------------------------------------------------

    def _make_workcell(self) -> Any:
        from robokernel_ros.rollout import SimWorkcell

        # The workcell mirrors every episode to <trace_dir>/<run_id>/bag itself (bag="mcap",
        # the rollout API's default).
        sinks: list[Any] = []
        trace_dir = self.trace_dir or None
        self.live_view = None
        if self.foxglove_port >= 0:
            from robokernel_ros.live import LiveView, live_option

            try:
                options = live_option("foxglove_port", self.foxglove_port)
            except ValueError as exc:
                raise ParameterError("foxglove_port", self.foxglove_port, str(exc)) from None
            self.live_view = LiveView(options, name="robokernel runner").start()
            sinks.append(self.live_view.episode_sink)
            self.get_logger().info(f"live Foxglove view: {self.live_view.url}")
        if self.env_kind == "sim":
            cell = SimWorkcell(trace_dir=trace_dir, episode_sinks=sinks)
            out = cell.add_robot(self.robot_name, self.robot)
            if isinstance(out, Mapping) and out.get("status") == "error":
                raise ParameterError("robot", self.robot, _text(out))
            return cell
        from robokernel_ros.ros.ros_env import RosRobotEnv, RosScene

        self.ros_env = RosRobotEnv(
            self,
            joints=self.joints,
            command_topic=self.command_topic,
            controller=self.controller,
            joint_states_topic=self.joint_states_topic,
            camera_topics=dict(zip(self.camera_names, self.camera_topics, strict=True)),
            control_hz=self.control_hz,
            state_timeout_s=self.state_timeout_s,
            reset_positions=dict(zip(self.joints, self.reset_positions, strict=True))
            if self.reset_positions
            else None,
        )
        # The rollout API drives any scene with the MuJoCo scene's protocol: the ROS robot
        # is one, so every call (and every refusal) is the same as in simulation.
        return SimWorkcell(
            scene=RosScene(self.robot_name, self.ros_env), trace_dir=trace_dir, episode_sinks=sinks
        )

    # events ----------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        self._events_pub.publish(kernel_event_msg(event))

    # API services ----------------------------------------------------------------------------

    def _answer(
        self,
        response: Any,
        call: Callable[[], Mapping[str, Any]],
        name: str,
        *,
        own_thread: bool = False,
    ) -> Any:
        """Run one facade call and fill ok/status/message/report_json from its envelope.
        own_thread: run it in a control thread of its own (a long call: its episode loop
        then competes with no executor thread) and wait for it."""
        try:
            out = _in_own_thread(call, f"runner-control-{name}") if own_thread else call()
        except Refused as exc:
            out = {"status": "error", "content": [{"text": str(exc)}]}
        except Exception as exc:  # noqa: BLE001 - every failure is answered, never raised into rclpy
            self.get_logger().error(f"{name} failed: {type(exc).__name__}: {exc}")
            out = {
                "status": "error",
                "content": [{"text": f"{name} failed: {type(exc).__name__}: {exc}"}],
            }
        status = out.get("status", "error")
        response.ok = status == "success"
        response.status = status if status in ("success", "error") else "error"
        response.message = _text(out)
        report = _json(out)
        response.report_json = dumps_text(report if report is not None else {})
        return response

    def _rollout_kwargs(self, request: Any) -> dict[str, Any]:
        extra = _json_object("extra_json", request.extra_json)
        kwargs = dict(
            robot_name=request.robot_name or self.robot_name,
            policy_provider=request.policy_provider,
            policy_config=_json_object("policy_config_json", request.policy_config_json),
            instruction=request.instruction,
            duration=request.duration,
            control_frequency=request.control_frequency,
            action_horizon=request.action_horizon,
            n_steps=_optional("n_steps", request.n_steps),
            seed=_optional("seed", request.seed),
            async_rtc=_async_rtc(request.async_rtc),
            rtc_inference_timeout_s=_timeout(request.rtc_inference_timeout_s),
        )
        kwargs = self._merge_extra(kwargs, extra)
        self._robot_time(kwargs)
        return kwargs

    def _robot_time(self, kwargs: dict[str, Any]) -> None:
        if self.env_kind == "ros":
            # A robot's time cannot run faster than the wall clock: paced by default, so
            # async_rtc runs the kernel's realtime wall-clock mode (holds, watchdog), at
            # the robot's rate unless the call names one.
            kwargs.setdefault("fast_mode", False)
            kwargs.setdefault("control_frequency", self.control_hz)

    def _merge_extra(self, kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(extra) & set(kwargs))
        if clash:
            raise Refused(
                f"extra_json names {clash}: these are typed fields of the request; set them there"
            )
        # Callables cannot cross ROS: a success criterion comes as predicate clauses
        # ({"predicate": name, **args}, or a list of them) or a registered predicate's name.
        for key in ("success", "success_fn"):
            if key in extra:
                clauses = extra.pop(key)
                if isinstance(clauses, str):
                    clauses = {"predicate": clauses}
                from robokernel_ros.tasks import compile_criteria

                try:
                    criteria = compile_criteria(f"extra_json[{key!r}]", clauses)
                except ValueError as exc:
                    raise Refused(str(exc)) from exc
                kwargs["success_fn"] = _AnyCriterion(criteria)
        kwargs.update(extra)
        return kwargs

    def _guard_start(self, provider: str, config: dict[str, Any]) -> None:
        """ROS-side refusals before the facade is called: latched e-stop, server not ready."""
        with self._estop_lock:
            latched = self._estop.latched
        if latched:
            raise Refused(
                "refused: the e-stop is latched; release it (estop false) and call clear_fault first"
            )
        # A source that is arming (one sample so far) becomes live within a period or two; in
        # the node's first seconds the panel may not be discovered yet (DDS discovery takes
        # seconds on a loaded machine): a start then waits for it, up to the grace.
        deadline = max(
            time.monotonic() + 2 * self._estop.timeout_s,
            self._started_at + _ESTOP_DISCOVERY_GRACE_S,
        )
        while True:
            with self._estop_lock:
                now = time.monotonic()
                ready = self._estop.may_forward(now)
                reason = self._estop.reason(now)
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not ready:
            raise Refused(f"refused: {reason}")
        if provider == "remote":
            namespace = config.setdefault(
                "namespace", self.get_namespace() if self.get_namespace() != "/" else ""
            )
            try:
                RemotePolicy.preflight(config)
                self._server_watch(namespace).wait_ready(self.server_ready_timeout_s)
            except (ValueError, RuntimeError) as exc:
                raise Refused(f"policy_provider='remote': {exc}") from exc

    def _guard_workers(self, kwargs: Mapping[str, Any]) -> None:
        """Parallel episodes (extra_json workers > 1) need simulated robots: a ROS robot is one."""
        workers = kwargs.get("workers", 1)
        if self.env_kind == "ros" and workers != 1 and "spec" not in kwargs:
            raise Refused(
                f"workers={workers!r}: this runner drives a ROS robot (env=ros), one body that episodes "
                "cannot share; parallel episodes need a simulated robot (env=sim) or evaluate_benchmark"
            )

    def _server_watch(self, namespace: str) -> ServerWatch:
        """One heartbeat subscription per policy server, kept for the node's life: destroying
        a subscription while the multi-threaded executor spins races its wait set (rclpy's
        "cannot use Destroyable because destruction was requested" ended the process)."""
        with self._watches_lock:
            watch = self._watches.get(namespace)
            if watch is None:
                watch = self._watches[namespace] = ServerWatch(self, namespace)
            return watch

    def _on_run_policy(self, request: RunPolicy.Request, response: RunPolicy.Response) -> Any:
        def call() -> Mapping[str, Any]:
            kwargs = self._rollout_kwargs(request)
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            return self.cell.run_policy(**kwargs)

        return self._answer(response, call, "run_policy", own_thread=True)

    def _on_start_policy(self, request: StartPolicy.Request, response: StartPolicy.Response) -> Any:
        def call() -> Mapping[str, Any]:
            kwargs = self._rollout_kwargs(request)
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            return self.cell.start_policy(**kwargs)

        return self._answer(response, call, "start_policy")

    def _on_eval_policy(self, request: EvalPolicy.Request, response: EvalPolicy.Response) -> Any:
        def call() -> Mapping[str, Any]:
            extra = _json_object("extra_json", request.extra_json)
            kwargs = dict(
                robot_name=request.robot_name or self.robot_name,
                policy_provider=request.policy_provider,
                policy_config=_json_object("policy_config_json", request.policy_config_json),
                instruction=request.instruction,
                n_episodes=request.n_episodes,
                max_steps=request.max_steps,
                seed=_optional("seed", request.seed),
                async_rtc=request.async_rtc,
                rtc_inference_timeout_s=_timeout(request.rtc_inference_timeout_s),
            )
            kwargs = self._merge_extra(kwargs, extra)
            self._robot_time(kwargs)
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            self._guard_workers(kwargs)
            return self.cell.eval_policy(**kwargs)

        return self._answer(response, call, "eval_policy", own_thread=True)

    def _on_evaluate_benchmark(self, request: EvaluateBenchmark.Request, response: Any) -> Any:
        def call() -> Mapping[str, Any]:
            extra = _json_object("extra_json", request.extra_json)
            spec = _json_object("spec_json", request.spec_json)
            if bool(request.name) == bool(spec):
                raise Refused(
                    f"name={request.name!r}, spec_json={request.spec_json!r}: give a registered benchmark "
                    "name or a spec, exactly one"
                )
            kwargs = dict(
                spec=request.name or spec,
                policy_provider=request.policy_provider,
                policy_config=_json_object("policy_config_json", request.policy_config_json),
                n_episodes=request.n_episodes,
                seed=_optional("seed", request.seed),
            )
            kwargs = self._merge_extra(kwargs, extra)
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            self._guard_workers(kwargs)
            return self.cell.evaluate_benchmark(**kwargs)

        return self._answer(response, call, "evaluate_benchmark", own_thread=True)

    def _on_replay_episode(self, request: ReplayEpisode.Request, response: Any) -> Any:
        def call() -> Mapping[str, Any]:
            if not request.repo_id:
                raise Refused(
                    "repo_id='': must name a run directory, a bag folder or a LeRobot dataset root"
                )
            kwargs = self._merge_extra(
                dict(
                    repo_id=request.repo_id,
                    robot_name=request.robot_name or self.robot_name,
                    episode=request.episode,
                ),
                _json_object("extra_json", request.extra_json),
            )
            self._guard_start("", {})
            return self.cell.replay_episode(**kwargs)

        return self._answer(response, call, "replay_episode", own_thread=True)

    def _on_run_multi_policy(self, request: RunMultiPolicy.Request, response: Any) -> Any:
        def call() -> Mapping[str, Any]:
            policies = _json_object("policies_json", request.policies_json)
            if not policies:
                raise Refused("policies_json='{}': must map at least one robot to a policy")
            kwargs = self._merge_extra(
                dict(
                    policies=policies,
                    instructions=_json_object("instructions_json", request.instructions_json),
                    duration=request.duration,
                    n_steps=_optional("n_steps", request.n_steps),
                ),
                _json_object("extra_json", request.extra_json),
            )
            self._guard_start("", {})
            return self.cell.run_multi_policy(**kwargs)

        return self._answer(response, call, "run_multi_policy", own_thread=True)

    def _on_stop_policy(self, request: StopPolicy.Request, response: StopPolicy.Response) -> Any:
        return self._answer(
            response, lambda: self.cell.stop_policy(request.robot_name), "stop_policy"
        )

    def _on_list(
        self, request: ListPoliciesRunning.Request, response: ListPoliciesRunning.Response
    ) -> Any:
        self._answer(response, self.cell.list_policies_running, "list_policies_running")
        response.robots = _running_robots(json.loads(response.report_json or "{}"))
        return response

    # operator channel ---------------------------------------------------------------------

    def _on_estop(self, msg: Bool) -> None:
        with self._estop_lock:
            latched = self._estop.sample(bool(msg.data), time.monotonic(), "estop topic: pressed")
        if latched:
            self._latched()

    def _estop_watch(self, period: float) -> None:
        while not self._estop_stop.wait(period):
            with self._estop_lock:
                latched = self._estop.tick(time.monotonic())
            if latched:
                self._latched()

    def _latched(self) -> None:
        self.get_logger().warn(
            f"e-stop latched by {self._estop.latched_by}; every rollout ends estopped"
        )
        # The workcell latches too: every in-flight episode ends "estopped" at once, the
        # rollouts stop (no further episodes) and new ones are refused until clear_fault.
        self.cell.estop()

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        out = self.cell.stop_policy("")
        response.success = out.get("status") == "success"
        response.message = _text(out)
        return response

    def _on_clear_fault(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        with self._estop_lock:
            ok, message = self._estop.clear(time.monotonic())
            if not ok:
                response.success, response.message = False, message
                return response
            self.cell.clear_fault()
        response.success = True
        response.message = "e-stop cleared on the runner"
        if self._shield_client is not None:
            ok, detail = self._clear_shield()
            response.success = ok
            response.message += f"; shield: {detail}"
        return response

    def _clear_shield(self) -> tuple[bool, str]:
        if not self._shield_client.wait_for_service(timeout_sec=1.0):
            return True, f"no {self._shield_client.srv_name} service (no shield running)"
        done = threading.Event()
        future = self._shield_client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(3.0):
            future.cancel()
            return False, f"{self._shield_client.srv_name} did not answer within 3 s"
        result = future.result()
        return bool(result.success), result.message

    def _on_reset_done(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        out = self.cell.reset_done()
        response.success = out.get("status") == "success"
        response.message = _text(out)
        return response

    def _verdict(self, outcome: str, note: str) -> tuple[bool, str]:
        out = self.cell.verdict(outcome, note)
        return out.get("status") == "success", _text(out)

    def _on_verdict_service(
        self, request: SubmitVerdict.Request, response: SubmitVerdict.Response
    ) -> Any:
        response.ok, response.message = self._verdict(request.outcome, request.note)
        return response

    def _on_verdict_topic(self, msg: Verdict) -> None:
        ok, text = self._verdict(msg.outcome, msg.note)
        if not ok:
            self.get_logger().warn(f"verdict refused: {text}")

    def destroy_node(self) -> None:
        self._estop_stop.set()
        try:
            self.cell.stop_policy("")
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass
        close = getattr(self.cell, "close", None)
        if callable(close):
            close()
        if self._unsubscribe is not None:
            self._unsubscribe()
        close_private_link()
        if getattr(self, "live_view", None) is not None:
            self.live_view.close()
        self._actions.destroy()
        super().destroy_node()


class _AnyCriterion:
    """success_fn from predicate clauses: true when any clause holds."""

    def __init__(self, criteria: list[Any]) -> None:
        self.criteria = criteria
        self.__name__ = " or ".join(c.name for c in criteria)

    def __call__(self, ctx: Any) -> bool:
        return any(c(ctx) for c in self.criteria)


def _text(out: Mapping[str, Any]) -> str:
    return "\n".join(
        str(c["text"]) for c in out.get("content", []) if isinstance(c, Mapping) and "text" in c
    )


def _json(out: Mapping[str, Any]) -> Any:
    for c in out.get("content", []):
        if isinstance(c, Mapping) and "json" in c:
            return c["json"]
    return None


def _running_robots(report: Mapping[str, Any]) -> list[str]:
    for key in ("robots", "running", "robots_running"):
        value = report.get(key)
        if isinstance(value, list):
            return [
                str(r.get("robot_name", r)) if isinstance(r, Mapping) else str(r) for r in value
            ]
        if isinstance(value, Mapping):
            return [str(r) for r in value]
    return []


def _in_own_thread(call: Callable[[], Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    """call() in a fresh thread, waited for; its exception is raised here."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting callback
            box["exc"] = exc

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    thread.join()
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def main(args: list[str] | None = None) -> int:
    return run_multithreaded(RunnerNode, args=args, threads=4)


if __name__ == "__main__":
    import sys

    sys.exit(main())
