"""The limit files robots ship, parsed and merged joint by joint with the source of
every limit: UR's layout with !degrees, MoveIt's nesting with jerk and switched-off
limits, a URDF with transmissions, soft limits and a <ros2_control> block; the
refusals name the file and the key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robokernel_ros.safety.limits import (
    LIMIT_FIELDS,
    JointLimit,
    describe_limit,
    limits_from_urdf,
    load_limits_file,
    merge_limit_sources,
    urdf_limit_sources,
)

FIXTURES = Path(__file__).with_name("fixtures")
UR = FIXTURES / "ur5e_joint_limits.yaml"
MOVEIT = FIXTURES / "panda_moveit_joint_limits.yaml"
URDF = FIXTURES / "arm_ros2_control.urdf"
PI = math.pi


def test_ur_layout_with_degrees_tags():
    limits = load_limits_file(UR)
    assert list(limits) == [
        "shoulder_pan_joint",
        "shoulder_lift_joint",
        "elbow_joint",
        "wrist_1_joint",
        "wrist_2_joint",
        "wrist_3_joint",
    ]
    for joint in ("shoulder_pan_joint", "shoulder_lift_joint"):
        assert limits[joint] == JointLimit(-2 * PI, 2 * PI, PI, None, 150.0)
    assert limits["elbow_joint"] == JointLimit(-PI, PI, PI, None, 150.0)
    for joint in ("wrist_1_joint", "wrist_2_joint"):
        assert limits[joint] == JointLimit(-2 * PI, 2 * PI, PI, None, 28.0)
    assert limits["wrist_3_joint"] == JointLimit(-2 * PI, 2 * PI, 3.14159, None, 28.0)  # !radians


def test_moveit_nesting_switched_off_limits_and_jerk(tmp_path):
    limits = load_limits_file(MOVEIT)
    assert limits == {
        "panda_joint1": JointLimit(-2.8973, 2.8973, 2.175, 3.75),
        "panda_joint2": JointLimit(-1.7628, 1.7628, 2.175, 1.875),
        # has_acceleration_limits: false beside max_acceleration: 0.0: no limit, no refusal
        "panda_joint3": JointLimit(-2.8973, 2.8973, 2.175, None),
        "panda_joint4": JointLimit(-3.0718, -0.0698, 2.175, 3.125),
        "panda_finger_joint1": JointLimit(None, None, 0.1, None),
    }
    # A jerk limit switched on cannot be enforced by the rate guards: refused, named.
    text = MOVEIT.read_text().replace("has_jerk_limits: false", "has_jerk_limits: true", 1)
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_limits_file(path)
    message = str(info.value)
    for word in (str(path), "panda_joint1.has_jerk_limits", "7500.0", "has_jerk_limits: false"):
        assert word in message


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "limits.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text",
    [
        "joint_limits:\n  a: {has_velocity_limits: true, max_velocity: 1.5}\n",
        "robot_description_planning:\n  joint_limits:\n"
        "    a: {has_velocity_limits: true, max_velocity: 1.5}\n",
        "/**:\n  ros__parameters:\n    robot_description_planning:\n      joint_limits:\n"
        "        a: {has_velocity_limits: true, max_velocity: 1.5}\n",
        "arm:\n  controller_manager:\n    ros__parameters:\n      joint_limits:\n"
        "        a: {has_velocity_limits: true, max_velocity: 1.5}\n",
    ],
    ids=["top", "moveit", "params-moveit", "namespaced-params"],
)
def test_layouts(tmp_path, text):
    assert load_limits_file(_write(tmp_path, text)) == {"a": JointLimit(None, None, 1.5, None)}


def test_switched_off_whatever_the_value_and_soft_limits_tighten(tmp_path):
    text = (
        "joint_limits:\n"
        "  a: {has_position_limits: true, min_position: -2.0, max_position: 2.0,\n"
        "      has_soft_limits: true, k_position: 10.0, k_velocity: 5.0,\n"
        "      soft_lower_limit: -1.5, soft_upper_limit: 3.0,\n"
        "      has_velocity_limits: false, max_velocity: -7,\n"
        "      has_effort_limits: false, max_effort: fast}\n"
    )
    assert load_limits_file(_write(tmp_path, text)) == {
        "a": JointLimit(-1.5, 2.0, None, None, None)
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("joint_limits:\n  a: {has_position_limits: true, min_position: !degrees ninety,"
         " max_position: 1}\n", ["not valid YAML", "!degrees", "'ninety'", "must be a number"]),
        ("joint_limits:\n  a: {has_soft_limits: true, soft_lower_limit: -1}\n",
         ["has_soft_limits is true but soft_upper_limit is missing"]),
        ("joint_limits:\n  a: {has_position_limits: true, min_position: 0, max_position: 1,"
         " has_soft_limits: true, soft_lower_limit: 2, soft_upper_limit: 3}\n",
         ["soft limits [2, 3] lie outside the position limits [0, 1]"]),
        ("joint_limits:\n  a: {has_effort_limits: true}\n", ["max_effort is missing"]),
        ("planning:\n  joint_limits: {}\n", ["no 'joint_limits'", "robot_description_planning"]),
    ],
)  # fmt: skip
def test_yaml_refusals_name_the_key(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_limits_file(path)
    assert str(path) in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_urdf_transmissions_soft_limits_and_ros2_control():
    sources = dict(urdf_limit_sources(URDF.read_text()))
    assert list(sources) == [
        "robot_description <limit>",
        "robot_description <safety_controller>",
        "robot_description <ros2_control>",
    ]
    assert set(sources["robot_description <limit>"]) == {
        "joint1",
        "joint2",
        "joint3",
        "finger_joint",
    }  # not the fixed joint; transmissions add no joints
    merged = merge_limit_sources(None, list(sources.items()))
    assert {j: m.limit for j, m in merged.items()} == limits_from_urdf(URDF.read_text())
    tag, soft, control = (
        "robot_description <limit>",
        "robot_description <safety_controller>",
        "robot_description <ros2_control>",
    )
    expected = {
        # soft limits tighten the <limit> range; velocity and effort from <limit>
        "joint1": (
            JointLimit(-2.8, 2.8, 2.0, None, 87.0),
            {"min_position": soft, "max_position": soft, "max_velocity": tag, "max_effort": tag},
        ),
        # the position interface's min/max and the velocity interface's smaller bound
        "joint2": (
            JointLimit(-1.5, 1.2, 1.0, None, 87.0),
            {
                "min_position": control,
                "max_position": control,
                "max_velocity": control,
                "max_effort": tag,
            },
        ),
        # continuous: no <limit> range, the ros2_control block's; effort interface tighter
        "joint3": (
            JointLimit(-3.1, 3.1, 3.0, None, 10.0),
            {
                "min_position": control,
                "max_position": control,
                "max_velocity": tag,
                "max_effort": control,
            },
        ),
        "finger_joint": (
            JointLimit(0.0, 0.04, 0.2, None, 20.0),
            {"min_position": tag, "max_position": tag, "max_velocity": tag, "max_effort": tag},
        ),
    }
    assert list(merged) == list(expected)
    for joint, (limit, by) in expected.items():
        assert merged[joint].limit == limit, joint
        assert dict(merged[joint].sources) == by, joint
    line = describe_limit("joint2", merged["joint2"])
    assert line == (
        "joint2: position [-1.5, 1.2] (robot_description <ros2_control>), velocity <= 1 "
        "(robot_description <ros2_control>), effort <= 87 (robot_description <limit>; "
        "not enforced)"
    )


def test_several_files_the_most_restrictive_wins_with_its_source(tmp_path):
    urdf = urdf_limit_sources(URDF.read_text())
    file = (
        "joint_limits:\n"
        "  joint1: {has_position_limits: true, min_position: -3.0, max_position: 2.5,"
        " has_acceleration_limits: true, max_acceleration: 4.0}\n"
    )
    path = _write(tmp_path, file)
    merged = merge_limit_sources(
        ["joint1"], [*urdf, (f"limits_file {path}", load_limits_file(path))]
    )
    assert merged["joint1"].limit == JointLimit(-2.8, 2.5, 2.0, 4.0, 87.0)
    assert merged["joint1"].sources["min_position"] == "robot_description <safety_controller>"
    assert merged["joint1"].sources["max_position"] == f"limits_file {path}"
    assert describe_limit("joint1", merged["joint1"]).startswith(
        f"joint1: position [-2.8, 2.5] (robot_description <safety_controller> + limits_file {path})"
    )
    apart = {"joint1": JointLimit(2.9, 3.0)}
    with pytest.raises(ValueError, match=r"do not overlap .* from robot_description <"):
        merge_limit_sources(["joint1"], [*urdf, ("other", apart)])


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (("<param name=\"max\">1.2</param>", "<param name=\"max\">${pi/2}</param>"),
         ["joint 'joint2' command_interface 'position' param max", "${pi/2}", "xacro"]),
        (("<param name=\"min\">-1.0</param>", "<param name=\"min\">0.5</param>"),
         ["command_interface 'velocity'", "min < 0 < max"]),
        (("soft_lower_limit=\"-2.8\"", "soft_lower_limit=\"2.85\""),
         ["<safety_controller>", "soft_lower_limit=2.85 must be <= soft_upper_limit=2.8"]),
        ((" soft_upper_limit=\"2.8\"", ""),
         ["joint 'joint1' <safety_controller>", "go together"]),
        (("<param name=\"min\">-1.5</param>", ""),
         ["joint 'joint2' command_interface 'position'", "min and max go together"]),
    ],
)  # fmt: skip
def test_urdf_refusals_name_the_joint(edit, words):
    text = URDF.read_text().replace(*edit)
    with pytest.raises(ValueError) as info:
        urdf_limit_sources(text)
    for word in words:
        assert word in str(info.value)


_bound = st.one_of(st.none(), st.floats(min_value=0.01, max_value=10.0))
_limits = st.builds(
    lambda lo, width, v, a, e: JointLimit(lo, None if lo is None else lo + width, v, a, e),
    st.one_of(st.none(), st.floats(min_value=-1.0, max_value=0.0)),
    st.floats(min_value=1.0, max_value=3.0),  # every range holds [0, 1]: they overlap
    _bound,
    _bound,
    _bound,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_limits, min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_merge_is_the_tightest_of_every_source_in_any_order(limits, rng):
    sources = [(f"s{i}", {"j": limit}) for i, limit in enumerate(limits)]
    merged = merge_limit_sources(["j"], sources)["j"]
    shuffled = sources[:]
    rng.shuffle(shuffled)
    assert merge_limit_sources(["j"], shuffled)["j"].limit == merged.limit
    by_name = dict(sources)
    for key in LIMIT_FIELDS:
        given_values = [getattr(lim, key) for lim in limits if getattr(lim, key) is not None]
        value = getattr(merged.limit, key)
        if not given_values:
            assert value is None and key not in merged.sources
            continue
        assert value == (max if key == "min_position" else min)(given_values)
        assert getattr(by_name[merged.sources[key]]["j"], key) == value  # its source set it
