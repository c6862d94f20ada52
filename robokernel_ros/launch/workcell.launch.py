"""The workcell next to a robot whose ros2_control is already up, its arm and gripper on
two controllers: two safety_shields + estop_panel + policy_server + runner (no sim_robot).

    ros2 launch robokernel_ros workcell.launch.py [namespace:=robokernel]
        [contract_file:=...] [arm_shield_params:=...] [gripper_shield_params:=...]
        [limits_file:=...] [policy_params:=...] [runner_params:=...] [trace_dir:=runs]

The topic contract (`contract_file`, the SO-101 example by default) names the robot's
state topics and its two controllers' command topics; the runner publishes the arm's
commands to `safety_shield` and the gripper's to `gripper_shield`, and each shield
forwards to the controller topic named in its parameter file (for the SO-101 example,
/arm_controller/commands and /gripper_controller/commands). The one estop_panel's
<ns>/estop holds both. A robot with another layout (one controller, a bimanual pair)
gets its own copy of this file: one shield Node per command of its contract, the
runner's `shields` in the contract's order. The policy_server and the runner are
lifecycle nodes brought up in order by this file (configure, activate the policy_server;
then the runner); the shield brings itself up (autostart in its parameter file). The
policy_server can run on another host (a GPU box) instead: start it there with the same
namespace and ROS_DOMAIN_ID (its parameter file autostarts it); the runner starts a
remote rollout only while that server says it is active.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from robokernel_ros.ros.launch_steps import bring_up_in_order, dds_profile


def generate_launch_description():
    config = os.path.join(get_package_share_directory("robokernel_ros"), "config")
    namespace = LaunchConfiguration("namespace")
    # The policy_server and the runner are lifecycle nodes: this file configures and
    # activates them in order (the policy loaded and served before the runner accepts
    # calls), so their autostart is off here.
    policy_server = LifecycleNode(
        package="robokernel_ros",
        executable="policy_server",
        name="policy_server",
        namespace=namespace,
        parameters=[LaunchConfiguration("policy_params"), {"autostart": False}],
        output="screen",
    )
    runner = LifecycleNode(
        package="robokernel_ros",
        executable="runner",
        name="runner",
        namespace=namespace,
        parameters=[
            LaunchConfiguration("runner_params"),
            {"trace_dir": LaunchConfiguration("trace_dir")},
            # the shield's limits: the reset ramps within them
            {"limits_file": LaunchConfiguration("limits_file")},
            # the robot: its state, and one command per controller, each to its shield
            {"contract_file": LaunchConfiguration("contract_file")},
            {"shields": ["safety_shield", "gripper_shield"]},
            {"autostart": False},
        ],
        output="screen",
    )
    return LaunchDescription(
        [
            *dds_profile(config),
            DeclareLaunchArgument(
                "namespace", default_value="robokernel", description="namespace of every name"
            ),
            DeclareLaunchArgument(
                "contract_file",
                default_value=os.path.join(config, "contract_so101_arm_gripper.yaml"),
                description="topic contract: state topics, one command per controller",
            ),
            DeclareLaunchArgument(
                "arm_shield_params",
                default_value=os.path.join(config, "shield_so101_arm.yaml"),
                description="the arm's safety_shield parameter file (joints, controller, topics)",
            ),
            DeclareLaunchArgument(
                "gripper_shield_params",
                default_value=os.path.join(config, "shield_so101_gripper.yaml"),
                description="the gripper's safety_shield parameter file",
            ),
            DeclareLaunchArgument(
                "limits_file",
                default_value=os.path.join(config, "joint_limits_so101.yaml"),
                description="joint limits in ros2_control's joint_limits layout",
            ),
            DeclareLaunchArgument(
                "policy_params",
                default_value=os.path.join(config, "policy_server_scripted_so101.yaml"),
                description="policy_server parameter file",
            ),
            DeclareLaunchArgument(
                "runner_params",
                default_value=os.path.join(config, "runner_ros_so101.yaml"),
                description="runner parameter file (env: ros, joints, topics)",
            ),
            DeclareLaunchArgument(
                "trace_dir", default_value="runs", description="run directories and bags"
            ),
            Node(
                package="robokernel_ros",
                executable="safety_shield",
                name="safety_shield",  # the arm
                namespace=namespace,
                parameters=[
                    LaunchConfiguration("arm_shield_params"),
                    {"limits_file": LaunchConfiguration("limits_file")},
                ],
                output="screen",
            ),
            Node(
                package="robokernel_ros",
                executable="safety_shield",
                name="gripper_shield",  # the gripper
                namespace=namespace,
                parameters=[
                    LaunchConfiguration("gripper_shield_params"),
                    {"limits_file": LaunchConfiguration("limits_file")},
                ],
                output="screen",
            ),
            # The operator e-stop: both shields and the runner hear only <ns>/estop and
            # forward nothing until this source is live and released.
            Node(
                package="robokernel_ros",
                executable="estop_panel",
                name="estop_panel",
                namespace=namespace,
                parameters=[os.path.join(config, "estop_panel.yaml")],
                output="screen",
            ),
            policy_server,
            runner,
            *bring_up_in_order([policy_server, runner]),
        ]
    )
