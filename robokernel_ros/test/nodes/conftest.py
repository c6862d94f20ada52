"""Fixtures of the node tests: a ROS client in the test process, and the workcell graph as processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

rclpy = pytest.importorskip("rclpy")


class RosClient:
    """A node of the test process, spun by a background thread; `call` waits for an answer."""

    def __init__(self, name: str = "test_client") -> None:
        from rclpy.executors import MultiThreadedExecutor

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self._clients: dict[str, Any] = {}

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def client(self, srv_type: Any, name: str) -> Any:
        if name not in self._clients:
            self._clients[name] = self.node.create_client(srv_type, name)
        return self._clients[name]

    def wait_for(self, srv_type: Any, name: str, timeout_s: float = 30.0) -> bool:
        return self.client(srv_type, name).wait_for_service(timeout_sec=timeout_s)

    def call(self, srv_type: Any, name: str, request: Any = None, timeout_s: float = 60.0) -> Any:
        client = self.client(srv_type, name)
        if not client.wait_for_service(timeout_sec=min(timeout_s, 30.0)):
            raise TimeoutError(f"service {name} not available")
        done = threading.Event()
        future = client.call_async(request if request is not None else srv_type.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            future.cancel()
            raise TimeoutError(f"service {name} did not answer within {timeout_s} s")
        return future.result()

    def answered(self, srv_type: Any, name: str, request: Any, timeout_s: float = 60.0) -> Any:
        """Call a harmless request until one is answered: DDS matches a service's response
        path separately from its request path, so a server that wait_for_service sees can
        still drop the first responses to a new client. Returns the answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.call(srv_type, name, request, timeout_s=2.0)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def collect(self, msg_type: Any, topic: str, qos: Any = 100) -> list[Any]:
        received: list[Any] = []
        self.node.create_subscription(msg_type, topic, received.append, qos)
        return received

    @staticmethod
    def wait_until(predicate: Any, timeout_s: float, period_s: float = 0.05) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(period_s)
        return bool(predicate())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


@pytest.fixture
def ros() -> Iterator[RosClient]:
    client = RosClient()
    try:
        yield client
    finally:
        client.close()
