"""A Python client of a runner node (the style of nav2_simple_commander, without its plumbing).

    from robokernel_ros.ros.client import WorkcellClient

    with WorkcellClient("/robokernel") as cell:
        result = cell.eval_policy(policy_provider="mock", n_episodes=5, feedback=print)
        print(result.ok, result.message, result.report["success_rate"])

Long calls (run_policy, eval_policy, evaluate_benchmark, replay_episode,
run_multi_policy) go as actions: `feedback` is called with each feedback message (on
the client's spin thread), `cancel()` (from any thread) or a KeyboardInterrupt while
waiting cancels the goal (the robot holds; the result says "cancelled"). A goal whose
runner leaves the graph before it answers (its process died) raises RunnerLost, naming
the runner, once the runner has been gone for _GONE_GRACE_S (DDS notices a killed
process when its lease runs out: up to ~20 s by Fast DDS's default). start_policy,
stop_policy and list_policies_running are services.

Fields are keyword arguments named as in the action or service (`robot_name`,
`n_episodes`, ...). A dict or list for a `<name>_json` field may be given as `<name>`
(`policy_config={...}` for `policy_config_json`); None means unset (-1 or 0 on the
wire, as the interface says); any other keyword goes into `extra_json`. A value of the
wrong type is refused here, naming the field, before anything is sent.

The client owns a private rclpy context, node and single-threaded executor spinning in a
daemon thread, so it works beside (or without) the caller's own rclpy.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rclpy
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from robokernel_interfaces.srv import ListPoliciesRunning, StartPolicy, StopPolicy

from .actions import ACTION_TYPES

#: The quick calls, as services.
_SERVICE_TYPES = {
    "start_policy": StartPolicy,
    "stop_policy": StopPolicy,
    "list_policies_running": ListPoliciesRunning,
}
_HANDSHAKE_TRY_S = 1.0  # one handshake request's wait before it is asked again
_LIVENESS_EVERY_S = 0.5  # how often a goal's wait looks for its runner in the graph
_GONE_GRACE_S = 2.0  # a runner absent this long is gone (its last answer had time to land)

#: Field names whose None means "unset" and the wire value that says so.
_UNSET = {"seed": -1, "n_steps": -1, "rtc_inference_timeout_s": 0.0, "sentry_rotate_s": 0.0}


@dataclass
class CallResult:
    """What a call answered: the envelope's fields, the report parsed."""

    ok: bool
    status: str
    message: str
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_response(cls, response: Any, status: str | None = None) -> CallResult:
        try:
            report = json.loads(response.report_json or "{}")
        except ValueError:
            report = {}
        return cls(bool(response.ok), status or response.status, response.message, report)


def fill_fields(message: Any, fields: Mapping[str, Any]) -> Any:
    """Set an action goal's or request's fields from keyword arguments (module docstring)."""
    names = set(message.get_fields_and_field_types())
    extra: dict[str, Any] = {}
    for name, value in fields.items():
        target = name if name in names else f"{name}_json" if f"{name}_json" in names else None
        if target is None:
            extra[name] = value
            continue
        if value is None and target in _UNSET:
            value = _UNSET[target]
        elif target == "async_rtc" and _is_int(message, target):
            # RunPolicy's tri-state: -1 auto (None), 0 off, 1 on
            value = -1 if value is None else int(value) if isinstance(value, bool) else value
        if target.endswith("_json") and not isinstance(value, str):
            value = json.dumps(value)
        setattr(
            message, target, _checked(name, message.get_fields_and_field_types()[target], value)
        )
    if extra:
        if "extra_json" not in names:
            raise ValueError(f"{sorted(extra)}: not fields of {type(message).__name__}")
        base = json.loads(message.extra_json or "{}")
        message.extra_json = json.dumps({**base, **extra})
    return message


def _is_int(message: Any, name: str) -> bool:
    return message.get_fields_and_field_types()[name].startswith(("int", "uint"))


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _checked(name: str, kind: str, value: Any) -> Any:
    """`value` as the wire type `kind` wants it, or a ValueError naming the field (rosidl's
    Python messages store anything; the C conversion would abort the process)."""
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind in _INT_BITS and isinstance(value, int) and not isinstance(value, bool):
        bound = 2 ** (_INT_BITS[kind] - 1)
        if -bound <= value < bound:
            return value
    if (
        kind in ("double", "float")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        return float(value)
    raise ValueError(f"{name}={value!r}: must be a {kind}")


class WorkcellClient:
    """A runner node's API from Python (module docstring).

    namespace: the runner's namespace ("/robokernel" in the launch files).
    server_timeout_s: how long a call waits for its action or service to be discovered.
    """

    def __init__(self, namespace: str = "/robokernel", *, server_timeout_s: float = 30.0) -> None:
        self.namespace = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self.server_timeout_s = server_timeout_s
        self._context = Context()
        rclpy.init(context=self._context)
        self._node = Node("robokernel_client", context=self._context)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._lock = threading.Lock()
        # Every client up front, the handshake's last (_wait_heard says why).
        self._actions: dict[str, ActionClient] = {
            name: ActionClient(self._node, action_type, self._name(name))
            for name, action_type in ACTION_TYPES.items()
        }
        self._services: dict[str, Any] = {
            name: self._node.create_client(srv_type, self._name(name))
            for name, srv_type in _SERVICE_TYPES.items()
        }
        self._handshake = self._node.create_client(
            ListPoliciesRunning, self._name("list_policies_running")
        )
        self._goals: list[Any] = []  # goal handles in flight
        self._triggers: dict[str, Any] = {}  # the operator's Trigger clients, by name
        self._peers: dict[str, Any] = {}  # lifecycle clients, by node
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="robokernel_client", daemon=True)
        self._thread.start()

    def __enter__(self) -> WorkcellClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spin(self) -> None:
        while not self._stop.is_set() and self._context.ok():
            try:
                self._executor.spin_once(timeout_sec=0.1)
            except Exception:  # noqa: BLE001 - the context is shutting down
                if not self._context.ok():
                    return
                raise

    def close(self) -> None:
        """Destroy the node and its private context (in-flight goals are not cancelled).
        In rclpy's order: the spin thread stops, then the executor, the action clients, the
        node, and last the context, so that no half-destroyed node keeps its DDS
        participant (with one left, the process's other participants can fail to discover
        a process that replaces a killed one)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            # A callback blocks: shutting the context down wakes the executor's wait and
            # ends the loop (_spin) once the callback returns; the node is never destroyed
            # under a thread that still spins it, and the thread is not left behind.
            self._context.try_shutdown()
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                raise RuntimeError(
                    "WorkcellClient.close: the spin thread did not end within 35 s (a callback "
                    "blocks); the node is left undestroyed"
                )
        self._executor.shutdown(timeout_sec=1)
        # An action client holds its node: left alive, destroy_node only asks for the
        # node's destruction, and the node and its DDS participant live on.
        for action in self._actions.values():
            action.destroy()
        self._actions.clear()
        self._services.clear()
        self._goals.clear()
        self._node.destroy_node()
        self._context.try_shutdown()
        self._context.destroy()

    def wait_until_ready(
        self, timeout_s: float = 60.0, *, shield: bool = True, policy_server: bool = True
    ) -> None:
        """Wait until a call can start (nav2's waitUntilNav2Active): the runner's actions
        are discovered, the safety_shield says "active" (`<ns>/safety_shield/state`: the
        e-stop panel is live and released) and the policy server reports ready. Raises
        TimeoutError naming what is not ready after `timeout_s`."""
        from robokernel_interfaces.msg import ShieldState

        from .qos import STATUS_QOS
        from .transport import check_server_ready

        deadline = time.monotonic() + timeout_s
        self._action_client("eval_policy")  # raises TimeoutError when no runner answers
        if shield:
            states: list[Any] = []
            sub = self._node.create_subscription(
                ShieldState, self._name("safety_shield/state"), states.append, STATUS_QOS
            )
            try:
                while not (states and states[-1].state == "active"):
                    if time.monotonic() > deadline:
                        why = f"{states[-1].state}: {states[-1].reason}" if states else "no state"
                        raise TimeoutError(
                            f"the safety_shield at {self._name('safety_shield')} is not active "
                            f"within {timeout_s:g} s ({why})"
                        )
                    time.sleep(0.05)
            finally:
                self._node.destroy_subscription(sub)
        if policy_server:
            try:
                check_server_ready(
                    self._node, self.namespace, timeout_s=max(0.1, deadline - time.monotonic())
                )
            except RuntimeError as exc:
                raise TimeoutError(str(exc)) from None

    # -- long calls (actions) --

    def run_policy(
        self, *, feedback: Callable[[Any], None] | None = None, **fields: Any
    ) -> CallResult:
        return self.call("run_policy", fields, feedback)

    def eval_policy(
        self, *, feedback: Callable[[Any], None] | None = None, **fields: Any
    ) -> CallResult:
        return self.call("eval_policy", fields, feedback)

    def evaluate_benchmark(
        self, *, feedback: Callable[[Any], None] | None = None, **fields: Any
    ) -> CallResult:
        return self.call("evaluate_benchmark", fields, feedback)

    def replay_episode(
        self, *, feedback: Callable[[Any], None] | None = None, **fields: Any
    ) -> CallResult:
        return self.call("replay_episode", fields, feedback)

    def run_multi_policy(
        self, *, feedback: Callable[[Any], None] | None = None, **fields: Any
    ) -> CallResult:
        return self.call("run_multi_policy", fields, feedback)

    def call(
        self,
        name: str,
        fields: Mapping[str, Any],
        feedback: Callable[[Any], None] | None = None,
    ) -> CallResult:
        """Send the goal of action `name`, wait for its result; Ctrl-C cancels the goal."""
        if name not in ACTION_TYPES:
            raise ValueError(f"call={name!r}: must be one of {sorted(ACTION_TYPES)}")
        action_type = ACTION_TYPES[name]
        goal = fill_fields(action_type.Goal(), fields)
        client = self._action_client(name)
        self._wait_heard()
        on_feedback = (lambda msg: feedback(msg.feedback)) if feedback else None
        handle = self._wait(client.send_goal_async(goal, feedback_callback=on_feedback), name)
        if not handle.accepted:
            return CallResult(False, "error", f"{name}: the runner rejected the goal")
        servers = self._servers(name)  # the runner that took the goal, bounding the wait
        with self._lock:
            self._goals.append(handle)
        try:
            try:
                answer = self._wait(handle.get_result_async(), name, timeout_s=None,
                                    servers=servers)  # fmt: skip
            except KeyboardInterrupt:
                self._wait(handle.cancel_goal_async(), name)
                answer = self._wait(handle.get_result_async(), name, timeout_s=None,
                                    servers=servers)  # fmt: skip
                raise CallInterrupted(CallResult.from_response(answer.result)) from None
        finally:
            with self._lock:
                self._goals.remove(handle)
        return CallResult.from_response(answer.result)

    def cancel(self) -> int:
        """Cancel every goal this client has in flight; returns how many."""
        with self._lock:
            goals = list(self._goals)
        for handle in goals:
            self._wait(handle.cancel_goal_async(), "cancel")
        return len(goals)

    # -- quick calls (services) --

    def start_policy(self, **fields: Any) -> CallResult:
        return self._service("start_policy", fields)

    def stop_policy(self, robot_name: str = "") -> CallResult:
        return self._service("stop_policy", {"robot_name": robot_name})

    def list_policies_running(self) -> CallResult:
        return self._service("list_policies_running", {})

    # -- the operator's calls --

    def estop(self, pressed: bool, panel: str = "estop_panel") -> CallResult:
        """Press (True) or release (False) the e-stop panel `<ns>/<panel>` (its ~/press,
        ~/release). A release leaves the runner and the shields latched: clear_fault."""
        return self.trigger(f"{panel}/{'press' if pressed else 'release'}")

    def clear_fault(self) -> CallResult:
        """The runner's clear_fault (which clears its shields' too), once released."""
        return self.trigger("clear_fault")

    def pause(self) -> CallResult:
        """The runner's pause: the robot holds (refused, naming it, while the runner has no
        teleop source: its contract's `teleop:`; or while no episode runs)."""
        return self.trigger("pause")

    def correct(self) -> CallResult:
        """The runner's correct: its teleop source drives the robot (through the handover
        limiter and the shield; the policy infers in the shadow)."""
        return self.trigger("correct")

    def resume(self) -> CallResult:
        """The runner's resume: the policy drives again (its queue flushed, re-queried)."""
        return self.trigger("resume")

    def trigger(self, service: str, timeout_s: float = 15.0) -> CallResult:
        """Call the std_srvs/Trigger service `<ns>/<service>` (absolute when it starts
        with '/'); asked again while unanswered (these calls are harmless to repeat), each
        try waiting 5 s (the runner's clear_fault waits up to 3 s for its shields)."""
        from std_srvs.srv import Trigger

        name = service if service.startswith("/") else self._name(service)
        with self._lock:
            client = self._triggers.get(name)
            if client is None:
                client = self._triggers[name] = self._node.create_client(Trigger, name)
        if not client.wait_for_service(timeout_sec=self.server_timeout_s):
            raise TimeoutError(
                f"no node answers the service {name} within {self.server_timeout_s:g} s"
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = self._wait(client.call_async(Trigger.Request()), name, timeout_s=5.0)
                return CallResult(bool(reply.success), "success" if reply.success else "error",
                                  reply.message)  # fmt: skip
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name}: no answer within {timeout_s:g} s") from None

    def lifecycle(self, node: str, transition: str, timeout_s: float = 10.0) -> CallResult:
        """Trigger a lifecycle `transition` (configure, activate, deactivate, cleanup,
        shutdown) of `<ns>/<node>`, or read its state (transition "get"); the answer says
        the state the node is in afterwards."""
        from .lifecycle import TRANSITIONS, LifecyclePeer

        if transition not in (*TRANSITIONS, "get"):
            raise ValueError(
                f"transition={transition!r}: must be one of {', '.join((*TRANSITIONS, 'get'))}"
            )
        target = node if node.startswith("/") else self._name(node)
        with self._lock:
            peer = self._peers.get(target)
            if peer is None:
                peer = self._peers[target] = LifecyclePeer(self._node, target)
        if transition == "get":
            state = peer.state(timeout_s)
            if state is None:
                return CallResult(False, "error", peer.refusal(None, "reachable", timeout_s))
            return CallResult(True, "success", f"{target}: {state}")
        done = peer.change(transition, timeout_s)
        state = peer.state(timeout_s)
        where = f"{target} is {state}" if state is not None else f"{target} did not answer"
        if done:
            return CallResult(True, "success", f"{transition}: done; {where}")
        return CallResult(False, "error", f"{transition}: refused or failed; {where}")

    # -- plumbing --

    def _name(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def _action_client(self, name: str) -> ActionClient:
        client = self._actions[name]
        if not client.wait_for_server(timeout_sec=self.server_timeout_s):
            raise TimeoutError(
                f"no runner answers the action {self._name(name)} within {self.server_timeout_s:g} s"
            )
        return client

    def _service(self, name: str, fields: Mapping[str, Any]) -> CallResult:
        client = self._services[name]
        if not client.wait_for_service(timeout_sec=self.server_timeout_s):
            raise TimeoutError(
                f"no runner answers the service {self._name(name)} within {self.server_timeout_s:g} s"
            )
        self._wait_heard()
        request = fill_fields(_SERVICE_TYPES[name].Request(), fields)
        return CallResult.from_response(self._wait(client.call_async(request), name))

    def _wait_heard(self) -> None:
        """Return once the runner has matched this client's response paths.

        wait_for_server only says that this client has discovered the runner. The runner
        discovers this client's readers later, and a response it sends before then is
        dropped without an error (Fast DDS): the goal runs on the robot while the caller
        never learns it was accepted. A node's readers are announced in the order they were created, on one
        discovery channel that the runner reads in order; the handshake client is created
        after all the others, so once the runner answers it, every earlier response path
        of this client is matched. Harmless to repeat (list_policies_running), so a try
        whose answer is lost is asked again, until server_timeout_s."""
        deadline = time.monotonic() + self.server_timeout_s
        if not self._handshake.wait_for_service(timeout_sec=self.server_timeout_s):
            raise TimeoutError(
                f"no runner answers the service {self._name('list_policies_running')} within "
                f"{self.server_timeout_s:g} s"
            )
        while True:
            try:
                self._wait(self._handshake.call_async(ListPoliciesRunning.Request()),
                           "handshake", timeout_s=min(_HANDSHAKE_TRY_S, self.server_timeout_s))  # fmt: skip
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the runner at {self.namespace or '/'} does not answer this client "
                        f"within {self.server_timeout_s:g} s (its responses do not arrive)"
                    ) from None

    def _servers(self, name: str) -> dict[tuple[int, ...], str]:
        """Who serves action `name` now (who publishes its status): endpoint GID -> the
        node's full name. Keyed by GID because a just-discovered endpoint's node name can
        read `_NODE_NAME_UNKNOWN_` until the graph learns it: a name would change under
        a live runner, its endpoint does not."""
        infos = self._node.get_publishers_info_by_topic(f"{self._name(name)}/_action/status")
        return {
            tuple(info.endpoint_gid): f"{info.node_namespace.rstrip('/')}/{info.node_name}"
            for info in infos
        }

    def _wait(self, future: Any, what: str, timeout_s: float | None = 60.0,
              servers: dict[tuple[int, ...], str] | None = None) -> Any:  # fmt: skip
        """future's result; TimeoutError after timeout_s (None: no bound but liveness);
        with `servers` (the runner that took a goal), RunnerLost once none of them has
        served the action `what` for _GONE_GRACE_S."""
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        next_look = time.monotonic() + _LIVENESS_EVERY_S
        gone_since: float | None = None
        while not done.wait(0.1):  # short waits: a KeyboardInterrupt lands between them
            now = time.monotonic()
            if deadline is not None and now > deadline:
                future.cancel()  # its late answer, or the client's closing, is nobody's
                raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")
            if not self._context.ok():
                raise RuntimeError(f"{what}: the client was closed")
            if servers and now >= next_look:
                next_look = now + _LIVENESS_EVERY_S
                if servers.keys() & self._servers(what).keys():
                    gone_since = None
                elif gone_since is None:
                    gone_since = now
                elif now - gone_since >= _GONE_GRACE_S and not done.is_set():
                    future.cancel()
                    known = sorted(n for n in set(servers.values()) if "_UNKNOWN_" not in n)
                    runner = ", ".join(known) or f"serving {self._name(what)}"
                    raise RunnerLost(
                        f"{what}: the runner {runner} that accepted the goal "
                        f"left the ROS graph before answering it (its process ended, or its "
                        f"host is unreachable); the goal's outcome is unknown"
                    )
        return future.result()


class RunnerLost(RuntimeError):
    """The runner that accepted a goal left the graph before it answered (see call)."""


class CallInterrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that cancelled its goal; `result` is the cancelled call's answer."""

    def __init__(self, result: CallResult) -> None:
        super().__init__("cancelled")
        self.result = result
