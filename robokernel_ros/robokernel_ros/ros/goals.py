"""WorkcellClient's typed goals and results: a long call's fields by name, its goal
message, and what the runner answered.

    goal = EvalGoal(robot_name="arm", n_episodes=5, extra={"fast_mode": False})
    goal.message()            # EvalPolicy.Goal; ValueError naming a field of the wrong type
    CallResult.from_response(answer.result, goal_status=answer.status).task  # a TaskResult

A goal's fields are its action's (robokernel_interfaces/action), in Python values: a dict
where the wire carries `<name>_json`, None where the wire has an "unset" value (-1, 0.0;
RunPolicy's async_rtc: -1, auto); any other None leaves the interface's default. `extra`
is any other keyword of the rollout call, sent as `extra_json` (the runner refuses a name
it does not take, and one that repeats a typed field). `fill_fields` sets fields by wire
name (the CLI's edge). Values are checked against the wire type before anything is sent:
rosidl's Python messages store anything, and the C conversion would abort the process.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from action_msgs.msg import GoalStatus

from robokernel_interfaces.action import (
    EvalPolicy,
    EvaluateBenchmark,
    ReplayEpisode,
    RunMultiPolicy,
    RunPolicy,
)

from .actions import ACTION_TYPES

#: A long call's progress (each action's Feedback has the same fields).
Feedback = (
    RunPolicy.Feedback
    | EvalPolicy.Feedback
    | EvaluateBenchmark.Feedback
    | ReplayEpisode.Feedback
    | RunMultiPolicy.Feedback
)
OnFeedback = Callable[[Feedback], object]

#: Field names whose None means "unset" and the wire value that says so.
_UNSET = {"seed": -1, "n_steps": -1, "rtc_inference_timeout_s": 0.0, "sentry_rotate_s": 0.0}
_NONE_IS_SENT = {*_UNSET, "async_rtc"}  # RunPolicy's async_rtc: None is -1 (auto)


class TaskResult(enum.Enum):
    """How a goal ended (nav2_simple_commander's TaskResult)."""

    UNKNOWN = 0  # not ended yet, or ended in a state the action does not use
    SUCCEEDED = 1  # the call did what was asked (ok)
    CANCELED = 2  # cancelled: the robot held; the report says what ran
    FAILED = 3  # refused, or the call ran and did not do what was asked (not ok)


_TASK_RESULTS = {
    GoalStatus.STATUS_SUCCEEDED: TaskResult.SUCCEEDED,
    GoalStatus.STATUS_CANCELED: TaskResult.CANCELED,
    GoalStatus.STATUS_ABORTED: TaskResult.FAILED,
}


@dataclass(frozen=True)
class CallResult:
    """What a call answered: ok, status ("success", "error", "cancelled"), the message, the
    report (the runner's JSON report, parsed once here) and, for a goal, how it ended."""

    ok: bool
    status: str
    message: str
    report: dict[str, Any] = field(default_factory=dict)
    task: TaskResult = TaskResult.UNKNOWN

    @classmethod
    def from_response(
        cls, response: Any, status: str | None = None, *, goal_status: int | None = None
    ) -> CallResult:
        try:
            report = json.loads(response.report_json or "{}")
        except ValueError:
            report = {}
        if goal_status is not None:  # a goal's end: the action's status
            task = _TASK_RESULTS.get(goal_status, TaskResult.UNKNOWN)
        else:  # a service's answer
            task = TaskResult.SUCCEEDED if response.ok else TaskResult.FAILED
        return cls(bool(response.ok), status or response.status, response.message, report, task)

    @property
    def outcomes(self) -> list[str]:
        """Each episode's outcome (the kernel's EpisodeOutcome values), in order."""
        episodes = self.report.get("episodes")
        if isinstance(episodes, list):
            return [str(e.get("outcome")) for e in episodes if isinstance(e, Mapping)]
        return [str(self.report["outcome"])] if "outcome" in self.report else []


# -- typed goals ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Goal:
    """A long call's goal: its action's fields by name (Python values), and `extra`."""

    ACTION: ClassVar[str]
    extra: Mapping[str, object] | None = None  # other keywords of the call, as extra_json

    def message(self) -> Any:
        """The action's Goal message (ValueError naming a field of the wrong type)."""
        return goal_message(ACTION_TYPES[self.ACTION].Goal(), self)


@dataclass(frozen=True)
class RunGoal(_Goal):
    """run_policy (and start_policy's request): one episode on one robot."""

    ACTION: ClassVar[str] = "run_policy"
    robot_name: str = ""  # "": the runner's robot
    policy_provider: str = "mock"
    policy_config: Mapping[str, object] | None = None
    instruction: str = ""
    duration: float = 10.0
    control_frequency: float = 50.0
    action_horizon: int = 8
    n_steps: int | None = None  # None: from duration
    seed: int | None = None
    async_rtc: bool | None = None  # None: from the policy
    rtc_inference_timeout_s: float | None = None  # None: no deadline
    sentry_rotate_s: float | None = None  # None: one episode


@dataclass(frozen=True)
class EvalGoal(_Goal):
    """eval_policy: n episodes and their aggregate."""

    ACTION: ClassVar[str] = "eval_policy"
    robot_name: str = ""
    policy_provider: str = "mock"
    policy_config: Mapping[str, object] | None = None
    instruction: str = ""
    n_episodes: int = 1
    max_steps: int = 300
    seed: int | None = None
    async_rtc: bool = False
    rtc_inference_timeout_s: float | None = None


@dataclass(frozen=True)
class BenchmarkGoal(_Goal):
    """evaluate_benchmark: a registered benchmark `name`, or a `spec`."""

    ACTION: ClassVar[str] = "evaluate_benchmark"
    name: str = ""
    spec: Mapping[str, object] | None = None
    policy_provider: str = "mock"
    policy_config: Mapping[str, object] | None = None
    n_episodes: int = 1
    seed: int | None = None


@dataclass(frozen=True)
class ReplayGoal(_Goal):
    """replay_episode: a recorded episode's actions again, through the shield."""

    ACTION: ClassVar[str] = "replay_episode"
    repo_id: str = ""
    robot_name: str = ""
    episode: int = 0


@dataclass(frozen=True)
class MultiGoal(_Goal):
    """run_multi_policy: several robots at once, one policy each."""

    ACTION: ClassVar[str] = "run_multi_policy"
    policies: Mapping[str, object] | None = None
    instructions: Mapping[str, str] | None = None
    duration: float = 10.0
    n_steps: int | None = None


Goal = RunGoal | EvalGoal | BenchmarkGoal | ReplayGoal | MultiGoal


def goal_message[M](message: M, goal: _Goal) -> M:
    """`message` (a Goal or a Request) with the typed goal's fields set (module docstring)."""
    values = {
        f.name: getattr(goal, f.name)
        for f in fields(goal)
        if f.name != "extra" and (getattr(goal, f.name) is not None or f.name in _NONE_IS_SENT)
    }  # None elsewhere: the interface's default ("{}", "")
    fill_fields(message, values, extra=False)
    if goal.extra:
        fill_fields(message, {"extra_json": dict(goal.extra)})
    return message


def fill_fields[M](message: M, values: Mapping[str, object], *, extra: bool = True) -> M:
    """Set a goal's or request's fields by wire name (a dict for `<name>_json` may be given
    as `<name>`; None is "unset"); with `extra`, any other name goes into extra_json (the
    CLI's fields), else it is refused naming it."""
    names = set(message.get_fields_and_field_types())
    others: dict[str, object] = {}
    for name, value in values.items():
        target = name if name in names else f"{name}_json" if f"{name}_json" in names else None
        if target is None:
            if not extra:
                raise ValueError(f"{name}: not a field of {type(message).__name__}")
            others[name] = value
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
    if others:
        if "extra_json" not in names:
            raise ValueError(f"{sorted(others)}: not fields of {type(message).__name__}")
        base = json.loads(message.extra_json or "{}")
        message.extra_json = json.dumps({**base, **others})
    return message


def _is_int(message: object, name: str) -> bool:
    return message.get_fields_and_field_types()[name].startswith(("int", "uint"))


_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _checked(name: str, kind: str, value: object) -> object:
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
