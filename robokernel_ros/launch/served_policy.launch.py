"""A policy served to an external harness that owns the loop (a Gazebo or Isaac
simulation, another team's controller): the served_endpoint node (the policy server in
served mode).

    ros2 launch robokernel_ros served_policy.launch.py [namespace:=robokernel]
        [policy_params:=...] [limits_file:=...] [trace_dir:=runs]

The harness publishes <ns>/served/episode_start, one Observation per control step on
<ns>/served/observation (the shielded action comes back on <ns>/served/action_chunk) or
calls <ns>/served/step, and publishes <ns>/served/episode_end; see
robokernel_ros/nodes/served_endpoint.py. Every action it receives has already passed the
kernel's SafetyShield with the joint limits of `limits_file`, and the e-stop is
<ns>/estop, so no safety_shield node is started here: a harness that forwards the actions
to ros2_control controllers (gz_ros2_control, a real robot) puts the safety_shield node
of workcell.launch.py in front of them.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    config = os.path.join(get_package_share_directory("robokernel_ros"), "config")
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "namespace", default_value="robokernel", description="namespace of every name"
            ),
            DeclareLaunchArgument(
                "policy_params",
                default_value=os.path.join(config, "served.yaml"),
                description="served_endpoint parameter file (provider, action keys, served mode)",
            ),
            DeclareLaunchArgument(
                "limits_file",
                default_value=os.path.join(config, "joint_limits_so101.yaml"),
                description="joint limits the shield enforces (ros2_control joint_limits layout)",
            ),
            DeclareLaunchArgument(
                "trace_dir", default_value="runs", description="run directories and bags"
            ),
            Node(
                package="robokernel_ros",
                executable="served_endpoint",
                name="policy_server",
                namespace=LaunchConfiguration("namespace"),
                parameters=[
                    LaunchConfiguration("policy_params"),
                    {
                        "limits_file": LaunchConfiguration("limits_file"),
                        "trace_dir": LaunchConfiguration("trace_dir"),
                    },
                ],
                output="screen",
            ),
        ]
    )
