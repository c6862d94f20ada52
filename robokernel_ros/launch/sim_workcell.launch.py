"""The simulated workcell: sim_robot + safety_shield + estop_panel + policy_server
+ runner.

    ros2 launch robokernel_ros sim_workcell.launch.py [namespace:=robokernel]
        [policy_params:=<policy_server params file>] [trace_dir:=runs]

The same graph, from the same config files, is what `make demo` and the node tests
start as processes (robokernel_ros.demo.workcell_graph) on machines without `launch`.
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
                "policy_params",
                default_value=os.path.join(config, "policy_server_scripted_so101.yaml"),
                description="parameter file of the policy_server (provider and its config)",
            ),
            DeclareLaunchArgument(
                "trace_dir", default_value="runs", description="run directories and bags"
            ),
            Node(
                package="robokernel_ros",
                executable="sim_robot",
                name="sim_robot",
                namespace=namespace,
                parameters=[os.path.join(config, "workcell_sim_robot_so101.yaml")],
                output="screen",
            ),
            Node(
                package="robokernel_ros",
                executable="safety_shield",
                name="safety_shield",
                namespace=namespace,
                parameters=[
                    os.path.join(config, "shield_so101.yaml"),
                    {"limits_file": os.path.join(config, "joint_limits_so101.yaml")},
                ],
                # The shield's e-stop input is the workcell's <ns>/estop topic.
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
                    os.path.join(config, "runner_ros_so101.yaml"),
                    {"trace_dir": LaunchConfiguration("trace_dir")},
                ],
                output="screen",
            ),
        ]
    )
