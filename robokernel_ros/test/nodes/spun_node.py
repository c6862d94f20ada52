"""A node of the test process in a context of its own, spun by a SingleThreadedExecutor in
a thread until close() (one executor thread: a callback that blocks stalls the node).

    spun = SpunNode("panel")                                  # rclpy.create_node
    spun = SpunNode("safety_shield", "/ns", node_class=SafetyShieldNode, parameter_overrides=[...])
    spun = SpunNode("robot", spin=False)                      # a node nobody spins
    ...
    spun.close()
"""

from __future__ import annotations

import threading
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor


class SpunNode:
    def __init__(
        self,
        name: str,
        namespace: str = "",
        *,
        node_class: Any = None,
        spin: bool = True,
        **kwargs: Any,
    ) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        if node_class is None:
            self.node = rclpy.create_node(name, namespace=namespace, context=self.context, **kwargs)
        else:
            self.node = node_class(name, namespace=namespace, context=self.context, **kwargs)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._spin, daemon=True) if spin else None
        if self._thread is not None:
            self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        """Stop spinning, destroy the node, shut its context down (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
