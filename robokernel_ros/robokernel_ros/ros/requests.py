"""The runner's service requests as rollout API calls, and the API's results as responses.

    kwargs = run_kwargs(request, robot_name="arm", robot_hz=None)   # RunPolicy / StartPolicy
    fill_response(response, result)           # a CallResult -> ok, status, message, report_json

A request field outside its wire domain (JSON that is not an object, an async_rtc that
is not -1/0/1, a typed field repeated in extra_json) raises `Refused` naming the field,
its value and its domain; every other check is the rollout API's own (the facade
refuses with its own words). Wire conventions: -1 means unset for optional integers,
0.0 means no deadline for timeouts, "" means the runner's robot for robot_name.
`robot_hz`: a runner driving a ROS robot (env=ros) paces its calls at the robot's rate
(fast_mode false, control_frequency defaults to it): a robot's time is the wall clock.
No rclpy here: the messages are read as plain objects.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from robokernel_ros.kernel import EpisodeOutcome
from robokernel_ros.kernel.trace import dumps_text

if TYPE_CHECKING:  # imported where used: a process that only refuses loads no rollout
    from robokernel_ros.rollout.results import CallResult


class Refused(ValueError):
    """A request field outside its domain (the message names field, value and domain)."""


def json_object(field: str, text: str) -> dict[str, Any]:
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


def _optional(value: int, unset: int = -1) -> int | None:
    """-1 means unset; any other value goes to the API as is (which refuses non-positive ones)."""
    return None if value == unset else value


def _timeout(value: float) -> float | None:
    # 0 means no deadline; a negative or non-finite value goes on to be refused by the API.
    return None if value == 0.0 else value


def _sentry(value: float) -> float | None:
    """sentry_rotate_s: 0 means one episode (None); else positive finite seconds."""
    if value == 0.0:
        return None
    if not (math.isfinite(value) and value > 0):
        raise Refused(
            f"sentry_rotate_s={value!r}: must be 0 (one episode) or positive finite seconds "
            "(sentry mode: a new episode every that many seconds of robot time)"
        )
    return value


def merge_extra(kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """kwargs with extra_json's keys added (a typed field repeated there is refused; a
    success criterion given as predicate clauses is compiled)."""
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


def _robot_time(kwargs: dict[str, Any], robot_hz: float | None) -> dict[str, Any]:
    if robot_hz is not None:
        # A robot's time cannot run faster than the wall clock: paced by default, so
        # async_rtc runs the kernel's realtime wall-clock mode (holds, watchdog), at
        # the robot's rate unless the call names one.
        kwargs.setdefault("fast_mode", False)
        kwargs.setdefault("control_frequency", robot_hz)
    return kwargs


def run_kwargs(request: Any, robot_name: str, robot_hz: float | None) -> dict[str, Any]:
    """RunPolicy / StartPolicy -> run_policy / start_policy keyword arguments."""
    extra = json_object("extra_json", request.extra_json)
    kwargs = dict(
        robot_name=request.robot_name or robot_name,
        policy_provider=request.policy_provider,
        policy_config=json_object("policy_config_json", request.policy_config_json),
        instruction=request.instruction,
        duration=request.duration,
        control_frequency=request.control_frequency,
        action_horizon=request.action_horizon,
        n_steps=_optional(request.n_steps),
        seed=_optional(request.seed),
        async_rtc=_async_rtc(request.async_rtc),
        rtc_inference_timeout_s=_timeout(request.rtc_inference_timeout_s),
        sentry_rotate_s=_sentry(request.sentry_rotate_s),
    )
    return _robot_time(merge_extra(kwargs, extra), robot_hz)


def eval_kwargs(request: Any, robot_name: str, robot_hz: float | None) -> dict[str, Any]:
    """EvalPolicy -> eval_policy keyword arguments."""
    extra = json_object("extra_json", request.extra_json)
    kwargs = dict(
        robot_name=request.robot_name or robot_name,
        policy_provider=request.policy_provider,
        policy_config=json_object("policy_config_json", request.policy_config_json),
        instruction=request.instruction,
        n_episodes=request.n_episodes,
        max_steps=request.max_steps,
        seed=_optional(request.seed),
        async_rtc=request.async_rtc,
        rtc_inference_timeout_s=_timeout(request.rtc_inference_timeout_s),
    )
    return _robot_time(merge_extra(kwargs, extra), robot_hz)


def benchmark_kwargs(request: Any) -> dict[str, Any]:
    """EvaluateBenchmark -> evaluate_benchmark keyword arguments."""
    extra = json_object("extra_json", request.extra_json)
    spec = json_object("spec_json", request.spec_json)
    if bool(request.name) == bool(spec):
        raise Refused(
            f"name={request.name!r}, spec_json={request.spec_json!r}: give a registered benchmark "
            "name or a spec, exactly one"
        )
    kwargs = dict(
        spec=request.name or spec,
        policy_provider=request.policy_provider,
        policy_config=json_object("policy_config_json", request.policy_config_json),
        n_episodes=request.n_episodes,
        seed=_optional(request.seed),
    )
    return merge_extra(kwargs, extra)


def replay_kwargs(request: Any, robot_name: str) -> dict[str, Any]:
    """ReplayEpisode -> replay_episode keyword arguments."""
    if not request.repo_id:
        raise Refused(
            "repo_id='': must name a run directory, a bag folder or a LeRobot dataset root"
        )
    kwargs = dict(
        repo_id=request.repo_id,
        robot_name=request.robot_name or robot_name,
        episode=request.episode,
    )
    return merge_extra(kwargs, json_object("extra_json", request.extra_json))


def multi_kwargs(request: Any) -> dict[str, Any]:
    """RunMultiPolicy -> run_multi_policy keyword arguments."""
    policies = json_object("policies_json", request.policies_json)
    if not policies:
        raise Refused("policies_json='{}': must map at least one robot to a policy")
    kwargs = dict(
        policies=policies,
        instructions=json_object("instructions_json", request.instructions_json),
        duration=request.duration,
        n_steps=_optional(request.n_steps),
    )
    return merge_extra(kwargs, json_object("extra_json", request.extra_json))


def refusal(text: str) -> CallResult:
    """The result of a call refused before the API is called."""
    from robokernel_ros.rollout.results import CallResult

    return CallResult.refused(text)


#: Episode outcomes that make a call's answer an error (the robot was stopped by safety).
NOT_COMPLETED = (EpisodeOutcome.ESTOPPED,)


def estopped_is_not_success(name: str, out: CallResult) -> CallResult:
    """A call whose episodes ended e-stopped did not do what was asked: its result with
    status error and a first line saying which episodes (ok false over ROS)."""
    if not out.ok:
        return out
    stopped = [
        (i, e) for i, e in enumerate(out.episode_records()) if e.get("outcome") in NOT_COMPLETED
    ]
    if not stopped:
        return out
    which = ", ".join(
        f"episode {e.get('episode', i)} {e.get('outcome')} after {e.get('steps_advanced', '?')} "
        "steps"
        for i, e in stopped
    )
    return out.failed(f"{name}: not completed: {which} (the e-stop held the robot)")


def fill_response(response: Any, out: CallResult) -> Any:
    """ok (status was "success"), status, message (its text) and report_json (its report,
    {} without one) of a response or action result: the ROS edge of a CallResult."""
    response.ok = out.ok
    response.status = out.status.value
    response.message = out.text
    response.report_json = dumps_text(out.report if out.report is not None else {})
    return response


def text(out: Mapping[str, Any]) -> str:
    """The envelope's text blocks, one a line (a CallResult's text)."""
    own = getattr(out, "text", None)  # a CallResult
    if isinstance(own, str):
        return own
    return "\n".join(
        str(c["text"]) for c in out.get("content", []) if isinstance(c, Mapping) and "text" in c
    )


class _AnyCriterion:
    """success_fn from predicate clauses: true when any clause holds."""

    def __init__(self, criteria: list[Any]) -> None:
        self.criteria = criteria
        self.__name__ = " or ".join(c.name for c in criteria)

    def __call__(self, ctx: Any) -> bool:
        return any(c(ctx) for c in self.criteria)
