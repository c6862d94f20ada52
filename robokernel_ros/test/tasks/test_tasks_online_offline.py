"""One predicate context: a real MuJoCo episode's online verdict and its step are what its
trace scores offline (PredicateScorer over tasks.trace_contexts), for successes, failures,
a clause that already holds at reset and a robot predicate in a two-robot scene."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json
from robokernel_ros.scoring import PredicateScorer
from robokernel_ros.tasks import builtin_benchmark_specs, compile_criteria, predicate_context
from robokernel_ros.tasks.context import trace_robot

HOLD_STILL = {"amplitude": 0.0}
# A benchmark whose success clause already holds on the scene's initial state.
HOLD_HOME = {
    "name": "so101_hold_home",
    "robot": {"name": "arm", "model": "so101"},
    "control_frequency": 25.0,
    "max_steps": 20,
    "success": [
        {"predicate": "joint_near_target", "targets": {"shoulder_pan": 0.0}, "tolerance": 0.05}
    ],
}


@pytest.fixture(scope="module")
def cell():
    c = SimWorkcell(trace_dir=None, bag=False)
    c.register_builtin_benchmarks()
    yield c
    c.close()


def _episodes(cell: SimWorkcell, spec: Any, tmp_path: Path, **kwargs: Any) -> list[dict]:
    out = cell.evaluate_benchmark(
        spec, trace_dir=str(tmp_path), progress=False, action_horizon=1, **kwargs
    )
    assert out["status"] == "success", out["content"]
    return envelope_json(out)["episodes"]


def _offline(spec: dict[str, Any], trace_path: str) -> dict[str, Any]:
    return PredicateScorer.for_benchmark(spec).score(load_trace(trace_path))


def test_the_reach_experts_successes_score_at_the_same_steps_offline(
    cell: SimWorkcell, tmp_path: Path
) -> None:
    spec = builtin_benchmark_specs()["so101_reach_random"]
    expert = {"max_delta": 0.08, "max_accel": 0.02, "tolerance": 0.05}
    episodes = _episodes(
        cell, spec["name"], tmp_path, policy_provider="scripted_goal", policy_config=expert,
        n_episodes=2, seed=40,
    )  # fmt: skip
    for episode in episodes:
        assert episode["success"] is True and 1 < episode["steps_advanced"] < spec["max_steps"]
        assert _offline(spec, episode["trace_path"]) == {
            "so101_reach_random_success": True,
            "so101_reach_random_step": episode["steps_advanced"],
            "so101_reach_random_failure_step": None,
        }


def test_a_collapse_fails_go2_walk_forward_at_the_same_step_offline(
    cell: SimWorkcell, tmp_path: Path
) -> None:
    spec = builtin_benchmark_specs()["go2_walk_forward"]
    (episode,) = _episodes(
        cell, spec["name"], tmp_path, policy_provider="mock", policy_config=HOLD_STILL, seed=0
    )
    # limp joints: the base drops below 0.15 m long before the horizon
    assert episode["outcome"] == "failure" and episode["steps_advanced"] < spec["max_steps"]
    assert _offline(spec, episode["trace_path"]) == {
        "go2_walk_forward_success": False,
        "go2_walk_forward_step": None,
        "go2_walk_forward_failure_step": episode["steps_advanced"],
    }


def test_a_clause_true_at_reset_succeeds_after_the_first_step_online_and_offline(
    cell: SimWorkcell, tmp_path: Path
) -> None:
    (episode,) = _episodes(
        cell, HOLD_HOME, tmp_path, policy_provider="mock", policy_config=HOLD_STILL, seed=0
    )
    assert episode["success"] is True and episode["steps_advanced"] == 1
    trace = load_trace(episode["trace_path"])
    assert PredicateScorer(HOLD_HOME["success"], name="home").score(trace) == {
        "home_success": True,
        "home_step": 1,
    }
    # The trace's reset state satisfies the clause too: a scorer that judged the reset
    # context (as the offline scorer once did) would have said step 0.
    obs0 = next(e.data["obs"] for e in trace.of_kind("observation") if e.step == 0)
    state0 = next(e.data["state"] for e in trace.of_kind("privileged") if e.step == 0)
    (criterion,) = compile_criteria("success", HOLD_HOME["success"])
    assert criterion(predicate_context(0, obs0, state0, robot="arm", episode=0))


def test_a_robot_predicate_in_a_two_robot_scene_fires_at_the_same_step_offline(
    tmp_path: Path,
) -> None:
    collapse = {"predicate": "base_below_z", "z": 0.2}  # no robot: the rollout's own
    with SimWorkcell(trace_dir=tmp_path, bag=False) as two:
        two.add_robot("dog", "go2")
        two.add_robot("arm", "so101", pos=[2.0, 0.0, 0.0])
        report = envelope_json(
            two.run_policy("dog", policy_provider="mock", policy_config=HOLD_STILL, n_steps=60,
                           seed=0, stop_when=collapse)
        )  # fmt: skip
    assert report["stopped_reason"] == "predicate" and 1 < report["steps_advanced"] < 60
    trace = load_trace(report["trace_path"])
    assert PredicateScorer(collapse, name="collapse").score(trace) == {
        "collapse_success": True,
        "collapse_step": report["steps_advanced"],
    }
    # Both robots are in the recorded state: only the rollout's robot, which the trace
    # names, tells the clause whose base to read (a context without it cannot).
    state = trace.of_kind("privileged")[-1].data["state"]
    assert sorted(state["robots"]) == ["arm", "dog"] and trace_robot(trace.meta) == "dog"
    (criterion,) = compile_criteria("stop_when", collapse)
    with pytest.raises(KeyError, match="robot None is not in the privileged state"):
        criterion(predicate_context(1, {}, state, robot=None, episode=0))
