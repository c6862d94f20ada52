"""A stand-in for a workcell's camera drivers (a test helper, run as its own process).

    python camera_publisher.py [--rate HZ] [--height H] [--width W]

Publishes, at `--rate`, frame n of two cameras:
  /cam/front/image_raw             sensor_msgs/Image, bgr8
  /cam/wrist/image_raw             sensor_msgs/Image, rgb8
  /cam/wrist/image_raw/compressed  sensor_msgs/CompressedImage, png (the same frame)
Frame n in RGB: red = n % 256, green = n // 256 % 256, blue = 200 (front) or 100
(wrist), so a reader can tell which frame it holds and whether its channels are in order.
Whenever the matched subscriptions of its publishers change it prints one line
`matched front=N wrist=N wrist_png=N` (flushed): a test's handshake that its readers
get the frames from now on (`matched_counts` reads the last one from the log).
"""

from __future__ import annotations

import argparse
import io
import sys

import numpy as np


def frame(n: int, blue: int, height: int, width: int) -> np.ndarray:
    array = np.empty((height, width, 3), dtype=np.uint8)
    array[:, :] = (n % 256, n // 256 % 256, blue)
    return array


def matched_counts(log: str) -> dict[str, int]:
    """The last `matched ...` line of this helper's output, as {publisher: count}."""
    lines = [line for line in log.splitlines() if line.startswith("matched ")]
    if not lines:
        return {"front": 0, "wrist": 0, "wrist_png": 0}
    return {k: int(v) for k, v in (item.split("=") for item in lines[-1].split()[1:])}


def frame_number(rgb: np.ndarray) -> int:
    """n of a frame made by `frame` (its first pixel)."""
    return int(rgb[0, 0, 0]) + 256 * int(rgb[0, 0, 1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--width", type=int, default=64)
    args, ros_args = parser.parse_known_args()

    import rclpy
    from PIL import Image as PILImage
    from rclpy.executors import ExternalShutdownException
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image

    rclpy.init(args=[sys.argv[0], *ros_args])
    node = rclpy.create_node("camera_publisher")
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)  # as camera drivers do
    front = node.create_publisher(Image, "/cam/front/image_raw", qos)
    wrist = node.create_publisher(Image, "/cam/wrist/image_raw", qos)
    wrist_png = node.create_publisher(CompressedImage, "/cam/wrist/image_raw/compressed", qos)
    h, w = args.height, args.width
    count = [0]

    def image(rgb: np.ndarray, encoding: str) -> Image:
        msg = Image(height=h, width=w, encoding=encoding, is_bigendian=0, step=w * 3)
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.header.frame_id = "camera"
        msg.data = (rgb[:, :, ::-1] if encoding == "bgr8" else rgb).tobytes()
        return msg

    matched = [None]

    def tick() -> None:
        counts = tuple(p.get_subscription_count() for p in (front, wrist, wrist_png))
        if counts != matched[0]:
            matched[0] = counts
            print("matched front={} wrist={} wrist_png={}".format(*counts), flush=True)
        n = count[0]
        front.publish(image(frame(n, 200, h, w), "bgr8"))
        rgb = frame(n, 100, h, w)
        wrist.publish(image(rgb, "rgb8"))
        buffer = io.BytesIO()
        PILImage.fromarray(rgb).save(buffer, format="PNG")
        msg = CompressedImage(format="rgb8; png compressed rgb8", data=buffer.getvalue())
        msg.header.stamp = node.get_clock().now().to_msg()
        wrist_png.publish(msg)
        count[0] = n + 1

    node.create_timer(1.0 / args.rate, tick)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
