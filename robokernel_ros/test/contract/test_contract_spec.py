"""The contract file: a leader/follower arm and a UR-style arm + gripper are read as
written; every mistake is refused by name, all of them at once, one line each."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.contract import (
    Command,
    ContractError,
    load_contract,
    parse_contract,
    resolve_types,
)

CONFIG = Path(__file__).resolve().parents[2] / "config"
SO101 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]


def leader_follower() -> dict[str, Any]:
    return {
        "fps": 30,
        "align": "header",
        "robot": "so101",
        "state": {
            "topic": "/follower/joint_states",
            "type": "sensor_msgs/JointState",
            "field": "position",
            "names": SO101,
        },
        "action": {"topic": "/leader/joint_states", "field": "position", "names": SO101},
        "images": {
            "front": {"topic": "/front_camera/image_raw/compressed"},
            "wrist": {"topic": "/wrist_camera/image_raw"},
        },
    }


def problems(mapping: Any) -> list[str]:
    with pytest.raises(ContractError) as info:
        parse_contract(mapping, "test.yaml")
    assert str(info.value).startswith("contract test.yaml: ")
    return info.value.problems


def test_a_leader_follower_contract_reads_as_written_with_one_default_command() -> None:
    c = parse_contract(leader_follower(), "lf.yaml")
    assert c.fps == 30.0 and c.align == "header" and c.robot == "so101"
    assert c.state[0].type == "sensor_msgs/msg/JointState"  # the short spelling is normalised
    assert c.action[0].type is None  # read from the bag or the graph later
    assert c.state_names == tuple(SO101) and c.action_names == tuple(SO101)
    assert set(c.images) == {"front", "wrist"}
    assert c.commands == (Command("arm", "/leader/joint_states", "forward_command", tuple(SO101)),)
    assert c.episodes.rule == "none"
    resolved = resolve_types(
        c,
        {
            "/follower/joint_states": "sensor_msgs/msg/JointState",
            "/leader/joint_states": "sensor_msgs/msg/JointState",
            "/front_camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
            "/wrist_camera/image_raw": "sensor_msgs/msg/Image",
        },
    )
    assert resolved.action[0].type == "sensor_msgs/msg/JointState"
    assert resolved.images["front"].type == "sensor_msgs/msg/CompressedImage"


def test_a_ur_style_arm_and_gripper_contract_has_two_commands() -> None:
    c = load_contract(CONFIG / "contract_ur_gripper.yaml")
    assert [cmd.name for cmd in c.commands] == ["arm", "gripper"]
    assert [cmd.kind for cmd in c.commands] == ["joint_trajectory", "forward_command"]
    assert c.commands[1].joints == ("finger_joint",)
    assert c.action_names[-1] == "finger_joint" and len(c.action_names) == 7
    # the wrench's six entries and the pose's position get names from their topic
    assert "force_torque_sensor_broadcaster_wrench.torque.z" in c.state_names
    assert c.state_names[-3:] == (
        "tcp_pose.position.x",
        "tcp_pose.position.y",
        "tcp_pose.position.z",
    )


def test_the_shipped_leader_follower_contract_loads() -> None:
    c = load_contract(CONFIG / "contract_so101_leader_follower.yaml")
    assert c.state_names == tuple(SO101)
    assert c.episodes.rule == "gap" and c.episodes.gap_s == 2.0


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda m: m.update(fsp=30), "fsp: unknown key (did you mean 'fps'?)"),
        (lambda m: m.update(fps=0), "fps: 0 must be a number of frames per second > 0"),
        (lambda m: m.update(fps="30"), "fps: '30' must be"),
        (lambda m: m.pop("fps"), "fps: missing"),
        (
            lambda m: m.update(align="stamp"),
            "align: 'stamp' is not an alignment; one of ['header', 'receive']",
        ),
        (
            lambda m: m["state"].update(type="sensor_msgs/Joy"),
            "state.type: type 'sensor_msgs/Joy' is not supported",
        ),
        (
            lambda m: m["state"].update(field="positions"),
            "state.field: 'positions' is not a field of sensor_msgs/msg/JointState (topic /follower/joint_states); one of ['position', 'velocity', 'effort']",
        ),
        (
            lambda m: m["state"].update(names=[]),
            "state.names: sensor_msgs/msg/JointState (topic /follower/joint_states) needs the names",
        ),
        (
            lambda m: m["state"].update(names=[*SO101, "gripper"]),
            "state.names: ['gripper'] named more than once",
        ),
        (
            lambda m: m["state"].update(topic="joint_states"),
            "state.topic: 'joint_states' is not a topic name",
        ),
        (
            lambda m: m["state"].update(nmaes=SO101),
            "state.nmaes: unknown key (did you mean 'names'?)",
        ),
        (lambda m: m.pop("action"), "action: missing"),
        (lambda m: m.update(robot="so100"), "robot: 'so100' is not a robot this project knows"),
        (
            lambda m: m["action"].update(names=[*SO101[:5], "jaw"]),
            "action.names: ['jaw'] (topic /leader/joint_states) are not joints of robot so101",
        ),
        (
            lambda m: m["images"].update(
                front={"topic": "/x", "type": "sensor_msgs/msg/JointState"}
            ),
            "images.front.type: type 'sensor_msgs/msg/JointState' is not supported",
        ),
        (
            lambda m: m["images"].update(back={"topic": "/wrist_camera/image_raw"}),
            "images.back.topic: /wrist_camera/image_raw is also images.wrist's",
        ),
        (
            lambda m: m.update(command={"topic": "/cmd", "kind": "position", "joints": SO101}),
            "command.kind: 'position' is not a command kind; one of ['forward_command', 'joint_trajectory']",
        ),
        (
            lambda m: m.update(
                command={"topic": "/cmd", "kind": "forward_command", "joints": ["elbow"]}
            ),
            "command.joints: ['elbow'] are not action names",
        ),
        (
            lambda m: m.update(episodes={"split": "gap"}),
            "episodes.gap_s: None must be a number of seconds > 0",
        ),
        (
            lambda m: m.update(episodes={"split": "time"}),
            "episodes.split: 'time' is not a rule; one of ['none', 'gap', 'marker']",
        ),
        (
            lambda m: m.update(episodes={"split": "marker", "topic": "marker"}),
            "episodes.topic: 'marker' is not a topic name",
        ),
    ],
)
def test_each_mistake_is_refused_by_its_key_path(edit: Any, expected: str) -> None:
    mapping = copy.deepcopy(leader_follower())
    edit(mapping)
    found = problems(mapping)
    assert any(expected in p for p in found), found
    assert len(found) == 1, found  # exactly the one mistake, nothing spurious


def test_duplicate_topics_within_a_role_and_names_across_sources_are_refused() -> None:
    m = leader_follower()
    m["state"] = [m["state"], dict(m["state"])]
    found = problems(m)
    assert any("state: topic /follower/joint_states is listed 2 times" in p for p in found)
    assert any(
        "state[1].names: 'shoulder_pan' is also read from" in p or "listed 2" in p for p in found
    )


def test_every_mistake_is_reported_at_once() -> None:
    m = leader_follower()
    m.update(fps=-1, align="x", robot="nobody")
    m["state"]["field"] = "bogus"
    m["images"]["front"]["typo"] = 1
    found = problems(m)
    keys = [p.split(":")[0] for p in found]
    assert keys == ["fps", "align", "state.field", "images.front.typo", "robot"], found


def test_names_must_match_a_fixed_layout_type_and_a_float64_array_needs_names() -> None:
    m = leader_follower()
    m.pop("robot")
    m["state"] = [
        m["state"],
        {
            "topic": "/ee",
            "type": "geometry_msgs/msg/PoseStamped",
            "field": "position",
            "names": ["x", "y"],
        },
        {"topic": "/arr", "type": "std_msgs/msg/Float64MultiArray"},
    ]
    found = problems(m)
    assert any(
        p.startswith(
            "state[1].names: 2 names for geometry_msgs/msg/PoseStamped.position (topic /ee), which has 3"
        )
        for p in found
    ), found
    assert any(
        p.startswith("state[2].names: std_msgs/msg/Float64MultiArray (topic /arr) needs the names")
        for p in found
    ), found


def test_resolving_types_names_a_missing_topic_and_a_type_mismatch() -> None:
    c = parse_contract(leader_follower(), "lf.yaml")
    with pytest.raises(ContractError) as info:
        resolve_types(
            c,
            {
                "/follower/joint_states": "sensor_msgs/msg/Imu",
                "/front_camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
                "/wrist_camera/image_raw": "sensor_msgs/msg/Image",
            },
        )
    assert info.value.problems == [
        "state.type: the contract says sensor_msgs/msg/JointState, topic "
        "/follower/joint_states carries sensor_msgs/msg/Imu",
        "action.topic: /leader/joint_states is not there",
    ]


def test_a_missing_or_broken_file_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as info:
        load_contract(tmp_path / "none.yaml")
    assert info.value.problems[0].startswith("file: cannot be read")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fps: [30\n")
    with pytest.raises(ContractError) as info:
        load_contract(bad)
    assert info.value.problems[0].startswith("file: not valid YAML")
