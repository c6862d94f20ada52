"""The predicate context's keys and update order, and the verdict order, on plain values."""

from __future__ import annotations

import pytest
from robokernel_ros.tasks import CriterionError, compile_criteria, judge, predicate_context
from robokernel_ros.tasks.context import FAILURE, SUCCESS, trace_robot


def test_the_rollouts_keys_win_over_a_state_that_carries_the_same_names() -> None:
    state = {"step": 99, "robot": "other", "joints": {"x": 9.0}, "time": 0.5}
    obs = {"joint_positions": {"shoulder_pan": 0.25}, "goal.shoulder_pan": 0.3}
    ctx = predicate_context(4, obs, state, robot="arm", episode=2)
    assert ctx == {
        "step": 4,
        "robot": "arm",
        "episode": 2,
        "obs": obs,
        "joints": {"shoulder_pan": 0.25},
        "time": 0.5,
    }
    assert state["step"] == 99  # the state itself is not touched


def test_joints_are_read_whatever_the_observations_layout() -> None:
    flat = predicate_context(1, {"shoulder_pan.pos": [0.5]}, None, robot=None, episode=None)
    assert flat["joints"] == {"shoulder_pan": 0.5}
    assert predicate_context(1, [0.1, 0.2], None, robot=None, episode=None)["joints"] == {}


def test_failure_is_judged_before_success_and_a_raising_clause_names_the_step() -> None:
    both = compile_criteria("c", {"predicate": "step_at_least", "n": 3})
    ctx = predicate_context(3, {}, None, robot=None, episode=0)
    verdict = judge(both, both, ctx, episode=0)
    assert verdict is not None and verdict[0] == FAILURE
    assert judge([], both, ctx, episode=0) == (SUCCESS, both[0])
    assert (
        judge(both, both, predicate_context(2, {}, None, robot=None, episode=0), episode=0) is None
    )
    broken = compile_criteria("c", lambda ctx: ctx["missing"])
    with pytest.raises(CriterionError, match="at episode 5, step 3"):
        judge(broken, [], ctx, episode=5)


def test_a_traces_robot_is_its_first_robot() -> None:
    assert trace_robot({"robots": ["dog", "arm"]}) == "dog"
    assert trace_robot({"robot": "arm"}) == "arm"
    assert trace_robot({}) is None
