"""Sentry mode (EpisodeRunner.run_sentry, docs/operator.md): one continuous run recorded
as an episode every N seconds, without a reset and without losing a step: the robot is
sent exactly what one plain run sends, every executed step is in exactly one episode, and
a boundary never splits an intervention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.kernel import (
    EpisodeOutcome,
    EpisodeRunner,
    Timing,
    TraceStore,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent

HZ = 50.0
SAFETY = {"max_velocity": 2.0, "max_acceleration": 20.0}


def follow(obs: Any, step: int, i: int) -> dict[str, float]:
    """A policy of the observation only (not of the step number, which restarts at 0 in
    every episode): j0 up, j1 down, a chunk of 5."""
    return {
        "j0": min(0.9, obs["j0"] + 0.01 * (i + 1)),
        "j1": max(-0.9, obs["j1"] - 0.005 * (i + 1)),
    }


def runner(tmp_path: Path, timing: Timing | None = None, **kwargs: Any) -> EpisodeRunner:
    return EpisodeRunner(
        PointEnv(2, control_hz=HZ),
        ScriptedAgent(follow, chunk_size=5),
        trace=TraceStore(tmp_path),
        timing=timing,
        safety=SAFETY,
        **kwargs,
    )


TIMINGS = [
    None,
    Timing(mode="realtime", clock="virtual", latency_s=0.05, refill_steps=3),
]


@pytest.mark.parametrize("timing", TIMINGS, ids=["sync", "realtime-virtual"])
def test_sentry_episodes_hold_every_step_of_one_plain_run(tmp_path: Path, timing) -> None:
    plain = runner(tmp_path / "plain", timing)
    record = plain.run(100, seed=1)
    sentry = runner(tmp_path / "sentry", timing)
    records = sentry.run_sentry(100, rotate_every_s=0.14, seed=1)  # 7 steps per episode
    assert [r.steps for r in records] == [7] * 14 + [2]
    assert [r.outcome for r in records] == [EpisodeOutcome.TRUNCATED] * 15
    assert all("sentry rotation" in r.status for r in records[:-1])
    assert "max_steps=2" in records[-1].status
    # the robot was sent exactly what the plain run sent it: no hold, no jump, no re-query
    assert sentry.env.received == plain.env.received and len(plain.env.received) == 100
    assert sum(r.holds for r in records) == record.holds
    assert sum(r.chunks for r in records) == record.chunks
    assert sum(r.safety_interventions for r in records) == record.safety_interventions
    assert len(sentry.agent.resets) == 1  # one agent.reset for the whole run
    traces = [load_trace(r.trace_path) for r in records]
    executed = [e.data["action"] for t in traces for e in t.of_kind("action")]
    assert executed == sentry.env.received  # every step in exactly one episode, in order
    for k, trace in enumerate(traces):
        assert [e.step for e in trace.of_kind("action")] == list(range(records[k].steps))
        assert trace.meta["sentry"] == {"index": k, "rotate_every_s": 0.14, "first_step": 7 * k}
    for before, after in zip(traces, traces[1:], strict=False):
        final = before.of_kind("observation")[-1]
        first = after.of_kind("observation")[0]
        assert final.step == 7 and first.step == 0 and final.data["obs"] == first.data["obs"]


class Leader:
    name = "leader"

    def __init__(self, plan: dict[int, str]) -> None:
        self.plan, self.operator, self.step = plan, None, 0

    def observe(self, step: int, observation: Any) -> None:
        verb = self.plan.get(self.step)  # the run's step (the episode's restarts at 0)
        if verb is not None:
            assert getattr(self.operator, verb)(by="test") == ""
        self.step += 1

    def teleop_action(self, observation: Any) -> dict[str, float]:
        return {"j0": -0.2, "j1": 0.2}


def test_a_boundary_waits_for_the_end_of_an_intervention(tmp_path: Path) -> None:
    leader = Leader({5: "correct", 20: "resume", 34: "pause", 37: "resume"})
    sentry = runner(tmp_path, teleop=leader)
    leader.operator = sentry.operator
    records = sentry.run_sentry(40, rotate_every_s=0.14, seed=0)
    # A boundary is the first step boundary at or after 7 steps whose last step the policy
    # drove: run steps 0..20 (the correction 5..19 ran past 7; step 20, the resume's, is
    # the policy's), 21..27, 28..37 (paused from 34 to 36 when 7 steps were up), 38..39.
    assert [r.steps for r in records] == [21, 7, 10, 2]
    traces = [load_trace(r.trace_path) for r in records]
    spans = [
        [(e.kind, e.step) for e in t.events if e.kind.startswith("intervention.")] for t in traces
    ]
    assert spans == [
        [("intervention.start", 5), ("intervention.end", 20)],
        [],
        [("intervention.start", 6), ("intervention.end", 9)],
        [],
    ]
    flags = [e.data["intervention"] for t in traces for e in t.of_kind("action")]
    assert flags == [False] * 5 + [True] * 15 + [False] * 14 + [True] * 3 + [False] * 3
    assert [r.takeover["interventions"] for r in records] == [1, 0, 1, 0]


def test_a_stop_ends_the_sentry_run_and_a_latched_estop_refuses_it(tmp_path: Path) -> None:
    sentry = runner(tmp_path)
    seen: list[int] = []

    def stop_after_20(event: Any) -> None:
        seen.append(event.step)
        if len(seen) == 20:
            sentry.operator.stop(reason="done watching")

    sentry.bus.subscribe(stop_after_20, kinds=["action"])
    records = sentry.run_sentry(1000, rotate_every_s=0.1, seed=0)  # 5 steps per episode
    assert [r.steps for r in records] == [5, 5, 5, 6]  # the stop's hold is the 21st step
    assert records[-1].outcome == EpisodeOutcome.STOPPED
    sentry.operator.estop(by="panel")
    again = sentry.run_sentry(100, rotate_every_s=0.1)
    assert [r.outcome for r in again] == [EpisodeOutcome.ESTOPPED] and again[0].steps == 0


def test_sentry_on_the_wall_clock_loses_no_step(tmp_path: Path) -> None:
    # (the hold watchdog is not under test: a loaded machine may starve the act thread)
    timing = Timing(mode="realtime", clock="wall", refill_steps=3, max_hold_steps=10_000)
    sentry = runner(tmp_path, timing)
    records = sentry.run_sentry(60, rotate_every_s=0.2, seed=0)  # 10 steps per episode
    assert [r.steps for r in records] == [10] * 6
    traces = [load_trace(r.trace_path) for r in records]
    executed = [e.data["action"] for t in traces for e in t.of_kind("action")]
    assert executed == sentry.env.received and len(executed) == 60


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), True, "5"])
def test_a_bad_rotation_period_is_refused_by_name(tmp_path: Path, value: Any) -> None:
    sentry = runner(tmp_path)
    with pytest.raises(ValueError, match=r"rotate_every_s=.*: must be a positive number"):
        sentry.run_sentry(10, rotate_every_s=value)
    assert sentry.env.received == [] and not any(tmp_path.iterdir())
