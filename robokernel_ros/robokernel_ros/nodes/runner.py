"""runner node: the rollout API and the kernel's episode loop as ROS 2 services and actions.

    python -m robokernel_ros.nodes.runner --ros-args -r __ns:=/robokernel \\
        --params-file config/runner_sim_so101.yaml -p autostart:=true

A thin adapter: every service request becomes one call of the rollout API's facade
(`robokernel_ros.rollout`; the conversion is `robokernel_ros.ros.requests`), whose typed
result becomes the response (`ok` = status was "success", `message` = its text,
`report_json` = its report, the one place it becomes JSON). Refusals are the facade's own, plus the ROS-only ones
checked here before anything starts (a field outside its wire domain, JSON that is not
an object, the runner not active, a latched e-stop, a policy server that is not active).

Lifecycle (rclpy.lifecycle, as the safety_shield): configure validates the parameters
and loads the scene (env=sim: the MuJoCo workcell with its robot) or the robot binding
(env=ros: RosRobotEnv's readers and command publisher), its load time on the log and on
`~/state`; a configuration it refuses leaves it unconfigured, naming the parameter.
activate serves the long calls; deactivate stops every rollout with hold (the running
episode ends "stopped" with stopped_reason "deactivated", its trace and bag complete,
before the transition returns; the call it cut short answers ok false, saying so, with
the report of what ran) and refuses new ones; cleanup frees the scene. Every
service and action exists in every state: a long call while not active is refused
naming the state. The operator channel (estop, stop, clear_fault, verdict, reset_done),
stop_policy and list_policies_running answer in every state; `~/state` (std_msgs/String,
a JSON object, transient_local: lifecycle state, env, robot_name, configure_s, detail)
is published on every transition. With `autostart:=true` the node configures and
activates itself (for demos and tests; a configuration it refuses then ends the process
with status 2); the launch files drive the transitions instead, in order.

With env=ros the runner learns what its safety shield(s) did with each episode's
commands (ros.shield_ledger: the shields' ~/state counts of this runner's own commands,
matched to the episode) and puts them in the episode's result (`shield`), its trace and
its bag (a `shield.report` event before episode.end, once each shield confirmed the
episode's commands; read by `robokernel score`) and `robokernel ros`'s output; an
episode whose commands a shield refused, or stopped forwarding, or whose robot did not
follow them (`follow_tolerance` for `follow_timeout_s`), ends `error` with the reason
(ros.checked_env); a start while a shield does not forward is refused naming it and
why (inactive, waiting, latched). A call with an e-stopped episode answers ok false.

A start with the `remote` provider first asks the policy server's lifecycle state
(`<ns>/policy_server/get_state`, ros.lifecycle): it starts only while the server says
it is active, and is refused naming the server and its state (or that it did not
answer within `server_ready_timeout_s`).

Names (relative to the node's namespace, `/robokernel` in the launch files):
  lifecycle ~/get_state, ~/change_state, ~/transition_event, ... (rclpy.lifecycle);
            ~/state (std_msgs/String JSON)
  services  run_policy, start_policy, stop_policy, list_policies_running, eval_policy,
            evaluate_benchmark, replay_episode, run_multi_policy   (robokernel_interfaces)
            stop, clear_fault, reset_done (std_srvs/Trigger), verdict (SubmitVerdict)
            pause, correct, resume (std_srvs/Trigger: the takeover, ros.takeover)
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
            events (KernelEvent, every kernel event live, reliable depth 100),
            the contract's takeover topic (a pedal or joystick) and teleop stream
            (env=ros with a contract_file naming them: ros.takeover, ros.teleop)
The operator channel (estop, stop, clear_fault, reset_done, verdict) is
robokernel_ros.ros.operator's; the request conversion robokernel_ros.ros.requests'.

Environment (`env` parameter): "sim" hosts the MuJoCo workcell in-process with the
robot `robot` (a packaged model name or an MJCF path) named `robot_name`; "ros" drives
a robot through ROS (`RosRobotEnv`: `joints`, `joint_states_topic`, camera topics,
`command_topic` = the shield's input; or a topic contract, `contract_file`, with one
shield per controller, `shields`: ros.workcell_contract), in the kernel's realtime
wall-clock mode.

Thread model. The episode loop of a call owns its time: each long call (run_policy,
eval_policy, ...) runs the rollout in a thread of its own ("runner-control"), while the
service callback that received it waits (without the GIL) for its answer. With env=ros
that loop takes the joint states and camera frames itself from rcl wait sets
(`RosRobotEnv`: DirectReaders on a node no executor spins), publishes its commands
itself and is paced by one clock against absolute deadlines (the env's `Pacer`), its
episode loop under SCHED_FIFO at `control_priority` (kernel.scheduling); the
remote policy's chunks are taken the same way. No subscription of this node runs at the
robot's rate, so the executor only wakes for service calls and the operator channel:
a MultiThreadedExecutor of 4 threads (a waiting long call, a refused second one, a quick
call, and clear_fault's wait for the shield's answer) keeps stop_policy,
list_policies_running and the operator channel answering during a run.
With env=ros, run_policy, start_policy and eval_policy are paced (fast_mode false by
default: a robot's time is the wall clock) at the robot's rate (control_frequency
defaults to the node's parameter); anything else stepping the robot (a replay) is held
to that rate by the env's pacer.

Why one module of ~800 lines: one lifecycle node, whose services and actions are each a
few lines over the rollout facade; what would split off has (ros.requests, ros.actions,
ros.operator, ros.transport's ServerWatch, ros.ros_env).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String

from robokernel_interfaces.msg import KernelEvent
from robokernel_interfaces.srv import (
    EvalPolicy,
    EvaluateBenchmark,
    ListPoliciesRunning,
    ReplayEpisode,
    RunMultiPolicy,
    RunPolicy,
    StartPolicy,
    StopPolicy,
)
from robokernel_ros.kernel import EpisodeOutcome
from robokernel_ros.kernel.events import EPISODE_END
from robokernel_ros.ros import requests
from robokernel_ros.ros.actions import ACTION_TYPES, RunnerActions
from robokernel_ros.ros.lifecycle import ACTIVE, LifecyclePeer, release_state_machine
from robokernel_ros.ros.node import freeze_heap, run_multithreaded
from robokernel_ros.ros.operator import RunnerOperator
from robokernel_ros.ros.params import ParameterError, declare_params
from robokernel_ros.ros.qos import EVENTS_QOS, STATUS_QOS
from robokernel_ros.ros.remote_policy import RemotePolicy
from robokernel_ros.ros.requests import Refused
from robokernel_ros.ros.runner_params import RunnerParams, declare_estop_required
from robokernel_ros.ros.shield_ledger import ShieldLedger, ShieldLink, shield_sink
from robokernel_ros.ros.takeover import RunnerTakeover
from robokernel_ros.ros.transport import ServerWatch, close_private_link
from robokernel_ros.ros.wire import join, kernel_event_msg

if TYPE_CHECKING:
    from robokernel_ros.rollout import CallResult, ListResult, SimWorkcell

#: How long deactivate waits for the rollouts it stopped to end (they end at their next
#: step boundary; a hold is sent then).
_DEACTIVATE_WAIT_S = 15.0


class RunnerNode(LifecycleNode):
    """See the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("runner", **kwargs)
        self._watches: dict[str, ServerWatch] = {}  # policy servers' heartbeats, by namespace
        self._peers: dict[str, LifecyclePeer] = {}  # policy servers' lifecycle, by namespace
        self._watches_lock = threading.Lock()
        # Lifecycle: the scene exists from configure to cleanup; calls are served while
        # active. `_calls` counts the long calls in flight (deactivate waits for them).
        self.cell: SimWorkcell | None = None
        self.live_view: Any = None
        self.ros_env: Any = None
        self.shield_ledger: ShieldLedger | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._active = False
        self._calls = 0
        self._calls_cond = threading.Condition()
        self._stops = 0  # how many times the lifecycle stopped running calls
        self._stop_reason = ""
        self._configure_error: Exception | None = None
        self._configure_s: float | None = None
        self._detail = "unconfigured"
        self.params = declare_params(self, RunnerParams)
        estop_required = declare_estop_required(self, self.params)
        self.joints = list(self.params.joints)  # the robot env's, once configured
        self._events_pub = self.create_publisher(KernelEvent, "events", EVENTS_QOS)
        self._state_pub = self.create_publisher(String, "~/state", STATUS_QOS)
        self._create_services(estop_required, self.params.estop_timeout_s)
        self._publish_state()
        self.get_logger().info(
            "runner up, unconfigured: configure and activate it (~/change_state), or "
            "autostart:=true"
        )

    def _create_services(self, estop_required: bool, estop_timeout_s: float) -> None:
        """Every name of the node, in every lifecycle state (a call answers by the state)."""
        long_calls = ReentrantCallbackGroup()  # each long call holds one executor thread
        quick = ReentrantCallbackGroup()
        handlers = {name: getattr(self, f"_on_{name}") for name in _LONG_SERVICES}
        for name, srv_type in _LONG_SERVICES.items():
            self.create_service(srv_type, name, handlers[name], callback_group=long_calls)
        # The same long calls as actions (goal, feedback, cancel: robokernel_ros.ros.actions).
        self._actions = RunnerActions(
            self,
            {name: handlers[name] for name in ACTION_TYPES},
            bus=lambda: getattr(self.cell, "bus", None),
            cancel=lambda: self._interrupt("cancelled"),
            callback_group=long_calls,
        )
        self.create_service(StopPolicy, "stop_policy", self._on_stop_policy, callback_group=quick)
        self.create_service(
            ListPoliciesRunning, "list_policies_running", self._on_list, callback_group=quick
        )
        # The operator channel: the e-stop circuit (node-level, every lifecycle state),
        # stop, clear_fault, reset_done, verdict (robokernel_ros.ros.operator).
        self.operator = RunnerOperator(
            self,
            scene=lambda: self.cell,
            call=self._cell_call,
            required=estop_required,
            timeout_s=estop_timeout_s,
            shield_clear_fault=self.params.shield_clear_fault_service,
            callback_group=quick,
        )
        # The takeover: pause, correct, resume (services; the contract's pedal and teleop
        # source once configured: robokernel_ros.ros.takeover).
        self.takeover = RunnerTakeover(self, call=self._cell_call, callback_group=quick)
        # The remote provider is not hosted on this node: chunks delivered through
        # rclpy's MultiThreadedExecutor (which this node needs for its long service
        # calls) arrive tens of milliseconds late; its private link spins a
        # single-threaded executor of its own.
        self._quick = quick

    # lifecycle -------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        started = time.monotonic()
        try:
            self.params.check()
            self.cell = self._make_workcell()
        except Exception as exc:  # noqa: BLE001 - a refused configuration is answered, not raised
            self._configure_error = exc
            self._free()
            self._detail = f"configure refused: {exc}"
            self.get_logger().error(self._detail)
            self._publish_state("unconfigured")
            return TransitionCallbackReturn.FAILURE
        self._configure_error = None
        # The scene built here (MuJoCo, the robot binding) is never scanned by a collection
        # again, however the node was configured (autostart or a lifecycle manager).
        freeze_heap()
        self._configure_s = time.monotonic() - started
        bus = getattr(self.cell, "bus", None)
        if bus is not None and self.params.publish_events:
            self._unsubscribe = bus.subscribe(self._on_event)
        self.operator.apply_latch(self.cell)  # latched while unconfigured: the scene is too
        what = (
            self.params.robot if self.params.env == "sim" else f"{len(self.joints)} joints over ROS"
        )
        self._detail = (
            f"configured in {self._configure_s:.2f} s: env={self.params.env} ({what}) "
            f"robot_name={self.params.robot_name} trace_dir={self.params.trace_dir or '-'}"
        )
        self.get_logger().info(self._detail)
        self._publish_state("inactive")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._calls_cond:
            self._active = True
        self._detail = f"active: serving the long calls (configured in {self._configure_s:.2f} s)"
        self.get_logger().info(self._detail)
        self._publish_state("active")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        stopped = self._stop_serving("deactivated")
        self._detail = "inactive (lifecycle): long calls are refused until activated"
        self.get_logger().info(self._detail + (f"; {stopped}" if stopped else ""))
        self._publish_state("inactive")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._free()
        self._detail = "unconfigured: the scene was freed (cleanup)"
        self._publish_state("unconfigured")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_serving("interrupted")
        self._free()
        self._detail = "finalized (shutdown)"
        self._publish_state("finalized")
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_serving("interrupted")
        self._free()
        return TransitionCallbackReturn.SUCCESS

    def autostart(self) -> None:
        """Configure and activate (the `autostart` parameter); the configure error when refused."""
        if self.trigger_configure() != TransitionCallbackReturn.SUCCESS:
            raise self._configure_error or RuntimeError("configure failed")
        self.trigger_activate()

    def _stop_serving(self, reason: str) -> str:
        """Refuse new long calls, stop the running ones with hold (`reason` is their
        stopped_reason) and wait until they ended; what was stopped, in words."""
        with self._calls_cond:
            self._active = False
            busy = self._calls
        cell = self.cell
        if cell is None:
            return ""
        running = _running_count(cell)
        if not busy and not running:
            return ""
        with self._calls_cond:
            self._stops += 1
            self._stop_reason = reason
        deadline = time.monotonic() + _DEACTIVATE_WAIT_S
        # Repeated until every call ended: a call that passed its start check just before
        # registers its rollout a moment later, and is stopped as well.
        while True:
            cell.interrupt(reason)
            with self._calls_cond:
                if (self._calls == 0 and _running_count(cell) == 0) or time.monotonic() > deadline:
                    left = self._calls
                    break
                self._calls_cond.wait(0.02)
        if left:
            self.get_logger().error(
                f"{left} long call(s) still running {_DEACTIVATE_WAIT_S:g} s after the stop"
            )
        return f"stopped {max(busy, running)} rollout(s) with hold ({reason})"

    def _interrupt(self, reason: str) -> None:
        if self.cell is not None:
            self.cell.interrupt(reason)

    def _free(self) -> None:
        """Free what configure built (the scene, the robot binding, the live view)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        cell, self.cell = self.cell, None
        if cell is not None:
            try:
                cell.stop_policy("")
            except Exception:  # noqa: BLE001 - best effort: nothing may be running
                pass
            close = getattr(cell, "close", None)
            if callable(close):
                close()
        if self.shield_ledger is not None:
            self.shield_ledger.close()
            self.shield_ledger = None
        if hasattr(self, "takeover"):
            self.takeover.release()
        if self.ros_env is not None:
            self.ros_env.close()
            self.ros_env = None
        if self.live_view is not None:
            self.live_view.close()
            self.live_view = None

    def _lifecycle_label(self) -> str:
        return str(self._state_machine.current_state[1])

    def _publish_state(self, label: str | None = None) -> None:
        """~/state; `label`: the state a transition callback is taking the node to (during
        the callback the state machine says the transition state)."""
        msg = String()
        msg.data = json.dumps(
            {
                "state": label or self._lifecycle_label(),
                "env": self.params.env,
                "robot_name": self.params.robot_name,
                "configure_s": self._configure_s,
                "detail": self._detail,
            }
        )
        self._state_pub.publish(msg)

    # environment ---------------------------------------------------------------------------

    def _make_workcell(self) -> Any:
        from robokernel_ros.rollout import SimWorkcell

        # The workcell mirrors every episode to <trace_dir>/<run_id>/bag itself (bag="mcap",
        # the rollout API's default).
        sinks: list[Any] = []
        trace_dir = self.params.trace_dir or None
        self.live_view = None
        if self.params.foxglove_port >= 0:
            from robokernel_ros.live import LiveView, live_option

            try:
                options = live_option("foxglove_port", self.params.foxglove_port)
            except ValueError as exc:
                raise ParameterError("foxglove_port", self.params.foxglove_port, str(exc)) from None
            self.live_view = LiveView(options, name="robokernel runner").start()
            sinks.append(self.live_view.episode_sink)
            self.get_logger().info(f"live Foxglove view: {self.live_view.url}")
        if self.params.env == "sim":
            cell = SimWorkcell(trace_dir=trace_dir, episode_sinks=sinks)
            out = cell.add_robot(self.params.robot_name, self.params.robot)
            if not out.ok:
                raise ParameterError("robot", self.params.robot, out.text)
            return cell
        from robokernel_ros.ros.ros_env import RosRobotEnv, RosScene
        from robokernel_ros.ros.workcell_contract import runner_env_config

        # The contract_file, or today's parameters as a one-controller contract.
        self.ros_env = RosRobotEnv(self, runner_env_config(self, self.params))
        self.joints = list(self.ros_env.joints)
        if self.params.contract_file:  # clear_fault clears each of its shields
            self.operator.use_shields([s.clear_fault_service for s in self.ros_env.shields])
        # What the shields did with the episode's commands (ros.shield_ledger) and whether
        # the robot followed them (ros.checked_env): in every step's check, the episode's
        # report, trace and score.
        from robokernel_ros.ros.checked_env import CheckedRobotEnv

        links = self._shield_links()
        self.shield_ledger = (
            ShieldLedger(self, links, discovery_s=self.ros_env.discovery_timeout_s)
            if links
            else None
        )
        if self.shield_ledger is not None:
            sinks.append(shield_sink(self.shield_ledger))
        env = CheckedRobotEnv(
            self.ros_env,
            self.shield_ledger,
            follow_tolerance=self.params.follow_tolerance,
            follow_timeout_s=self.params.follow_timeout_s,
            estop=self.operator.latch,
        )
        if self.params.contract_file:  # its teleop source and pedal (the contract was checked)
            from robokernel_ros.contract import load_contract

            self.takeover.configure(
                load_contract(self.params.contract_file), env, self.params.contract_file
            )
        # The rollout API drives any scene with the MuJoCo scene's protocol: the ROS robot
        # is one, so every call (and every refusal) is the same as in simulation.
        return SimWorkcell(
            scene=RosScene(self.params.robot_name, env), trace_dir=trace_dir, episode_sinks=sinks
        )

    def _shield_links(self) -> list[ShieldLink]:
        """The shields the robot env commands through (its `shields`, else the one of
        shield_state_topic and command_topic), keyed by the shield's full node name."""
        env = self.ros_env

        def sent() -> int:
            return int(env.commands_sent)

        routes = getattr(env, "shields", None)
        if routes is not None:
            return [
                ShieldLink(r.name or r.state_topic.rsplit("/", 1)[0], r.state_topic,
                           r.input_topic, sent)
                for r in routes
            ]  # fmt: skip
        if not self.params.shield_state_topic:
            return []
        state = self.resolve_topic_name(self.params.shield_state_topic)
        return [ShieldLink(state.rsplit("/", 1)[0], state, self.params.command_topic, sent)]

    # events ----------------------------------------------------------------------------------

    def _on_event(self, event: Any) -> None:
        self._events_pub.publish(kernel_event_msg(event))
        if event.kind == EPISODE_END and event.data.get("outcome") in _LOGGED_OUTCOMES:
            # In the log too: the operator at the cell sees why an episode ended early.
            data = event.data
            self.get_logger().warning(
                f"episode {event.run_id} ended {data['outcome']} after {data.get('steps')} "
                f"steps: {data.get('status')}"
            )

    # API services ----------------------------------------------------------------------------

    def _answer(
        self,
        response: Any,
        call: Callable[[], CallResult],
        name: str,
        *,
        own_thread: bool = False,
        long: bool = True,
    ) -> Any:
        """Run one facade call and fill ok/status/message/report_json from its result.
        long: a rollout call, refused unless the node is active and counted while it
        runs (deactivate stops and waits for it). own_thread: run it in a control thread
        of its own (its episode loop then competes with no executor thread) and wait."""
        if long:
            with self._calls_cond:
                refused = None if self._active else self._not_active(name)
                if refused is None:
                    self._calls += 1
                stops = self._stops
            if refused is not None:
                self.get_logger().warning(refused)
                return requests.fill_response(response, requests.refusal(refused))
        try:
            out = _in_own_thread(call, f"runner-control-{name}") if own_thread else call()
        except Refused as exc:
            # Said in the log too: the operator at the cell sees why nothing moved.
            self.get_logger().warning(f"{name}: {exc}")
            out = requests.refusal(str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure is answered, never raised into rclpy
            self.get_logger().error(f"{name} failed: {type(exc).__name__}: {exc}")
            out = requests.refusal(f"{name} failed: {type(exc).__name__}: {exc}")
        finally:
            if long:
                with self._calls_cond:
                    self._calls -= 1
                    self._calls_cond.notify_all()
                    stopped = self._stop_reason if self._stops != stops else ""
        if long and stopped:
            # Cut short by the runner's lifecycle: not a success, whatever ran; the report
            # says what ran (its episode ended "stopped", stopped_reason the transition).
            out = out.failed(
                f"{name} stopped by the runner's lifecycle ({stopped}) before it completed"
            )
        elif long:
            out = requests.estopped_is_not_success(name, out)
        return requests.fill_response(response, out)

    def _not_active(self, name: str) -> str:
        return (
            f"refused: {name}: the runner {self.get_fully_qualified_name()} is "
            f"{self._lifecycle_label()} (lifecycle), not active; long calls are served only "
            "while active (~/change_state)"
        )

    def _robot_hz(self) -> float | None:
        return self.params.control_frequency if self.params.env == "ros" else None

    def _guard_start(self, provider: str, config: dict[str, Any]) -> None:
        """ROS-side refusals before the facade is called: latched e-stop, a shield that does
        not forward (inactive, waiting, latched: named with its reason), policy server not
        active."""
        self.operator.check_start()
        if self.shield_ledger is not None:
            self.shield_ledger.check_ready()
        if provider == "remote":
            namespace = config.setdefault(
                "namespace", self.get_namespace() if self.get_namespace() != "/" else ""
            )
            try:
                RemotePolicy.preflight(config)
            except ValueError as exc:
                raise Refused(f"policy_provider='remote': {exc}") from exc
            self._check_server_active(namespace)

    def _check_server_active(self, namespace: str) -> None:
        """Fail closed: the policy server must say it is active (its lifecycle state)."""
        peer, watch = self._server_peer(namespace)
        try:
            peer.wait_for(ACTIVE, self.params.server_ready_timeout_s)
        except RuntimeError as exc:
            # Its heartbeat says why, when it has one (a failed load, what is loading); a
            # server that answered has one, which may take a moment to reach us.
            detail = watch.not_ready_detail(_HEARTBEAT_AGREES_S if peer.answered else 0.0)
            raise Refused(
                f"policy_provider='remote': policy server not ready: {exc}"
                + (f"; its status: {detail}" if detail else "")
            ) from exc

    def _guard_workers(self, kwargs: Mapping[str, object]) -> None:
        """Parallel episodes (extra_json workers > 1) need simulated robots: a ROS robot is one."""
        workers = kwargs.get("workers", 1)
        if self.params.env == "ros" and workers != 1 and "spec" not in kwargs:
            raise Refused(
                f"workers={workers!r}: this runner drives a ROS robot (env=ros), one body that episodes "
                "cannot share; parallel episodes need a simulated robot (env=sim) or evaluate_benchmark"
            )

    def _server_peer(self, namespace: str) -> tuple[LifecyclePeer, ServerWatch]:
        """The lifecycle client and heartbeat of one policy server, kept for the node's
        life: destroying a subscription while the multi-threaded executor spins races its
        wait set (rclpy's "cannot use Destroyable because destruction was requested"
        ended the process)."""
        with self._watches_lock:
            peer = self._peers.get(namespace)
            if peer is None:
                target = join(namespace, "policy_server") or "policy_server"
                peer = self._peers[namespace] = LifecyclePeer(
                    self, target if target.startswith("/") else f"/{target}",
                    callback_group=self._quick,
                )  # fmt: skip
                self._watches[namespace] = ServerWatch(self, namespace)
            return peer, self._watches[namespace]

    def _on_run_policy(self, request: RunPolicy.Request, response: RunPolicy.Response) -> Any:
        def call() -> CallResult:
            kwargs = requests.run_kwargs(request, self.params.robot_name, self._robot_hz())
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            return self.cell.run_policy(**kwargs)

        return self._answer(response, call, "run_policy", own_thread=True)

    def _on_start_policy(self, request: StartPolicy.Request, response: StartPolicy.Response) -> Any:
        def call() -> CallResult:
            kwargs = requests.run_kwargs(request, self.params.robot_name, self._robot_hz())
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            return self.cell.start_policy(**kwargs)

        return self._answer(response, call, "start_policy")

    def _on_eval_policy(self, request: EvalPolicy.Request, response: EvalPolicy.Response) -> Any:
        def call() -> CallResult:
            kwargs = requests.eval_kwargs(request, self.params.robot_name, self._robot_hz())
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            self._guard_workers(kwargs)
            return self.cell.eval_policy(**kwargs)

        return self._answer(response, call, "eval_policy", own_thread=True)

    def _on_evaluate_benchmark(self, request: EvaluateBenchmark.Request, response: Any) -> Any:
        def call() -> CallResult:
            kwargs = requests.benchmark_kwargs(request)
            self._guard_start(kwargs["policy_provider"], kwargs["policy_config"])
            self._guard_workers(kwargs)
            return self.cell.evaluate_benchmark(**kwargs)

        return self._answer(response, call, "evaluate_benchmark", own_thread=True)

    def _on_replay_episode(self, request: ReplayEpisode.Request, response: Any) -> Any:
        def call() -> CallResult:
            kwargs = requests.replay_kwargs(request, self.params.robot_name)
            self._guard_start("", {})
            return self.cell.replay_episode(**kwargs)

        return self._answer(response, call, "replay_episode", own_thread=True)

    def _on_run_multi_policy(self, request: RunMultiPolicy.Request, response: Any) -> Any:
        def call() -> CallResult:
            kwargs = requests.multi_kwargs(request)
            self._guard_start("", {})
            return self.cell.run_multi_policy(**kwargs)

        return self._answer(response, call, "run_multi_policy", own_thread=True)

    def _on_stop_policy(self, request: StopPolicy.Request, response: StopPolicy.Response) -> Any:
        return self._answer(
            response, lambda: self._cell_call("stop_policy", request.robot_name), "stop_policy",
            long=False,
        )  # fmt: skip

    def _on_list(
        self, request: ListPoliciesRunning.Request, response: ListPoliciesRunning.Response
    ) -> Any:
        robots: list[str] = []

        def call() -> ListResult:
            out = self._list()
            robots.extend(out.robots)
            return out

        self._answer(response, call, "list_policies_running", long=False)
        response.robots = robots
        return response

    def _list(self) -> ListResult:
        """The scene's list_policies_running; unconfigured: none (nothing runs)."""
        from robokernel_ros.rollout import ListResult

        if self.cell is None:
            return ListResult.of(
                "success", "no policies running", {"running": [], "robots": [], "count": 0}
            )
        return self.cell.list_policies_running()

    def _cell_call(self, method: str, *args: object) -> CallResult:
        """A quick call of the scene; without one (unconfigured) nothing runs: answered so."""
        if method == "list_policies_running":
            return self._list()
        cell = self.cell
        if cell is None:
            return requests.refusal(
                f"{method}: the runner is {self._lifecycle_label()} (lifecycle): nothing runs"
            )
        return getattr(cell, method)(*args)

    def destroy_node(self) -> None:
        # Also called by rclpy's shutdown on a node whose constructor refused a parameter:
        # what was not built yet is not there to destroy.
        if hasattr(self, "operator"):
            self.operator.destroy()
        self._stop_serving("interrupted")
        self._free()
        close_private_link()
        if hasattr(self, "_actions"):
            self._actions.destroy()
        super().destroy_node()
        release_state_machine(self)


#: The long calls' services (each but start_policy also an action: ros.actions.ACTION_TYPES).
_LONG_SERVICES = {
    "run_policy": RunPolicy,
    "start_policy": StartPolicy,
    "eval_policy": EvalPolicy,
    "evaluate_benchmark": EvaluateBenchmark,
    "replay_episode": ReplayEpisode,
    "run_multi_policy": RunMultiPolicy,
}
#: how long a refusal waits for the heartbeat of a replaced policy server to agree
_HEARTBEAT_AGREES_S = 5.0
#: episode outcomes the runner also logs (an error, a watchdog, an e-stop)
_LOGGED_OUTCOMES = frozenset(
    {EpisodeOutcome.ERROR.value, EpisodeOutcome.WATCHDOG.value, EpisodeOutcome.ESTOPPED.value}
)


def _running_count(cell: SimWorkcell) -> int:
    """How many rollouts the scene has queued or running."""
    return cell.list_policies_running().count


def _in_own_thread(call: Callable[[], CallResult], name: str) -> CallResult:
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
    def started(node: RunnerNode) -> None:
        if node.get_parameter("autostart").value:
            node.autostart()

    return run_multithreaded(RunnerNode, args=args, threads=4, on_started=started)


if __name__ == "__main__":
    import sys

    sys.exit(main())
