"""The workcell next to a robot whose ros2_control is already up: safety_shield +
estop_panel + policy_server + runner (no sim_robot).

    ros2 launch robokernel_ros workcell.launch.py [namespace:=robokernel]
        [shield_params:=...] [limits_file:=...] [policy_params:=...] [runner_params:=...]
        [trace_dir:=runs]

The shield forwards to the controller topic named in its parameter file (for the SO-101
example, /forward_position_controller/commands). The policy_server can run on another
host (a GPU box) instead: launch it there with the same namespace and ROS_DOMAIN_ID.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def _dds_profile(config):
    """config/fastdds_shm.xml (camera frames on shared memory) unless a profile is set."""
    from launch.actions import SetEnvironmentVariable

    names = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
    if any(os.environ.get(name) for name in names):
        return []
    name = names[os.environ.get("ROS_DISTRO", "") in ("humble", "jazzy")]  # Fast DDS 2: the old
    return [SetEnvironmentVariable(name, os.path.join(config, "fastdds_shm.xml"))]


def generate_launch_description():
    config = os.path.join(get_package_share_directory("robokernel_ros"), "config")
    namespace = LaunchConfiguration("namespace")
    return LaunchDescription(
        [
            *_dds_profile(config),
            DeclareLaunchArgument(
                "namespace", default_value="robokernel", description="namespace of every name"
            ),
            DeclareLaunchArgument(
                "shield_params",
                default_value=os.path.join(config, "shield_so101.yaml"),
                description="safety_shield parameter file (joints, controller, topics)",
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
                name="safety_shield",
                namespace=namespace,
                parameters=[
                    LaunchConfiguration("shield_params"),
                    {"limits_file": LaunchConfiguration("limits_file")},
                ],
                remappings=[("~/estop", "estop")],
                output="screen",
            ),
            # The operator e-stop: the shield and the runner hear only <ns>/estop and
            # forward nothing until this source is live and released.
            Node(
                package="robokernel_ros",
                executable="estop_panel",
                name="estop_panel",
                namespace=namespace,
                parameters=[os.path.join(config, "estop_panel.yaml")],
                output="screen",
            ),
            Node(
                package="robokernel_ros",
                executable="policy_server",
                name="policy_server",
                namespace=namespace,
                parameters=[LaunchConfiguration("policy_params")],
                output="screen",
            ),
            Node(
                package="robokernel_ros",
                executable="runner",
                name="runner",
                namespace=namespace,
                parameters=[
                    LaunchConfiguration("runner_params"),
                    {"trace_dir": LaunchConfiguration("trace_dir")},
                ],
                output="screen",
            ),
        ]
    )
