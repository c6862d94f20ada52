"""robokernel_ros: one episode loop for robot-learning policies on ROS 2 workcells."""

__version__ = "0.1.0"
