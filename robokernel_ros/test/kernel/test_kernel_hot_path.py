"""The per-step hot path: privileged_every, native trace encoding, the hold action on demand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from robokernel_ros.kernel import (
    EnvSpec,
    EpisodeRunner,
    Event,
    EventBus,
    SafetyShield,
    StepResult,
    TraceStore,
    build_guards,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent
from robokernel_ros.kernel.trace import dumps_line, event_line, snapshot, to_jsonable


def ramp(obs: Any, step: int, i: int) -> dict[str, float]:
    return {"j0": step / 100, "j1": i / 100}


class CountingEnv(PointEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(privileged=True, **kwargs)
        self.privileged_calls = 0
        self.hold_calls = 0

    def privileged_state(self) -> dict[str, Any]:
        self.privileged_calls += 1
        return {"position": self.position.copy(), "nested": {"v": np.arange(3.0)}}

    def hold_action(self, last: Any) -> dict[str, float]:
        self.hold_calls += 1
        return {key: float(v) for key, v in zip(self.keys, self.position, strict=True)}


# -- privileged_every ------------------------------------------------------------------


@pytest.mark.parametrize(("every", "steps"), [(1, 7), (3, 7), (4, 8), (10, 3)])
def test_privileged_every_samples_steps_and_always_the_final_observation(
    tmp_path: Path, every: int, steps: int
) -> None:
    env = CountingEnv()
    runner = EpisodeRunner(
        env, ScriptedAgent(ramp, chunk_size=2), trace=TraceStore(tmp_path), privileged_every=every
    )
    record = runner.run(steps)
    trace = load_trace(record.trace_path)
    expected = sorted({s for s in range(steps + 1) if s % every == 0} | {steps})
    privileged = trace.of_kind("privileged")
    assert [e.step for e in privileged] == expected
    assert env.privileged_calls == len(expected)  # fetched only when recorded
    # each one follows its step's observation, numpy converted, nested containers kept
    events = trace.events
    for e in privileged:
        before = events[events.index(e) - 1]
        assert before.kind == "observation" and before.step == e.step
        assert e.data["state"]["nested"] == {"v": [0.0, 1.0, 2.0]}
    assert privileged[-1].data["state"]["position"] == pytest.approx(list(env.position))
    assert [e.seq for e in events] == list(range(len(events)))
    assert record.events == len(events)


def test_privileged_state_is_not_fetched_when_nobody_listens() -> None:
    env = CountingEnv()
    record = EpisodeRunner(env, ScriptedAgent(ramp, chunk_size=2)).run(5)
    assert env.privileged_calls == 0
    # seq numbers do not depend on listeners: the same count as a listened run
    bus = EventBus()
    seen: list[Event] = []
    bus.subscribe(seen.append)
    listened = EpisodeRunner(CountingEnv(), ScriptedAgent(ramp, chunk_size=2), bus=bus).run(5)
    assert record.events == listened.events == len(seen)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_privileged_every_is_refused_unless_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"privileged_every={bad!r}: must be an integer >= 1"):
        EpisodeRunner(CountingEnv(), ScriptedAgent(ramp), privileged_every=bad)


# -- the hold action on demand ---------------------------------------------------------


def test_hold_action_is_computed_only_when_the_review_needs_it() -> None:
    env = CountingEnv()
    runner = EpisodeRunner(env, ScriptedAgent(ramp, chunk_size=4))
    record = runner.run(8)
    assert record.holds == 0 and env.hold_calls == 0  # every action passed the fast review

    class Partial(ScriptedAgent):  # misses j1: filled from the hold action
        def act(self, observation: Any, step: int, **rtc: Any) -> list[Any]:
            return [{"j0": 0.1}]

    env = CountingEnv()
    record = EpisodeRunner(env, Partial(ramp)).run(3)
    assert env.hold_calls == 3 and record.compat.missing_keys == ["j1"]
    assert [a["j1"] for a in env.received] == pytest.approx(
        [env.received[0]["j1"]] * 3
    )  # the hold action's value each time


def test_review_fast_matches_review_and_declines_what_needs_a_hold() -> None:
    spec = EnvSpec(("a", "b"), "absolute", 50.0, {"a": (-1.0, 1.0)})
    fast, full = SafetyShield(spec), SafetyShield(spec)
    action = {"a": 0.5, "b": 7.0}
    got = fast.review_fast(action)
    want = full.review(action, hold={"a": 0.0, "b": 0.0})
    assert got is not None and got.action == want.action and not got.interventions
    assert fast.last == full.last == action and got.action is not action
    for declined in (
        {"a": 0.5},  # missing key
        {"a": 2.0, "b": 0.0},  # outside the limits
        {"a": math.nan, "b": 0.0},
        {"a": 1, "b": 0.0},  # not a float: the full review converts it
        [0.5, 0.0],
    ):
        assert fast.review_fast(declined) is None
    assert fast.last == action  # a declined action records nothing
    guarded = SafetyShield(spec, build_guards({"max_delta": {"a": 0.1}}))
    assert guarded.review_fast(action) is None  # extra guards need the full review


# -- trace encoding ----------------------------------------------------------------------


def test_dumps_line_encodes_numpy_and_nested_data_natively_with_non_finite_as_null() -> None:
    obj = {
        "a": np.array([1.0, np.nan, np.inf]),
        "b": {"c": (np.float32(0.5), np.int64(3), np.bool_(True))},
        "d": np.arange(6.0).reshape(2, 3)[:, 1],  # not contiguous: through the default
        "e": -math.inf,
        4: "int key",
        "f": {1, 2},
        "big": 2**70,  # beyond orjson's 64-bit integers: the standard library path
    }
    line = dumps_line(obj)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "a": [1.0, None, None],
        "b": {"c": [0.5, 3, True]},
        "d": [1.0, 4.0],
        "e": None,
        "4": "int key",
        "f": [1, 2],
        "big": 2**70,
    }
    # a key JSON cannot name falls back to the converting path instead of raising
    assert json.loads(dumps_line({(1, 2): np.float64(math.nan)})) == {"(1, 2)": None}


def test_to_jsonable_converts_deeply() -> None:
    value = {"x": [np.float64(1.5), (np.int32(2), None)], 3: {"y": np.zeros(2)}, "z": object}
    out = to_jsonable(value)
    assert out == {"x": [1.5, [2, None]], "3": {"y": [0.0, 0.0]}, "z": repr(object)}
    assert type(out["x"][0]) is float and type(out["x"][1][0]) is int


def test_snapshot_copies_one_level_and_converts_top_level_numpy() -> None:
    buffer = np.zeros(3)
    nested = {"q": [1.0]}
    snap = snapshot({"state": buffer, "nested": nested, "n": np.float64(2.0)})
    buffer[:] = 9.0  # the env reuses its buffer: the snapshot keeps the old values
    assert snap == {"state": [0.0, 0.0, 0.0], "nested": {"q": [1.0]}, "n": 2.0}
    assert snap["nested"] is nested  # nested containers are shared, not copied
    assert snapshot(np.ones(2)) == [1.0, 1.0] and snapshot("x") == "x"


def test_observation_event_keeps_a_snapshot_and_the_line_is_encoded_once(tmp_path: Path) -> None:
    class BufferEnv:
        env_spec = EnvSpec(("a",), "absolute", 10.0)

        def __init__(self) -> None:
            self.buf = np.zeros(2)

        def reset(self, seed: int | None = None) -> dict[str, Any]:
            self.buf[:] = 0.0
            return {"q": self.buf, "meta": {"ok": True}, "images": {}}

        def step(self, action: Any) -> StepResult:
            self.buf += 1.0  # the same array every step, updated in place
            return StepResult({"q": self.buf, "meta": {"ok": True}}, 0.0, False, False, {})

    bus = EventBus()
    seen: list[Event] = []
    bus.subscribe(seen.append, kinds=["observation"])
    record = EpisodeRunner(
        BufferEnv(),
        ScriptedAgent(lambda o, s, i: {"a": 0.0}),
        bus=bus,
        trace=TraceStore(tmp_path),
    ).run(3)
    assert [e.data["obs"]["q"] for e in seen] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    assert all("images" not in e.data["obs"] for e in seen)
    lines = (record.trace_path / "events.jsonl").read_bytes().splitlines(keepends=True)
    observation_lines = [line for line in lines if b'"kind":"observation"' in line]
    assert [e.line for e in seen] == observation_lines  # cached by the writer, reused as is
    assert event_line(seen[0]) is seen[0].line
