"""The runner's long calls as ROS 2 actions (navigation2's convention for long tasks).

Each of run_policy, eval_policy, evaluate_benchmark, replay_episode and run_multi_policy
is an action `<ns>/<call>` (robokernel_interfaces/action/*.action) beside the blocking
service of the same name: the goal carries the service request's fields, feedback
streams the call's progress, cancel stops it with hold, and the result carries the
service response's fields (ok, status, message, report_json).

Contract:
  - A goal is always accepted; a refused one (a field outside its domain, a busy robot
    naming the call that holds it, a latched e-stop) is aborted at once with ok false and
    the refusal in `message`, before anything starts: the same refusals, in the same
    words, as the service.
  - Feedback is published by the goal's own thread (never by the episode loop) at most
    every `FEEDBACK_PERIOD_S`, and once more when the call ends. Its counts come from the
    workcell's event bus (`GoalProgress`, cheap enough to run on the loop's thread).
  - Cancel stops the call's rollouts with hold: the episode ends "stopped" with
    stopped_reason "cancelled" at its next step boundary (its episode.end, trace and bag
    complete), an eval runs no further episode, and the result (status "cancelled", ok
    false) carries the report of what ran. A cancel that arrives before the rollout has
    started is repeated until the call ends, so a late start is stopped as well.
The runner node drives one robot, so a goal's events are those on the bus while it runs
(a second goal meanwhile is refused as busy and adds none).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse

from robokernel_interfaces.action import (
    EvalPolicy,
    EvaluateBenchmark,
    ReplayEpisode,
    RunMultiPolicy,
    RunPolicy,
)

#: The actions, by name: the runner's long calls.
ACTION_TYPES: dict[str, Any] = {
    "run_policy": RunPolicy,
    "eval_policy": EvalPolicy,
    "evaluate_benchmark": EvaluateBenchmark,
    "replay_episode": ReplayEpisode,
    "run_multi_policy": RunMultiPolicy,
}

#: The most often feedback is published (seconds between two messages).
FEEDBACK_PERIOD_S = 0.2

_COUNTED = ("episode.start", "episode.end", "action", "safety.intervention", "chunk.merge")


class GoalProgress:
    """A goal's progress, counted from kernel events (thread-safe; O(1) per event)."""

    def __init__(self, n_episodes: int = 1) -> None:
        self._lock = threading.Lock()
        self.episode = 0
        self.n_episodes = max(1, int(n_episodes))
        self.episodes_done = 0
        self.successes = 0
        self.step = 0
        self.holds = 0
        self.interventions = 0
        self.chunk_latency_ms = 0.0
        self.last_outcome = ""
        self.changed = threading.Event()  # an episode ended: publish without waiting

    def on_event(self, event: Any) -> None:
        kind, data = event.kind, event.data
        with self._lock:
            if kind == "action":
                self.step = int(data.get("step", self.step))
                self.holds += bool(data.get("hold"))
            elif kind == "safety.intervention":
                self.interventions += 1
            elif kind == "chunk.merge":
                latency = data.get("inference_s")
                if isinstance(latency, int | float):
                    self.chunk_latency_ms = 1e3 * float(latency)
            elif kind == "episode.start":
                self.episode += 1
                self.step = 0
            elif kind == "episode.end":
                self.episodes_done += 1
                self.last_outcome = str(data.get("outcome", ""))
                self.successes += self.last_outcome == "success"
                self.n_episodes = max(self.n_episodes, self.episodes_done)
                self.changed.set()

    def fill(self, feedback: Any, elapsed_s: float) -> Any:
        with self._lock:
            feedback.episode = self.episode
            feedback.n_episodes = self.n_episodes
            feedback.episodes_done = self.episodes_done
            feedback.successes = self.successes
            feedback.step = self.step
            feedback.holds = self.holds
            feedback.interventions = self.interventions
            feedback.chunk_latency_ms = self.chunk_latency_ms
            feedback.last_outcome = self.last_outcome
        feedback.elapsed_s = elapsed_s
        return feedback


Handler = Callable[[Any, Any], Any]


class RunnerActions:
    """The five action servers of a runner node.

    handlers: call name -> the node's service handler `(request, response) -> response`
        (an action's goal and result have the request's and response's fields).
    bus: returns the workcell's EventBus (None while there is none: the runner's scene
        exists from configure to cleanup), for feedback. cancel: stops every rollout with
        hold, reason "cancelled" (the workcell's `interrupt`).
    """

    def __init__(
        self,
        node: Any,
        handlers: Mapping[str, Handler],
        *,
        bus: Callable[[], Any],
        cancel: Callable[[], Any],
        callback_group: Any = None,
    ) -> None:
        self._node = node
        self._bus = bus
        self._cancel = cancel
        self._servers = [
            ActionServer(
                node,
                ACTION_TYPES[name],
                name,
                execute_callback=self._executor_for(name, handler),
                goal_callback=lambda _goal: GoalResponse.ACCEPT,
                cancel_callback=self._on_cancel,
                callback_group=callback_group,
            )
            for name, handler in handlers.items()
        ]

    def destroy(self) -> None:
        for server in self._servers:
            server.destroy()
        self._servers = []

    def _on_cancel(self, _goal_handle: Any) -> CancelResponse:
        self._cancel()  # at once: the episode holds at its next step boundary
        return CancelResponse.ACCEPT

    def _executor_for(self, name: str, handler: Handler) -> Callable[[Any], Any]:
        action_type = ACTION_TYPES[name]

        def execute(goal_handle: Any) -> Any:
            return self._execute(goal_handle, action_type, handler, name)

        return execute

    def _execute(self, goal_handle: Any, action_type: Any, handler: Handler, name: str) -> Any:
        t0 = time.monotonic()
        result = action_type.Result()
        progress = GoalProgress(getattr(goal_handle.request, "n_episodes", 1))
        bus = self._bus()
        unsubscribe = bus.subscribe(progress.on_event, _COUNTED) if bus is not None else None
        done = threading.Event()

        def call() -> None:
            try:
                handler(goal_handle.request, result)
            finally:
                done.set()

        threading.Thread(target=call, name=f"runner-action-{name}", daemon=True).start()
        try:
            next_feedback = t0
            while not done.is_set():
                if goal_handle.is_cancel_requested:
                    self._cancel()  # again: a rollout that started after the cancel
                now = time.monotonic()
                if now >= next_feedback or progress.changed.is_set():
                    progress.changed.clear()
                    goal_handle.publish_feedback(progress.fill(action_type.Feedback(), now - t0))
                    next_feedback = now + FEEDBACK_PERIOD_S
                done.wait(min(0.05, max(0.0, next_feedback - time.monotonic())))
            goal_handle.publish_feedback(
                progress.fill(action_type.Feedback(), time.monotonic() - t0)
            )
        finally:
            if unsubscribe is not None:
                unsubscribe()
        if goal_handle.is_cancel_requested:
            result.ok = False
            result.status = "cancelled"
            result.message = f"{name} cancelled: {result.message}"
            goal_handle.canceled()
        elif result.ok:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result
