"""Safety rules without ROS: joint limits (limits.py) and the e-stop circuit (estop.py)."""
