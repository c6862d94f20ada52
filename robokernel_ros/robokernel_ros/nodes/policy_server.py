"""policy_server node: hosts one policy (any provider) and answers observations with action chunks.

    python -m robokernel_ros.nodes.policy_server --ros-args -r __ns:=/robokernel \\
        -p provider:=lerobot -p checkpoint:=/path/to/pretrained_model

Names (relative to the node's namespace, `/robokernel` in the launch files):
  subscribes  observation              robokernel_interfaces/Observation (reliable, depth 2)
  publishes   action_chunk             robokernel_interfaces/ActionChunk (reliable, depth 10),
                                        tagged with the observation's run_id and step and the
                                        inference time
  publishes   ~/status                 PolicyServerStatus heartbeat (reliable, transient_local)
  service     get_action_chunk         GetActionChunk: the same, synchronously (evaluation)

The policy is built once, in a loader thread started at construction, with the rollout
API's own provider registry (`preflight` then `create_policy`); the heartbeat says
`ready=false` with what is loading (or why the load failed) until it is done, so a
runner refuses to start against it. Observations are answered on one inference
thread, latest first: an observation that arrives while the policy computes replaces
the one waiting, so the server never falls behind the robot. A new `run_id` starts a
new episode (the policy is reset with the observation's instruction). The inference
thread takes the observations itself, without an executor in between: their
subscription sits on a companion node `<name>_rx` (in `ros2 node list` too) that no
executor spins.

Served mode (`served:=true`): an external harness owns the loop (a Gazebo or Isaac
simulation, another team's controller) and the server wraps its policy in the kernel's
ServedSession: the same agent, SafetyShield, events, trace and bag as the runner's
driven loop, one step at a time. The driven names above are not offered then (one
policy, one episode stream); instead, relative to the namespace:
  subscribes  served/episode_start     std_msgs/String, a JSON object
                                        {"episode_id": str (required), "instruction": str,
                                         "seed": int | null, "meta": {...}}
  subscribes  served/observation       robokernel_interfaces/Observation (reliable, depth 10:
                                        no step is replaced by a later one), one per step:
                                        observation.run_id = the episode_id, observation.step =
                                        0, 1, 2, ... The reward of the previous action, and its
                                        terminated/truncated flags and the harness's clock,
                                        ride in observation.arrays named served.reward,
                                        served.terminated, served.truncated, served.sim_time_s
                                        (one value each, all optional; not seen by the policy)
  publishes   served/action_chunk      robokernel_interfaces/ActionChunk (reliable, depth 10)
                                        per step: horizon 1 = the shielded action (keys =
                                        action_keys, run_id = the episode_id, obs_step = the
                                        observation's step). A step that is refused gets no
                                        chunk: served/episode_status says why, state
                                        "step_refused" with its "step" (and the message naming
                                        field, value and domain, as the service's)
  service     served/step              GetActionChunk: the same step synchronously (the same
                                        observation; answers ok + the same ActionChunk, or
                                        ok=false + the refusal). Steps are taken in order over
                                        both paths; the topics are the low-latency one (the
                                        inference thread takes them, no executor in between)
  subscribes  served/episode_end       std_msgs/String, a JSON object
                                        {"episode_id": str (required), "success": bool | null,
                                         "outcome": str | null, "reward": float,
                                         "terminated": bool, "truncated": bool}
  publishes   served/episode_status    std_msgs/String, a JSON object per change, reliable
                                        depth 100: {"episode_id", "state": "started" |
                                        "refused" | "step_refused" | "ended", "message",
                                        "run_id", "trace_path"} plus "step" when a step over
                                        topics was refused and, once ended, "outcome", "steps",
                                        "holds", "chunks", "safety_interventions",
                                        "total_reward", "bag_path"
  publishes   served/events            KernelEvent, every kernel event live (as the runner's
                                        events)
  subscribes  estop                    std_msgs/Bool (the workcell's latched e-stop topic):
                                        true latches the e-stop: steps answer the hold action,
                                        the episode ends "estopped", starts are refused
  service     served/clear_fault       std_srvs/Trigger: releases the latched e-stop (refused
                                        while the last estop value is true)
A step that arrives before its episode_start waits up to `start_timeout_s` for it.
Each episode leaves a run directory <trace_dir>/<run_id>/ (events.jsonl, meta.json) and
its rosbag2 <trace_dir>/<run_id>/bag (MCAP); both load with `kernel.load_trace`.
Parameters of served mode: `action_keys` (required: the env's action keys),
`limits_file` (required: ros2_control joint_limits YAML, loaded by `safety.limits` as
the safety_shield node loads it), `command_interface` (position | velocity), `control_hz`, `trace_dir`
('' = no trace and no bag), `bag`, `clip_tolerance`, `execution_steps` (0 = the whole
chunk), `image_every`, `start_timeout_s`.
"""

from __future__ import annotations

import importlib
import json
import math
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import ClockType, JumpThreshold
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from robokernel_interfaces.msg import ActionChunk, KernelEvent, Observation, PolicyServerStatus
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.kernel.operator import Latch
from robokernel_ros.nodes._common import (
    ESTOP_QOS,
    EVENT_QOS,
    EVENTS_QOS,
    STATUS_QOS,
    ParameterError,
    declare,
    kernel_event_msg,
    run_node,
)
from robokernel_ros.policies import remote as wire

OBSERVATION_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=2, reliability=ReliabilityPolicy.RELIABLE
)
CHUNK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)
#: Served steps: reliable like the driven pair, but every step counts (none may be
#: replaced by a later one), so the history is as deep as the chunks'.
SERVED_OBSERVATION_QOS = CHUNK_QOS


class PolicyServer(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("policy_server", **kwargs)
        self.provider = declare(
            self,
            "provider",
            "mock",
            "policy provider: mock, scripted, lerobot, or a registered one",
        )
        config_json = declare(
            self, "policy_config_json", "{}", "the provider's config as a JSON object"
        )
        checkpoint = declare(
            self, "checkpoint", "", "a local checkpoint folder (sets policy_config['path'])"
        )
        device = declare(
            self, "device", "", "cpu | cuda | auto (sets policy_config['device']); '' leaves it"
        )
        self.action_keys = list(
            declare(
                self,
                "action_keys",
                [],
                "action keys the policy is bound to; [] binds to "
                "the first observation's joint names",
                array_type=str,
            )
        )
        self.heartbeat_hz = declare(
            self,
            "heartbeat_hz",
            2.0,
            "status heartbeat rate",
            min_value=0.0,
            min_exclusive=True,
            max_value=100.0,
        )
        self.plugin_modules = list(
            declare(
                self,
                "plugin_modules",
                [],
                "Python modules imported before the "
                "provider is built (they register their own providers)",
                array_type=str,
            )
        )
        self.served = declare(
            self,
            "served",
            False,
            "served mode: an external harness owns the loop (served/* names); "
            "false: answer observations with chunks (driven mode)",
        )
        self._served_params = _declare_served(self) if self.served else None
        try:
            config = json.loads(config_json)
        except json.JSONDecodeError as exc:
            raise ParameterError(
                "policy_config_json", config_json, f"must be a JSON object ({exc})"
            ) from exc
        if not isinstance(config, dict):
            raise ParameterError("policy_config_json", config_json, "must be a JSON object")
        if checkpoint:
            config["path"] = checkpoint
        if device:
            config["device"] = device
        self.config = config

        self.policy: Any = None
        self.ready = False
        self.detail = f"loading {self.provider} policy"
        self.chunks_served = 0
        self._episode: str | None = None
        self._bound = False
        self._infer_lock = threading.Lock()  # one inference at a time (topic and service paths)
        self._stopping = False

        self._status_pub = self.create_publisher(PolicyServerStatus, "~/status", STATUS_QOS)
        # The chunks' stamps: the node's clock, read as the system clock while that is what
        # it reads (Clock.now() builds a Time per call: ~50 us on an idle server's chunk
        # path); a jump callback follows use_sim_time turning ROS time on and off. (It holds
        # the node weakly: a node whose construction failed is freed as before.)
        self._now_ns = time.time_ns
        node = weakref.ref(self)
        self._clock_watch = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=None, on_clock_change=True),
            post_callback=lambda _jump: _follow_clock(node()),
        )
        _follow_clock(self)
        self.served_endpoint: ServedEndpoint | None = None
        if self._served_params is not None:
            if not self.action_keys:
                raise ParameterError(
                    "action_keys", self.action_keys, "served mode needs the env's action keys"
                )
            self.served_endpoint = ServedEndpoint(self, self._served_params)
            observation_topic = "served/observation"
            observation_qos = SERVED_OBSERVATION_QOS
        else:
            self._chunk_pub = self.create_publisher(ActionChunk, "action_chunk", CHUNK_QOS)
            self._chunk_msg = ActionChunk()
            self.create_service(
                GetActionChunk,
                "get_action_chunk",
                self._on_get_chunk,
                callback_group=MutuallyExclusiveCallbackGroup(),
            )
            observation_topic = "observation"
            observation_qos = OBSERVATION_QOS
        # The inference thread takes observations itself (wire.DirectReader): no executor
        # dispatch and no thread hand-over on the chunk's latency path. The subscription
        # lives on a companion node `<name>_rx` that no executor spins, under the name
        # this node resolves (remaps included).
        self._rx_node = Node(
            f"{self.get_name()}_rx",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        self._observations = wire.DirectReader(
            self._rx_node, Observation, self.resolve_topic_name(observation_topic), observation_qos
        )
        self.create_timer(
            1.0 / self.heartbeat_hz,
            self._publish_status,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self._publish_status()
        self._loader = threading.Thread(target=self._load, name="policy-load", daemon=True)
        self._loader.start()
        self._worker = threading.Thread(target=self._serve, name="policy-infer", daemon=True)
        self._worker.start()

    # loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        from robokernel_ros.policies import create_policy, preflight

        started = time.monotonic()
        try:
            for module in self.plugin_modules:
                importlib.import_module(module)
            preflight(self.provider, self.config)
            policy = create_policy(self.provider, **self.config)
            if self.action_keys:
                policy.set_robot_state_keys(self.action_keys)
                self._bound = True
        except Exception as exc:  # noqa: BLE001 - reported on the heartbeat and the log
            self.detail = f"loading the {self.provider} policy failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(self.detail)
            self._publish_status()
            return
        self.policy = policy
        self.ready = True
        self.detail = f"{self.provider} policy loaded in {time.monotonic() - started:.2f} s"
        self.get_logger().info(self.detail)
        self._publish_status()

    def _publish_status(self) -> None:
        policy = self.policy
        msg = PolicyServerStatus()
        msg.stamp = self.get_clock().now().to_msg()
        msg.ready = self.ready
        msg.provider = self.provider
        msg.detail = self.detail
        msg.action_keys = list(getattr(policy, "action_keys", ()) or self.action_keys)
        msg.chunk_emitting = bool(policy.is_chunk_emitting()) if policy is not None else False
        msg.rtc_supported = bool(getattr(policy, "supports_rtc", False))
        msg.chunks_served = self.chunks_served
        self._status_pub.publish(msg)

    # inference ------------------------------------------------------------------------------

    def _serve(self) -> None:
        """The inference thread: driven mode answers the latest observation waiting (an
        older one is dropped, so the server never falls behind the robot); served mode
        steps every observation in order."""
        while not self._stopping:
            messages = self._observations.take(1.0)
            if not messages:
                continue
            if self.served_endpoint is not None:
                for msg in messages:
                    self.served_endpoint.step_topic(msg)
                continue
            msg = messages[-1]
            if not self.ready:
                self.get_logger().warn(
                    f"observation of step {msg.step} ignored: {self.detail}",
                    throttle_duration_sec=2.0,
                )
                continue
            try:
                # Published at once: one message, refilled (building one costs ~0.1 ms).
                chunk = self.infer(msg, out=self._chunk_msg)
            except Exception as exc:  # noqa: BLE001 - one bad observation must not stop the server
                self.get_logger().error(
                    f"inference on the observation of step {msg.step} failed: "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            self._chunk_pub.publish(chunk)
            self.chunks_served += 1  # bookkeeping after the chunk is out

    def infer(self, msg: Observation, out: ActionChunk | None = None) -> ActionChunk:
        """One observation in, one ActionChunk out (tagged with run_id, obs_step, inference
        time); `out`: the message to fill instead of a new one."""
        with self._infer_lock:
            policy = self.policy
            # Converted as the policy reads it (the mock reads nothing of it).
            observation = wire.ObservationView(msg)
            if not self._bound:
                keys = sorted(observation.get("actuator_targets", {})) or list(
                    observation["joint_positions"]
                )
                policy.set_robot_state_keys(keys)
                self._bound = True
            run_id, instruction = msg.run_id, msg.instruction
            if run_id != self._episode:
                policy.reset(instruction=instruction)
                self._episode = run_id
            # The chunk as the wire takes it (ActionRows): no action dict per step when the
            # policy computes an array anyway (the mock, LeRobot).
            keys = policy.action_keys or None
            if getattr(policy, "supports_rtc", False):
                rtc = {
                    "queued_actions": wire.queued_actions_from_msg(msg, policy.action_keys),
                    "delay_steps": int(msg.delay_steps),
                }
                started = time.perf_counter()
                rows = policy.get_action_rows(observation, instruction, keys=keys, **rtc)
            else:
                started = time.perf_counter()
                rows = policy.get_action_rows(observation, instruction, keys=keys)
            elapsed = time.perf_counter() - started
            chunk = wire.chunk_to_msg(
                rows, run_id=run_id, obs_step=msg.step, inference_time_s=elapsed, msg=out
            )
            _stamp(chunk.header.stamp, self._now_ns())
            return chunk

    def _on_get_chunk(
        self, request: GetActionChunk.Request, response: GetActionChunk.Response
    ) -> GetActionChunk.Response:
        if not self.ready:
            response.ok = False
            response.message = f"policy server not ready: {self.detail}"
            return response
        try:
            response.chunk = self.infer(request.observation)
        except Exception as exc:  # noqa: BLE001 - answered, not raised into the executor
            response.ok = False
            response.message = f"inference failed: {type(exc).__name__}: {exc}"
            return response
        self.chunks_served += 1
        response.ok = True
        response.message = (
            f"{response.chunk.horizon} actions in {response.chunk.inference_time_s * 1e3:.2f} ms"
        )
        return response

    def destroy_node(self) -> None:
        self._stopping = True
        self._observations.close()  # wakes the inference thread
        self._worker.join(timeout=5)
        self._rx_node.destroy_node()
        if self.served_endpoint is not None:
            self.served_endpoint.close()
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()
        self._clock_watch.unregister()
        super().destroy_node()


# --- served mode ------------------------------------------------------------------------------

COMMAND_INTERFACES = ("position", "velocity")
#: Observation.arrays the harness uses for what belongs to the previous action.
SERVED_ARRAYS = ("served.reward", "served.terminated", "served.truncated", "served.sim_time_s")
#: Episode status changes: reliable, deep enough for a burst of episodes.
EPISODE_STATUS_QOS = EVENT_QOS


def _declare_served(node: Node) -> dict[str, Any]:
    """Declare and validate served mode's parameters; the limits file is loaded here."""
    from robokernel_ros.safety.limits import load_limits_file

    p: dict[str, Any] = {
        "limits_file": declare(
            node, "limits_file", "", "served: joint limits (ros2_control joint_limits YAML)"
        ),
        "command_interface": declare(
            node,
            "command_interface",
            "position",
            "served: what actions command (position: absolute targets; velocity)",
            choices=COMMAND_INTERFACES,
        ),
        "control_hz": declare(
            node,
            "control_hz",
            50.0,
            "served: the harness's control rate (Hz; the rate guards' step time)",
            min_value=0.0,
            min_exclusive=True,
            max_value=10000.0,
        ),
        "trace_dir": declare(
            node, "trace_dir", "runs", "served: folder of run directories and bags ('' = none)"
        ),
        "bag": declare(node, "bag", True, "served: mirror each episode to <run_dir>/bag"),
        "clip_tolerance": declare(
            node,
            "clip_tolerance",
            0.05,
            "served: a value outside its limits by at most this x range is clipped, else held",
            min_value=0.0,
            max_value=1.0,
        ),
        "execution_steps": declare(
            node,
            "execution_steps",
            0,
            "served: actions served from each chunk (0 = the whole chunk)",
            min_value=0,
            max_value=100000,
        ),
        "image_every": declare(
            node,
            "image_every",
            1,
            "served: record camera images every N steps (0 = none)",
            min_value=0,
            max_value=100000,
        ),
        "start_timeout_s": declare(
            node,
            "start_timeout_s",
            2.0,
            "served: how long a step waits for its episode_start",
            min_value=0.0,
            max_value=60.0,
        ),
    }
    if not p["limits_file"]:
        raise ParameterError(
            "limits_file",
            "",
            "served mode needs the joint limits the shield enforces (a ros2_control "
            "joint_limits YAML)",
        )
    try:
        p["limits"] = load_limits_file(p["limits_file"])
    except ValueError as exc:
        raise ParameterError("limits_file", p["limits_file"], str(exc)) from exc
    return p


class _Refused(ValueError):
    """A served-mode request outside its domain (the message names field, value, domain)."""


def _payload(field: str, text: str, required: tuple[str, ...], known: dict[str, Any]) -> dict:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _Refused(f"{field}={text!r}: must be a JSON object ({exc})") from exc
    if not isinstance(data, dict):
        raise _Refused(f"{field}={text!r}: must be a JSON object")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _Refused(f"{field}: unknown key(s) {unknown}; known: {sorted(known)}")
    for key in required:
        if not isinstance(data.get(key), str) or not data[key]:
            raise _Refused(f"{field}[{key!r}]={data.get(key)!r}: must be a non-empty string")
    for key, kind in known.items():
        value = data.get(key)
        if value is None:
            continue
        ok = (
            isinstance(value, bool)
            if kind is bool
            else (
                isinstance(value, int | float) and not isinstance(value, bool)
                if kind is float
                else isinstance(value, kind) and not isinstance(value, bool)
            )
        )
        if not ok:
            raise _Refused(f"{field}[{key!r}]={value!r}: must be {kind.__name__} or null")
    return data


def _episode_id_of(text: str) -> str:
    """The episode_id of a refused payload, where one can be read ('' otherwise)."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return ""
    value = data.get("episode_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else ""


class ServedEndpoint:
    """Served mode's ROS names around one kernel ServedSession (see the module docstring).

    Every session call runs under one condition lock: the session is one episode at a
    time. Steps and episode start/end sit in different callback groups so that a step
    can wait for its episode_start.
    """

    def __init__(self, server: PolicyServer, params: dict[str, Any]) -> None:
        from robokernel_ros.kernel import EnvSpec
        from robokernel_ros.safety.limits import MissingLimitsError, merge_limits, shield_limits

        self.server = server
        self.params = params
        self.action_keys = list(server.action_keys)
        try:
            limits = merge_limits(self.action_keys, [("limits_file", params["limits"])])
        except MissingLimitsError as exc:
            raise ParameterError("action_keys", self.action_keys, str(exc)) from exc
        action_limits, safety = shield_limits(limits, params["command_interface"])
        safety["clip_tolerance"] = params["clip_tolerance"]
        self.safety = safety
        self.env_spec = EnvSpec(
            action_keys=tuple(self.action_keys),
            control="absolute" if params["command_interface"] == "position" else "velocity",
            control_hz=float(params["control_hz"]),
            action_limits=action_limits,
        )
        self.session: Any = None  # built once the policy is loaded
        self._mirror: Any = None
        self._cond = threading.Condition()
        self._episode: str | None = None  # the active episode_id
        self._closed: dict[str, str] = {}  # ended episode_id -> how it ended (ids are not reused)
        self._refused: dict[str, str] = {}  # episode_id -> why its start was refused (retryable)
        self._estop_input = False  # the last estop value
        self._estop = Latch()  # pressed since the last clear_fault (before a session too)
        self._next_step = 0  # the step index the active episode expects next
        self._run_id = ""  # the active episode's run directory name (its episode.start)

        self._status_pub = server.create_publisher(
            String, "served/episode_status", EPISODE_STATUS_QOS
        )
        self._chunk_pub = server.create_publisher(ActionChunk, "served/action_chunk", CHUNK_QOS)
        self._events_pub = server.create_publisher(KernelEvent, "served/events", EVENTS_QOS)
        episodes = MutuallyExclusiveCallbackGroup()
        server.create_subscription(
            String, "served/episode_start", self._on_start, EVENT_QOS, callback_group=episodes
        )
        server.create_subscription(
            String, "served/episode_end", self._on_end, EVENT_QOS, callback_group=episodes
        )
        server.create_service(
            GetActionChunk,
            "served/step",
            self._on_step,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        operator = MutuallyExclusiveCallbackGroup()
        server.create_subscription(
            Bool, "estop", self._on_estop, ESTOP_QOS, callback_group=operator
        )
        server.create_service(
            Trigger, "served/clear_fault", self._on_clear_fault, callback_group=operator
        )

    # the session -----------------------------------------------------------------------------

    def _ensure_session(self) -> Any:
        """The ServedSession around the loaded policy (built at the first episode)."""
        if self.session is not None:
            return self.session
        from robokernel_ros.kernel import ServedSession, Timing, TraceStore
        from robokernel_ros.policies.base import PolicyAgent

        p = self.params
        trace = TraceStore(p["trace_dir"]) if p["trace_dir"] else None
        session = ServedSession(
            self.env_spec,
            PolicyAgent(self.server.policy),
            trace=trace,
            safety=self.safety,
            image_every=int(p["image_every"]),
            timing=Timing(execution_steps=int(p["execution_steps"]) or None),
        )
        session.bus.subscribe(self._on_event)
        if trace is not None and p["bag"]:
            from robokernel_ros.bag import EpisodeBagMirror

            self._mirror = EpisodeBagMirror(p["trace_dir"])
            self._mirror.attach(session.bus)
        if self._estop.latched:
            session.operator.estop(self._estop.by)
        self.session = session
        return session

    def _on_event(self, event: Any) -> None:
        if event.kind == "episode.start":
            self._run_id = event.run_id
        self._events_pub.publish(kernel_event_msg(event))

    def _publish(self, episode_id: str, state: str, message: str, **fields: Any) -> None:
        payload = {"episode_id": episode_id, "state": state, "message": message, **fields}
        self._status_pub.publish(String(data=json.dumps(payload, default=str)))

    def _end(self, episode_id: str, **kwargs: Any) -> dict[str, Any]:
        """End the active episode (lock held) and publish its record."""
        record = self.session.end(**kwargs)
        self._episode = None
        self._closed[episode_id] = f"episode {episode_id!r} has ended ({record.outcome.value})"
        bag = None
        if record.trace_path is not None and self._mirror is not None:
            bag = str(Path(record.trace_path) / "bag")
        fields = {
            "run_id": record.run_id,
            "outcome": record.outcome.value,
            "steps": record.steps,
            "holds": record.holds,
            "chunks": record.chunks,
            "safety_interventions": record.safety_interventions,
            "total_reward": record.total_reward,
            "trace_path": str(record.trace_path) if record.trace_path is not None else None,
            "bag_path": bag,
        }
        self._publish(episode_id, "ended", record.status, **fields)
        self._cond.notify_all()
        return fields

    # callbacks -------------------------------------------------------------------------------

    def _on_start(self, msg: String) -> None:
        episode_id = ""
        try:
            data = _payload(
                "episode_start",
                msg.data,
                ("episode_id",),
                {"episode_id": str, "instruction": str, "seed": int, "meta": dict},
            )
            episode_id = data["episode_id"]
            if not self.server.ready:
                raise _Refused(f"policy server not ready: {self.server.detail}")
            with self._cond:
                session = self._ensure_session()
                if episode_id == self._episode or episode_id in self._closed:
                    raise _Refused(
                        f"episode_start['episode_id']={episode_id!r}: already used; "
                        "every episode needs a new id"
                    )
                if self._episode is not None:
                    self._end(self._episode, outcome="stopped")
                if session.operator.estopped:
                    raise _Refused(
                        "the e-stop is latched: release it (estop false) and call "
                        "served/clear_fault first"
                    )
                meta = {**dict(data.get("meta") or {}), "episode_id": episode_id}
                session.reset(
                    None,
                    seed=data.get("seed"),
                    instruction=data.get("instruction") or "",
                    meta=meta,
                )
                self._episode = episode_id
                self._refused.pop(episode_id, None)
                self._next_step = 0
                run_id = self._run_id
                self._cond.notify_all()
            trace_dir = self.params["trace_dir"]
            self._publish(
                episode_id,
                "started",
                "episode started",
                run_id=run_id,
                trace_path=str(Path(trace_dir) / run_id) if trace_dir and run_id else None,
            )
        except (_Refused, ValueError, RuntimeError) as exc:
            text = str(exc)
            episode_id = episode_id or _episode_id_of(msg.data)
            self.server.get_logger().error(f"served: episode_start refused: {text}")
            if episode_id:
                with self._cond:
                    self._refused[episode_id] = f"episode {episode_id!r} was refused: {text}"
                    self._cond.notify_all()
            self._publish(episode_id, "refused", text)

    def _on_end(self, msg: String) -> None:
        episode_id = ""
        try:
            data = _payload(
                "episode_end",
                msg.data,
                ("episode_id",),
                {
                    "episode_id": str,
                    "success": bool,
                    "outcome": str,
                    "reward": float,
                    "terminated": bool,
                    "truncated": bool,
                },
            )
            episode_id = data["episode_id"]
            with self._cond:
                if episode_id != self._episode:
                    raise _Refused(
                        f"episode_end['episode_id']={episode_id!r}: not the active episode "
                        f"({self._episode!r})"
                    )
                self._end(
                    episode_id,
                    success=data.get("success"),
                    outcome=data.get("outcome"),
                    reward=float(data.get("reward") or 0.0),
                    terminated=bool(data.get("terminated")),
                    truncated=bool(data.get("truncated")),
                )
        except (_Refused, ValueError, RuntimeError) as exc:
            self.server.get_logger().error(f"served: episode_end refused: {exc}")
            self._publish(episode_id or _episode_id_of(msg.data), "refused", str(exc))

    def _on_step(
        self, request: GetActionChunk.Request, response: GetActionChunk.Response
    ) -> GetActionChunk.Response:
        msg = request.observation
        try:
            response.chunk = self.step(msg)
        except (_Refused, ValueError, RuntimeError) as exc:
            response.ok = False
            response.message = str(exc)
            return response
        response.ok = True
        response.message = f"step {msg.step} of episode {msg.run_id!r}"
        return response

    def step_topic(self, msg: Observation) -> None:
        """A step over topics: the shielded action on served/action_chunk, or the refusal
        on served/episode_status (state "step_refused")."""
        try:
            chunk = self.step(msg)
        except Exception as exc:  # noqa: BLE001 - answered, and the inference thread lives on
            text = (
                str(exc)
                if isinstance(exc, _Refused | ValueError | RuntimeError)
                else (f"{type(exc).__name__}: {exc}")
            )
            self.server.get_logger().error(f"served: step {msg.step} refused: {text}")
            self._publish(msg.run_id, "step_refused", text, step=int(msg.step))
            return
        self._chunk_pub.publish(chunk)

    def step(self, msg: Observation) -> ActionChunk:
        """One observation of the active episode in, its shielded action out (horizon 1)."""
        episode_id = msg.run_id
        timeout = float(self.params["start_timeout_s"])
        with self._cond:
            if not self._cond.wait_for(
                lambda: (
                    episode_id == self._episode
                    or episode_id in self._closed
                    or episode_id in self._refused
                ),
                timeout,
            ):
                raise _Refused(
                    f"observation.run_id={episode_id!r}: no such episode (active: "
                    f'{self._episode!r}); publish {{"episode_id": {episode_id!r}}} on '
                    f"{self.server.resolve_topic_name('served/episode_start')} first"
                )
            if episode_id != self._episode:
                raise _Refused(self._closed.get(episode_id) or self._refused[episode_id])
            session = self.session
            expected = self._next_step
            if msg.step != expected:
                raise _Refused(
                    f"observation.step={msg.step}: expected {expected} (one call per step, "
                    "counting from 0 in each episode)"
                )
            observation = wire.msg_to_observation(msg)
            extra = {k: observation.pop(k) for k in SERVED_ARRAYS if k in observation}
            values = {k.split(".", 1)[1]: _scalar(k, v) for k, v in extra.items()}
            info = {"sim_time_s": values["sim_time_s"]} if "sim_time_s" in values else None
            started = time.perf_counter()
            action = session.step(
                observation,
                reward=values.get("reward", 0.0),
                terminated=bool(values.get("terminated", 0.0)),
                truncated=bool(values.get("truncated", 0.0)),
                info=info,
            )
            elapsed = time.perf_counter() - started
            self._next_step = expected + 1
        chunk = wire.chunk_to_msg(
            [action],
            run_id=episode_id,
            obs_step=msg.step,
            inference_time_s=elapsed,
            keys=self.action_keys,
        )
        chunk.header.stamp = self.server.get_clock().now().to_msg()
        return chunk

    def _on_estop(self, msg: Bool) -> None:
        with self._cond:
            self._estop_input = bool(msg.data)
            if msg.data:
                self._estop.latch("estop topic: pressed")
                if self.session is not None:
                    self.session.operator.estop(self._estop.by)
        if msg.data:
            self.server.get_logger().warn("served: e-stop latched; steps answer the hold action")

    def _on_clear_fault(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        with self._cond:
            if self._estop_input:
                response.success = False
                response.message = (
                    "refused: the e-stop input is still pressed (last estop value true); "
                    "release it first"
                )
                return response
            self._estop.clear()
            if self.session is not None:
                self.session.operator.clear_fault()
        response.success = True
        response.message = "e-stop cleared on the policy server"
        return response

    def close(self) -> None:
        """End an unfinished episode as stopped (its trace and bag stay whole)."""
        with self._cond:
            if self._episode is not None and self.session is not None:
                try:
                    self._end(self._episode, outcome="stopped")
                except Exception as exc:  # noqa: BLE001 - best effort at shutdown
                    self.server.get_logger().error(f"served: ending the episode failed: {exc}")
            if self._mirror is not None:
                self._mirror.close()


def _follow_clock(server: PolicyServer | None) -> None:
    """Point server._now_ns at what its clock reads now: the system clock while ROS time
    is off (what rcl reads then too), else the clock itself."""
    if server is None:
        return
    clock = server.get_clock()
    if clock.clock_type == ClockType.ROS_TIME and not clock.ros_time_is_active:
        server._now_ns = time.time_ns
    else:
        server._now_ns = lambda: clock.now().nanoseconds


def _stamp(stamp: Any, nanoseconds: int) -> None:
    """Set a builtin_interfaces/Time in place (cheaper than Time.to_msg()'s new message)."""
    stamp.sec, stamp.nanosec = divmod(nanoseconds, 1_000_000_000)


def _scalar(name: str, value: Any) -> float:
    import numpy as np

    flat = np.asarray(value, dtype=float).reshape(-1)
    if flat.size != 1 or not math.isfinite(float(flat[0])):
        raise _Refused(f"observation.arrays[{name!r}]={flat.tolist()!r}: must be one finite number")
    return float(flat[0])


def main(args: list[str] | None = None) -> int:
    def executor_for(node: PolicyServer) -> Any:
        # Observations never pass the executor (the inference thread takes them), so in
        # driven mode it serves the heartbeat and get_action_chunk: one thread (rclpy's
        # MultiThreadedExecutor adds tens of milliseconds per call in this build; the
        # EventsExecutor measured no better here). Served mode needs several: a
        # served/step call may wait for its episode's start message.
        if node.served:
            return MultiThreadedExecutor(num_threads=4)
        return SingleThreadedExecutor()

    return run_node(PolicyServer, args=args, executor=executor_for)


if __name__ == "__main__":
    import sys

    sys.exit(main())
