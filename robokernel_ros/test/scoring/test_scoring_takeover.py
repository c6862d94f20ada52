"""Takeover figures (docs/operator.md): intervention_share, interventions,
time_to_first_intervention_s per episode and their aggregates, read from the run directory
and from its bag alike (the bag's events carry the intervention fields); an episode run
without a teleop source gets none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.kernel import EpisodeRunner, EventBus, TraceStore, load_trace
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent
from robokernel_ros.recording import EpisodeBagMirror
from robokernel_ros.scoring import format_table, score_paths
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

HZ = 50.0


class Leader:
    """Takes over at the steps of `plan` (step -> verb) with the leader at a fixed pose."""

    name = "leader"

    def __init__(self, plan: dict[int, str]) -> None:
        self.plan = plan
        self.operator: Any = None

    def observe(self, step: int, observation: Any) -> None:
        if step in self.plan:
            assert getattr(self.operator, self.plan[step])(by="test") == ""

    def teleop_action(self, observation: Any) -> dict[str, float]:
        return {"j0": 0.2, "j1": -0.2}


def record(tmp_path: Path, plans: list[dict[int, str] | None]) -> tuple[list[Any], list[Path]]:
    """One episode of 50 steps per plan (None: no teleop source), with their bags."""
    store = TraceStore(tmp_path / "runs")
    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    records = []
    for plan in plans:
        leader = None if plan is None else Leader(plan)
        runner = EpisodeRunner(
            PointEnv(2, control_hz=HZ),
            ScriptedAgent(lambda obs, step, i: {"j0": 0.001 * step, "j1": 0.0}, chunk_size=4),
            trace=store,
            bus=bus,
            teleop=leader,
        )
        if leader is not None:
            leader.operator = runner.operator
        records.append(runner.run(50, seed=0))
    return records, list(sink.bag_paths)


def test_takeover_figures_per_episode_and_aggregate_from_the_trace_and_the_bag(
    tmp_path: Path,
) -> None:
    plans = [
        {10: "correct", 20: "resume", 30: "pause", 35: "correct", 40: "resume"},
        {},  # a teleop source, never used
        {25: "pause"},  # paused to the end
    ]
    records, bags = record(tmp_path, plans)
    by_dir = score_paths([r.trace_path for r in records])
    by_bag = score_paths(bags)
    for result in (by_dir, by_bag):
        figures = [
            {k: e[k] for k in ("intervention_share", "interventions", "intervention_steps")}
            for e in result["episodes"]
        ]
        assert figures == [
            {"intervention_share": 20 / 50, "interventions": 2, "intervention_steps": 20},
            {"intervention_share": 0.0, "interventions": 0, "intervention_steps": 0},
            {"intervention_share": 25 / 50, "interventions": 1, "intervention_steps": 25},
        ]
        firsts = [e["time_to_first_intervention_s"] for e in result["episodes"]]
        assert firsts[0] == pytest.approx(10 / HZ) and firsts[1] is None
        assert firsts[2] == pytest.approx(25 / HZ)
        agg = result["aggregate"]
        assert agg["total_interventions"] == 3
        assert agg["mean_interventions"] == pytest.approx(1.0)
        assert agg["mean_intervention_share"] == pytest.approx((0.4 + 0.0 + 0.5) / 3)
        assert agg["intervened_episode_share"] == pytest.approx(2 / 3)
        assert agg["mean_time_to_first_intervention_s"] == pytest.approx((0.2 + 0.5) / 2)
    table = format_table(by_dir)
    assert "takeovers" in table and "operated" in table
    # the bag holds the per-step fields as the trace does, and its action topic says who drove
    a, b = load_trace(records[0].trace_path), load_trace(bags[0])
    assert [e.data for e in a.of_kind("action")] == [e.data for e in b.of_kind("action")]
    step_12 = b.of_kind("action")[12].data
    assert step_12["intervention"] is True and step_12["human_action"] == {"j0": 0.2, "j1": -0.2}
    assert step_12["policy_action"] == {"j0": 0.012, "j1": 0.0}
    typestore = get_typestore(Stores.ROS2_JAZZY)
    with Reader(bags[0]) as reader:
        conns = [c for c in reader.connections if c.topic == "/robokernel/action"]
        frames = [
            typestore.deserialize_cdr(raw, conn.msgtype).header.frame_id
            for conn, _, raw in reader.messages(connections=conns)
        ]
    assert (
        frames
        == ["policy"] * 10
        + ["teleop"] * 10
        + ["policy"] * 10
        + ["hold"] * 5
        + ["teleop"] * 5
        + ["policy"] * 10
    )


def test_an_episode_without_a_teleop_source_has_no_takeover_figures(tmp_path: Path) -> None:
    records, _ = record(tmp_path, [None])
    result = score_paths([records[0].trace_path])
    assert "interventions" not in result["episodes"][0]
    assert "total_interventions" not in result["aggregate"]
    assert "takeovers" not in format_table(result)
