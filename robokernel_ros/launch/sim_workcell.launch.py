"""The simulated workcell: sim_robot + two safety_shields + estop_panel + policy_server
+ runner, for an SO-101 whose arm and gripper are two controllers.

    ros2 launch robokernel_ros sim_workcell.launch.py [namespace:=robokernel]
        [policy_params:=<policy_server params file>] [trace_dir:=runs] [sim_operator:=true]

One topic contract (config/contract_so101_arm_gripper.yaml) describes the robot: the
state on /joint_states, the arm's command on /arm_controller/commands, the gripper's on
/gripper_controller/commands. sim_robot serves those two controllers; the runner
(contract_file, shields) observes the state and publishes each controller's command to
the shield in front of it: safety_shield (the arm's five joints) and gripper_shield (the
gripper), each with its own limits, watchdog and latch; the one estop_panel's <ns>/estop
is heard by both shields and the runner, so one press holds both controllers.

                       +--> safety_shield  --> /arm_controller/commands     --+
    runner (contract) -|                                                      +--> sim_robot
                       +--> gripper_shield --> /gripper_controller/commands --+
         ^      ^                  ^ ^                                            |
         |      +--- <ns>/estop ---+-+--- estop_panel                             |
         +----------------------------- /joint_states <---------------------------+

`sim_operator:=true` adds the simulated operator (nodes/sim_operator.py,
config/sim_operator_so101.yaml): it plays the contract's leader arm (/leader/joint_states)
from the scripted expert and presses its pedal (/pedal) when the robot leaves the
expert's tube; the runner then hands the robot to it through the same shields
(docs/operator_ros.md).

The policy_server and the runner are lifecycle nodes brought up in order by this file
(configure, activate the policy_server; then configure, activate the runner); the
shields bring themselves up (autostart in their parameter files). The same graph, from
the same config files, is what `make demo` and the node tests start as processes
(robokernel_ros.demo.workcell_graph) on machines without `launch`; there every
lifecycle node autostarts (`autostart: true` in the config files).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
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
            os.path.join(config, "runner_ros_so101.yaml"),
            {"trace_dir": LaunchConfiguration("trace_dir")},
            # the shield's limits: the reset ramps within them
            {"limits_file": os.path.join(config, "joint_limits_so101.yaml")},
            # the robot: its state, and one command per controller, each to its shield
            {"contract_file": os.path.join(config, "contract_so101_arm_gripper.yaml")},
            {"shields": ["safety_shield", "gripper_shield"]},
            {"autostart": False},
        ],
        output="screen",
    )
    limits = {"limits_file": os.path.join(config, "joint_limits_so101.yaml")}
    shields = [
        Node(
            package="robokernel_ros",
            executable="safety_shield",
            name="safety_shield",  # the arm's five joints
            namespace=namespace,
            parameters=[os.path.join(config, "shield_so101_arm.yaml"), limits],
            # Each shield's e-stop input is the workcell's one <ns>/estop topic: the
            # shield's default estop_topic, the panel's; no remap (each shield's own
            # ~/estop service stays <ns>/<shield>/estop).
            output="screen",
        ),
        Node(
            package="robokernel_ros",
            executable="safety_shield",
            name="gripper_shield",  # the gripper
            namespace=namespace,
            parameters=[os.path.join(config, "shield_so101_gripper.yaml"), limits],
            output="screen",
        ),
    ]
    return LaunchDescription(
        [
            *dds_profile(config),
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
                parameters=[
                    os.path.join(config, "workcell_sim_robot_so101.yaml"),
                    # the contract's two controllers (arm, gripper)
                    {"contract_file": os.path.join(config, "contract_so101_arm_gripper.yaml")},
                ],
                output="screen",
            ),
            *shields,
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
            DeclareLaunchArgument(
                "sim_operator",
                default_value="false",
                description="add the simulated operator (the scripted expert on the leader "
                "topic, the pedal when the robot leaves its tube)",
            ),
            Node(
                package="robokernel_ros",
                executable="sim_operator",
                name="sim_operator",
                namespace=namespace,
                parameters=[
                    os.path.join(config, "sim_operator_so101.yaml"),
                    {"contract_file": os.path.join(config, "contract_so101_arm_gripper.yaml")},
                ],
                condition=IfCondition(LaunchConfiguration("sim_operator")),
                output="screen",
            ),
            policy_server,
            runner,
            *bring_up_in_order([policy_server, runner]),
        ]
    )
