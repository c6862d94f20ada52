"""Scorers on hand-built traces with known answers; the CLI; shadow replay."""

from __future__ import annotations

import json

import pytest
from bag_fixtures import ChunkAgent, NumpyArm
from robokernel_ros.cli.score import main as score_main
from robokernel_ros.kernel import EpisodeRunner
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.timing import Timing
from robokernel_ros.kernel.trace import TraceStore, load_trace
from robokernel_ros.scoring import (
    PredicateScorer,
    callable_scorer,
    register_scorer,
    score_paths,
    score_trace,
    shadow_replay,
)
from robokernel_ros.tasks.statistics import wilson_interval


def test_known_answers_from_run_dir_and_bag(record_episode):
    run_dir, _ = record_episode()  # success at step 9, hold at 5, intervention at 7
    for path in (run_dir, run_dir / "bag"):
        s = score_trace(load_trace(path))
        assert s["success"] is True and s["outcome"] == "success"
        assert s["length"] == 10 and s["return"] == 1.0
        assert s["time_to_success_s"] == pytest.approx(0.9)
        assert s["holds"] == 1 and s["hold_ratio"] == pytest.approx(0.1)
        assert s["stale_action_ratio"] == pytest.approx(0.1)  # sync: only the hold is stale
        assert s["mean_action_age_steps"] == pytest.approx((0 + 1 + 2 + 3 + 0 + 2 + 3 + 0 + 1) / 9)
        assert s["chunks"] == 3
        assert s["chunk_latency_p50_ms"] == pytest.approx(11.0)
        assert s["chunk_latency_p99_ms"] == pytest.approx(11.98)
        assert s["effective_control_hz"] == pytest.approx(1000.0)  # wall = step * 1 ms
        assert s["nominal_control_hz"] == 10.0
        assert s["shield_interventions"] == 1 and s["shield_interventions_by_guard"] == {
            "position": 1
        }
        assert s["action_jerk_rms"] == pytest.approx(0.0, abs=1e-9)  # linear ramps


def test_jerk_of_a_cubic_is_known(record_episode):
    c = 0.001
    run_dir, _ = record_episode(
        storage=None,
        holds=(),
        action_fn=lambda s: {"shoulder": c * s**3, "elbow": 0.0, "gripper": 0.0},
    )
    s = score_trace(load_trace(run_dir))
    # third difference of c*s^3 is 6c per step^3; at 10 Hz: 6c * 10^3; keys elbow/gripper contribute 0
    expected = (6 * c * 10**3) * (1 / 3) ** 0.5
    assert s["action_jerk_rms"] == pytest.approx(expected)


def test_aggregate_success_rate_with_wilson_interval(record_episode, tmp_path):
    record_episode(storage=None, root=tmp_path / "runs")
    record_episode(storage=None, root=tmp_path / "runs", success_at=None)
    result = score_paths([tmp_path / "runs"])
    agg = result["aggregate"]
    assert agg["episodes"] == 2 and agg["successes"] == 1 and agg["success_rate"] == 0.5
    lo, hi = agg["success_rate_ci95"]
    assert (lo, hi) == pytest.approx(wilson_interval(1, 2)) and lo == pytest.approx(
        0.0945, abs=1e-3
    )
    assert agg["mean_length"] == pytest.approx((10 + 12) / 2)
    assert agg["mean_return"] == pytest.approx(0.5)
    assert agg["mean_time_to_success_s"] == pytest.approx(0.9)
    assert agg["chunk_latency_p50_ms"] == pytest.approx(11.0)  # pooled over both episodes
    assert agg["total_shield_interventions"] == 2
    assert sorted(e["outcome"] for e in result["episodes"]) == ["failure", "success"]
    assert all(not k.startswith("_") for e in result["episodes"] for k in e)


def test_predicate_success_offline_from_privileged_state(record_episode):
    run_dir, _ = record_episode()
    trace = load_trace(run_dir / "bag")
    above = PredicateScorer({"body_above_z": {"body": "cube", "z": 0.065}}, name="lifted")
    s = above.score(trace)
    assert s == {"lifted_success": True, "lifted_step": 5}  # cube z = 0.02 + 0.01 * step
    never = PredicateScorer({"body_above_z": {"body": "cube", "z": 5.0}}, name="lifted").score(
        trace
    )
    assert never == {"lifted_success": False, "lifted_step": None}


def test_scorer_plugins_and_refusals(record_episode):
    run_dir, _ = record_episode(storage=None)
    plugin = register_scorer(
        callable_scorer("event_count", lambda tr: {"events": len(tr.events)}), replace=True
    )
    try:
        result = score_paths([run_dir])
        assert result["episodes"][0]["events"] == len(load_trace(run_dir).events)
        assert result["aggregate"]["mean_events"] == result["episodes"][0]["events"]
    finally:
        from robokernel_ros.scoring import scorers as S

        S._SCORERS.pop(plugin.name)
    with pytest.raises(ValueError, match="already registered"):
        register_scorer(callable_scorer("outcome", lambda tr: {}))
    with pytest.raises(ValueError, match="needs a non-empty string `name`"):
        register_scorer(object())


def test_score_cli_json_table_and_plot(record_episode, tmp_path, capsys):
    run_dir, _ = record_episode()
    assert score_main([str(run_dir / "bag"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"][0]["length"] == 10 and result["aggregate"]["success_rate"] == 1.0
    png = tmp_path / "episode.png"
    assert score_main([str(run_dir), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "aggregate over 1 episode(s)" in out and "success_rate: 1" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert score_main([str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert score_main([str(run_dir), "--scorers", "nope"]) == 1
    assert "scorer='nope'" in capsys.readouterr().err
    assert score_main([str(run_dir), "--success", "{not json"]) == 1
    root = run_dir.parent
    record_episode(root=root)
    assert score_main([str(root), "--plot", str(tmp_path / "two.png")]) == 1
    assert "exactly one episode" in capsys.readouterr().err


@pytest.mark.parametrize(
    "timing",
    [Timing(), Timing(mode="realtime", refill_steps=2, latency_s=0.12)],
    ids=["sync", "realtime"],
)
def test_shadow_replay_of_the_executing_policy_is_zero(tmp_path, timing):
    store = TraceStore(tmp_path / "runs")
    from robokernel_ros.recording import EpisodeBagMirror

    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    record = EpisodeRunner(NumpyArm(), ChunkAgent(), trace=store, bus=bus, timing=timing).run(
        max_steps=40
    )
    for path in (record.trace_path, sink.last_bag_path):
        trace = load_trace(path)
        same = shadow_replay(trace, ChunkAgent())
        executed = [e for e in trace.of_kind("action") if not e.data.get("hold")]
        assert same.compared == len(executed) > 10 and same.uncovered == 0
        # The executing policy: no difference from what it proposed, and none from what ran
        # except where the shield clipped (the arm's targets pass the +-2 limit late on).
        assert same.max_abs_diff_vs_proposed == 0.0
        assert same.max_abs_diff_unshielded == 0.0
        assert same.shielded_steps == sum(1 for s in same.steps if s.shielded)
        assert all(s.max_abs_diff == 0.0 for s in same.steps if not s.shielded)
        other = shadow_replay(trace, ChunkAgent(step_size=0.06))
        assert other.compared == same.compared
        assert other.max_abs_diff > 0.01
        assert other.per_key_max_abs_diff["j2"] > other.per_key_max_abs_diff["j0"]
        first = other.steps[0]
        assert first.diff["j0"] == pytest.approx(first.shadow["j0"] - first.executed["j0"])
    if timing.mode == "realtime":
        assert same.holds_skipped > 0


def test_robokernel_cli_has_score_and_export(record_episode, capsys):
    from robokernel_ros.cli import main as robokernel

    run_dir, _ = record_episode()
    assert robokernel(["score", str(run_dir / "bag"), str(run_dir.parent), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # the bag and the folder holding its run directory: the same episode twice
    assert [e["length"] for e in result["episodes"]] == [10, 10]
    assert result["aggregate"]["successes"] == 2
    assert robokernel(["bag-recover", str(run_dir / "bag"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"] is True
