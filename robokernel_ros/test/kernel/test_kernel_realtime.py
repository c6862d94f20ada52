"""Realtime timing: virtual-clock delay and aligned merge (property), holds, watchdog,
determinism, the wall clock, and RTC hints."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robokernel_ros.kernel import (
    EpisodeOutcome,
    EpisodeRunner,
    Event,
    EventBus,
    Timing,
    TraceStore,
    delay_steps,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent


def tagged(obs: Any, step: int, i: int) -> dict[str, float]:
    """j0 encodes the step the chunk was computed at, j1 the index in the chunk."""
    return {"j0": step / 1000, "j1": i / 1000}


def record_events(runner: EpisodeRunner) -> list[Event]:
    events: list[Event] = []
    runner.bus.subscribe(events.append)
    return events


def test_delay_steps_rounds_up_with_tolerance() -> None:
    assert delay_steps(0.1, 50.0) == 5  # 0.1 * 50 = 5.000000000000001 in floats
    assert delay_steps(0.101, 50.0) == 6
    assert delay_steps(0.0, 50.0) == 0
    assert delay_steps(0.3, 10.0) == 3


def test_virtual_clock_merges_after_the_latency_and_holds_meanwhile() -> None:
    env = PointEnv(control_hz=50.0)
    runner = EpisodeRunner(
        env, ScriptedAgent(tagged, chunk_size=8), timing=Timing("realtime", latency_s=0.1)
    )
    events = record_events(runner)
    record = runner.run(8)
    actions = [e.data for e in events if e.kind == "action"]
    assert [a["hold"] for a in actions] == [True] * 5 + [False] * 3
    assert record.holds == 5 and record.chunks == 1
    merge = next(e for e in events if e.kind == "chunk.merge")
    assert merge.step == 5 and merge.data["obs_step"] == 0 and merge.data["arrival_step"] == 5
    assert (
        merge.data["dropped"] == 5 and merge.data["kept"] == 3 and merge.data["inference_s"] == 0.1
    )
    assert [round(a["action"]["j1"] * 1000) for a in actions[5:]] == [5, 6, 7]


def test_refill_requests_while_actions_remain_and_none_in_flight() -> None:
    agent = ScriptedAgent(tagged, chunk_size=6)
    runner = EpisodeRunner(
        PointEnv(control_hz=10.0), agent, timing=Timing("realtime", latency_s=0.2, refill_steps=3)
    )
    record = runner.run(12)
    # d = 2: the request of step 0 merges at 2 (2 dropped, 4 kept); at step 3 three remain
    # (<= refill_steps), so the next request is made at 3 and merges at 5 before the queue runs dry.
    assert [s for s, _ in agent.calls] == [0, 3, 6, 9]
    assert record.holds == 2  # only before the first chunk arrived


def test_watchdog_ends_the_episode_after_max_hold_steps() -> None:
    timing = Timing("realtime", latency_s=1.0, max_hold_steps=10)
    record = EpisodeRunner(PointEnv(control_hz=50.0), ScriptedAgent(tagged, 4), timing=timing).run(
        100
    )
    assert record.outcome == EpisodeOutcome.WATCHDOG and record.steps == 10 and record.holds == 10
    assert "max_hold_steps=10" in record.status


@settings(max_examples=150, deadline=None)
@given(
    control_hz=st.sampled_from([10.0, 20.0, 50.0, 100.0]),
    latency_s=st.floats(0.0, 0.25),
    chunk_size=st.integers(1, 12),
    refill=st.integers(0, 6),
    execution_steps=st.one_of(st.none(), st.integers(1, 12)),
    max_steps=st.integers(1, 50),
)
def test_property_aligned_merge(
    control_hz: float,
    latency_s: float,
    chunk_size: int,
    refill: int,
    execution_steps: int | None,
    max_steps: int,
) -> None:
    """An action executed at step t from a chunk computed at step s is that chunk's action t - s."""
    env = PointEnv(control_hz=control_hz, limit=10.0)
    timing = Timing(
        "realtime",
        latency_s=latency_s,
        refill_steps=refill,
        execution_steps=execution_steps,
        max_hold_steps=10_000,
    )
    agent = ScriptedAgent(tagged, chunk_size=chunk_size)
    runner = EpisodeRunner(env, agent, timing=timing)
    events = record_events(runner)
    record = runner.run(max_steps)
    d = delay_steps(latency_s, control_hz)
    holds = 0
    for event in events:
        if event.kind == "action":
            t, data = event.step, event.data
            if data["hold"]:
                holds += 1
                continue
            s, index = round(data["action"]["j0"] * 1000), round(data["action"]["j1"] * 1000)
            assert index == t - s
            assert index < (execution_steps or chunk_size)
        elif event.kind == "chunk.merge":
            data = event.data
            assert data["arrival_step"] - data["obs_step"] == d == event.step - data["obs_step"]
            assert data["dropped"] == min(d, len(data["actions"]))
    assert holds == record.holds
    requests = sum(e.kind == "chunk.request" for e in events)
    merges = sum(e.kind == "chunk.merge" for e in events)
    assert requests - merges in (0, 1)  # at most one request in flight


def _comparable(trace_dir: Path) -> list[tuple[Any, ...]]:
    trace = load_trace(trace_dir)
    out = []
    for e in trace.events:
        data = {k: v for k, v in e.data.items() if k not in ("run_id", "started_at", "elapsed_s")}
        out.append((e.seq, e.kind, e.step, e.t, data))
    return out


def test_virtual_clock_traces_are_deterministic(tmp_path: Path) -> None:
    def noisy(obs: Any, step: int, i: int) -> dict[str, float]:
        return {"j0": float(obs["state"][0]) + 0.01 * i, "j1": 0.3}

    def run_once() -> Path:
        timing = Timing("realtime", latency_s=0.06, refill_steps=2)
        runner = EpisodeRunner(
            PointEnv(control_hz=50.0),
            ScriptedAgent(noisy, 5),
            trace=TraceStore(tmp_path),
            timing=timing,
        )
        return runner.run(40, seed=7).trace_path

    first, second = run_once(), run_once()
    assert first != second
    assert _comparable(first) == _comparable(second)
    assert len(_comparable(first)) > 100


def test_measured_latency_on_the_virtual_clock() -> None:
    agent = ScriptedAgent(tagged, chunk_size=20, delay_s=0.05)
    timing = Timing("realtime", max_hold_steps=500)
    runner = EpisodeRunner(PointEnv(control_hz=100.0), agent, timing=timing)
    events = record_events(runner)
    runner.run(300)  # room for a loaded machine: the merge comes when the measured latency says
    merge = next(e for e in events if e.kind == "chunk.merge")
    assert merge.data["inference_s"] >= 0.05
    assert merge.data["dropped"] == delay_steps(merge.data["inference_s"], 100.0) >= 5


def test_wall_clock_ticks_at_control_rate_and_measures_arrival() -> None:
    agent = ScriptedAgent(tagged, chunk_size=10, delay_s=0.05)
    timing = Timing("realtime", clock="wall", refill_steps=3)
    runner = EpisodeRunner(PointEnv(control_hz=50.0), agent, timing=timing)
    events = record_events(runner)
    started = time.monotonic()
    record = runner.run(30)
    elapsed = time.monotonic() - started
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.steps == 30
    assert elapsed >= 29 / 50  # paced, not as fast as possible
    merges = [e for e in events if e.kind == "chunk.merge"]
    assert merges
    for merge in merges:
        data = merge.data
        assert (
            data["arrival_step"] == merge.step
            and data["dropped"] == data["arrival_step"] - data["obs_step"]
        )
        assert data["inference_s"] >= 0.05 and data["dropped"] >= 2  # 50 ms at 50 Hz is 2.5 steps
    for event in events:
        if event.kind == "action" and not event.data["hold"]:
            s, index = (
                round(event.data["action"]["j0"] * 1000),
                round(event.data["action"]["j1"] * 1000),
            )
            assert index == event.step - s


def test_wall_clock_timeout_is_detected_while_in_flight() -> None:
    agent = ScriptedAgent(tagged, chunk_size=10, delay_s=2.0)
    timing = Timing("realtime", clock="wall")
    started = time.monotonic()
    record = EpisodeRunner(PointEnv(control_hz=50.0), agent, timing=timing, act_timeout_s=0.1).run(
        1000
    )
    assert record.outcome == EpisodeOutcome.ERROR and record.error["category"] == "policy_timeout"
    assert time.monotonic() - started < 1.5  # detected while act() still runs


def test_rtc_agent_receives_queued_actions_and_delay() -> None:
    agent = ScriptedAgent(tagged, chunk_size=6, supports_rtc=True)
    timing = Timing("realtime", latency_s=0.2, refill_steps=3)
    EpisodeRunner(PointEnv(control_hz=10.0), agent, timing=timing).run(6)
    (s0, first), (s1, second) = agent.calls[:2]
    assert first == {"queued_actions": [], "delay_steps": 2}
    assert s1 == 3 and second["delay_steps"] == 2
    assert [round(a["j1"] * 1000) for a in second["queued_actions"]] == [3, 4, 5]

    plain = ScriptedAgent(tagged, chunk_size=6)
    EpisodeRunner(PointEnv(control_hz=10.0), plain, timing=timing).run(6)
    assert all(kwargs == {} for _, kwargs in plain.calls)


def test_bus_events_reach_a_live_subscriber_in_realtime() -> None:
    bus = EventBus()
    steps: list[int] = []
    bus.subscribe(lambda e: steps.append(e.step), kinds=["action"])
    EpisodeRunner(
        PointEnv(), ScriptedAgent(tagged, 3), bus=bus, timing=Timing("realtime", latency_s=0.02)
    ).run(5)
    assert steps == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["sync", "realtime"])
def test_sync_and_realtime_both_respect_execution_steps(mode: str) -> None:
    agent = ScriptedAgent(tagged, chunk_size=8)
    env = PointEnv()
    EpisodeRunner(env, agent, timing=Timing(mode, execution_steps=3, latency_s=0.0)).run(9)  # type: ignore[arg-type]
    assert max(round(a["j1"] * 1000) for a in env.received) == 2


def test_sync_on_the_wall_clock_is_paced_at_control_rate() -> None:
    started = time.monotonic()
    record = EpisodeRunner(
        PointEnv(control_hz=50.0), ScriptedAgent(tagged, 4), timing=Timing(clock="wall")
    ).run(10)
    assert record.steps == 10 and record.holds == 0 and time.monotonic() - started >= 9 / 50


class _StallingAgent:
    """Chunks of 4 tagged actions; the second act() takes `stall_s`."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.calls = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.calls = 0

    def act(self, observation: Any, step: int, **kwargs: Any) -> list[dict[str, float]]:
        self.calls += 1
        if self.calls == 2:
            time.sleep(self.stall_s)
        return [tagged(observation, step, i) for i in range(4)]


def test_wall_clock_restarts_its_schedule_after_a_stall_instead_of_bursting() -> None:
    """A step 150 ms late (7.5 periods at 50 Hz) is not followed by 7 back-to-back steps:
    the commands stay a period apart, as the robot's controller expects."""
    runner = EpisodeRunner(
        PointEnv(control_hz=50.0), _StallingAgent(0.15), timing=Timing(clock="wall")
    )
    events = record_events(runner)
    record = runner.run(16)
    assert record.steps == 16
    walls = [e.wall for e in events if e.kind == "action"]
    gaps = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    stall = max(range(len(gaps)), key=gaps.__getitem__)
    assert gaps[stall] >= 0.15  # the stalled act() (step 4's chunk)
    after = gaps[stall + 1 :]
    assert len(after) >= 10
    assert min(after) >= 0.5 / 50.0, [round(g * 1000, 1) for g in gaps]
