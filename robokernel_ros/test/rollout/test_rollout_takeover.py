"""The tube rule of the simulated operator (rollout.takeover): when it takes over, when it
hands back, what it refuses."""

from __future__ import annotations

import math

import pytest
from robokernel_ros.kernel.toy import ScriptedAgent
from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule


def test_the_rule_takes_over_beyond_the_radius_and_hands_back_after_steps_inside() -> None:
    rule = TubeRule(radius=0.2, back_steps=3)
    assert rule.back_radius == pytest.approx(0.1)
    assert rule.update(0.2, intervening=False) is None  # on the edge: inside
    assert rule.update(0.21, intervening=False) == "correct"
    assert rule.update(math.nan, intervening=False) == "correct"  # unknown: take over
    decisions = [rule.update(d, intervening=True) for d in (0.15, 0.1, 0.05, 0.11, 0.0, 0.0)]
    assert decisions == [None, None, None, None, None, None]
    assert rule.update(0.0, intervening=True) == "resume"  # three in a row within 0.1
    assert rule.inside == 0


def test_the_distance_is_the_largest_joint_difference_over_the_experts_keys() -> None:
    state = {"a": 0.0, "b": 1.0, "c": 5.0}
    assert TubeRule.distance(state, {"a": 0.1, "b": 0.7}) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="name none of the expert's action keys"):
        TubeRule.distance(state, {"x": 0.0})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"radius": 0}, r"radius=0: must be a positive"),
        ({"radius": 0.1, "back_radius": 0.2}, r"back_radius=0.2: must be <= radius=0.1"),
        ({"back_steps": 0}, r"back_steps=0: must be an integer >= 1"),
        ({"back_steps": True}, r"back_steps=True: must be an integer >= 1"),
    ],
)
def test_bad_rule_parameters_are_refused_by_name(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TubeRule(**kwargs)


class Channel:
    """The three members the simulated operator calls, answering like OperatorChannel."""

    def __init__(self) -> None:
        self.mode = "autonomous"
        self.calls: list[tuple[str, str]] = []

    def correct(self, by: str = "") -> str:
        self.calls.append(("correct", by))
        self.mode = "correcting"
        return ""

    def resume(self, by: str = "") -> str:
        self.calls.append(("resume", by))
        self.mode = "autonomous"
        return ""


def test_the_simulated_operator_plays_the_expert_and_calls_the_channel() -> None:
    expert = ScriptedAgent(lambda obs, step, i: {"a": 1.0})
    channel = Channel()
    operator = SimulatedOperator(expert, TubeRule(radius=0.5, back_steps=2), channel)
    operator.reset(seed=4)
    assert expert.resets == [{"instruction": "", "seed": 4}]
    operator.observe(0, {"joint_positions": {"a": 0.8}})
    assert channel.calls == [] and operator.teleop_action({}) == {"a": 1.0}
    operator.observe(1, {"joint_positions": {"a": 0.2}})
    assert channel.calls[0][0] == "correct" and "left the tube: 0.800 > 0.5" in channel.calls[0][1]
    for step in (2, 3):
        operator.observe(step, {"joint_positions": {"a": 0.9}})
    assert [c[0] for c in channel.calls] == ["correct", "resume"]
    assert [d[:2] for d in operator.decisions] == [(1, "correct"), (3, "resume")]


def test_a_bad_expert_or_name_is_refused() -> None:
    with pytest.raises(ValueError, match="expert=.*act"):
        SimulatedOperator(object())
    with pytest.raises(ValueError, match="name='': must be a non-empty string"):
        SimulatedOperator(ScriptedAgent(lambda o, s, i: {}), name="")


def test_the_simulated_operator_never_hands_back_a_persons_intervention() -> None:
    expert = ScriptedAgent(lambda obs, step, i: {"a": 1.0})
    channel = Channel()
    operator = SimulatedOperator(expert, TubeRule(radius=0.5, back_steps=2), channel)
    operator.reset()
    channel.mode = "paused"  # a person paused the robot, inside the tube
    for step in range(5):
        operator.observe(step, {"joint_positions": {"a": 0.95}})
    assert channel.calls == [] and channel.mode == "paused"
    channel.mode = "correcting"  # the person corrects: still theirs
    for step in range(5, 10):
        operator.observe(step, {"joint_positions": {"a": 0.95}})
    assert channel.calls == []
