"""served_endpoint node: the policy server in served mode, for an external harness that
owns the loop (a Gazebo or Isaac simulation, another team's controller).

    python -m robokernel_ros.nodes.served_endpoint --ros-args -r __ns:=/robokernel \\
        --params-file config/served.yaml -p limits_file:=config/joint_limits_so101.yaml

(or `policy_server` with `served:=true`, which builds this node). The policy, its
parameters and the heartbeat (`~/status`, the node named `policy_server` by default)
are ros.policy_host's, as the streaming policy_server's; the policy is wrapped in the
kernel's ServedSession: the same agent, SafetyShield, events, trace and bag as the
runner's driven loop, one step at a time. The driven names (observation, action_chunk,
get_action_chunk) are not offered (one policy, one episode stream); instead, relative
to the namespace:
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

import json
import threading
import time
from pathlib import Path
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from robokernel_interfaces.msg import ActionChunk, KernelEvent, Observation
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.kernel import EnvSpec
from robokernel_ros.kernel.operator import Latch
from robokernel_ros.ros import wire
from robokernel_ros.ros.node import exit_main, run_multithreaded
from robokernel_ros.ros.params import ParameterError, declare
from robokernel_ros.ros.policy_host import PolicyHost
from robokernel_ros.ros.qos import (
    CHUNK_QOS,
    EPISODE_STATUS_QOS,
    ESTOP_QOS,
    EVENT_QOS,
    EVENTS_QOS,
    SERVED_OBSERVATION_QOS,
)
from robokernel_ros.ros.served_wire import (
    END_FIELDS,
    SERVED_ARRAYS,
    START_FIELDS,
    Refused,
    episode_id_of,
    parse_payload,
    scalar,
)
from robokernel_ros.ros.wire import kernel_event_msg
from robokernel_ros.safety.limits import (
    MissingLimitsError,
    load_limits_file,
    merge_limits,
    shield_limits,
)

COMMAND_INTERFACES = ("position", "velocity")
SERVED_DESCRIPTION = "served mode (this node); false is the policy_server node's driven mode"


def _declare_served(node: Node) -> dict[str, Any]:
    """Declare and validate served mode's parameters; the limits file is loaded here."""
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


class ServedEndpoint(PolicyHost):
    """Served mode's ROS names around one kernel ServedSession (see the module docstring).

    Every session call runs under one condition lock: the session is one episode at a
    time. Steps and episode start/end sit in different callback groups so that a step
    can wait for its episode_start.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not declare(self, "served", True, SERVED_DESCRIPTION):
            raise ParameterError(
                "served", False, "this node is served mode; driven mode is the policy_server node"
            )
        self.params = params = _declare_served(self)
        if not self.action_keys:
            raise ParameterError(
                "action_keys", self.action_keys, "served mode needs the env's action keys"
            )
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

        self._episode_status_pub = self.create_publisher(
            String, "served/episode_status", EPISODE_STATUS_QOS
        )
        self._chunk_pub = self.create_publisher(ActionChunk, "served/action_chunk", CHUNK_QOS)
        self._events_pub = self.create_publisher(KernelEvent, "served/events", EVENTS_QOS)
        episodes = MutuallyExclusiveCallbackGroup()
        self.create_subscription(
            String, "served/episode_start", self._on_start, EVENT_QOS, callback_group=episodes
        )
        self.create_subscription(
            String, "served/episode_end", self._on_end, EVENT_QOS, callback_group=episodes
        )
        self.create_service(
            GetActionChunk,
            "served/step",
            self._on_step,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        operator = MutuallyExclusiveCallbackGroup()
        self.create_subscription(Bool, "estop", self._on_estop, ESTOP_QOS, callback_group=operator)
        self.create_service(
            Trigger, "served/clear_fault", self._on_clear_fault, callback_group=operator
        )
        self.start_hosting("served/observation", SERVED_OBSERVATION_QOS)

    def on_observations(self, messages: list[Observation]) -> None:
        """Every observation is a step, in order."""
        for msg in messages:
            self.step_topic(msg)

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
            PolicyAgent(self.policy),
            trace=trace,
            safety=self.safety,
            image_every=int(p["image_every"]),
            timing=Timing(execution_steps=int(p["execution_steps"]) or None),
        )
        session.bus.subscribe(self._on_event)
        if trace is not None and p["bag"]:
            from robokernel_ros.recording import EpisodeBagMirror

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
        self._episode_status_pub.publish(String(data=json.dumps(payload, default=str)))

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
            data = parse_payload(
                "episode_start",
                msg.data,
                ("episode_id",),
                START_FIELDS,
            )
            episode_id = data["episode_id"]
            if not self.ready:
                raise Refused(f"policy server not ready: {self.detail}")
            with self._cond:
                session = self._ensure_session()
                if episode_id == self._episode or episode_id in self._closed:
                    raise Refused(
                        f"episode_start['episode_id']={episode_id!r}: already used; "
                        "every episode needs a new id"
                    )
                if self._episode is not None:
                    self._end(self._episode, outcome="stopped")
                if session.operator.estopped:
                    raise Refused(
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
        except (Refused, ValueError, RuntimeError) as exc:
            text = str(exc)
            episode_id = episode_id or episode_id_of(msg.data)
            self.get_logger().error(f"served: episode_start refused: {text}")
            if episode_id:
                with self._cond:
                    self._refused[episode_id] = f"episode {episode_id!r} was refused: {text}"
                    self._cond.notify_all()
            self._publish(episode_id, "refused", text)

    def _on_end(self, msg: String) -> None:
        episode_id = ""
        try:
            data = parse_payload(
                "episode_end",
                msg.data,
                ("episode_id",),
                END_FIELDS,
            )
            episode_id = data["episode_id"]
            with self._cond:
                if episode_id != self._episode:
                    raise Refused(
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
        except (Refused, ValueError, RuntimeError) as exc:
            self.get_logger().error(f"served: episode_end refused: {exc}")
            self._publish(episode_id or episode_id_of(msg.data), "refused", str(exc))

    def _on_step(
        self, request: GetActionChunk.Request, response: GetActionChunk.Response
    ) -> GetActionChunk.Response:
        msg = request.observation
        try:
            response.chunk = self.step(msg)
        except (Refused, ValueError, RuntimeError) as exc:
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
                if isinstance(exc, Refused | ValueError | RuntimeError)
                else (f"{type(exc).__name__}: {exc}")
            )
            self.get_logger().error(f"served: step {msg.step} refused: {text}")
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
                raise Refused(
                    f"observation.run_id={episode_id!r}: no such episode (active: "
                    f'{self._episode!r}); publish {{"episode_id": {episode_id!r}}} on '
                    f"{self.resolve_topic_name('served/episode_start')} first"
                )
            if episode_id != self._episode:
                raise Refused(self._closed.get(episode_id) or self._refused[episode_id])
            session = self.session
            expected = self._next_step
            if msg.step != expected:
                raise Refused(
                    f"observation.step={msg.step}: expected {expected} (one call per step, "
                    "counting from 0 in each episode)"
                )
            observation = wire.msg_to_observation(msg)
            extra = {k: observation.pop(k) for k in SERVED_ARRAYS if k in observation}
            values = {k.split(".", 1)[1]: scalar(k, v) for k, v in extra.items()}
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
        chunk.header.stamp = self.get_clock().now().to_msg()
        return chunk

    def _on_estop(self, msg: Bool) -> None:
        with self._cond:
            self._estop_input = bool(msg.data)
            if msg.data:
                self._estop.latch("estop topic: pressed")
                if self.session is not None:
                    self.session.operator.estop(self._estop.by)
        if msg.data:
            self.get_logger().warning("served: e-stop latched; steps answer the hold action")

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

    def destroy_node(self) -> None:
        self.stop_hosting()
        self._end_unfinished()
        super().destroy_node()

    def _end_unfinished(self) -> None:
        """End an unfinished episode as stopped (its trace and bag stay whole)."""
        with self._cond:
            if self._episode is not None and self.session is not None:
                try:
                    self._end(self._episode, outcome="stopped")
                except Exception as exc:  # noqa: BLE001 - best effort at shutdown
                    self.get_logger().error(f"served: ending the episode failed: {exc}")
            if self._mirror is not None:
                self._mirror.close()


def main(args: list[str] | None = None) -> int:
    # Several threads: a served/step call may wait for its episode's start message.
    return run_multithreaded(ServedEndpoint, args=args, threads=4)


if __name__ == "__main__":
    exit_main(main)
