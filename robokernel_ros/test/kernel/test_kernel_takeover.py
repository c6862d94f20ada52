"""Takeover in the kernel loop (docs/operator.md): pause holds, correct drives from the
teleop source through the handover limiter and the shield, resume hands back with the
policy's queue flushed; the e-stop wins; refusals name why. The toy PointEnv (absolute
control: position = command) makes every command the robot's position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.kernel import (
    CORRECTING,
    PAUSED,
    EpisodeOutcome,
    EpisodeRunner,
    OperatorChannel,
    Timing,
    TraceStore,
    load_trace,
)
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent

HZ = 50.0
VMAX, AMAX = 2.0, 20.0  # the shield's rate bounds, which the limiter takes over
SAFETY = {"max_velocity": VMAX, "max_acceleration": AMAX}


def ramp(obs: Any, step: int, i: int) -> dict[str, float]:
    """A policy that moves j0 at 0.5 /s from 0 and keeps j1 at 0 (well inside the bounds)."""
    return {"j0": min(0.9, 0.01 * (step + i)), "j1": 0.0}


class Leader:
    """A teleop source whose leader sits at `pose`; `plan` {step: (verb, by)} drives the
    operator channel from observe(), at the step boundary of that step."""

    name = "leader"

    def __init__(self, plan: dict[int, str], pose: dict[str, float] | None = None) -> None:
        self.plan = plan
        self.pose = pose if pose is not None else {"j0": -0.5, "j1": 0.5}
        self.operator: OperatorChannel | None = None
        self.answers: dict[int, str] = {}
        self.calls = 0
        self.resets: list[Any] = []

    def reset(self, *, seed: int | None = None) -> None:
        self.resets.append(seed)

    def observe(self, step: int, observation: Any) -> None:
        verb = self.plan.get(step)
        if verb is not None:
            assert self.operator is not None
            self.answers[step] = getattr(self.operator, verb)(by="test operator")

    def teleop_action(self, observation: Any) -> dict[str, float] | None:
        self.calls += 1
        return dict(self.pose) if self.pose is not None else None


def runner_with(leader: Leader | None, tmp_path: Path, **kwargs: Any) -> EpisodeRunner:
    runner = EpisodeRunner(
        PointEnv(2, control_hz=HZ),
        ScriptedAgent(ramp, chunk_size=kwargs.pop("chunk_size", 5)),
        trace=TraceStore(tmp_path),
        safety=kwargs.pop("safety", SAFETY),
        teleop=leader,
        **kwargs,
    )
    if leader is not None:
        leader.operator = runner.operator
    return runner


def commands(trace: Any) -> list[dict[str, float]]:
    return [e.data["action"] for e in trace.of_kind("action")]


def assert_within_bounds(cmds: list[dict[str, float]], first: int, last: int) -> None:
    """Every change of command within VMAX/HZ and every change of that change within
    AMAX/HZ^2 (a hair of float rounding allowed), over steps first..last."""
    for key in ("j0", "j1"):
        values = [c[key] for c in cmds]
        for s in range(max(first, 1), last + 1):
            v = values[s] - values[s - 1]
            assert abs(v) <= VMAX / HZ + 1e-9, (key, s, v)
            if s >= 2:
                a = v - (values[s - 1] - values[s - 2])
                assert abs(a) <= AMAX / HZ**2 + 1e-9, (key, s, a)


def test_pause_and_correct_without_a_teleop_source_are_refused_by_name(tmp_path: Path) -> None:
    runner = runner_with(None, tmp_path)
    answers: dict[str, str] = {}

    def call(event: Any) -> None:
        if event.step == 3 and not answers:
            answers["pause"] = runner.operator.pause(by="panel")
            answers["correct"] = runner.operator.correct(by="panel")
            answers["resume"] = runner.operator.resume()

    runner.bus.subscribe(call, kinds=["action"])
    record = runner.run(10)
    assert answers["pause"].startswith("pause refused: no teleop source")
    assert answers["correct"].startswith("correct refused: no teleop source")
    assert answers["resume"] == ""  # already autonomous: nothing to do
    trace = load_trace(record.trace_path)
    assert not [e for e in trace.events if e.kind.startswith(("intervention", "operator."))]
    assert "intervention" not in trace.of_kind("action")[0].data
    assert record.takeover is None and record.execution.operator == 0


def test_takeover_outside_an_episode_is_refused(tmp_path: Path) -> None:
    leader = Leader({})
    runner = runner_with(leader, tmp_path)
    assert runner.operator.pause() == "pause refused: no episode is running"
    runner.run(3)
    assert runner.operator.correct() == "correct refused: no episode is running"
    assert runner.operator.mode == "autonomous"


def test_takeover_and_handback_stay_within_the_limiter_bounds_at_the_seams(
    tmp_path: Path,
) -> None:
    leader = Leader({10: "correct", 60: "resume"})
    runner = runner_with(leader, tmp_path)
    record = runner.run(90)
    assert leader.answers == {10: "", 60: ""}
    trace = load_trace(record.trace_path)
    cmds = commands(trace)
    assert len(cmds) == 90
    # The robot reached the leader and followed it (the limiter did not hold it back).
    assert cmds[59] == pytest.approx({"j0": -0.5, "j1": 0.5})
    assert_within_bounds(cmds, 5, 89)  # takeover at 10, handback at 60
    # The shield had nothing to clip at the seams: the limiter used its bounds.
    clipped = [e for e in trace.of_kind("safety.intervention") if 5 <= e.step <= 89]
    assert clipped == []
    flags = [e.data["intervention"] for e in trace.of_kind("action")]
    assert flags == [False] * 10 + [True] * 50 + [False] * 30
    kinds = [e.kind for e in trace.events if e.kind.startswith(("intervention", "operator."))]
    assert kinds == [
        "operator.correct",
        "intervention.start",
        "operator.resume",
        "intervention.end",
    ]
    start = trace.of_kind("intervention.start")[0].data
    assert start == {"step": 10, "mode": CORRECTING, "by": "test operator", "teleop": "leader"}
    end = trace.of_kind("intervention.end")[0].data
    assert end["start_step"] == 10 and end["steps"] == 50
    assert end["duration_s"] == pytest.approx(50 / HZ)
    assert record.takeover == {
        "interventions": 1,
        "intervention_steps": 50,
        "first_intervention_step": 10,
    }
    assert record.execution.operator == 50
    assert leader.calls == 50 and leader.resets == [None]


def test_correcting_records_the_human_and_the_policy_shadow_action(tmp_path: Path) -> None:
    leader = Leader({10: "correct", 30: "resume"})
    runner = runner_with(leader, tmp_path)
    record = runner.run(40)
    actions = load_trace(record.trace_path).of_kind("action")
    for event in actions[10:30]:
        data = event.data
        assert data["mode"] == CORRECTING
        assert data["human_action"] == {"j0": -0.5, "j1": 0.5}
        # the policy kept inferring: its action for this step, not executed
        assert data["policy_action"] == ramp(None, event.step, 0)
        assert data["action"] != data["policy_action"]
    assert "human_action" not in actions[30].data and "mode" not in actions[9].data


def test_resume_flushes_the_queue_and_requeries_from_the_current_observation(
    tmp_path: Path,
) -> None:
    leader = Leader({10: "correct", 23: "resume"})
    agent_chunk = 8
    runner = runner_with(leader, tmp_path, chunk_size=agent_chunk)
    record = runner.run(40)
    trace = load_trace(record.trace_path)
    requests = [e.step for e in trace.of_kind("chunk.request")]
    # the shadow kept requesting every 8 steps (0, 8, 16), and the resume at 23 asked at
    # once, with 1 action of the chunk from 16 still queued
    assert requests[:4] == [0, 8, 16, 23]
    calls = runner.agent.calls
    assert [step for step, _ in calls][:4] == [0, 8, 16, 23]
    observation_at_23 = trace.of_kind("observation")[23].data["obs"]
    command_at_22 = commands(trace)[22]
    assert observation_at_23["j0"] == pytest.approx(command_at_22["j0"])


def test_pause_holds_without_asking_the_policy(tmp_path: Path) -> None:
    leader = Leader({10: "pause", 30: "correct", 40: "resume"})
    runner = runner_with(leader, tmp_path)
    record = runner.run(50)
    trace = load_trace(record.trace_path)
    cmds = commands(trace)
    # The policy moved j0 at 0.5 /s: the limiter brakes it to rest (within AMAX), then holds.
    assert cmds[10]["j0"] > cmds[9]["j0"]
    assert cmds[20] == cmds[29]
    assert_within_bounds(cmds, 5, 49)
    assert not [e for e in trace.of_kind("chunk.request") if 10 <= e.step < 30]
    assert leader.calls == 10  # the teleop source is asked while correcting only
    assert [e.data["mode"] for e in trace.of_kind("intervention.mode")] == [CORRECTING]
    assert trace.of_kind("intervention.start")[0].data["mode"] == PAUSED
    assert record.takeover["interventions"] == 1
    assert record.outcome == EpisodeOutcome.TRUNCATED  # deliberate holds: no watchdog


def test_no_fresh_teleop_command_holds(tmp_path: Path) -> None:
    leader = Leader({5: "correct"})
    leader.pose = None
    runner = runner_with(leader, tmp_path)
    record = runner.run(40, seed=3)
    trace = load_trace(record.trace_path)
    cmds = commands(trace)
    assert cmds[30] == cmds[39]
    holds = [e.data["hold"] for e in trace.of_kind("action")][5:]
    assert all(holds) and all(e.data["human_action"] is None for e in trace.of_kind("action")[5:])
    assert leader.resets == [3]


def test_an_estop_during_a_correction_holds_and_latches(tmp_path: Path) -> None:
    leader = Leader({10: "correct"})
    runner = runner_with(leader, tmp_path)
    env = runner.env

    def press(event: Any) -> None:
        if event.step == 20:
            runner.operator.estop(by="panel")

    runner.bus.subscribe(press, kinds=["action"])
    record = runner.run(60)
    assert record.outcome == EpisodeOutcome.ESTOPPED
    assert len(env.received) == 21  # nothing reached the robot after the e-stop's step
    assert runner.operator.estopped and runner.operator.mode == "autonomous"
    trace = load_trace(record.trace_path)
    end = trace.of_kind("intervention.end")[0].data
    assert end["by"] == "episode end (estopped)" and end["steps"] == 11
    # latched: the next run does not start, and a takeover is refused
    assert runner.run(10).outcome == EpisodeOutcome.ESTOPPED
    assert len(env.received) == 21


def test_a_teleop_source_that_raises_ends_the_episode_as_a_teleop_error(tmp_path: Path) -> None:
    class Broken(Leader):
        def teleop_action(self, observation: Any) -> dict[str, float] | None:
            raise RuntimeError("leader arm unplugged")

    leader = Broken({4: "correct"})
    record = runner_with(leader, tmp_path).run(20)
    assert record.outcome == EpisodeOutcome.ERROR
    assert record.error["category"] == "teleop_error"
    assert "leader arm unplugged" in record.status and "'leader'" in record.status


def test_a_realtime_correction_keeps_the_shadow_aligned(tmp_path: Path) -> None:
    leader = Leader({10: "correct", 30: "resume"})
    runner = runner_with(
        leader,
        tmp_path,
        chunk_size=10,
        timing=Timing(mode="realtime", clock="virtual", latency_s=0.05, refill_steps=4),
    )
    record = runner.run(60)
    trace = load_trace(record.trace_path)
    for event in trace.of_kind("action")[12:30]:
        shadow = event.data["policy_action"]
        if shadow is not None:  # aligned by consumption: the ramp's value of this step
            assert shadow["j0"] == pytest.approx(ramp(None, event.step, 0)["j0"])
    assert_within_bounds(commands(trace), 5, 59)
    assert record.outcome == EpisodeOutcome.TRUNCATED


def test_the_teleop_source_and_handover_bounds_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="teleop=.*name"):
        runner_with(object(), tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"handover: unknown keys \['speed'\]"):
        runner_with(Leader({}), tmp_path, handover={"speed": 1})
    with pytest.raises(ValueError, match=r"max_velocity=-1: must be a positive"):
        runner_with(Leader({}), tmp_path, handover={"max_velocity": -1})


def test_a_wall_clock_correction_runs_beside_the_policys_act_thread(tmp_path: Path) -> None:
    leader = Leader({10: "correct", 30: "resume"})
    timing = Timing(mode="realtime", clock="wall", refill_steps=3, max_hold_steps=10_000)
    runner = runner_with(leader, tmp_path, chunk_size=8, timing=timing)
    record = runner.run(45)
    trace = load_trace(record.trace_path)
    actions = trace.of_kind("action")
    assert [e.data["intervention"] for e in actions] == [False] * 10 + [True] * 20 + [False] * 15
    # the policy kept inferring on its thread: its chunks were merged during the correction
    assert [e for e in trace.of_kind("chunk.merge") if 10 < e.step < 30]
    assert any(e.data["policy_action"] is not None for e in actions[10:30])
    # the takeover and the correction within the bounds: the shield clipped nothing there
    assert [e for e in trace.of_kind("safety.intervention") if 10 <= e.step < 30] == []
    assert_within_bounds(commands(trace), 10, 29)
    # handed back: a request at the resume step, from its observation
    assert 30 in [e.step for e in trace.of_kind("chunk.request")]
