"""eval_policy / evaluate_benchmark / replay_episode / run_multi_policy on real MuJoCo."""

from __future__ import annotations

import json

import av
import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text

SCRIPT = {
    "targets": [
        {"shoulder_pan": 0.5, "elbow_flex": 0.3},
        {"shoulder_pan": -0.3, "wrist_flex": 0.4},
    ],
    "tolerance": 0.05,
}
AGGREGATE_FIELDS = [
    "success_rate",
    "avg_reward",
    "pass_hat_k",
    "total_steps",
    "stopped_reasons",
    "video_paths",
    "episodes",
    "n_episodes",
    "positional_fallback_used",
    "generic_state_keys_used",
    "missing_state_keys_used",
    "policy_load_time_s",
    "policy_load_cache_hit",
    "policy_resident_rss_mb",
    "actions_applied",
    "partial_action_failure_rate",
    "chunk_prefetch_enabled",
    "chunk_prefetch_chunks_acquired",
    "rtc_async_enabled",
]


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"))
    c.add_robot("arm", "so101")
    yield c
    c.close()


def frames_in(path):
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_eval_aggregate_fields(cell):
    progress = []
    unsubscribe = cell.bus.subscribe(lambda e: progress.append(e.data), "progress")
    try:
        out = cell.eval_policy(
            n_episodes=3, max_steps=15, seed=0, policy_config={"extra_keys": ["bogus"]}
        )
    finally:
        unsubscribe()
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    json.dumps(out.envelope(), allow_nan=False)
    assert set(AGGREGATE_FIELDS) <= set(j), sorted(set(AGGREGATE_FIELDS) - set(j))
    assert j["robot_name"] == "arm"  # auto-resolved: the sole robot
    assert j["n_episodes"] == 3 and len(j["episodes"]) == 3
    assert j["total_steps"] == 45 and j["stopped_reasons"] == ["budget"] * 3
    assert j["success_rate"] == 0.0 and j["pass_hat_k"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    assert max(e["partial_action_failure_rate"] for e in j["episodes"]) == 1.0
    assert j["action_errors"] == {"bogus": 45}
    assert [e["seed"] for e in j["episodes"]] == [0, 1, 2]  # seeded per episode
    assert [e["policy_load_cache_hit"] for e in j["episodes"]] == [False, True, True]
    assert j["chunk_prefetch_enabled"] is False and j["rtc_async_enabled"] is False
    assert len({e["trace_path"] for e in j["episodes"]}) == 3
    assert [p["episode"] for p in progress] == [0, 1, 2] and progress[-1]["episodes_done"] == 3


def test_scripted_task_scores_success(cell):
    out = cell.eval_policy(
        "arm", policy_provider="scripted", policy_config=SCRIPT, n_episodes=2, max_steps=150
    )
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    assert (
        j["success_rate"] == 1.0 and j["pass_hat_k"] == {"1": 1.0, "2": 1.0} and j["successes"] == 2
    )
    assert all(e["stop_predicate"] == "ScriptedPolicy.is_success" for e in j["episodes"])
    assert all(e["steps_advanced"] < 150 for e in j["episodes"])
    # a success_fn wins over the task's own criterion
    out = cell.eval_policy(
        policy_provider="scripted", policy_config=SCRIPT, max_steps=40, success_fn=lambda ctx: False
    )
    assert envelope_json(out)["success_rate"] == 0.0
    # too short a budget: the task is not done
    out = cell.eval_policy(policy_provider="scripted", policy_config=SCRIPT, max_steps=10)
    assert envelope_json(out)["success_rate"] == 0.0 and envelope_json(out)["stopped_reasons"] == [
        "budget"
    ]


def test_success_fn_that_raises_is_fatal_and_named(cell):
    def judge(ctx):
        if ctx["episode"] == 1 and ctx["step"] == 4:
            raise ValueError("bad judge")
        return False

    out = cell.eval_policy(n_episodes=3, max_steps=10, success_fn=judge)
    text = envelope_text(out)
    assert (
        out["status"] == "error"
        and "success_fn judge" in text
        and "episode 1" in text
        and "step 4" in text
    )


def test_eval_with_no_applied_action_refuses_the_aggregate(cell):
    out = cell.eval_policy(n_episodes=2, max_steps=5, policy_config={"key_mode": "generic"})
    assert out["status"] == "error" and "actions_applied=0" in envelope_text(out)


def test_eval_is_reproducible(cell):
    config = {"noise": 0.1}
    a = envelope_json(cell.eval_policy(n_episodes=2, max_steps=20, seed=5, policy_config=config))
    b = envelope_json(cell.eval_policy(n_episodes=2, max_steps=20, seed=5, policy_config=config))
    qa = [
        [e.data["state"]["qpos"] for e in load_trace(x["trace_path"]).of_kind("privileged")]
        for x in a["episodes"]
    ]
    qb = [
        [e.data["state"]["qpos"] for e in load_trace(x["trace_path"]).of_kind("privileged")]
        for x in b["episodes"]
    ]
    assert qa == qb and qa[0] != qa[1]


def test_eval_videos_one_per_episode_decode_with_expected_frames(cell, tmp_path):
    out = cell.eval_policy(
        n_episodes=2,
        max_steps=20,
        video={"path": str(tmp_path / "eval.mp4"), "fps": 25, "width": 64, "height": 48},
    )
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    assert j["video_paths"] == [str(tmp_path / "eval_ep0.mp4"), str(tmp_path / "eval_ep1.mp4")]
    for episode, path in zip(j["episodes"], j["video_paths"], strict=True):
        assert (
            episode["video_fps"] == 25 and episode["video_frames"] == 10
        )  # 20 steps at 50 Hz -> 25 fps
        assert frames_in(path) == 10
    # run_policy: fps capped to the control rate, one frame per step
    out = cell.run_policy(
        "arm", n_steps=12, video={"path": str(tmp_path / "run.mp4"), "fps": 200, "w": 32, "h": 32}
    )
    j = envelope_json(out)
    assert j["video_fps"] == 50.0 and j["video_frames"] == 12 and frames_in(j["video_path"]) == 12


def test_go2_walk_forward_fails_a_zero_policy_for_the_right_reason():
    cell = SimWorkcell(trace_dir=None)
    try:
        assert (
            envelope_json(cell.list_benchmarks())["benchmarks"] == []
        )  # opt-in: nothing registered on import
        specs = cell.builtin_benchmark_specs()
        specs["go2_walk_forward"]["max_steps"] = 1  # a forked copy ...
        cell.register_builtin_benchmarks()
        listed = envelope_json(cell.list_benchmarks())["benchmarks"]
        assert [b["name"] for b in listed] == ["go2_walk_forward", "so101_reach_random"] and listed[
            0
        ]["max_steps"] == 500  # ... not the registry
        out = cell.evaluate_benchmark(
            "go2_walk_forward",
            policy_provider="mock",
            policy_config={"amplitude": 0.0},
            n_episodes=2,
        )
        j = envelope_json(out)
        assert out["status"] == "success", envelope_text(out)
        assert j["success_rate"] == 0.0 and j["benchmark"] == "go2_walk_forward"
        for episode in j["episodes"]:
            assert episode["outcome"] == "failure"
            assert (
                episode["stop_predicate"] == "base_below_z(z=0.15)"
            )  # the height collapse, not a topple
            assert (
                episode["steps_advanced"] < 100
                and episode["actions_applied"] == episode["steps_advanced"]
            )
            assert episode["total_reward"] > 0  # the dense reward is shaped, not a constant
        assert envelope_json(cell.list_policies_running())["count"] == 0
        assert cell.scene.robots() == []  # the benchmark ran in its own scene
    finally:
        cell.close()


def test_replay_repeats_a_recorded_episode(cell, tmp_path):
    recorded = envelope_json(
        cell.run_policy("arm", n_steps=20, seed=2, policy_config={"noise": 0.1}, trace_dir=tmp_path)
    )
    out = cell.replay_episode(recorded["trace_path"], trace_dir=None)
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    assert j["recorded_steps"] == 20 and j["steps_advanced"] == 20 and j["actions_applied"] == 20
    assert j["max_qpos_divergence"] == pytest.approx(0.0, abs=1e-9)
    # a folder of run directories: episode picks one
    out = cell.replay_episode(str(tmp_path), episode=0, trace_dir=None)
    assert (
        out["status"] == "success" and envelope_json(out)["replayed_from"] == recorded["trace_path"]
    )
    bad = cell.replay_episode(str(tmp_path), episode=3)
    assert (
        bad["status"] == "error"
        and "episode=3" in envelope_text(bad)
        and "1 recorded episodes" in envelope_text(bad)
    )
    assert cell.replay_episode(str(tmp_path / "nope"))["status"] == "error"


def test_run_multi_policy_drives_both_robots():
    cell = SimWorkcell(trace_dir=None)
    try:
        cell.add_robot("a", "so101")
        cell.add_robot("b", "so101", pos=(0.5, 0, 0))
        out = cell.run_multi_policy(
            {
                "a": "mock",
                "b": {
                    "policy_provider": "mock",
                    "policy_config": {"execution_horizon": 4, "extra_keys": ["x"]},
                },
            },
            n_steps=12,
            action_horizon={"a": 1, "b": 4},
            instructions={"a": "left", "b": "right"},
        )
        j = envelope_json(out)
        assert out["status"] == "success", envelope_text(out)
        assert j["actions_applied_per_robot"] == {"a": 12, "b": 12} and j["steps_advanced"] == 12
        assert (
            j["per_robot"]["b"]["action_errors"] == {"x": 12}
            and j["per_robot"]["a"]["action_errors"] == {}
        )
        assert j["action_errors"] == {"b/x": 12}
        policy = MockPolicy()
        out = cell.run_multi_policy({"a": policy}, n_steps=3)
        assert out["status"] == "success" and policy.action_keys == tuple(
            cell.scene.robot_action_keys("a")
        )
    finally:
        cell.close()
