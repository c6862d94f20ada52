"""Takeover on the MuJoCo SO-101 with the scripted expert as the simulated operator
(rollout.takeover): a policy heading for the wrong place is taken over when it leaves
the expert's tube, the expert's command reaches the robot through the handover limiter
and the shield with nothing clipped at the seams, the policy gets the robot back; the
e-stop during a correction ends the episode and stays latched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.envs import MujocoScene
from robokernel_ros.kernel import EpisodeOutcome, EpisodeRunner, TraceStore, load_trace
from robokernel_ros.policies.base import PolicyAgent
from robokernel_ros.policies.scripted import ScriptedPolicy
from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule

HZ = 50.0
VMAX, AMAX = 1.5, 25.0  # the shield's bounds (rad/s, rad/s^2); the limiter takes them
EXPERT = [{"shoulder_pan": 0.6, "elbow_flex": 0.5}, {"shoulder_pan": -0.3, "elbow_flex": 0.2}]
WRONG = [{"shoulder_pan": -0.6, "elbow_flex": 0.5}]  # the policy heads the other way
SPEED = {"max_delta": 0.02, "max_accel": 0.004}  # 1 rad/s, 10 rad/s^2 at 50 Hz


def agent(targets: list[dict[str, float]], env: Any) -> PolicyAgent:
    policy = ScriptedPolicy(targets=targets, tolerance=0.03, **SPEED)
    policy.set_robot_state_keys(env.env_spec.action_keys)
    policy.set_action_limits(env.env_spec.action_limits)
    return PolicyAgent(policy)


@pytest.fixture
def cell(tmp_path: Path) -> tuple[EpisodeRunner, SimulatedOperator]:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm", control_hz=HZ)
    operator = SimulatedOperator(agent(EXPERT, env), TubeRule(radius=0.15, back_steps=10))
    runner = EpisodeRunner(
        env,
        agent(WRONG, env),
        trace=TraceStore(tmp_path),
        safety={"max_velocity": VMAX, "max_acceleration": AMAX},
        teleop=operator,
    )
    operator.attach(runner.operator)
    return runner, operator


def windows(trace: Any) -> list[tuple[int, int]]:
    starts = [e.data["step"] for e in trace.of_kind("intervention.start")]
    ends = [e.data["step"] for e in trace.of_kind("intervention.end")]
    return list(zip(starts, ends, strict=True))


def test_the_simulated_operator_takes_over_and_hands_back_with_nothing_clipped(cell) -> None:
    runner, operator = cell
    record = runner.run(300, seed=0)
    trace = load_trace(record.trace_path)
    assert record.outcome == EpisodeOutcome.TRUNCATED, record.status
    spans = windows(trace)
    assert len(spans) >= 2, operator.decisions  # taken over, handed back, taken over again
    first_start, first_end = spans[0]
    # the rule decided each switch, and the channel accepted it
    verbs = [(d[0], d[1], d[3]) for d in operator.decisions]
    assert verbs[:2] == [(first_start, "correct", ""), (first_end, "resume", "")]
    assert operator.decisions[0][2] > 0.15
    # every command of the episode within the bounds: at the seams the limiter moved the
    # robot from the policy's motion to the expert's and back without a step in speed
    commands = [e.data["action"] for e in trace.of_kind("action")]
    for key in runner.env.env_spec.action_keys:
        values = [c[key] for c in commands]
        speeds = [b - a for a, b in zip(values, values[1:], strict=False)]
        assert max(abs(v) for v in speeds) <= VMAX / HZ + 1e-9, key
        changes = [b - a for a, b in zip(speeds, speeds[1:], strict=False)]
        assert max(abs(c) for c in changes) <= AMAX / HZ**2 + 1e-9, key
    assert trace.of_kind("safety.intervention") == []  # the shield clipped nothing
    # the flags are the windows; the correction drove the robot into the expert's tube
    flags = [e.data["intervention"] for e in trace.of_kind("action")]
    expected = [any(s <= step < e for s, e in spans) for step in range(len(flags))]
    if len(trace.of_kind("intervention.start")) > len(spans):  # one open at the end
        last = trace.of_kind("intervention.start")[-1].data["step"]
        expected = [x or step >= last for step, x in enumerate(expected)]
    assert flags == expected
    joints = trace.of_kind("observation")[first_end].data["obs"]["joint_positions"]
    assert joints["shoulder_pan"] > 0.0  # the policy alone only ever went negative
    shadows = [e.data["policy_action"] for e in trace.of_kind("action")[first_start:first_end]]
    assert all(s is not None and s["shoulder_pan"] <= 0.0 for s in shadows)
    assert record.takeover["interventions"] == len(trace.of_kind("intervention.start"))


def test_an_estop_during_the_simulated_correction_holds_and_latches(cell) -> None:
    runner, operator = cell
    env = runner.env
    pressed: dict[str, int] = {}

    def press(event: Any) -> None:
        if event.data.get("intervention") and not pressed:
            pressed["step"] = event.step
            runner.operator.estop(by="panel", why="test")

    runner.bus.subscribe(press, kinds=["action"])
    record = runner.run(300, seed=0)
    assert record.outcome == EpisodeOutcome.ESTOPPED
    assert record.steps == pressed["step"] + 1  # the pressed step's command was the last
    trace = load_trace(record.trace_path)
    assert trace.of_kind("intervention.end")[-1].data["by"] == "episode end (estopped)"
    latch = runner.operator.estop_latch
    assert latch.latched and latch.by == "panel"
    before = env.privileged_state()
    again = runner.run(50, seed=0)
    assert again.outcome == EpisodeOutcome.ESTOPPED and again.steps == 0
    assert repr(env.privileged_state()) == repr(before)  # nothing moved it while latched
    assert runner.operator.correct() == "correct refused: no episode is running"


def test_pause_without_a_teleop_source_is_refused_and_the_policy_keeps_driving(
    tmp_path: Path,
) -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm", control_hz=HZ)
    runner = EpisodeRunner(env, agent(EXPERT, env), trace=TraceStore(tmp_path))
    answers: list[str] = []

    def ask(event: Any) -> None:
        if event.step == 5:
            answers.extend([runner.operator.pause(by="panel"), runner.operator.correct()])

    runner.bus.subscribe(ask, kinds=["action"])
    record = runner.run(40, seed=0)
    assert answers == [
        "pause refused: no teleop source is attached to the runner "
        "(EpisodeRunner(teleop=...), or the contract's teleop channel)",
        "correct refused: no teleop source is attached to the runner "
        "(EpisodeRunner(teleop=...), or the contract's teleop channel)",
    ]
    trace = load_trace(record.trace_path)
    assert record.holds == 0 and record.execution.operator == 0  # nothing held the robot
    assert not [e for e in trace.events if e.kind.startswith(("intervention.", "operator."))]
    pan = [e.data["action"]["shoulder_pan"] for e in trace.of_kind("action")]
    assert pan[39] > pan[5] > 0.0  # the policy drove on toward its first waypoint
