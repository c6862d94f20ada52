"""RosEnvConfig, the ROS env's typed configuration: built from a topic contract (one
controller per command, each behind the shield named for it) or from today's single-robot
parameters, and validated where it is built, naming the field."""

from __future__ import annotations

import pytest
from robokernel_ros.contract import parse_contract
from robokernel_ros.ros.commands import command_message
from robokernel_ros.ros.env_config import RosEnvConfig, ShieldRoute, StateSource
from robokernel_ros.ros.workcell_contract import default_shields

ARM = ["j1", "j2", "j3"]


def _contract(**extra):
    mapping = {
        "fps": 50,
        "state": [
            {"topic": "/joint_states", "type": "sensor_msgs/msg/JointState",
             "names": [*ARM, "finger"]},
            {"topic": "/ft/wrench", "type": "geometry_msgs/msg/WrenchStamped"},
            {"topic": "/torques", "type": "sensor_msgs/msg/JointState", "field": "effort",
             "names": ["j4"]},
        ],
        "action": [
            {"topic": "/arm/joint_trajectory", "type": "trajectory_msgs/msg/JointTrajectory",
             "names": ARM},
            {"topic": "/gripper/commands", "type": "std_msgs/msg/Float64MultiArray",
             "names": ["finger"]},
        ],
        "images": {"front": {"topic": "/cam/image_raw/compressed"}},
        **extra,
    }  # fmt: skip
    return parse_contract(mapping, "test")


def test_a_contract_of_two_controllers_is_two_routes_each_behind_its_shield() -> None:
    contract = _contract()
    assert [c.name for c in contract.commands] == ["arm", "gripper"]
    assert default_shields(contract) == ["arm_shield", "gripper_shield"]
    config = RosEnvConfig.from_contract(contract, shields=["arm_shield", ""], control_hz=20.0)
    arm, gripper = config.controllers
    assert config.joints == (*ARM, "finger")  # the action keys: command after command
    assert arm.kind == "joint_trajectory" and arm.topic == "arm_shield/joint_trajectory"
    assert arm.controller_topic == "/arm/joint_trajectory"
    assert arm.shield == ShieldRoute(
        "arm_shield", "arm_shield/joint_trajectory", "arm_shield/state", "arm_shield/clear_fault"
    )
    # '' = no shield: the controller's own topic, nothing to confirm on
    assert gripper.shield is None and gripper.topic == "/gripper/commands"
    assert gripper.shield_state_topic == ""
    assert config.shields == (arm.shield,)
    # state: the joints by name; the wrench and a JointState's effort by the contract's names
    joint_state, wrench, effort = config.state
    assert joint_state.is_joint_state and joint_state.stream is None
    assert not wrench.is_joint_state and wrench.stream.topic == "/ft/wrench"
    assert not effort.is_joint_state and effort.field == "effort"
    assert config.cameras == {
        "front": ("/cam/image_raw/compressed", "sensor_msgs/msg/CompressedImage")
    }


def test_a_shield_list_of_the_wrong_length_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"shields=\['one'\]: must name one shield node"):
        RosEnvConfig.from_contract(_contract(), shields=["one"])


def test_the_single_robot_parameters_are_one_source_and_one_controller() -> None:
    config = RosEnvConfig.single(
        joints=ARM,
        command_topic="safety_shield/commands",
        shield_state_topic="safety_shield/state",
        shield_clear_fault_service="safety_shield/clear_fault",
        camera_topics={"wrist": "/wrist/image_raw"},
        motion_limits=None,  # None: none, as the runner passed it
    )
    (route,) = config.controllers
    assert route.topic == "safety_shield/commands" and route.joints == tuple(ARM)
    assert route.shield == ShieldRoute(
        "safety_shield",
        "safety_shield/commands",
        "safety_shield/state",
        "safety_shield/clear_fault",
    )
    assert config.state == (StateSource("/joint_states", names=tuple(ARM)),)
    assert config.cameras == {"wrist": ("/wrist/image_raw", "sensor_msgs/msg/Image")}
    assert config.motion_limits == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"joints": ["j1", "j1"]}, r"names must be unique"),
        ({"joints": []}, r"non-empty list of joint names"),
        ({"controller": "velocity"}, r"controller='velocity': must be one of"),
        ({"control_hz": 0.0}, r"control_hz=0.0: must be a positive finite number"),
        ({"reset_positions": {"j9": 0.0}}, r"reset_positions names joints that are not in joints"),
        ({"reset_speed_scale": 1.5}, r"reset_speed_scale=1.5: must be in \(0, 1\]"),
        ({"discovery_timeout_s": -1.0}, r"discovery_timeout_s=-1.0"),
    ],
)
def test_each_mistake_is_refused_naming_the_field(kwargs, message) -> None:
    arguments = {"joints": ARM, "command_topic": "/c", **kwargs}
    with pytest.raises(ValueError, match=message):
        RosEnvConfig.single(**arguments)


def test_a_robot_without_a_joint_state_source_is_refused() -> None:
    contract = _contract()
    config = RosEnvConfig.from_contract(contract)
    with pytest.raises(ValueError, match="a sensor_msgs/JointState source must report"):
        RosEnvConfig(controllers=config.controllers, state=config.state[1:2])


def test_command_messages_are_built_in_one_place() -> None:
    forward = command_message("forward_command", ARM, [0.1, 0.2, 0.3], 0.02)
    assert list(forward.data) == [0.1, 0.2, 0.3]
    trajectory = command_message("joint_trajectory", ARM, [0.1, 0.2, 0.3], 0.02)
    (point,) = trajectory.points
    assert list(trajectory.joint_names) == ARM and list(point.positions) == [0.1, 0.2, 0.3]
    assert (point.time_from_start.sec, point.time_from_start.nanosec) == (0, 20_000_000)
