"""WorkcellClient's typed goals become the action's Goal message, and the wire's answer a
typed result: the field names are the interface's, None is the wire's "unset", dicts are
its JSON fields, `extra` is extra_json, a value of the wrong type is refused naming the
field before anything is sent."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("rclpy")

from action_msgs.msg import GoalStatus  # noqa: E402
from robokernel_ros.ros.client import (  # noqa: E402
    BenchmarkGoal,
    CallResult,
    EvalGoal,
    MultiGoal,
    RunGoal,
    TaskResult,
    WorkcellClient,
)


def test_a_run_goal_sets_the_interface_fields_with_the_wire_unset_values():
    msg = RunGoal(robot_name="arm", policy_config={"a": 1}, n_steps=None, seed=None).message()
    assert (msg.robot_name, msg.n_steps, msg.seed, msg.async_rtc) == ("arm", -1, -1, -1)
    assert json.loads(msg.policy_config_json) == {"a": 1}
    assert msg.rtc_inference_timeout_s == 0.0 and msg.sentry_rotate_s == 0.0
    assert json.loads(msg.extra_json) == {}
    on = RunGoal(async_rtc=True, seed=4, n_steps=20, sentry_rotate_s=1.5).message()
    assert (on.async_rtc, on.seed, on.n_steps, on.sentry_rotate_s) == (1, 4, 20, 1.5)


def test_extra_goes_into_extra_json_and_unset_json_fields_keep_their_default():
    msg = EvalGoal(n_episodes=3, extra={"fast_mode": False, "video": {"fps": 10}}).message()
    assert msg.n_episodes == 3 and msg.policy_config_json == "{}"
    assert json.loads(msg.extra_json) == {"fast_mode": False, "video": {"fps": 10}}
    bench = BenchmarkGoal(spec={"name": "x"}).message()
    assert json.loads(bench.spec_json) == {"name": "x"} and bench.name == ""
    multi = MultiGoal(policies={"a": "mock"}, n_steps=5).message()
    assert json.loads(multi.policies_json) == {"a": "mock"} and multi.n_steps == 5


@pytest.mark.parametrize(
    ("goal", "field"),
    [
        (EvalGoal(n_episodes="three"), "n_episodes"),  # type: ignore[arg-type]
        (RunGoal(duration="1"), "duration"),  # type: ignore[arg-type]
        (EvalGoal(async_rtc=None), "async_rtc"),  # type: ignore[arg-type]
        (RunGoal(seed=2**70), "seed"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_the_field(goal, field):
    with pytest.raises(ValueError, match=f"^{field}="):
        goal.message()


def test_an_unknown_keyword_of_a_typed_method_is_a_type_error_before_anything_is_sent():
    with pytest.raises(TypeError, match="n_episods"):
        WorkcellClient.eval_policy(None, n_episods=3)  # type: ignore[arg-type,call-arg]


@pytest.mark.parametrize(
    ("ok", "goal_status", "task"),
    [
        (True, GoalStatus.STATUS_SUCCEEDED, TaskResult.SUCCEEDED),
        (False, GoalStatus.STATUS_CANCELED, TaskResult.CANCELED),
        (False, GoalStatus.STATUS_ABORTED, TaskResult.FAILED),
        (True, None, TaskResult.SUCCEEDED),  # a service's answer
        (False, None, TaskResult.FAILED),
    ],
)
def test_the_answer_is_a_typed_result(ok, goal_status, task):
    report = {"episodes": [{"outcome": "success"}, {"outcome": "stopped"}]}
    response = SimpleNamespace(ok=ok, status="x", message="m", report_json=json.dumps(report))
    result = CallResult.from_response(response, goal_status=goal_status)
    assert result.task is task and result.ok is ok and result.report == report
    assert result.outcomes == ["success", "stopped"]
