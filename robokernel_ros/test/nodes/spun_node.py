"""A node of the test process in a context of its own, spun by a SingleThreadedExecutor in
a thread until close() (one executor thread: a callback that blocks stalls the node).

    spun = SpunNode("panel")                                  # rclpy.create_node
    spun = SpunNode("safety_shield", "/ns", node_class=SafetyShieldNode, parameter_overrides=[...])
    spun = SpunNode("robot", spin=False)                      # a node nobody spins
    ...
    spun.close()

`Spinner` is the spin thread every helper of the node tests uses (SpunNode, the `ros`
fixture's RosClient, shield_harness.Peer). Its contract:
- an exception that ends the spin (a callback's, or rclpy's own, e.g. an entity destroyed
  while the executor's wait set held it) is kept, and `check()` / `stop()` raise it as an
  AssertionError naming the helper: a dead spin thread fails the test, it does not leave
  timers silent and service futures unanswered;
- `run(fn)` calls fn on the spin thread between two spins and returns its result: the
  way to destroy an entity of a spun node (destroying it from another thread races the
  executor's wait set: "cannot use Destroyable because destruction was requested");
- `stop()` checks the close: the thread ended within its timeout, the executor shut down
  with no callback left running.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import SingleThreadedExecutor

_SPIN_S = 0.05  # one spin_once's wait: how late a queued run() or a stop is served


class Spinner:
    """Spins `executor` in a daemon thread (`name` in its messages) until stop()."""

    def __init__(self, executor: Any, name: str) -> None:
        self.executor = executor
        self.name = name
        self.error: BaseException | None = None
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = (
            queue.SimpleQueue()
        )
        self._stop = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._spin, name=f"spin:{name}", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            while not self._stop.is_set():
                self._serve_calls()
                self.executor.spin_once(timeout_sec=_SPIN_S)
        except BaseException as exc:  # noqa: BLE001 - kept and raised in the test's thread
            self.error = exc
        finally:
            self._serve_calls()  # no run() waits forever on a thread that ended

    def _serve_calls(self) -> None:
        while True:
            try:
                fn, out, done = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                out.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                out.append((False, exc))
            done.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def check(self) -> None:
        """AssertionError when the spin thread died (the exception that ended it attached)."""
        if self.error is not None:
            raise AssertionError(
                f"{self.name}: its spin thread died: {type(self.error).__name__}: {self.error}"
            ) from self.error
        if not self._stopped and not self._thread.is_alive():
            raise AssertionError(f"{self.name}: its spin thread ended without a stop")

    def run(self, fn: Callable[[], Any], timeout_s: float = 10.0) -> Any:
        """fn() on the spin thread, between two spins; its result (or its exception)."""
        if threading.current_thread() is self._thread:
            return fn()
        self.check()
        out: list[Any] = []
        done = threading.Event()
        self._calls.put((fn, out, done))
        if not self._thread.is_alive():
            self._serve_calls()  # ended meanwhile (stop or death): served here, in order
        if not done.wait(timeout_s):
            self.check()
            raise AssertionError(
                f"{self.name}: the spin thread did not run a call in {timeout_s} s"
            )
        ok, value = out[0]
        if not ok:
            raise value
        return value

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the thread and shut the executor down; AssertionError when the thread died
        earlier, outlived `timeout_s`, or the executor kept a callback running."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(
                f"{self.name}: the spin thread did not end within {timeout_s:g} s of its stop "
                "(a callback blocks)"
            )
        self.check()
        if not self.executor.shutdown(timeout_sec=timeout_s):
            raise AssertionError(
                f"{self.name}: the executor still ran a callback {timeout_s:g} s after its shutdown"
            )


def close_context(node: Any, context: Any) -> None:
    """Destroy `node` (no executor may spin it any more), shut `context` down and destroy it;
    AssertionError when the context is still valid afterwards."""
    node.destroy_node()
    rclpy.try_shutdown(context=context)
    if context.ok():
        raise AssertionError(f"{node.get_name()}: its context is still valid after shutdown")
    context.destroy()


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
        self._closed = False
        self.spinner = Spinner(self.executor, name) if spin else None

    def check(self) -> None:
        """AssertionError when the node's spin thread died."""
        if self.spinner is not None:
            self.spinner.check()

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn() where it cannot race the executor: on the spin thread (here when not spun)."""
        return fn() if self.spinner is None else self.spinner.run(fn)

    def close(self) -> None:
        """Stop spinning, destroy the node, shut its context down (a second call does
        nothing). AssertionError after the close when the spin thread had died or a close
        step failed."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.spinner is not None:
                self.spinner.stop()
            else:
                self.executor.shutdown(timeout_sec=5.0)
        finally:
            if self.spinner is None or not self.spinner.alive:  # else destroying races it
                close_context(self.node, self.context)
