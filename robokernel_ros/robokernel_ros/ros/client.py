"""A Python client of a runner node, in the manner of nav2_simple_commander's BasicNavigator.

    from robokernel_ros.ros.client import EvalGoal, TaskResult, WorkcellClient

    with WorkcellClient("/robokernel") as cell:
        # blocking: a typed method per call, its fields named
        result = cell.eval_policy(policy_provider="mock", n_episodes=5, feedback=print)
        print(result.ok, result.message, result.report["success_rate"])
        # non-blocking: send a typed goal, watch it, cancel it, take its result
        task = cell.send(EvalGoal(n_episodes=50, seed=0))
        while not task.is_complete():
            progress = task.feedback()       # the latest feedback message, or None
            time.sleep(0.5)                  # task.cancel() stops it with hold
        result = task.result()               # a CallResult; result.task is a TaskResult

Long calls (run_policy, eval_policy, evaluate_benchmark, replay_episode,
run_multi_policy) go as actions. Their goals are typed (`RunGoal`, `EvalGoal`,
`BenchmarkGoal`, `ReplayGoal`, `MultiGoal`: the action's fields by name, in Python values:
a dict where the wire carries `<name>_json`, None for "unset"); `extra` holds any other
keyword of the rollout call, sent as `extra_json` (the runner refuses one it does not
take, naming it). `send(goal)` returns once the runner accepted or refused the goal, with
a `GoalTask`: is_complete(), feedback(), cancel() and result(). The blocking methods
(`eval_policy(...)`) send the goal and wait for its result; `feedback` is called with
each feedback message (on the client's spin thread), and a KeyboardInterrupt once the
goal has left (while its acceptance is on the way too: the runner may already move the
robot) cancels the goal (the robot holds) and raises CallInterrupted with the result of
what ran. A goal whose runner leaves the graph before it answers (its process died)
raises RunnerLost, naming the runner, once the runner has been gone for _GONE_GRACE_S
(DDS notices a killed process when its lease runs out). start_policy, stop_policy and
list_policies_running are services. A value of the wrong type is refused here, naming
the field, before anything is sent.

`call(name, fields)` is the edge for fields by wire name (the `robokernel ros` command):
a field that is not the interface's goes into `extra_json`.

The client owns a private rclpy context, node and single-threaded executor spinning in a
daemon thread, so it works beside (or without) the caller's own rclpy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import rclpy
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from robokernel_interfaces.srv import ListPoliciesRunning, StartPolicy, StopPolicy

from .actions import ACTION_TYPES
from .goals import (
    BenchmarkGoal,
    CallResult,
    EvalGoal,
    Feedback,
    Goal,
    MultiGoal,
    OnFeedback,
    ReplayGoal,
    RunGoal,
    TaskResult,
    fill_fields,
    goal_message,
)

__all__ = [
    "BenchmarkGoal",
    "CallInterrupted",
    "CallResult",
    "EvalGoal",
    "GoalTask",
    "MultiGoal",
    "ReplayGoal",
    "RunGoal",
    "RunnerLost",
    "TaskResult",
    "WorkcellClient",
    "fill_fields",
]

#: The quick calls, as services.
_SERVICE_TYPES = {
    "start_policy": StartPolicy,
    "stop_policy": StopPolicy,
    "list_policies_running": ListPoliciesRunning,
}
_HANDSHAKE_TRY_S = 1.0  # one handshake request's wait before it is asked again
_LIVENESS_EVERY_S = 0.5  # how often a goal's wait looks for its runner in the graph
_GONE_GRACE_S = 2.0  # a runner absent this long is gone (its last answer had time to land)


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
        self._goals: list[GoalTask] = []  # goals in flight
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
        self,
        *,
        robot_name: str = "",
        policy_provider: str = "mock",
        policy_config: Mapping[str, object] | None = None,
        instruction: str = "",
        duration: float = 10.0,
        control_frequency: float = 50.0,
        action_horizon: int = 8,
        n_steps: int | None = None,
        seed: int | None = None,
        async_rtc: bool | None = None,
        rtc_inference_timeout_s: float | None = None,
        sentry_rotate_s: float | None = None,
        extra: Mapping[str, object] | None = None,
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """RunGoal's fields; waits for the result (module docstring)."""
        return self._until_done(RunGoal(**_goal_fields(locals())), feedback)

    def eval_policy(
        self,
        *,
        robot_name: str = "",
        policy_provider: str = "mock",
        policy_config: Mapping[str, object] | None = None,
        instruction: str = "",
        n_episodes: int = 1,
        max_steps: int = 300,
        seed: int | None = None,
        async_rtc: bool = False,
        rtc_inference_timeout_s: float | None = None,
        extra: Mapping[str, object] | None = None,
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """EvalGoal's fields; waits for the result."""
        return self._until_done(EvalGoal(**_goal_fields(locals())), feedback)

    def evaluate_benchmark(
        self,
        *,
        name: str = "",
        spec: Mapping[str, object] | None = None,
        policy_provider: str = "mock",
        policy_config: Mapping[str, object] | None = None,
        n_episodes: int = 1,
        seed: int | None = None,
        extra: Mapping[str, object] | None = None,
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """BenchmarkGoal's fields; waits for the result."""
        return self._until_done(BenchmarkGoal(**_goal_fields(locals())), feedback)

    def replay_episode(
        self,
        *,
        repo_id: str,
        robot_name: str = "",
        episode: int = 0,
        extra: Mapping[str, object] | None = None,
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """ReplayGoal's fields; waits for the result."""
        return self._until_done(ReplayGoal(**_goal_fields(locals())), feedback)

    def run_multi_policy(
        self,
        *,
        policies: Mapping[str, object],
        instructions: Mapping[str, str] | None = None,
        duration: float = 10.0,
        n_steps: int | None = None,
        extra: Mapping[str, object] | None = None,
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """MultiGoal's fields; waits for the result."""
        return self._until_done(MultiGoal(**_goal_fields(locals())), feedback)

    def send(self, goal: Goal, feedback: OnFeedback | None = None) -> GoalTask:
        """Send a typed goal; returns once the runner accepted (or refused) it, with the
        GoalTask that follows it (nav2's goToPose, then isTaskComplete / getFeedback /
        cancelTask / getResult). ValueError (a field of the wrong type) sends nothing."""
        return self._send(goal.ACTION, goal.message(), feedback)

    def call(
        self,
        name: str,
        fields: Mapping[str, object],
        feedback: OnFeedback | None = None,
    ) -> CallResult:
        """Call `name` (an action or a quick call's service) with fields by wire name (the
        CLI's edge: a name that is not the interface's goes into extra_json); waits for the
        result; Ctrl-C cancels an action's goal."""
        if name in _SERVICE_TYPES:
            return self._service(name, fill_fields(_SERVICE_TYPES[name].Request(), fields))
        if name not in ACTION_TYPES:
            raise ValueError(
                f"call={name!r}: must be one of {sorted({*ACTION_TYPES, *_SERVICE_TYPES})}"
            )
        goal = fill_fields(ACTION_TYPES[name].Goal(), fields)
        return self._blocking(GoalTask(self, name, feedback), goal)

    def _until_done(self, goal: Goal, feedback: OnFeedback | None) -> CallResult:
        return self._blocking(GoalTask(self, goal.ACTION, feedback), goal.message())

    def _send(self, name: str, goal: Any, feedback: OnFeedback | None) -> GoalTask:
        task = GoalTask(self, name, feedback)
        self._send_task(task, goal)
        return task

    def _send_task(self, task: GoalTask, goal: Any) -> None:
        """Send `goal` for `task` and wait until the runner accepted or refused it."""
        client = self._action_client(task.name)
        self._wait_heard()
        task._sent(client.send_goal_async(goal, feedback_callback=task._on_feedback))
        task._await_answer()

    def _blocking(self, task: GoalTask, goal: Any) -> CallResult:
        """Send `goal` for `task` and wait for its result. A KeyboardInterrupt once the goal
        was sent (its acceptance still on the way included: the runner may already be
        moving the robot) cancels it and raises CallInterrupted with the result of what
        ran; one before that sent nothing and is raised as it came."""
        try:
            self._send_task(task, goal)
            return task.result()
        except KeyboardInterrupt:
            if not task.sent:
                raise
            task.cancel()
            raise CallInterrupted(task.result()) from None

    def cancel(self) -> int:
        """Cancel every goal this client has in flight; returns how many."""
        with self._lock:
            tasks = list(self._goals)
        for task in tasks:
            task.cancel()
        return len(tasks)

    # -- quick calls (services) --

    def start_policy(
        self,
        *,
        robot_name: str = "",
        policy_provider: str = "mock",
        policy_config: Mapping[str, object] | None = None,
        instruction: str = "",
        duration: float = 10.0,
        control_frequency: float = 50.0,
        action_horizon: int = 8,
        n_steps: int | None = None,
        seed: int | None = None,
        async_rtc: bool | None = None,
        rtc_inference_timeout_s: float | None = None,
        sentry_rotate_s: float | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> CallResult:
        """run_policy's fields (RunGoal); returns once the rollout started (or was refused)."""
        goal = RunGoal(**_goal_fields(locals()))
        return self._service("start_policy", goal_message(StartPolicy.Request(), goal))

    def stop_policy(self, robot_name: str = "") -> CallResult:
        """Stop the rollout on `robot_name` ("": every rollout) with hold."""
        request = fill_fields(StopPolicy.Request(), {"robot_name": robot_name}, extra=False)
        return self._service("stop_policy", request)

    def list_policies_running(self) -> CallResult:
        """The robots the runner drives now (report: running, robots, count)."""
        return self._service("list_policies_running", ListPoliciesRunning.Request())

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

    def _service(self, name: str, request: Any) -> CallResult:
        client = self._services[name]
        if not client.wait_for_service(timeout_sec=self.server_timeout_s):
            raise TimeoutError(
                f"no runner answers the service {self._name(name)} within {self.server_timeout_s:g} s"
            )
        self._wait_heard()
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
        served the action `what` for _GONE_GRACE_S, naming them (a node name the graph had
        not learned when the goal was accepted is filled in while they live)."""
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
                serving = self._servers(what)
                if servers.keys() & serving.keys():
                    gone_since = None
                    for gid in servers.keys() & serving.keys():  # a name learned since
                        if "_UNKNOWN_" not in serving[gid]:
                            servers[gid] = serving[gid]
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


class GoalTask:
    """One goal sent by a WorkcellClient (nav2's isTaskComplete / getFeedback / cancelTask /
    getResult): thread-safe; feedback() is the latest feedback message; result() waits
    for the result (RunnerLost once the runner that accepted the goal left the graph)."""

    def __init__(self, client: WorkcellClient, name: str, on_feedback: OnFeedback | None) -> None:
        self.name = name
        self._client = client
        self._user_feedback = on_feedback
        self._feedback: Feedback | None = None
        self._sending: Any = None  # the goal request's future, until it is answered
        self._handle: Any = None
        self._future: Any = None
        self._servers: dict[tuple[int, ...], str] = {}
        self._result: CallResult | None = None

    def _on_feedback(self, message: Any) -> None:  # the action's FeedbackMessage
        self._feedback = message.feedback
        if self._user_feedback is not None:
            self._user_feedback(message.feedback)

    @property
    def sent(self) -> bool:
        """Whether the goal went to the runner (it may run, accepted or not yet)."""
        return self._sending is not None

    def _sent(self, request: Any) -> None:
        self._sending = request

    def _await_answer(self) -> None:
        """Wait for the runner's acceptance (or refusal) of the goal sent, once."""
        if self._future is None and self._result is None:
            self._accepted(self._handle or self._client._wait(self._sending, self.name))

    def _accepted(self, handle: Any) -> None:
        self._handle = handle
        if not handle.accepted:
            self._result = CallResult(
                False, "error", f"{self.name}: the runner rejected the goal", task=TaskResult.FAILED
            )
            return
        self._servers = self._client._servers(self.name)  # who took it: bounds the wait
        self._future = handle.get_result_async()
        with self._client._lock:
            self._client._goals.append(self)
        self._future.add_done_callback(lambda _f: self._forget())

    def _forget(self) -> None:
        with self._client._lock:
            if self in self._client._goals:
                self._client._goals.remove(self)

    def is_complete(self) -> bool:
        """Whether the goal ended (its result is in, or it was refused)."""
        return self._result is not None or (self._future is not None and self._future.done())

    def feedback(self) -> Feedback | None:
        """The latest feedback message (the action's Feedback), or None before the first."""
        return self._feedback

    def status(self) -> TaskResult:
        """How the goal ended; UNKNOWN while it runs."""
        if not self.is_complete():
            return TaskResult.UNKNOWN
        return self.result().task

    def cancel(self) -> bool:
        """Ask the runner to cancel the goal (the robot holds; the result says what ran);
        False when it had already ended or was refused. A goal whose acceptance is still on
        the way is cancelled once it arrives."""
        if self._sending is None:
            return False
        self._await_answer()
        if self._future is None or self._future.done():
            return False
        reply = self._client._wait(self._handle.cancel_goal_async(), "cancel")
        return bool(reply.goals_canceling)

    def result(self, timeout_s: float | None = None) -> CallResult:
        """Wait (timeout_s: None, no bound but the runner's liveness) for the goal's result."""
        if self._result is None:
            self._await_answer()
        if self._result is None:
            try:
                answer = self._client._wait(
                    self._future, self.name, timeout_s=timeout_s, servers=self._servers
                )
            except RunnerLost:
                self._forget()  # its outcome is unknown: no longer in flight
                raise
            self._result = CallResult.from_response(answer.result, goal_status=answer.status)
        return self._result


def _goal_fields(arguments: Mapping[str, object]) -> dict[str, Any]:
    """A typed method's arguments as its goal's fields (self and feedback left out)."""
    return {k: v for k, v in arguments.items() if k not in ("self", "feedback")}


class RunnerLost(RuntimeError):
    """The runner that accepted a goal left the graph before it answered (see call)."""


class CallInterrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that cancelled its goal; `result` is the cancelled call's answer."""

    def __init__(self, result: CallResult) -> None:
        super().__init__("cancelled")
        self.result = result
