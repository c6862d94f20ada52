"""A benchmark's per-episode goal: drawn from the seed, observed, scored, and solved by
the scripted expert; bad goals refused by field."""

from __future__ import annotations

from typing import Any

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json
from robokernel_ros.tasks.benchmarks import builtin_benchmark_specs, validate_spec
from robokernel_ros.tasks.goals import draw_goal
from robokernel_ros.tasks.predicates import joint_goal_distance, joint_near_goal

SPEC = builtin_benchmark_specs()["so101_reach_random"]
EXPERT = {"max_delta": 0.08, "max_accel": 0.02, "tolerance": 0.05}


def _eval(tmp_path: Any, provider: str, config: dict[str, Any], n: int, seed: int) -> dict:
    cell = SimWorkcell(trace_dir=None)
    cell.register_builtin_benchmarks()
    out = cell.evaluate_benchmark(
        "so101_reach_random", policy_provider=provider, policy_config=config, n_episodes=n,
        seed=seed, trace_dir=str(tmp_path), progress=False, action_horizon=1,
    )  # fmt: skip
    assert out["status"] == "success", out["content"]
    return envelope_json(out)


def test_the_goal_is_drawn_from_the_seed_inside_its_intervals() -> None:
    goals = [draw_goal(SPEC["goal"], s) for s in range(50)]
    assert draw_goal(SPEC["goal"], 7) == goals[7]
    assert len({tuple(g.values()) for g in goals}) == 50
    for joint, (lo, hi) in SPEC["goal"]["joints"].items():
        values = [g[joint] for g in goals]
        assert all(lo <= v <= hi for v in values)
        assert max(values) - min(values) > 0.6 * (hi - lo)  # spread over the interval


def test_every_recorded_observation_carries_the_episodes_goal_and_the_expert_reaches_it(
    tmp_path: Any,
) -> None:
    report = _eval(tmp_path, "scripted_goal", EXPERT, n=3, seed=40)
    assert report["benchmark"] == "so101_reach_random"
    for i, episode in enumerate(report["episodes"]):
        goal = draw_goal(SPEC["goal"], 40 + i)
        assert episode["success"] is True and episode["steps_advanced"] < SPEC["max_steps"]
        trace = load_trace(episode["trace_path"])
        observations = [e.data["obs"] for e in trace.of_kind("observation")]
        assert observations
        for obs in observations:
            assert {k: obs[f"goal.{k}"] for k in goal} == pytest.approx(goal)
        last = observations[-1]["joint_positions"]
        assert all(abs(last[j] - goal[j]) <= 0.1 for j in goal)
        assert episode["total_reward"] < 0  # minus the distance, summed


def test_a_policy_that_holds_still_does_not_reach_a_random_goal(tmp_path: Any) -> None:
    report = _eval(tmp_path, "mock", {"amplitude": 0.0}, n=3, seed=40)
    assert [e["success"] for e in report["episodes"]] == [False, False, False]
    assert all(e["steps_advanced"] == SPEC["max_steps"] for e in report["episodes"])


def test_the_predicate_and_the_reward_read_the_goal_from_the_observation() -> None:
    ctx = {"obs": {"goal.a": 0.5, "goal.b": -0.2}, "joints": {"a": 0.45, "b": -0.2, "c": 3.0}}
    assert joint_near_goal(ctx, tolerance=0.1)
    assert not joint_near_goal(ctx, tolerance=0.01)
    assert not joint_near_goal({"obs": {}, "joints": {"a": 0.0}})  # no goal: never a success
    assert joint_goal_distance(ctx) == pytest.approx(0.05)


@pytest.mark.parametrize(
    ("goal", "needle"),
    [
        ({"joints": {"shoulder_pan": [1.0, -1.0]}}, "low <= high"),
        ({"joints": {"shoulder_pan": [0.0, float("nan")]}}, "finite"),
        ({"joints": {}}, "at least one joint"),
        ({"targets": {"shoulder_pan": [0, 1]}}, "must be {'joints'"),
    ],
)
def test_a_bad_goal_is_refused_by_field(goal: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=r"so101_reach_random\['goal'\]") as err:
        validate_spec({**SPEC, "goal": goal}, name="so101_reach_random")
    assert needle in str(err.value)


def test_a_goal_on_a_joint_the_robot_lacks_is_refused_before_the_episode(tmp_path: Any) -> None:
    cell = SimWorkcell(trace_dir=None)
    out = cell.evaluate_benchmark(
        {**SPEC, "goal": {"joints": {"knee": [0.0, 1.0]}}}, policy_provider="scripted_goal",
        n_episodes=1, trace_dir=str(tmp_path), progress=False,
    )  # fmt: skip
    assert out["status"] == "error"
    assert "'knee'" in out["content"][0]["text"]


def test_the_goal_expert_refuses_targets_and_an_observation_without_goal() -> None:
    from robokernel_ros.policies import create_policy

    with pytest.raises(ValueError, match="targets"):
        create_policy("scripted_goal", targets=[[0.0]])
    policy = create_policy("scripted_goal")
    policy.set_robot_state_keys(["shoulder_pan"])
    with pytest.raises(ValueError, match="goal"):
        policy.get_actions({"joint_positions": {"shoulder_pan": 0.0}})
