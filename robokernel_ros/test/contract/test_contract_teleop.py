"""The contract's operator channels: `teleop:` (the leader that drives the robot while the
operator corrects) and `takeover:` (the pedal or joystick) are read as written, kept by
contract_mapping, and every mistake in them is refused by its key path, one line each."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from robokernel_ros.contract import (
    ContractError,
    Takeover,
    Teleop,
    contract_mapping,
    parse_contract,
)

SO101 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


def supervised() -> dict[str, Any]:
    return {
        "fps": 50,
        "robot": "so101",
        "state": {"topic": "/joint_states", "type": "sensor_msgs/msg/JointState", "names": SO101},
        "action": {"topic": "/arm/commands", "type": "std_msgs/Float64MultiArray", "names": SO101},
        "teleop": {
            "topic": "/leader/joint_states",
            "type": "sensor_msgs/msg/JointState",
            "field": "position",
            "names": SO101,
            "command": "/leader/commands",
        },
        "takeover": {"topic": "/pedal", "type": "std_msgs/msg/Bool"},
    }


def problems(mapping: Any) -> list[str]:
    with pytest.raises(ContractError) as info:
        parse_contract(mapping, "t.yaml")
    return info.value.problems


def test_a_teleop_stream_and_a_pedal_are_read_as_written_and_kept_by_the_mapping() -> None:
    c = parse_contract(supervised(), "t.yaml")
    assert isinstance(c.teleop, Teleop)
    assert c.teleop.stream.topic == "/leader/joint_states"
    assert c.teleop.stream.names == tuple(SO101)
    assert c.teleop.command == "/leader/commands"
    assert c.teleop.stale_s == pytest.approx(0.25)
    assert c.takeover == Takeover("/pedal", "std_msgs/msg/Bool", {})
    again = parse_contract(contract_mapping(c), "again")
    assert again.teleop == c.teleop and again.takeover == c.takeover


def test_a_joystick_names_its_buttons_and_a_contract_without_either_has_none() -> None:
    m = supervised()
    m["takeover"] = {
        "topic": "/joy",
        "type": "sensor_msgs/Joy",
        "buttons": {"pause": 0, "correct": 4, "resume": 5},
    }
    c = parse_contract(m, "t.yaml")
    assert c.takeover == Takeover(
        "/joy", "sensor_msgs/msg/Joy", {"pause": 0, "correct": 4, "resume": 5}
    )
    m.pop("teleop")
    m.pop("takeover")
    c = parse_contract(m, "t.yaml")
    assert c.teleop is None and c.takeover is None
    assert "teleop" not in contract_mapping(c)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda m: m["teleop"].pop("type"), "teleop.type: missing"),
        (lambda m: m["teleop"].pop("topic"), "teleop.topic: missing"),
        (
            lambda m: m["teleop"].update(names=[*SO101[:5], "jaw"]),
            "teleop.names: ['jaw'] (topic /leader/joint_states) are not action names",
        ),
        (
            lambda m: m["teleop"].update(stale_s=0),
            "teleop.stale_s: 0 must be a number of seconds > 0",
        ),
        (
            lambda m: m["teleop"].update(stale="1"),
            "teleop.stale: unknown key (did you mean 'stale_s'?)",
        ),
        (
            lambda m: m["teleop"].update(command="leader"),
            "teleop.command: 'leader' is not a topic name",
        ),
        (
            lambda m: m["teleop"].update(command="/arm/commands"),
            "teleop.command: /arm/commands is also command arm's",
        ),
        (
            lambda m: m["teleop"].update(topic="/joint_states"),
            "teleop.topic: /joint_states is also state's",
        ),
        (lambda m: m.update(teleop=["/leader"]), "teleop: must be a mapping"),
        (
            lambda m: m["takeover"].update(type="std_msgs/String"),
            "takeover.type: type 'std_msgs/String' is not supported; one of ['std_msgs/msg/Bool', 'sensor_msgs/msg/Joy']",
        ),
        (lambda m: m["takeover"].pop("type"), "takeover.type: missing"),
        (
            lambda m: m["takeover"].update(buttons={"correct": 1}),
            "takeover.buttons: only with type sensor_msgs/msg/Joy",
        ),
        (
            lambda m: m.update(takeover={"topic": "/joy", "type": "sensor_msgs/msg/Joy"}),
            "takeover.buttons: None must map some of ['pause', 'correct', 'resume']",
        ),
        (
            lambda m: m.update(
                takeover={
                    "topic": "/joy",
                    "type": "sensor_msgs/msg/Joy",
                    "buttons": {"correct": 1, "resume": 1},
                }  # fmt: skip
            ),
            "takeover.buttons.resume: button 1 is also correct's",
        ),
        (
            lambda m: m.update(
                takeover={
                    "topic": "/joy",
                    "type": "sensor_msgs/msg/Joy",
                    "buttons": {"correct": -1},
                }
            ),
            "takeover.buttons.correct: -1 must be a button index >= 0",
        ),
        (
            lambda m: m.update(
                takeover={
                    "topic": "/joy",
                    "type": "sensor_msgs/msg/Joy",
                    "buttons": {"takeover": 1},
                }
            ),
            "takeover.buttons.takeover: unknown key",
        ),
        (
            lambda m: m["takeover"].update(topic="/leader/joint_states"),
            "takeover.topic: /leader/joint_states is also the teleop's",
        ),
    ],
)
def test_each_teleop_or_takeover_mistake_is_refused_by_its_key_path(
    edit: Any, expected: str
) -> None:
    m = copy.deepcopy(supervised())
    edit(m)
    found = problems(m)
    assert any(expected in p for p in found), found
    assert len(found) == 1, found
