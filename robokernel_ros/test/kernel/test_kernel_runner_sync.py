"""EpisodeRunner in sync mode: chunking, hold actions, shield, keys, outcomes, errors, events, trace."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from robokernel_ros.kernel import (
    EnvSpec,
    EpisodeOutcome,
    EpisodeRunner,
    Event,
    EventBus,
    StepResult,
    Timing,
    TraceStore,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent


def ramp(obs: Any, step: int, i: int) -> dict[str, float]:
    """j0 = the step the chunk was computed at (/100), j1 = the index in the chunk (/100)."""
    return {"j0": step / 100, "j1": i / 100}


def collect(bus: EventBus) -> list[Event]:
    events: list[Event] = []
    bus.subscribe(events.append)
    return events


def test_sync_requests_only_when_queue_is_empty_and_runs_the_whole_chunk() -> None:
    env, agent = PointEnv(), ScriptedAgent(ramp, chunk_size=4)
    record = EpisodeRunner(env, agent).run(10)
    assert [step for step, _ in agent.calls] == [0, 4, 8]
    assert [a["j1"] for a in env.received] == [0, 0.01, 0.02, 0.03] * 2 + [0, 0.01]
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.steps == 10 and record.chunks == 3
    assert record.holds == 0 and agent.ended == [record]


def test_sync_execution_steps_runs_the_first_actions_of_each_chunk() -> None:
    env, agent = PointEnv(), ScriptedAgent(ramp, chunk_size=5)
    EpisodeRunner(env, agent, timing=Timing(execution_steps=2)).run(6)
    assert [step for step, _ in agent.calls] == [0, 2, 4]
    assert [a["j1"] for a in env.received] == [0, 0.01] * 3


def test_chunk_is_computed_from_the_observation_of_its_step() -> None:
    seen: list[tuple[int, float]] = []

    def fn(obs: Any, step: int, i: int) -> dict[str, float]:
        seen.append((step, obs["j0"])) if i == 0 else None
        return {"j0": 0.1 * (step + i + 1), "j1": 0.0}

    env = PointEnv()
    EpisodeRunner(env, ScriptedAgent(fn, chunk_size=3)).run(6, seed=1)
    # the chunk asked at step 3 saw the position commanded by the action of step 2
    assert seen[1] == (3, pytest.approx(0.3))


def test_hold_action_variants() -> None:
    absolute = EpisodeRunner(PointEnv(gripper=True), ScriptedAgent(ramp))
    assert absolute.hold_action({"j0": 0.2, "j1": 0.3, "gripper": 1.0}) == {
        "j0": 0.2,
        "j1": 0.3,
        "gripper": 1.0,
    }
    delta = EpisodeRunner(PointEnv(control="delta", gripper=True), ScriptedAgent(ramp))
    assert delta.hold_action({"j0": 0.2, "j1": 0.3, "gripper": 0.7}) == {
        "j0": 0.0,
        "j1": 0.0,
        "gripper": 0.7,
    }
    velocity = EpisodeRunner(PointEnv(control="velocity"), ScriptedAgent(ramp))
    assert velocity.hold_action(None) == {"j0": 0.0, "j1": 0.0}

    class OwnHold(PointEnv):
        def hold_action(self, last: Any) -> dict[str, float]:
            return {"j0": -0.5, "j1": -0.5}

    assert EpisodeRunner(OwnHold(), ScriptedAgent(ramp)).hold_action({"j0": 1, "j1": 1}) == {
        "j0": -0.5,
        "j1": -0.5,
    }


def test_absolute_hold_without_last_holds_the_observed_position() -> None:
    env = PointEnv()
    runner = EpisodeRunner(
        env, ScriptedAgent(lambda o, s, i: None)
    )  # garbage: every action refused
    record = runner.run(3, seed=4)
    start = np.random.default_rng(4).uniform(-0.1, 0.1, 2)
    assert env.received[0] == {"j0": pytest.approx(start[0]), "j1": pytest.approx(start[1])}
    assert record.safety_interventions == 3


def test_garbage_from_the_agent_never_raises_and_the_env_only_sees_safe_actions() -> None:
    garbage = [
        None,
        "x",
        3.0,
        {"j0": float("nan"), "j1": 0},
        {"j0": 5.0, "j1": 0.0},
        [1, 2],
        {"j0": True, "j1": 0.0},
    ]

    def fn(obs: Any, step: int, i: int) -> Any:
        return garbage[step % len(garbage)]

    env = PointEnv()
    bus = EventBus()
    events = collect(bus)
    record = EpisodeRunner(env, ScriptedAgent(fn), bus=bus).run(len(garbage))
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.steps == len(garbage)
    for action in env.received:
        assert all(
            isinstance(v, float) and math.isfinite(v) and -1 <= v <= 1 for v in action.values()
        )
    interventions = [e for e in events if e.kind == "safety.intervention"]
    assert record.safety_interventions == len(interventions) == len(garbage)
    assert {e.data["guard"] for e in interventions} == {"type", "finite", "limits"}
    assert all(e.data["action"] == "refused" for e in interventions)
    limits_event = next(e for e in interventions if e.data["guard"] == "limits")
    assert (
        limits_event.data["key"] == "j0"
        and limits_event.data["value"] == 5.0
        and limits_event.data["limit"] == [-1.0, 1.0]
    )


def test_a_non_sequence_chunk_and_a_bare_action_are_accepted() -> None:
    class BareAgent(ScriptedAgent):
        def act(self, observation: Any, step: int, **rtc: Any) -> Any:
            return {"j0": 0.25, "j1": 0.5}  # a single-step policy that did not wrap its action

    env = PointEnv()
    record = EpisodeRunner(env, BareAgent(ramp)).run(2)
    assert env.received == [{"j0": 0.25, "j1": 0.5}] * 2 and record.safety_interventions == 0


def test_missing_keys_filled_from_hold_unknown_dropped_and_counted() -> None:
    def fn(obs: Any, step: int, i: int) -> dict[str, float]:
        return {"j0": 0.3, "elbow": 1.0} if step % 2 else {"j0": 0.1, "j1": 0.2}

    env = PointEnv()
    record = EpisodeRunner(env, ScriptedAgent(fn)).run(4)
    assert env.received[1] == {"j0": 0.3, "j1": 0.2}  # j1 held at its last target
    assert record.compat.missing_keys == ["j1"] and record.compat.unknown_keys == ["elbow"]
    assert record.compat.action_resolution_rate == 0.5
    assert record.safety_interventions == 0


def test_small_overshoot_is_clipped_and_passes() -> None:
    env = PointEnv()
    record = EpisodeRunner(env, ScriptedAgent(lambda o, s, i: {"j0": 1.05, "j1": -1.0})).run(1)
    assert env.received == [{"j0": 1.0, "j1": -1.0}] and record.safety_interventions == 1


def test_safety_config_reaches_the_shield_and_is_validated() -> None:
    runner = EpisodeRunner(
        PointEnv(), ScriptedAgent(ramp), safety={"clip_tolerance": 0.0, "max_delta": 0.5}
    )
    assert (
        runner.shield.clip_tolerance == 0.0
        and [g.name for g in runner.shield.guards][-1] == "max_delta"
    )
    with pytest.raises(ValueError, match="max_jerk"):
        EpisodeRunner(PointEnv(), ScriptedAgent(ramp), safety={"max_jerk": 1})


def test_terminated_is_success_unless_info_says_failure_and_env_truncation() -> None:
    env = PointEnv(goal=[0.5, 0.5], tolerance=0.01)
    record = EpisodeRunner(env, ScriptedAgent(lambda o, s, i: {"j0": 0.5, "j1": 0.5})).run(10)
    assert record.outcome == EpisodeOutcome.SUCCESS and record.steps == 1

    class Fails(PointEnv):
        def step(self, action: Any) -> StepResult:
            result = super().step(action)
            return StepResult(result.observation, 0.0, terminated=True, info={"success": False})

    assert EpisodeRunner(Fails(), ScriptedAgent(ramp)).run(5).outcome == EpisodeOutcome.FAILURE

    class Truncates(PointEnv):
        def step(self, action: Any) -> StepResult:
            result = super().step(action)
            return StepResult(result.observation, 1.5, truncated=self.steps >= 3)

    record = EpisodeRunner(Truncates(), ScriptedAgent(ramp)).run(10)
    assert (
        record.outcome == EpisodeOutcome.TRUNCATED
        and record.steps == 3
        and record.total_reward == 4.5
    )
    assert "env truncated" in record.status


def test_policy_error_env_error_and_timeout_are_classified(tmp_path: Path) -> None:
    class Raises(ScriptedAgent):
        def act(self, observation: Any, step: int, **rtc: Any) -> Any:
            if step == 2:
                raise RuntimeError("policy exploded")
            return super().act(observation, step)

    bus = EventBus()
    events = collect(bus)
    record = EpisodeRunner(PointEnv(), Raises(ramp), bus=bus, trace=TraceStore(tmp_path)).run(5)
    assert record.outcome == EpisodeOutcome.ERROR and record.steps == 2
    assert record.status.startswith("error: policy_error") and "policy exploded" in record.status
    (error,) = [e for e in events if e.kind == "error"]
    assert error.data["category"] == "policy_error" and error.data["type"] == "RuntimeError"
    assert "policy exploded" in error.data["message"] and "Traceback" in error.data["traceback"]
    assert load_trace(record.trace_path).meta["outcome"] == "error"

    class Broken(PointEnv):
        def step(self, action: Any) -> StepResult:
            raise OSError("motor bus down")

    record = EpisodeRunner(Broken(), ScriptedAgent(ramp)).run(5)
    assert record.outcome == EpisodeOutcome.ERROR and record.error["category"] == "env_error"
    assert record.error["type"] == "OSError"

    class BrokenReset(PointEnv):
        def reset(self, seed: int | None = None) -> Any:
            raise RuntimeError("no robot")

    assert EpisodeRunner(BrokenReset(), ScriptedAgent(ramp)).run(5).error["category"] == "env_error"

    started = time.monotonic()
    slow = ScriptedAgent(ramp, delay_s=2.0)
    record = EpisodeRunner(PointEnv(), slow, act_timeout_s=0.1).run(5)
    assert record.outcome == EpisodeOutcome.ERROR and record.error["category"] == "policy_timeout"
    assert "act_timeout_s=0.1" in record.status
    assert time.monotonic() - started < 1.5  # the hung act was abandoned, not waited for


def test_event_order_seq_t_and_sim_time() -> None:
    bus = EventBus()
    events = collect(bus)
    env = PointEnv(
        control_hz=10.0, sim_dt=0.25
    )  # the env's clock runs faster than steps / control_hz
    EpisodeRunner(env, ScriptedAgent(ramp, chunk_size=2), bus=bus).run(
        3, seed=0, instruction="go", meta={"suite": "t"}
    )
    kinds = [e.kind for e in events]
    assert kinds == [
        "episode.start",
        "observation", "chunk.request", "chunk.merge", "action",
        "observation", "action",
        "observation", "chunk.request", "chunk.merge", "action",
        "observation", "episode.end",
    ]  # fmt: skip
    assert [e.seq for e in events] == list(range(len(events)))
    start = events[0].data
    assert start["instruction"] == "go" and start["seed"] == 0 and start["suite"] == "t"
    assert start["agent"] == "ScriptedAgent" and start["env"]["action_keys"] == ["j0", "j1"]
    assert start["timing"]["mode"] == "sync" and "T" in start["started_at"]
    observations = [e for e in events if e.kind == "observation"]
    assert [e.t for e in observations] == pytest.approx(
        [0.0, 0.25, 0.5, 0.75]
    )  # the env's sim time
    walls = [e.wall for e in events]
    assert walls == sorted(walls) and walls[0] >= 0
    end = events[-1].data
    assert end["outcome"] == "truncated" and end["steps"] == 3 and end["chunks"] == 2
    assert set(end["compat"]) >= {"missing_keys", "unknown_keys", "action_resolution_rate"}
    merge = events[3].data
    assert merge["keys"] == ["j0", "j1"] and merge["actions"] == [[0.0, 0.0], [0.0, 0.01]]


def test_without_sim_time_the_clock_is_step_over_control_hz() -> None:
    class NoClock(PointEnv):
        def step(self, action: Any) -> StepResult:
            result = super().step(action)
            result.info = {}
            return result

    bus = EventBus()
    events = collect(bus)
    EpisodeRunner(NoClock(control_hz=20.0), ScriptedAgent(ramp), bus=bus).run(3)
    assert [e.t for e in events if e.kind == "observation"] == pytest.approx([0.0, 0.05, 0.1, 0.15])


def test_trace_holds_observations_images_and_privileged_state(tmp_path: Path) -> None:
    env = PointEnv(image_shape=(8, 6), privileged=True)
    agent = ScriptedAgent(ramp, chunk_size=3)
    record = EpisodeRunner(env, agent, trace=TraceStore(tmp_path), image_every=2).run(5)
    trace = load_trace(record.trace_path)
    assert trace.meta["outcome"] == "truncated" and trace.meta["steps"] == 5
    observations = trace.of_kind("observation")
    assert [e.step for e in observations] == [0, 1, 2, 3, 4, 5]
    assert observations[1].data["obs"]["state"] == pytest.approx(list(env.received[0].values()))
    with_images = [e.step for e in observations if "images" in e.data]
    assert with_images == [0, 2, 4]
    frame = trace.image(observations[2].data["images"]["front"])
    assert frame.shape == (8, 6, 3) and frame.dtype == np.uint8 and frame[0, 0, 0] == 2
    privileged = trace.of_kind("privileged")
    assert len(privileged) == 6 and privileged[-1].data["state"]["position"] == pytest.approx(
        list(env.position)
    )
    actions = trace.of_kind("action")
    assert [e.data["action"] for e in actions] == env.received and not any(
        e.data["hold"] for e in actions
    )

    # privileged state needs both: the env offers it and its capabilities say so
    quiet = EpisodeRunner(PointEnv(privileged=False), agent, trace=TraceStore(tmp_path)).run(2)
    assert load_trace(quiet.trace_path).of_kind("privileged") == []
    off = EpisodeRunner(
        PointEnv(privileged=True), agent, trace=TraceStore(tmp_path), record_privileged=False
    )
    assert load_trace(off.run(2).trace_path).of_kind("privileged") == []


def test_on_step_receives_each_executed_action() -> None:
    class Learner(ScriptedAgent):
        def __init__(self) -> None:
            super().__init__(ramp, chunk_size=2)
            self.steps: list[tuple[int, dict[str, float], float]] = []

        def on_step(self, step: int, observation: Any, action: Any, reward: float) -> None:
            self.steps.append((step, dict(action), reward))

    env, agent = PointEnv(), Learner()
    record = EpisodeRunner(env, agent).run(3)
    assert [s for s, _, _ in agent.steps] == [0, 1, 2] and [
        a for _, a, _ in agent.steps
    ] == env.received
    assert sum(r for _, _, r in agent.steps) == pytest.approx(record.total_reward)


def test_entry_point_refusals_name_parameter_and_value() -> None:
    env, agent = PointEnv(), ScriptedAgent(ramp)
    with pytest.raises(ValueError, match="record_privileged='false'"):
        EpisodeRunner(env, agent, record_privileged="false")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="image_every=-1"):
        EpisodeRunner(env, agent, image_every=-1)
    with pytest.raises(ValueError, match="act_timeout_s=0"):
        EpisodeRunner(env, agent, act_timeout_s=0)
    with pytest.raises(ValueError, match="env_spec"):
        EpisodeRunner(object(), agent)
    with pytest.raises(ValueError, match="agent=object: has no reset"):
        EpisodeRunner(env, object())
    runner = EpisodeRunner(env, agent)
    with pytest.raises(ValueError, match="max_steps=-1"):
        runner.run(-1)
    with pytest.raises(ValueError, match="max_steps=True"):
        runner.run(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed='1'"):
        runner.run(3, seed="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode='async'"):
        Timing(mode="async")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="execution_steps=0"):
        Timing(execution_steps=0)
    with pytest.raises(ValueError, match="latency_s=-0.1"):
        Timing(latency_s=-0.1)
    with pytest.raises(ValueError, match="control='joint'"):
        EnvSpec(("a",), "joint", 10.0)  # type: ignore[arg-type]


def test_the_envs_account_of_the_episode_is_in_the_trace_before_episode_end(
    tmp_path: Path,
) -> None:
    class Accounting(PointEnv):
        """Settles its account when the episode ends: what it saw step by step."""

        def __init__(self) -> None:
            super().__init__()
            self.settled_at: list[int] = []

        def before_episode_end(self, step: int) -> list[tuple[str, dict[str, Any]]]:
            self.settled_at.append(step)
            return [("cell.account", {"commands": len(self.received), "step": step})]

    env = Accounting()
    bus = EventBus()
    events = collect(bus)
    record = EpisodeRunner(env, ScriptedAgent(ramp), bus=bus, trace=TraceStore(tmp_path)).run(5)
    assert env.settled_at == [5]
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["cell.account", "episode.end"], kinds
    assert events[-2].data == {"commands": 5, "step": 5} and events[-2].step == 5
    assert [e.seq for e in events] == list(range(len(events))) and record.events == len(events)
    trace = load_trace(record.trace_path)  # the trace holds what the bus carried, in order
    assert [e.kind for e in trace.events] == kinds
    assert trace.of_kind("cell.account")[0].data == {"commands": 5, "step": 5}

    class Failing(PointEnv):  # a hook that raises is ignored: the episode still ends
        def before_episode_end(self, step: int) -> Any:
            raise RuntimeError("ledger unreachable")

    bus = EventBus()
    events = collect(bus)
    record = EpisodeRunner(Failing(), ScriptedAgent(ramp), bus=bus).run(3)
    assert record.outcome == EpisodeOutcome.TRUNCATED and events[-1].kind == "episode.end"
    assert "ledger unreachable" not in str([e.data for e in events])
