"""Safety configuration without ROS: the joint limits the shields enforce.

`limits` reads ros2_control's joint_limits YAML and URDF limits and builds the kernel
SafetyShield from them; the safety_shield node, the policy server and the CLI use it.
This package imports no rclpy (test/safety/test_safety_imports_no_ros.py).
"""
