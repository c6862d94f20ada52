"""EpisodeRecord.execution: what the loop executed (exact and other policy actions, holds,
chunk seams), counted after env.step, against the action events the loop published."""

from __future__ import annotations

import math
from typing import Any

from robokernel_ros.kernel import EpisodeOutcome, EpisodeRunner, Event, EventBus, Timing
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent


def collect(bus: EventBus) -> list[Event]:
    events: list[Event] = []
    bus.subscribe(events.append)
    return events


def actions(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.kind == "action"]


# one proposal per step, by step: exact, then each kind the fast review does not pass
PROPOSALS: list[Any] = [
    {"j0": 0.1, "j1": 0.2},  # exact
    {"j1": 0.2, "j0": 0.1},  # exact, other key order
    {"j0": 5.0, "j1": 0.0},  # out of limits: clipped
    {"j0": 0.1},  # a key missing: filled from the hold action
    {"j0": 0.1, "j1": 0.0, "bogus": 1.0},  # an unknown key
    {"j0": math.nan, "j1": 0.0},  # refused: held in its place, yet a policy action
    "garbage",  # not a mapping: refused
    {"j0": 1, "j1": 0.0},  # an int, not a float: the full review
    {"j0": 0.3, "j1": -0.3},  # exact
]


def test_exact_and_other_actions_are_counted_and_the_others_handed_over() -> None:
    handed: list[Any] = []
    env = PointEnv()
    agent = ScriptedAgent(lambda obs, step, i: PROPOSALS[step])
    runner = EpisodeRunner(env, agent, count_action=handed.append)
    events = collect(runner.bus)
    record = runner.run(len(PROPOSALS))
    assert record.steps == len(PROPOSALS) and record.execution is not None
    ex = record.execution
    assert (ex.exact, ex.other, ex.holds) == (3, 6, 0)
    assert ex.actions == len(PROPOSALS) == sum(not a["hold"] for a in actions(events))
    assert handed == [PROPOSALS[i] for i in (2, 3, 4, 5, 6, 7)]  # in order, the same objects
    assert handed[0] is PROPOSALS[2]
    assert record.compat.actions == ex.actions  # the compat report counted the same actions


def test_holds_and_an_operator_stops_hold_are_executed_holds() -> None:
    env = PointEnv()
    # chunks of 3, every second request empty: the queue runs dry and the loop holds
    agent = ScriptedAgent(lambda obs, step, i: {"j0": 0.1, "j1": 0.1}, chunk_size=3)
    calls = {"n": 0}
    real_act = agent.act

    def act(observation: Any, step: int, **rtc: Any) -> list[Any]:
        calls["n"] += 1
        chunk = real_act(observation, step, **rtc)
        empty = calls["n"] % 2 == 0
        if step >= 6 and not empty:  # stopped with this chunk's actions still queued
            runner.operator.stop("enough")
        return [] if empty else chunk

    agent.act = act  # type: ignore[method-assign]
    runner = EpisodeRunner(env, agent)
    events = collect(runner.bus)
    record = runner.run(20)
    assert record.outcome == EpisodeOutcome.STOPPED
    executed = actions(events)
    ex = record.execution
    assert ex is not None
    assert ex.holds == sum(a["hold"] for a in executed) > 1 and executed[-1]["hold"]
    assert ex.exact == sum(not a["hold"] for a in executed) and ex.other == 0
    assert ex.holds + ex.actions == record.steps == len(executed)


def test_an_action_that_never_reached_the_env_is_not_counted() -> None:
    class Failing(PointEnv):
        def step(self, action: Any) -> Any:
            if self.steps == 4:
                raise OSError("motor bus down")
            return super().step(action)

    record = EpisodeRunner(Failing(), ScriptedAgent(lambda o, s, i: {"j0": 0.1, "j1": 0.1})).run(10)
    assert record.outcome == EpisodeOutcome.ERROR and record.steps == 4
    assert record.execution is not None and record.execution.exact == 4  # not 5

    # an e-stop while the policy computes: the step's action is reviewed, never sent
    env = PointEnv()
    agent = ScriptedAgent(lambda o, s, i: {"j0": 0.1, "j1": 0.1})
    runner = EpisodeRunner(env, agent)
    real_act = agent.act

    def act(observation: Any, step: int, **rtc: Any) -> list[Any]:
        if step == 3:
            runner.operator.estop("panel")
        return real_act(observation, step, **rtc)

    agent.act = act  # type: ignore[method-assign]
    record = runner.run(10)
    assert record.outcome == EpisodeOutcome.ESTOPPED and len(env.received) == 3
    assert record.execution is not None and record.execution.actions == 3
    assert record.compat.actions == 4  # the shield did review the fourth


def test_seams_hit_or_block_as_the_action_events_say() -> None:
    # 100 ms chunks at 50 Hz arrive 5 steps after their request; 8 actions, refill at 4:
    # the first steps hold, and every seam where the queue ran dry first blocks
    for latency_s, refill in ((0.1, 4), (0.1, 1), (0.02, 4)):
        timing = Timing(mode="realtime", clock="virtual", latency_s=latency_s,
                        execution_steps=8, refill_steps=refill)  # fmt: skip
        runner = EpisodeRunner(PointEnv(), ScriptedAgent(ramp_action, chunk_size=8), timing=timing)
        events = collect(runner.bus)
        record = runner.run(60)
        merges = [e.step for e in events if e.kind == "chunk.merge"]
        executed = actions(events)
        hits = blocks = 0
        for prev, step in zip(merges, merges[1:], strict=False):
            held = any(a["hold"] for a in executed if prev <= a["step"] < step)
            blocks += held
            hits += not held
        ex = record.execution
        assert ex is not None and (ex.seam_hits, ex.seam_blocks) == (hits, blocks), latency_s
        assert ex.holds == sum(a["hold"] for a in executed)
        assert hits + blocks == record.chunks - 1
    assert blocks == 0 and hits > 0  # the fast case: every seam a hit


def ramp_action(obs: Any, step: int, i: int) -> dict[str, float]:
    return {"j0": step / 100, "j1": i / 100}


def test_count_action_is_checked_and_a_raising_one_does_not_end_the_episode() -> None:
    import pytest

    with pytest.raises(ValueError, match="count_action=3: must be callable or None"):
        EpisodeRunner(PointEnv(), ScriptedAgent(ramp_action), count_action=3)  # type: ignore[arg-type]

    def boom(action: Any) -> None:
        raise RuntimeError("tally broke")

    agent = ScriptedAgent(lambda o, s, i: {"j0": 5.0, "j1": 0.0})  # clipped: handed over
    record = EpisodeRunner(PointEnv(), agent, count_action=boom).run(5)
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.steps == 5
    assert record.execution is not None and record.execution.other == 5
