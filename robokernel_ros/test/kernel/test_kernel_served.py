"""ServedSession: an external harness owns the loop; same shield, events and trace."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from robokernel_ros.kernel import (
    EpisodeOutcome,
    EpisodeRunner,
    OperatorChannel,
    ServedSession,
    Timing,
    TraceStore,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent


def harness_episode(session: ServedSession, env: PointEnv, steps: int, **end: Any) -> Any:
    observation = env.reset(seed=3)
    session.reset(observation, seed=3, instruction="reach")
    reward = 0.0
    for _ in range(steps):
        action = session.step(observation, reward=reward)
        result = env.step(action)
        observation, reward = result.observation, result.reward
    return session.end(reward=reward, final_observation=observation, **end)


def test_served_episode_writes_the_same_kind_of_trace(tmp_path: Path) -> None:
    env = PointEnv()
    agent = ScriptedAgent(lambda o, s, i: {"j0": 0.1 * i, "j1": 0.2}, chunk_size=3)
    session = ServedSession(env.env_spec, agent, trace=TraceStore(tmp_path))
    record = harness_episode(session, env, 5, success=True)
    assert record.outcome == EpisodeOutcome.SUCCESS and record.steps == 5 and record.chunks == 2
    assert [s for s, _ in agent.calls] == [0, 3] and agent.ended == [record]
    trace = load_trace(record.trace_path)
    assert trace.meta["mode"] == "served" and trace.meta["outcome"] == "success"
    kinds = [e.kind for e in trace.events]
    assert kinds[:6] == [
        "episode.start",
        "observation",
        "chunk.request",
        "chunk.merge",
        "action",
        "observation",
    ]
    assert kinds[-2:] == ["observation", "episode.end"]
    actions = trace.of_kind("action")
    assert [e.data["action"] for e in actions] == env.received
    assert math.isclose(sum(e.data["reward"] for e in actions), record.total_reward)
    assert record.total_reward < 0  # the rewards the harness reported were attached


def test_served_shield_refuses_garbage_and_returns_a_hold(tmp_path: Path) -> None:
    env = PointEnv()
    agent = ScriptedAgent(lambda o, s, i: {"j0": float("nan"), "j1": 9.0, "extra": 1.0})
    session = ServedSession(
        env.env_spec, agent, trace=TraceStore(tmp_path), safety={"max_delta": 0.5}
    )
    record = harness_episode(session, env, 3)
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.safety_interventions == 3
    for action in env.received:
        assert set(action) == {"j0", "j1"} and all(
            math.isfinite(v) and -1 <= v <= 1 for v in action.values()
        )
    assert record.compat.unknown_keys == ["extra"]
    interventions = load_trace(record.trace_path).of_kind("safety.intervention")
    assert [e.data["guard"] for e in interventions] == ["finite"] * 3


def test_served_operator_stop_holds_and_policy_errors_are_reported() -> None:
    env = PointEnv()
    session = ServedSession(env.env_spec, ScriptedAgent(lambda o, s, i: {"j0": 0.5, "j1": 0.5}))
    observation = env.reset()
    session.reset(observation)
    first = session.step(observation)
    session.operator.stop()
    assert (
        session.step(env.step(first).observation) == first
    )  # absolute control: hold the last target
    assert session.end().outcome == EpisodeOutcome.STOPPED

    class Raises(ScriptedAgent):
        def act(self, observation: Any, step: int, **rtc: Any) -> Any:
            raise KeyError("camera")

    session = ServedSession(env.env_spec, Raises(lambda o, s, i: None))
    session.reset(env.reset())
    session.step(env.reset())
    record = session.end(success=True)
    assert record.outcome == EpisodeOutcome.ERROR and record.error["type"] == "KeyError"


def test_served_refusals() -> None:
    env = PointEnv()
    agent = ScriptedAgent(lambda o, s, i: {})
    with pytest.raises(ValueError, match="served mode supports Timing"):
        ServedSession(env.env_spec, agent, timing=Timing("realtime"))
    session = ServedSession(env.env_spec, agent)
    with pytest.raises(RuntimeError, match="reset"):
        session.step({})
    session.reset({})
    with pytest.raises(ValueError, match="success='yes'"):
        session.end(success="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="outcome='great'"):
        session.end(outcome="great")


def test_served_holds_and_verdicts_are_the_driven_loops() -> None:
    """The served session holds as the driven loop does (kernel.hold): with no action sent
    yet, absolute control holds the observed position, not the middle of the limits; and an
    operator verdict's note is in the status, as in the driven loop's record."""
    env = PointEnv()
    session = ServedSession(env.env_spec, ScriptedAgent(lambda o, s, i: None))  # all refused
    observation = env.reset(seed=4)
    session.reset(observation)
    held = session.step(observation)
    start = np.random.default_rng(4).uniform(-0.1, 0.1, 2)
    assert held == {"j0": pytest.approx(start[0]), "j1": pytest.approx(start[1])}
    assert abs(start[0]) > 1e-3  # the middle of the limits (0.0) would fail the line above
    session.operator.verdict("failure", note="dropped the cube")
    record = session.end(success=True)
    assert record.outcome == EpisodeOutcome.FAILURE
    assert record.status == "failure: operator verdict (dropped the cube)"
    operator = OperatorChannel()

    def judged(observation: Any, step: int, i: int) -> None:  # the verdict, during the run
        operator.verdict("failure", note="dropped the cube")

    driven = EpisodeRunner(env, ScriptedAgent(judged), operator=operator)
    assert driven.run(2, seed=4).status == record.status


def test_a_served_episode_records_the_driven_loops_events(tmp_path: Path) -> None:
    """One episode code: the same agent on the same env gives the same events, step by
    step and field by field, whether the kernel drives the env or a harness steps it and
    asks the session (only the clocks, the start's mode and the end's status differ)."""

    def agent() -> ScriptedAgent:
        return ScriptedAgent(lambda o, s, i: {"j0": 0.9 - 0.1 * i, "j1": 5.0}, chunk_size=4)

    env = PointEnv()
    driven = EpisodeRunner(
        env, agent(), trace=TraceStore(tmp_path / "driven"), safety={"max_delta": 0.3},
        record_privileged=False,
    )  # fmt: skip
    driven_record = driven.run(7, seed=5)
    served = ServedSession(
        env.env_spec, agent(), trace=TraceStore(tmp_path / "served"), safety={"max_delta": 0.3}
    )
    observation = env.reset(seed=5)
    served.reset(observation, seed=5)
    reward = 0.0
    for _ in range(7):
        result = env.step(served.step(observation, reward=reward))
        observation, reward = result.observation, result.reward
    served_record = served.end(reward=reward, final_observation=observation)

    def events(record: Any) -> list[tuple[Any, ...]]:
        out = []
        for e in load_trace(record.trace_path).events:
            data = {k: v for k, v in e.data.items() if k not in ("inference_s", "started_at")}
            if e.kind == "episode.end":
                data = {}
            data.pop("mode", None)
            data.pop("run_id", None)
            out.append((e.seq, e.kind, e.step, data))
        return out

    assert driven_record.outcome == served_record.outcome == EpisodeOutcome.TRUNCATED
    assert events(served_record) == events(driven_record)
    assert (served_record.steps, served_record.chunks, served_record.holds) == (7, 2, 0)
    assert served_record.safety_interventions == driven_record.safety_interventions > 0
    assert served_record.compat.to_dict() == driven_record.compat.to_dict()
    assert served_record.total_reward == pytest.approx(driven_record.total_reward)
    assert served_record.events == driven_record.events
