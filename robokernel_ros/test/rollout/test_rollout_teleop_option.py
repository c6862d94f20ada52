"""The rollout API's `teleop=`: an in-process teleop source (the simulated operator) for every
episode of a call, attached to each episode's operator channel; refused by name when it is
no source, and with Ray workers (the source lives in this process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from robokernel_ros.kernel import load_trace
from robokernel_ros.policies.base import PolicyAgent
from robokernel_ros.policies.scripted import GoalReachPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text
from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule

SO101 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
EXPERT = {"max_delta": 0.08, "max_accel": 0.02, "tolerance": 0.05}


def operator(radius: float) -> SimulatedOperator:
    expert = GoalReachPolicy(**EXPERT)
    expert.set_robot_state_keys(SO101)
    return SimulatedOperator(PolicyAgent(expert, action_horizon=1), TubeRule(radius=radius))


@pytest.fixture
def cell():
    with SimWorkcell(trace_dir=None) as cell:
        cell.register_builtin_benchmarks()
        yield cell


def test_a_policy_that_holds_still_is_taken_over_and_the_operator_reaches_the_goal(
    cell: SimWorkcell, tmp_path: Path
) -> None:
    # the mock at amplitude 0 commands the middle of every joint's range, whatever the
    # goal: it leaves the expert's tube, and the operator's correction reaches each goal
    sim = operator(0.3)
    out = cell.evaluate_benchmark(
        "so101_reach_random", policy_provider="mock", policy_config={"amplitude": 0.0},
        n_episodes=2, seed=900, trace_dir=str(tmp_path), progress=False, teleop=sim,
    )  # fmt: skip
    report = envelope_json(out)
    assert report is not None, envelope_text(out)
    for episode in report["episodes"]:
        assert episode["success"], episode
        trace = load_trace(Path(episode["trace_path"]))
        starts = trace.of_kind("intervention.start")
        assert len(starts) >= 1 and starts[0].data["by"].startswith("simulated_operator")
        flags = [e.data["intervention"] for e in trace.of_kind("action")]
        assert flags[0] is False and flags[-1] is True  # autonomous first, corrected at the end
        assert trace.of_kind("operator.correct")  # the operator called the episode's channel


def test_a_teleop_that_is_no_source_or_with_ray_workers_is_refused_by_name(
    cell: SimWorkcell, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    out = cell.evaluate_benchmark(
        "so101_reach_random", policy_provider="mock", n_episodes=1, trace_dir=str(runs),
        teleop="leader_arm",
    )  # fmt: skip
    assert out["status"] == "error" and "teleop='leader_arm'" in envelope_text(out)
    out = cell.evaluate_benchmark(
        "so101_reach_random", policy_provider="mock", n_episodes=2, trace_dir=str(runs),
        teleop=operator(0.3), workers=2,
    )  # fmt: skip
    text = envelope_text(out)
    assert (
        out["status"] == "error" and "teleop='simulated_operator'" in text and "workers=2" in text
    )
    assert not runs.exists()  # a refused call writes nothing
