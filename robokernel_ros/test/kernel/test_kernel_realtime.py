"""Realtime timing: virtual-clock delay and the aligned merge (by the robot's progress
along its plans: property), holds, watchdog, determinism, the wall clock, and RTC hints."""

from __future__ import annotations

import sys
import threading
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


def executed_between(events: list[Any], start: int, stop: int) -> int:
    """Policy actions (not holds) the trace's `action` events executed at steps start..stop-1."""
    return sum(
        1 for e in events if e.kind == "action" and not e.data["hold"] and start <= e.step < stop
    )


def chunk_row(action: dict[str, float]) -> tuple[int, int]:
    """(the step the chunk was computed at, the row) of a `tagged` action."""
    return round(action["j0"] * 1000), round(action["j1"] * 1000)


def test_delay_steps_is_the_first_boundary_strictly_after_the_latency() -> None:
    """As on the wall clock (bench/fidelity.py): a chunk is never merged in the step that
    asked for it, and one that takes exactly k periods misses the k-th boundary."""
    assert delay_steps(0.0, 50.0) == 1
    assert delay_steps(0.001, 50.0) == 1
    assert delay_steps(0.03, 50.0) == 2
    assert delay_steps(0.08, 50.0) == 5  # 4 whole periods: merged at the 5th boundary
    assert delay_steps(0.1, 50.0) == 6  # 0.1 * 50 = 5.000000000000001 in floats
    assert delay_steps(0.099, 50.0) == 5
    assert delay_steps(0.3, 10.0) == 4  # 0.3 * 10 = 3.0000000000000004
    assert delay_steps(0.29, 100.0) == 30  # 0.29 * 100 = 28.999999999999996


def test_first_chunk_starts_at_its_first_action_after_the_holds() -> None:
    """The robot held while the first chunk was computed (it did not move), so the chunk
    arriving d = 5 steps late drops nothing: it starts at its first action."""
    env = PointEnv(control_hz=50.0)
    runner = EpisodeRunner(
        env, ScriptedAgent(tagged, chunk_size=8), timing=Timing("realtime", latency_s=0.09)
    )
    events = record_events(runner)
    record = runner.run(8)
    actions = [e.data for e in events if e.kind == "action"]
    assert [a["hold"] for a in actions] == [True] * 5 + [False] * 3
    assert record.holds == 5 and record.chunks == 1
    merge = next(e for e in events if e.kind == "chunk.merge")
    assert merge.step == 5 and merge.data["obs_step"] == 0 and merge.data["arrival_step"] == 5
    assert (
        merge.data["dropped"] == 0 and merge.data["kept"] == 8 and merge.data["inference_s"] == 0.09
    )
    assert [chunk_row(a["action"]) for a in actions[5:]] == [(0, 0), (0, 1), (0, 2)]


def test_a_refill_while_executing_drops_exactly_the_executed_actions() -> None:
    """Chunks of 10 refilled at 5 left, d = 3: the robot executes queued actions during
    every inference after the first, so each refill drops the 3 it executed meanwhile
    (all the steps since its observation, as the clock-aligned rule did) and continues at
    the row the robot has reached."""
    runner = EpisodeRunner(
        PointEnv(control_hz=50.0, limit=10.0),
        ScriptedAgent(tagged, chunk_size=10),
        timing=Timing("realtime", latency_s=0.05, refill_steps=5),
    )
    events = record_events(runner)
    record = runner.run(40)
    merges = [e.data for e in events if e.kind == "chunk.merge"]
    assert len(merges) >= 5
    assert merges[0]["dropped"] == 0 and record.holds == 3  # the first chunk's wait only
    for m in merges[1:]:
        assert m["arrival_step"] - m["obs_step"] == 3 == m["dropped"]
        assert m["dropped"] == executed_between(events, m["obs_step"], m["arrival_step"])
        first = next(e for e in events if e.kind == "action" and e.step == m["arrival_step"])
        assert chunk_row(first.data["action"]) == (m["obs_step"], 3)


def test_a_chunk_after_the_queue_ran_empty_drops_only_the_executed_actions(
    tmp_path: Path,
) -> None:
    """Chunks of 6 refilled at 2 left, d = 5: the robot executes the 2 queued actions, then
    holds 3 steps (it did not move), so the refill drops 2, not 5, and the first command
    after the holds is the row after the last one executed. The recorded `dropped` is that
    count."""
    runner = EpisodeRunner(
        PointEnv(control_hz=50.0, limit=10.0),
        ScriptedAgent(tagged, chunk_size=6),
        trace=TraceStore(tmp_path),
        timing=Timing("realtime", latency_s=0.08, refill_steps=2),
    )
    record = runner.run(40)
    trace = load_trace(record.trace_path)
    events = trace.events
    merges = [e.data for e in events if e.kind == "chunk.merge"]
    assert len(merges) >= 3
    assert merges[0]["dropped"] == 0 and merges[0]["kept"] == 6
    for m in merges[1:]:
        assert m["arrival_step"] - m["obs_step"] == 5
        assert m["dropped"] == 2 == executed_between(events, m["obs_step"], m["arrival_step"])
        assert m["kept"] == 4
        first = next(e for e in events if e.kind == "action" and e.step == m["arrival_step"])
        before = next(e for e in events if e.kind == "action" and e.step == m["arrival_step"] - 1)
        assert before.data["hold"] and chunk_row(first.data["action"]) == (m["obs_step"], 2)
    # 5 holds before the first chunk, then 3 before each refill (the last run may be cut
    # short by the end of the episode)
    holds = [e.data["hold"] for e in events if e.kind == "action"]
    runs = [len(r) for r in "".join("h" if h else "." for h in holds).split(".") if r]
    assert runs[0] == 5 and all(r == 3 for r in runs[1:-1]) and 1 <= runs[-1] <= 3
    assert sum(runs) == record.holds


def test_a_chunk_requested_on_an_empty_queue_drops_nothing() -> None:
    """refill_steps=0: every chunk is asked for when the queue is empty, so the robot holds
    through every inference and every chunk starts at its first action."""
    runner = EpisodeRunner(
        PointEnv(control_hz=50.0),
        ScriptedAgent(tagged, chunk_size=4),
        timing=Timing("realtime", latency_s=0.03),
    )
    events = record_events(runner)
    runner.run(30)
    merges = [e.data for e in events if e.kind == "chunk.merge"]
    assert len(merges) >= 4 and all(m["dropped"] == 0 and m["kept"] == 4 for m in merges)
    rows = [
        chunk_row(e.data["action"])[1] for e in events if e.kind == "action" and not e.data["hold"]
    ]
    assert rows[:12] == [0, 1, 2, 3] * 3


def test_the_first_command_out_of_a_hold_is_one_plan_increment_from_rest() -> None:
    """A policy that plans 0.01 per step from the measured position: aligned by progress,
    the command stream moves at most one increment per step through every hold and
    merge (dropping by the clock made it jump d increments out of each hold)."""

    def plan(obs: Any, step: int, i: int) -> dict[str, float]:
        return {"j0": obs["j0"] + 0.01 * (i + 1), "j1": obs["j1"]}

    for refill in (0, 2, 4):
        env = PointEnv(control_hz=50.0, limit=10.0)
        runner = EpisodeRunner(
            env,
            ScriptedAgent(plan, chunk_size=6),
            timing=Timing("realtime", latency_s=0.08, refill_steps=refill),
        )
        record = runner.run(60, seed=3)
        assert record.chunks >= 5 and record.holds > 5
        j0 = [a["j0"] for a in env.received]  # every command, holds included
        steps = [abs(b - a) for a, b in zip(j0, j0[1:], strict=False)]
        assert max(steps) <= 0.01 + 1e-9, (refill, max(steps))
        # each policy action advanced the plan by one increment, each hold by none
        assert j0[-1] - j0[0] == pytest.approx(0.01 * (60 - record.holds))


def test_a_chunk_with_no_latency_merges_at_the_next_step_as_on_the_wall_clock() -> None:
    """latency_s=0 is the wall clock's quickest chunk: asked for at step s, merged at s + 1;
    the step that asked runs what was queued: the first chunk's step held (nothing
    dropped), a refill's step executed the one action left (dropped)."""
    runner = EpisodeRunner(
        PointEnv(control_hz=50.0),
        ScriptedAgent(tagged, chunk_size=4),
        timing=Timing("realtime", latency_s=0.0, refill_steps=1),
    )
    events = record_events(runner)
    record = runner.run(8)
    merges = [e.data for e in events if e.kind == "chunk.merge"]
    assert [(m["obs_step"], m["arrival_step"], m["dropped"]) for m in merges[:2]] == [
        (0, 1, 0),
        (4, 5, 1),
    ]
    assert record.holds == 1  # step 0 only: later requests leave one action queued


def test_refill_requests_while_actions_remain_and_none_in_flight() -> None:
    agent = ScriptedAgent(tagged, chunk_size=6)
    runner = EpisodeRunner(
        PointEnv(control_hz=10.0), agent, timing=Timing("realtime", latency_s=0.15, refill_steps=3)
    )
    record = runner.run(12)
    # d = 2: the request of step 0 merges at 2 (the robot held: 0 dropped, 6 kept); at step
    # 5 three remain (<= refill_steps), so the next request is made at 5 and merges at 7
    # (2 executed meanwhile, dropped; 4 kept) before the queue runs dry; and so on.
    assert [s for s, _ in agent.calls] == [0, 5, 8, 11]
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
    """An action executed at step t from a chunk computed at step s is that chunk's row k,
    k the policy actions (not holds) executed at steps s..t-1: the robot's progress along
    its plans; each merge dropped those executed between its observation and its arrival."""
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
            s, index = chunk_row(data["action"])
            assert index == executed_between(events, s, t)
            assert index < (execution_steps or chunk_size)
        elif event.kind == "chunk.merge":
            data = event.data
            obs_step, arrival = data["obs_step"], data["arrival_step"]
            assert arrival - obs_step == d == event.step - obs_step
            executed = executed_between(events, obs_step, arrival)
            assert executed <= d
            assert data["dropped"] == min(executed, len(data["actions"]))
            assert data["kept"] == len(data["actions"]) - data["dropped"]
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
        return runner.run(50, seed=7).trace_path

    first, second = run_once(), run_once()
    assert first != second
    assert _comparable(first) == _comparable(second)
    assert len(_comparable(first)) > 100
    assert sum(kind == "chunk.merge" for _, kind, *_ in _comparable(first)) >= 5


def test_measured_latency_on_the_virtual_clock() -> None:
    agent = ScriptedAgent(tagged, chunk_size=20, delay_s=0.05)
    timing = Timing("realtime", max_hold_steps=500)
    runner = EpisodeRunner(PointEnv(control_hz=100.0), agent, timing=timing)
    events = record_events(runner)
    runner.run(300)  # room for a loaded machine: the merge comes when the measured latency says
    merge = next(e for e in events if e.kind == "chunk.merge")
    assert merge.data["inference_s"] >= 0.05
    delay = merge.data["arrival_step"] - merge.data["obs_step"]
    assert delay == delay_steps(merge.data["inference_s"], 100.0) >= 5
    assert merge.data["dropped"] == 0  # the first chunk: the robot held meanwhile


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
    assert merges[0].data["dropped"] == 0  # the robot held until the first chunk
    for merge in merges:
        data = merge.data
        obs_step, arrival = data["obs_step"], data["arrival_step"]
        assert arrival == merge.step
        assert data["dropped"] == executed_between(events, obs_step, arrival)
        assert data["inference_s"] >= 0.05 and arrival - obs_step >= 2  # 50 ms at 50 Hz: 2.5 steps
    for event in events:
        if event.kind == "action" and not event.data["hold"]:
            s, index = chunk_row(event.data["action"])
            assert index == executed_between(events, s, event.step)


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
    timing = Timing("realtime", latency_s=0.15, refill_steps=3)
    EpisodeRunner(PointEnv(control_hz=10.0), agent, timing=timing).run(6)
    (s0, first), (s1, second) = agent.calls[:2]
    assert first == {"queued_actions": [], "delay_steps": 2}
    # the first chunk starts at its first action (merged at 2), so 3 remain at step 5
    assert s1 == 5 and second["delay_steps"] == 2
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
    runner = EpisodeRunner(
        PointEnv(),
        agent,
        timing=Timing(mode, execution_steps=3, latency_s=0.0),  # type: ignore[arg-type]
    )
    events = record_events(runner)
    runner.run(9)
    executed = [e.data["action"] for e in events if e.kind == "action" and not e.data["hold"]]
    assert len(executed) >= 6 and max(round(a["j1"] * 1000) for a in executed) == 2


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


WORK_AFTER_COMMAND_S = 0.030


class _SlowToObserveEnv(PointEnv):
    """A PointEnv whose step() notes when it was called, then takes 0 or 30 ms (by turns)
    to return its observation, as a robot env taking joint states and frames after its
    command does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.called_at: list[float] = []

    def step(self, action: Any) -> Any:
        self.called_at.append(time.monotonic())
        if len(self.called_at) % 2:
            time.sleep(WORK_AFTER_COMMAND_S)
        return super().step(action)


def test_an_action_event_is_stamped_when_its_command_is_handed_to_the_env() -> None:
    """The action events' spacing is the command period, not the command period plus the
    env's varying work after it: their walls are spaced as the env.step calls were, though
    each step returned 0 or 30 ms after its call. The bound is half that work: a stamp
    taken after the work is off by all of it, while a loaded machine's preemption between
    the stamp and the call (the 1 ms bound this had) stays far below it."""
    env = _SlowToObserveEnv(control_hz=20.0)
    runner = EpisodeRunner(env, ScriptedAgent(tagged, 4), timing=Timing(clock="wall"))
    events = record_events(runner)
    assert runner.run(8).steps == 8
    walls = [e.wall for e in events if e.kind == "action"]
    assert len(walls) == len(env.called_at) == 8
    for k in range(1, 8):
        spacing = walls[k] - walls[0]
        off = abs(spacing - (env.called_at[k] - env.called_at[0]))
        assert off < WORK_AFTER_COMMAND_S / 2, (k, spacing, off)


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
    # A burst makes ~7 gaps near 0 right after the stall. A loaded machine may deschedule
    # a later step by up to a period, and the pacer keeps its schedule for that (the
    # next gap is short): at most two such gaps, never a run of them.
    short = [i for i, g in enumerate(after) if g < 0.5 / 50.0]
    assert len(short) <= 2 and 0 not in short, [round(g * 1000, 1) for g in gaps]


def test_wall_clock_rtc_hints_are_the_queue_as_of_the_request() -> None:
    """The act thread runs a request after the loop has popped the step's action (it takes
    the GIL when the loop sleeps), yet the queued actions an RTC agent gets are the queue
    at the request: its first one is the action executed at the request's step."""
    agent = ScriptedAgent(tagged, chunk_size=6, supports_rtc=True)
    timing = Timing("realtime", clock="wall", refill_steps=3)
    runner = EpisodeRunner(PointEnv(control_hz=50.0), agent, timing=timing)
    events = record_events(runner)
    runner.run(24)
    executed = {e.step: e.data["action"] for e in events if e.kind == "action"}
    later = [(step, kwargs) for step, kwargs in agent.calls if kwargs["queued_actions"]]
    assert len(later) >= 3
    for step, kwargs in later:
        queued = kwargs["queued_actions"]
        assert len(queued) <= 3
        assert chunk_row(queued[0]) == chunk_row(executed[step]), (step, queued)


class _GreedyAgent:
    """Chunks of 4 tagged actions, each act() first spending `busy_s` in pure Python (the
    GIL held, as a remote policy building its request message does); records its thread."""

    supports_rtc = False

    def __init__(self, busy_s: float) -> None:
        self.busy_s = busy_s
        self.threads: list[Any] = []

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.threads = []

    def act(self, observation: Any, step: int, **kwargs: Any) -> list[dict[str, float]]:
        self.threads.append(threading.current_thread())
        end = time.perf_counter() + self.busy_s
        while time.perf_counter() < end:
            pass
        return [tagged(observation, step, i) for i in range(4)]


def test_wall_clock_act_calls_run_on_one_thread_that_ends_with_the_episode() -> None:
    agent = _GreedyAgent(0.0)
    runner = EpisodeRunner(
        PointEnv(control_hz=100.0), agent, timing=Timing("realtime", clock="wall")
    )
    record = runner.run(20)
    assert record.chunks >= 3
    (thread,) = set(agent.threads)
    assert thread is not threading.main_thread() and thread.name == "kernel-act"
    thread.join(timeout=5.0)  # told to end when the episode did
    assert not thread.is_alive()


def test_wall_clock_command_is_not_delayed_by_the_request_of_its_step() -> None:
    """A request's act() that holds the GIL for 15 ms does not hold up the command of the
    step that made it: the loop keeps the GIL until its pacer sleeps. A thread started per
    request did: Thread.start() waits for the new thread, which then keeps the GIL for the
    interpreter's switch interval (5 ms) before the loop gets it back."""
    agent = _GreedyAgent(0.015)
    timing = Timing("realtime", clock="wall", refill_steps=1)
    runner = EpisodeRunner(PointEnv(control_hz=25.0), agent, timing=timing)
    events = record_events(runner)
    runner.run(24)
    observed = {e.step: e.wall for e in events if e.kind == "observation"}
    requested = [e.step for e in events if e.kind == "chunk.request"]
    delays = sorted(
        e.wall - observed[e.step] for e in events if e.kind == "action" and e.step in requested
    )
    assert len(delays) >= 5
    median = delays[len(delays) // 2]
    assert median < 0.6 * sys.getswitchinterval(), [round(d * 1000, 2) for d in delays]
