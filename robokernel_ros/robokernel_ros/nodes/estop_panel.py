"""estop_panel: the workcell's operator e-stop source, the one the shield and the runner hear.

    python -m robokernel_ros.nodes.estop_panel --ros-args -r __ns:=/robokernel \\
        --params-file config/estop_panel.yaml

Publishes its state on `estop` (std_msgs/Bool, true = pressed; reliable + transient_local
depth 1, the workcell's e-stop QoS) every `period_s`: a released heartbeat while
released, pressed once pressed. Consumers with `estop_required` (the safety_shield, the
runner on a ROS robot) forward nothing until they have heard it live and released, and
latch when it goes silent for their `estop_timeout_s` (see robokernel_ros.safety.estop),
so `period_s` must stay well under that timeout (0.1 s against 0.5 s by default).

  services  ~/press    (std_srvs/Trigger): pressed, latched here until ~/release
            ~/release  (std_srvs/Trigger): released (the consumers still need their
                       clear_fault: releasing the button does not restart the robot)
  signals   SIGINT / SIGTERM: pressed is published and acknowledged by every matched
            subscriber (or 1 s passes) before the process exits: a panel that is shut
            down does not leave the robot running. SIGKILL cannot be caught: the
            consumers see the heartbeat stop and latch on their own.

`start_pressed:=true` starts pressed (a panel that must be released by an operator).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import rclpy
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robokernel_ros.ros.node import exit_main, report
from robokernel_ros.ros.params import ParameterError, declare_params, param
from robokernel_ros.ros.qos import ESTOP_QOS


@dataclass(frozen=True)
class PanelParams:
    """The panel's parameters, as declared."""

    period_s: float = param(
        0.1,
        "heartbeat period: the state is republished this often (keep it well under "
        "the consumers' estop_timeout_s)",
        min_value=0.001,
        max_value=10.0,
    )
    estop_topic: str = param("estop", "the workcell's e-stop topic")
    start_pressed: bool = param(False, "start pressed (released by ~/release)")


class EstopPanelNode(Node):
    """See the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("estop_panel", **kwargs)
        params = declare_params(self, PanelParams)
        self.pressed = params.start_pressed
        self._pub = self.create_publisher(Bool, params.estop_topic, ESTOP_QOS)
        self.create_service(Trigger, "~/press", self._on_press)
        self.create_service(Trigger, "~/release", self._on_release)
        self.create_timer(params.period_s, self._beat)
        self._beat()
        self.get_logger().info(
            f"e-stop panel on {self._pub.topic_name}: "
            f"{'pressed' if self.pressed else 'released'}, every {params.period_s:g} s"
        )

    def _beat(self) -> None:
        self._pub.publish(Bool(data=self.pressed))

    def press(self, by: str) -> None:
        if not self.pressed:
            self.get_logger().warning(f"e-stop pressed ({by})")
        self.pressed = True
        self._beat()

    def _on_press(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        self.press("~/press")
        response.success, response.message = True, "e-stop pressed (latched until ~/release)"
        return response

    def _on_release(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        if self.pressed:
            self.get_logger().info("e-stop released (consumers still need clear_fault)")
        self.pressed = False
        self._beat()
        response.success, response.message = True, "e-stop released; call clear_fault to resume"
        return response

    def press_and_flush(self, by: str, timeout_s: float = 1.0) -> bool:
        """Publish pressed and wait until every matched subscriber acknowledged it."""
        self.press(by)
        return self._pub.wait_for_all_acked(Duration(seconds=timeout_s))


def main(args: Sequence[str] | None = None) -> int:
    # rclpy's own SIGINT handler would shut the context down before the press is sent.
    rclpy.init(
        args=list(args) if args is not None else sys.argv,
        signal_handler_options=SignalHandlerOptions.NO,
    )
    caught: list[str] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: caught.append(signal.Signals(signum).name))
    node: EstopPanelNode | None = None
    status = 0
    try:
        node = EstopPanelNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while rclpy.ok() and not caught:
            executor.spin_once(timeout_sec=0.05)
        if caught:
            acked = node.press_and_flush(caught[0])
            node.get_logger().info(
                f"{caught[0]}: pressed published"
                + (" and acknowledged" if acked else " (not acknowledged within 1 s)")
                + "; exiting"
            )
        executor.shutdown(timeout_sec=1.0)
    except ParameterError as exc:
        report(node, f"refused: {exc}")
        status = 2
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return status


if __name__ == "__main__":
    exit_main(main)
