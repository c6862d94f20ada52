"""All rclpy code but the nodes: wire, transport, QoS, parameters, the ROS env, the remote
provider, the runner's actions and their client."""
