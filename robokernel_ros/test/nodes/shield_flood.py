"""A command source for the shield tests, run as its own process:

    python shield_flood.py TOPIC RATE_HZ V1,V2,... [SECONDS]

publishes std_msgs/Float64MultiArray(VALUES) on TOPIC at RATE_HZ (reliable, depth 10)
until killed or SECONDS pass. It waits for a subscriber first, then prints 'flooding'.
"""

from __future__ import annotations

import sys
import time

import rclpy
from robokernel_ros.ros.qos import COMMAND_QOS
from std_msgs.msg import Float64MultiArray


def main() -> None:
    topic, rate, values = (
        sys.argv[1],
        float(sys.argv[2]),
        [float(v) for v in sys.argv[3].split(",")],
    )
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 1e9
    rclpy.init()
    node = rclpy.create_node("shield_flood")
    pub = node.create_publisher(Float64MultiArray, topic, COMMAND_QOS)
    msg = Float64MultiArray()
    msg.data = values
    while pub.get_subscription_count() == 0:
        time.sleep(0.01)
    sys.stdout.write("flooding\n")
    sys.stdout.flush()
    period = 1.0 / rate
    start = next_t = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            pub.publish(msg)
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    except KeyboardInterrupt:
        pass
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()
