"""Safety configuration and decisions without ROS: the joint limits the shields enforce,
and the e-stop circuit.

`limits` reads ros2_control's joint_limits YAML and URDF limits and builds the kernel
SafetyShield from them; the safety_shield node, the policy server and the CLI use it.
`estop` decides whether a command may pass given the e-stop source's samples (a
normally-closed circuit); the safety_shield and runner nodes use it.
This package imports no rclpy (test/safety/test_safety_imports_no_ros.py).
"""
