"""The operator channel: stop, latched e-stop, clear_fault, reset confirmation, verdicts."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.kernel import (
    Capabilities,
    EnvSpec,
    EpisodeOutcome,
    EpisodeRunner,
    Event,
    Latch,
    OperatorChannel,
    Timing,
    TraceStore,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent


def ramp(obs: Any, step: int, i: int) -> dict[str, float]:
    return {"j0": 0.1 + 0.01 * i, "j1": 0.2}


class CountingEnv(PointEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resets = 0

    def reset(self, seed: int | None = None) -> Any:
        self.resets += 1
        return super().reset(seed)


def on_action_at(runner: EpisodeRunner, step: int, fn: Any) -> None:
    """Call fn once, from the bus, when the action of `step` has been executed."""

    def callback(event: Event) -> None:
        if event.step == step:
            unsubscribe()
            fn()

    unsubscribe = runner.bus.subscribe(callback, kinds=["action"])


def test_stop_ends_at_the_next_step_boundary_with_the_hold_action_last(tmp_path: Path) -> None:
    env = PointEnv()
    runner = EpisodeRunner(env, ScriptedAgent(ramp, chunk_size=10), trace=TraceStore(tmp_path))
    on_action_at(runner, 2, runner.operator.stop)
    record = runner.run(50)
    assert record.outcome == EpisodeOutcome.STOPPED and record.steps == 4
    assert env.received[3] == env.received[2]  # absolute control: the hold is the last target
    trace = load_trace(record.trace_path)
    actions = trace.of_kind("action")
    assert [a.data["hold"] for a in actions] == [False, False, False, True]
    (stop,) = trace.of_kind("operator.stop")
    assert stop.step == 3
    assert trace.meta["outcome"] == "stopped"
    # a stop belongs to its episode: the next run starts clean
    assert runner.run(3).outcome == EpisodeOutcome.TRUNCATED


def test_estop_ends_at_once_latches_and_clear_fault_releases(tmp_path: Path) -> None:
    env = CountingEnv()
    runner = EpisodeRunner(env, ScriptedAgent(ramp, chunk_size=10), trace=TraceStore(tmp_path))
    on_action_at(runner, 2, runner.operator.estop)
    record = runner.run(50)
    assert (
        record.outcome == EpisodeOutcome.ESTOPPED and record.steps == 3 and len(env.received) == 3
    )
    assert "clear_fault" in record.status and runner.operator.estopped
    assert load_trace(record.trace_path).of_kind("operator.estop")

    env.received.clear()
    latched = runner.run(50)
    assert latched.outcome == EpisodeOutcome.ESTOPPED and "clear_fault" in latched.status
    assert env.resets == 1 and env.received == [] and latched.trace_path is None

    runner.operator.clear_fault()
    assert not runner.operator.estopped
    assert runner.run(5).outcome == EpisodeOutcome.TRUNCATED and env.resets == 2


def test_stop_from_another_thread_during_a_wall_clock_episode() -> None:
    runner = EpisodeRunner(
        PointEnv(control_hz=100.0), ScriptedAgent(ramp, 5), timing=Timing("realtime", clock="wall")
    )
    threading.Timer(0.1, runner.operator.stop).start()
    started = time.monotonic()
    record = runner.run(10_000)
    assert record.outcome == EpisodeOutcome.STOPPED
    assert time.monotonic() - started < 1.5 and 1 <= record.steps <= 100


class ConfirmEnv(CountingEnv):
    def __init__(self) -> None:
        super().__init__()
        spec = self.env_spec
        self.env_spec = EnvSpec(
            spec.action_keys,
            spec.control,
            spec.control_hz,
            spec.action_limits,
            capabilities=Capabilities(requires_reset_confirmation=True),
        )


def test_the_loop_waits_for_reset_done_after_env_reset() -> None:
    env = ConfirmEnv()
    agent = ScriptedAgent(ramp)
    runner = EpisodeRunner(env, agent)
    runner.operator.reset_done()  # a confirmation before the reset does not count
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(runner.run(3)))
    thread.start()
    time.sleep(0.3)
    assert env.resets == 1 and agent.resets == [] and env.received == []  # waiting
    runner.operator.reset_done()
    thread.join(5)
    assert (
        result[0].outcome == EpisodeOutcome.TRUNCATED
        and result[0].steps == 3
        and len(agent.resets) == 1
    )


def test_reset_wait_ends_on_timeout_or_estop() -> None:
    runner = EpisodeRunner(ConfirmEnv(), ScriptedAgent(ramp), reset_timeout_s=0.2)
    record = runner.run(3)
    assert (
        record.outcome == EpisodeOutcome.STOPPED
        and "reset_timeout_s=0.2" in record.status
        and record.steps == 0
    )

    runner = EpisodeRunner(ConfirmEnv(), ScriptedAgent(ramp))
    threading.Timer(0.1, runner.operator.estop).start()
    started = time.monotonic()
    record = runner.run(3)
    assert record.outcome == EpisodeOutcome.ESTOPPED and time.monotonic() - started < 2.0


def test_verdict_during_the_episode_decides_success_or_failure() -> None:
    env = PointEnv(goal=[0.1, 0.2], tolerance=0.001)
    runner = EpisodeRunner(env, ScriptedAgent(ramp))
    on_action_at(runner, 0, lambda: runner.operator.verdict("failure", note="cube dropped"))
    record = runner.run(10)  # the env says success at step 1
    assert record.outcome == EpisodeOutcome.FAILURE
    assert record.verdict is not None and record.verdict["note"] == "cube dropped"

    runner = EpisodeRunner(PointEnv(), ScriptedAgent(ramp))
    on_action_at(runner, 1, lambda: runner.operator.verdict("success"))
    assert runner.run(4).outcome == EpisodeOutcome.SUCCESS  # instead of truncated


def test_verdict_right_after_the_episode_updates_record_and_trace(tmp_path: Path) -> None:
    runner = EpisodeRunner(PointEnv(), ScriptedAgent(ramp), trace=TraceStore(tmp_path))
    record = runner.run(3)
    assert record.outcome == EpisodeOutcome.TRUNCATED
    runner.operator.verdict("success", note="looked right")
    assert record.outcome == EpisodeOutcome.SUCCESS and record.verdict["note"] == "looked right"
    meta = json.loads((record.trace_path / "meta.json").read_text())
    assert meta["outcome"] == "success" and meta["verdict"]["outcome"] == "success"
    trace = load_trace(record.trace_path)
    assert (
        trace.events[-1].kind == "operator.verdict"
        and trace.events[-1].seq == trace.events[-2].seq + 1
    )


def test_verdict_does_not_override_safety_outcomes_but_is_kept() -> None:
    runner = EpisodeRunner(PointEnv(), ScriptedAgent(ramp))
    on_action_at(runner, 1, runner.operator.estop)
    on_action_at(runner, 0, lambda: runner.operator.verdict("success"))
    record = runner.run(10)
    assert record.outcome == EpisodeOutcome.ESTOPPED and record.verdict["outcome"] == "success"


def test_verdict_refusals() -> None:
    channel = OperatorChannel()
    with pytest.raises(ValueError, match="outcome='maybe'"):
        channel.verdict("maybe")
    with pytest.raises(ValueError, match="note=3"):
        channel.verdict("success", note=3)  # type: ignore[arg-type]
    channel.verdict(EpisodeOutcome.FAILURE)
    assert channel.take_verdict()["outcome"] == "failure"


def test_estop_during_a_slow_act_reaches_the_env_with_nothing_more() -> None:
    env = PointEnv()

    class SlowAgent(ScriptedAgent):
        def act(self, observation: Any, step: int, **rtc: Any) -> Any:
            if step == 2:
                runner.operator.estop()  # arrives while the policy computes
            return super().act(observation, step)

    runner = EpisodeRunner(env, SlowAgent(ramp))
    record = runner.run(10)
    assert record.outcome == EpisodeOutcome.ESTOPPED and len(env.received) == 2
    runner.operator.clear_fault()


# -- the latch ---------------------------------------------------------------------------


def test_latch_keeps_the_first_latch_until_clear() -> None:
    latch = Latch()
    assert not latch.latched and latch.by == "" and latch.at is None
    before = time.time()
    assert latch.latch("estop topic: pressed", "panel A") is True
    assert latch.latched and latch.by == "estop topic: pressed" and latch.why == "panel A"
    assert latch.at is not None and before <= latch.at <= time.time()
    first_at = latch.at
    assert latch.latch("lost source") is False  # already latched: the first fault is kept
    assert latch.by == "estop topic: pressed" and latch.at == first_at
    assert latch.clear() is True
    assert not latch.latched and latch.by == "" and latch.why == "" and latch.at is None
    assert latch.clear() is False
    with pytest.raises(AttributeError):
        latch.latched = True  # read-only: latch() and clear() change it


def test_latch_latches_once_under_concurrent_callers() -> None:
    latch = Latch()
    barrier = threading.Barrier(8)
    wins: dict[int, bool] = {}

    def press(i: int) -> None:
        barrier.wait()
        wins[i] = latch.latch(f"thread {i}")

    threads = [threading.Thread(target=press, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (winner,) = [i for i, won in wins.items() if won]
    assert len(wins) == 8 and latch.by == f"thread {winner}"


def test_operator_estop_is_a_latch_that_names_who_latched_it() -> None:
    op = OperatorChannel()
    op.estop("panel")
    assert op.estopped and op.estop_latch.latched and op.estop_latch.by == "panel"
    op.clear_fault()
    assert not op.estopped and not op.estop_latch.latched


class InterruptedResetEnv(CountingEnv):
    """A robot-like reset that an operator call ends early: `during(operator)` runs inside
    reset (the call arriving mid-reset), then the reset gives up as ros_env's does."""

    def __init__(self, during: Any) -> None:
        super().__init__()
        self.during = during
        self.operator: OperatorChannel | None = None

    def reset(self, seed: int | None = None) -> Any:
        self.resets += 1
        if self.during is not None:
            self.during(self.operator)
        raise RuntimeError("reset: ended by the operator's call before reset_positions")


@pytest.mark.parametrize(
    ("during", "outcome", "status"),
    [
        (lambda op: op.estop("panel"), EpisodeOutcome.ESTOPPED, "estopped: e-stop during env.reset()"),
        (lambda op: op.stop("cancelled"), EpisodeOutcome.STOPPED,
         "stopped: operator stop (cancelled) during env.reset()"),
        (None, EpisodeOutcome.ERROR, "reset: ended by"),
    ],
    ids=["estop", "cancel", "no-operator-call"],
)  # fmt: skip
def test_a_reset_that_a_stop_or_estop_ends_early_names_that_outcome_with_a_complete_trace(
    tmp_path: Path, during: Any, outcome: EpisodeOutcome, status: str
) -> None:
    env = InterruptedResetEnv(during)
    runner = EpisodeRunner(env, ScriptedAgent(ramp), trace=TraceStore(tmp_path))
    env.operator = runner.operator
    record = runner.run(10)
    assert record.outcome == outcome and status in record.status, record.status
    assert record.steps == 0 and env.received == []
    trace = load_trace(record.trace_path)
    kinds = [e.kind for e in trace.events]
    assert kinds[0] == "episode.start" and kinds[-1] == "episode.end", kinds
    assert trace.meta["outcome"] == outcome.value
    if during is None:
        assert trace.of_kind("episode.end")[0].data["status"].startswith("error: env_error")
    else:  # the operator's call is in the trace, before the end
        assert any(k.startswith("operator.") for k in kinds), kinds
