"""run_policy on real MuJoCo: result fields, binding health, seeds, predicates, async_rtc, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import RecordingFrameError, SimWorkcell, envelope_json, envelope_text

RESULT_FIELDS = [
    "robot_name",
    "policy",
    "instruction",
    "n_steps",
    "elapsed_s",
    "stopped_early",
    "stopped_reason",
    "actions_applied",
    "steps_advanced",
    "action_errors",
    "action_resolution_rate",
    "partial_action_failure_rate",
    "video_path",
    "video_frames",
    "video_fps",
    "sim_time_s",
    "stop_when_true_at_reset",
    "stop_when_reset_warning",
    "chunk_prefetch_enabled",
    "policy_rtc_enabled",
    "chunk_prefetch_chunks_acquired",
    "chunk_prefetch_hits",
    "chunk_prefetch_blocks",
    "avg_inference_ms",
    "max_inference_ms",
    "rtc_async_enabled",
    "rtc_chunks_acquired",
    "rtc_prefetch_hits",
    "rtc_prefetch_blocks",
    "rtc_avg_inference_ms",
    "rtc_max_inference_ms",
    "positional_fallback_used",
    "generic_state_keys_used",
    "missing_state_keys_used",
    "policy_load_time_s",
    "policy_load_cache_hit",
    "policy_resident_rss_mb",
    "trace_path",
    "bag_path",
]


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"))
    c.add_robot("arm", "so101")
    yield c
    c.close()


def run(cell, **kwargs):
    out = cell.run_policy("arm", **kwargs)
    return out, envelope_json(out)


def test_result_has_every_field_and_is_strict_json(cell):
    out, j = run(cell, n_steps=12, seed=0, instruction="wave")
    assert out["status"] == "success", envelope_text(out)
    assert set(RESULT_FIELDS) <= set(j), sorted(set(RESULT_FIELDS) - set(j))
    json.dumps(out.envelope(), allow_nan=False)  # the envelope is JSON as is
    assert j["robot_name"] == "arm" and j["policy"] == "mock" and j["instruction"] == "wave"
    assert j["n_steps"] == 12 and j["steps_advanced"] == 12 and j["actions_applied"] == 12
    assert j["stopped_reason"] == "budget" and j["stopped_early"] is False
    assert j["sim_time_s"] == pytest.approx(12 / 50.0)
    assert j["elapsed_s"] > 0 and j["action_resolution_rate"] == 1.0 and j["action_errors"] == {}
    assert j["trace_path"] and load_trace(j["trace_path"]).meta["outcome"] == "truncated"
    assert j["bag_path"] == str(Path(j["trace_path"]) / "bag") and j["video_path"] is None
    for alias, name in (
        ("rtc_chunks_acquired", "chunk_prefetch_chunks_acquired"),
        ("rtc_async_enabled", "chunk_prefetch_enabled"),
    ):
        assert j[alias] == j[name]


def test_duration_sets_horizon_unless_n_steps_given(cell):
    _, j = run(cell, duration=0.2, control_frequency=50.0, trace_dir=None)
    assert j["steps_advanced"] == 10
    _, j = run(cell, duration=5.0, n_steps=4, trace_dir=None)
    assert j["steps_advanced"] == 4


def test_partial_key_failure_is_operational_with_a_note(cell):
    out, j = run(cell, n_steps=10, policy_config={"extra_keys": ["bogus"]}, trace_dir=None)
    assert out["status"] == "success"
    assert j["actions_applied"] == 10
    assert j["action_errors"] == {"bogus": 10}
    assert j["partial_action_failure_rate"] == 1.0
    assert j["action_resolution_rate"] == pytest.approx(6 / 7)
    assert "10/10 action steps had unresolved keys (bogus)" in envelope_text(out)


def test_no_resolved_key_is_an_error(cell):
    out, j = run(cell, n_steps=6, policy_config={"key_mode": "generic"}, trace_dir=None)
    assert out["status"] == "error"
    assert j["actions_applied"] == 0 and j["steps_advanced"] == 6
    assert j["generic_state_keys_used"] is True
    assert "no action commanded the robot" in envelope_text(out)


def test_joint_keyed_steps_are_excluded_not_scored(cell):
    class JointKeyed(MockPolicy):
        def get_actions(self, observation, instruction="", **kw):
            return [{f"{k}_joint": 0.0 for k in self.action_keys}]

    # so101's joints share the actuator names, so key by names that are joint-like but absent:
    # the step names nothing of the robot -> credited as unresolved
    out, j = run(cell, n_steps=3, policy_object=JointKeyed(), trace_dir=None)
    assert j["actions_applied"] == 0 and out["status"] == "error"


def _comparable(trace):
    skip = {"started_at", "run_id", "elapsed_s", "inference_s", "wall"}

    def clean(value):
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in skip}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return [(e.kind, e.step, e.t, clean(e.data)) for e in trace.events]


def test_seed_makes_traces_bit_identical(cell):
    config = {"noise": 0.2, "amplitude": 0.5}
    _, a = run(cell, n_steps=25, seed=7, policy_config=config)
    _, b = run(cell, n_steps=25, seed=7, policy_config=config)
    _, c = run(cell, n_steps=25, seed=8, policy_config=config)
    ta, tb, tc = (load_trace(x["trace_path"]) for x in (a, b, c))
    assert _comparable(ta) == _comparable(tb)
    qa = [e.data["state"]["qpos"] for e in ta.of_kind("privileged")]
    qc = [e.data["state"]["qpos"] for e in tc.of_kind("privileged")]
    assert qa[-1] != qc[-1]  # another seed, another trajectory
    assert qa[-1] != qa[0]  # and the robot moved


def test_stop_when_predicate_ends_the_rollout(cell):
    out, j = run(cell, n_steps=50, stop_when={"predicate": "step_at_least", "n": 7}, trace_dir=None)
    assert out["status"] == "success"
    assert (
        j["steps_advanced"] == 7
        and j["stopped_reason"] == "predicate"
        and j["stopped_early"] is True
    )
    assert j["stop_predicate"] == "step_at_least(n=7)"
    out, j = run(cell, n_steps=50, stop_when=[{"sim_time_beyond": {"t": 0.11}}], trace_dir=None)
    assert j["steps_advanced"] == 6 and j["stopped_reason"] == "predicate"


def test_stop_when_true_at_reset_is_reported_and_not_fired_at_once(cell):
    out, j = run(
        cell, n_steps=8, stop_when={"predicate": "base_below_z", "z": 10.0}, trace_dir=None
    )
    assert out["status"] == "success"
    assert (
        j["stop_when_true_at_reset"] is True
        and "already true at reset" in j["stop_when_reset_warning"]
    )
    assert j["steps_advanced"] == 8 and j["stopped_reason"] == "budget"


def test_criterion_that_raises_is_fatal_and_named(cell):
    def broken(ctx):
        if ctx["step"] >= 3:
            raise KeyError("nope")
        return False

    out = cell.run_policy("arm", n_steps=10, stop_when=broken, trace_dir=None)
    assert out["status"] == "error"
    text = envelope_text(out)
    assert "criterion 'broken'" in text and "episode 0" in text and "step 3" in text
    assert cell.list_policies_running()["content"][1]["json"]["count"] == 0


def test_async_rtc_resolves_from_the_policy(cell):
    _, j = run(
        cell, n_steps=40, policy_config={"execution_horizon": 8}, action_horizon=8, trace_dir=None
    )
    assert j["chunk_prefetch_enabled"] is True  # chunk-emitting -> overlap
    assert (
        j["chunk_prefetch_hits"] + j["chunk_prefetch_blocks"]
        == j["chunk_prefetch_chunks_acquired"] - 1
    )
    # virtual clock: even a fast inference takes >= 1 step, so the cold start holds once
    assert j["chunk_prefetch_blocks"] == 0 and j["hold_steps"] == 1 and j["actions_applied"] == 39
    _, j = run(cell, n_steps=10, trace_dir=None)
    assert j["chunk_prefetch_enabled"] is False  # single-step mock stays synchronous
    assert j["chunk_prefetch_chunks_acquired"] == 10
    _, j = run(
        cell, n_steps=16, policy_config={"execution_horizon": 8}, async_rtc=False, trace_dir=None
    )
    assert j["chunk_prefetch_enabled"] is False and j["chunk_prefetch_chunks_acquired"] == 2


def test_async_rtc_latency_masks_or_starves(cell):
    # 50 Hz, horizon 8, refill at 4 left: 40 ms (2 steps) hides behind the queue ...
    _, j = run(
        cell,
        n_steps=40,
        policy_config={"execution_horizon": 8, "latency_s": 0.04},
        async_rtc=True,
        trace_dir=None,
    )
    # (only the cold start holds, for the ceil(latency x rate) steps of the first inference)
    assert (
        j["chunk_prefetch_blocks"] == 0 and j["chunk_prefetch_hits"] >= 4 and j["hold_steps"] <= 3
    )
    assert j["avg_inference_ms"] >= 40
    # ... 160 ms (8 steps) cannot: the seam starves and the robot holds
    _, j = run(
        cell,
        n_steps=40,
        policy_config={"execution_horizon": 8, "latency_s": 0.16},
        async_rtc=True,
        trace_dir=None,
    )
    assert j["chunk_prefetch_blocks"] >= 1 and j["hold_steps"] > 0


def test_rtc_inference_timeout_bounds_a_stuck_inference(cell):
    out, j = run(
        cell,
        n_steps=10,
        policy_config={"latency_s": 0.5},
        rtc_inference_timeout_s=0.05,
        trace_dir=None,
    )
    assert out["status"] == "error"
    assert j["error_category"] == "policy_timeout" and j["stopped_reason"].startswith("error")


def test_empty_chunk_is_requeried_once(cell):
    out, j = run(cell, n_steps=5, policy_config={"empty_chunks": [0]}, trace_dir=None)
    assert (
        out["status"] == "success"
        and j["empty_chunks_requeried"] == 1
        and j["actions_applied"] == 5
    )
    out, j = run(cell, n_steps=5, policy_config={"empty_chunks": [0, 1]}, trace_dir=None)
    assert out["status"] == "error" and "empty chunk twice" in j["error"]


def test_policy_error_is_reported(cell):
    out, j = run(cell, n_steps=10, policy_config={"fail_on_call": 2}, trace_dir=None)
    assert (
        out["status"] == "error"
        and j["error_category"] == "policy_error"
        and j["steps_advanced"] == 2
    )


def test_on_frame_is_best_effort_except_recording_errors(cell):
    seen = []

    def flaky(step, obs):
        seen.append(step)
        if step == 2:
            raise ValueError("telemetry hiccup")

    out, j = run(cell, n_steps=5, on_frame=flaky, trace_dir=None)
    assert out["status"] == "success" and seen == [1, 2, 3, 4, 5]

    def lossy(step, obs):
        if step == 3:
            raise RecordingFrameError("disk full")

    out = cell.run_policy("arm", n_steps=5, on_frame=lossy, trace_dir=None)
    assert out["status"] == "error" and "disk full" in envelope_text(out)


def test_observer_sees_the_episode_events(cell):
    kinds = []
    _, j = run(cell, n_steps=3, observer=lambda e: kinds.append(e.kind), trace_dir=None)
    assert kinds[0] == "episode.start" and kinds[-1] == "episode.end" and kinds.count("action") == 3


def test_a_listener_joining_the_workcell_bus_mid_episode_gets_the_rest(cell):
    # the episode's bus forwards to the workcell's only while it has listeners: one that
    # subscribes during the episode must see every event from then on, the trace all of them
    seen = []
    joined = {}

    def join_at_step_5(step, observation):
        if step == 5 and not joined:
            joined["off"] = cell.bus.subscribe(lambda e: seen.append((e.kind, e.step, e.seq)))

    try:
        _, j = run(cell, n_steps=12, on_frame=join_at_step_5)
    finally:
        joined["off"]()
    trace = load_trace(j["trace_path"])
    first = seen[0][2]
    expected = [(e.kind, e.step, e.seq) for e in trace.events if e.seq >= first]
    assert seen == expected and seen[-1][0] == "episode.end"
    assert trace.events[0].kind == "episode.start" and 0 < first < len(trace.events) - 10


def test_policy_object_is_reused_and_reported(cell):
    policy = MockPolicy(seed=1)
    _, j = run(cell, n_steps=3, policy_object=policy, trace_dir=None)
    assert j["policy_load_cache_hit"] is True and policy.action_keys == tuple(
        cell.scene.robot_action_keys("arm")
    )
    _, j = run(cell, n_steps=3, trace_dir=None)
    assert (
        j["policy_load_cache_hit"] is False
        and j["policy_load_time_s"] >= 0
        and j["policy_resident_rss_mb"] > 0
    )


def test_unbound_policy_reports_positional_fallback(cell):
    class Unbound(MockPolicy):
        def set_robot_state_keys(self, keys):
            pass  # ignores the binding: falls back to generic positional keys

    out, j = run(cell, n_steps=3, policy_object=Unbound(), trace_dir=None)
    assert (
        j["positional_fallback_used"] is True
        and j["actions_applied"] == 0
        and out["status"] == "error"
    )


def test_episode_sinks_attach_per_episode_and_report_paths(cell, tmp_path):
    seen = []

    def sink(ctx):
        kinds = []
        unsubscribe = ctx.bus.subscribe(lambda e: kinds.append(e.kind))
        seen.append((ctx.robots, ctx.episode, ctx.call))

        def finish(record):
            unsubscribe()
            return {"bag_path": str(tmp_path / f"{record.run_id}.mcap"), "sink_events": len(kinds)}

        return finish

    cell.episode_sinks.append(sink)
    try:
        _, j = run(cell, n_steps=4)
        report = envelope_json(cell.eval_policy(n_episodes=2, max_steps=3))
    finally:
        cell.episode_sinks.remove(sink)
    assert seen == [
        (("arm",), 0, "run_policy"),
        (("arm",), 0, "eval_policy"),
        (("arm",), 1, "eval_policy"),
    ]
    assert j["bag_path"] == str(tmp_path / f"{j['run_id']}.mcap") and j["sink_events"] > 4
    assert report["bag_paths"] == [
        str(tmp_path / f"{e['run_id']}.mcap") for e in report["episodes"]
    ]


def test_fast_mode_false_paces_at_the_control_rate(cell):
    _, fast = run(cell, n_steps=10, trace_dir=None)
    _, paced = run(cell, n_steps=10, fast_mode=False, trace_dir=None)
    assert paced["elapsed_s"] >= 10 / 50.0 - 0.01  # 10 steps at 50 Hz take >= 0.2 s of wall time
    assert paced["steps_advanced"] == fast["steps_advanced"] == 10
