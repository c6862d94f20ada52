"""A node's process: `main()` plumbing and the executors the nodes spin on.

A node module stays thin: it defines a Node (or LifecycleNode) subclass and

    def main(args=None) -> int:
        return run_node(MyNode, args=args)

    # a node whose callbacks block (services that wait for work) on N threads:
    def main(args=None) -> int:
        return run_multithreaded(MyNode, args=args, threads=4)

    if __name__ == "__main__":
        exit_main(main)

`run_node` does `rclpy.init()`, builds the node, spins it, turns Ctrl-C into a clean
exit, stops the executor before `rclpy.shutdown()` (shutting rclpy down under a
spinning executor aborts the process in this build), and turns a `ParameterError`
raised while building or starting the node into one logged line and exit status 2
(a RuntimeError into one logged line and status 1). `run_multithreaded` is the same
on a MultiThreadedExecutor. Every node's process keeps its freed large buffers for
reuse (memory.retain_freed_memory: camera frames would fault in fresh pages each time).
`kill -USR1 <pid>` makes a node's process write every thread's Python stack to its
stderr and go on (a node that looks hung: what each thread waits in).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from robokernel_ros.memory import retain_freed_memory
from robokernel_ros.ros.params import ParameterError, check, declare

_log = logging.getLogger(__name__)

EXECUTORS = ("single_threaded", "events")


def make_executor(kind: str) -> Any:
    """'single_threaded' (rclpy's SingleThreadedExecutor) or 'events' (rclpy's
    experimental EventsExecutor; in this build only `spin_once(timeout_sec=...)` in a
    loop works with it, which `spin_until` does)."""
    check("executor", kind, choices=EXECUTORS)
    if kind == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor()
    return SingleThreadedExecutor()


def _is_events_executor(executor: Any) -> bool:
    return type(executor).__name__ == "EventsExecutor"


def _spin(executor: Any) -> None:
    if _is_events_executor(executor):
        spin_until(executor, lambda: False)
    else:
        # spin(), not a spin_once loop: MultiThreadedExecutor.spin_once returns at once
        # while a callback is still running in its pool, so the loop would busy-wait for
        # as long as a long service call (a rollout) runs.
        executor.spin()


def _spin_then_stop(executor: Any, node: Any) -> None:
    """The executor's thread beside a node's `main_work`: when rclpy shuts down, the
    node's main work is told to stop (`stop_hosting`) so that the process ends."""
    try:
        _spin(executor)
    except (ExternalShutdownException, KeyboardInterrupt):
        pass
    except RuntimeError:
        # Ctrl-C: rclpy's signal handler shuts the context down from the main thread, and
        # an executor between its ok() check and its next wait set gets RCLError "the
        # given context is not valid" (a traceback on every such Ctrl-C otherwise).
        if rclpy.ok():
            raise
    finally:
        stop = getattr(node, "stop_hosting", None)
        if stop is not None:
            stop()


def spin_until(executor: Any, done: Callable[[], bool], timeout_sec: float = 0.1) -> None:
    """Spin with spin_once(timeout_sec) until `done()` or rclpy's context shuts down.
    Works with every executor kind, EventsExecutor included."""
    while rclpy.ok() and not done():
        try:
            executor.spin_once(timeout_sec=timeout_sec)
        except (ExternalShutdownException, RuntimeError):
            if rclpy.ok():
                raise
            return  # a signal shut the context down under the executor: a normal end


def freeze_heap() -> None:
    """Exclude every object alive now from later garbage collections (`gc.freeze`).

    Called once a node is built (and by the policy host once its policy is loaded): a
    full collection scans every object of the process, and with torch and LeRobot loaded
    that took 0.5-2.7 s here, a stall of every thread (the control loop, the inference
    worker) at a moment nobody chooses. Frozen, the start-up heap is never scanned again;
    what the node allocates later is collected as usual.
    """
    gc.collect()
    gc.freeze()


def run_node(
    make_node: Callable[[], Node],
    *,
    args: Sequence[str] | None = None,
    executor: str | Callable[[], Any] | None = None,
    on_started: Callable[[Node], None] | None = None,
    main_work: Callable[[Node], None] | None = None,
) -> int:
    """`main()` of a node: init rclpy, build the node, spin until Ctrl-C or shutdown.

    `executor` None reads the `--executor` choice from the node's `executor` parameter
    when it has one, else uses the SingleThreadedExecutor; a string is one of
    EXECUTORS; a callable, given the built node, returns the executor to use. `on_started(node)` runs once
    after the node is built (e.g. a lifecycle node's autostart); a ParameterError or
    RuntimeError from it ends the process with status 2 or 1.
    `main_work(node)`: work that must run on the process's main thread (the policy
    server's inference, ros.policy_host); the executor then spins on a thread of its
    own, and the process ends when either returns (Ctrl-C interrupts the main thread).
    Returns the exit status.
    """
    retain_freed_memory()  # nodes move camera frames: reuse their buffers (memory.py)
    dump_stacks_on_sigusr1()
    rclpy.init(args=list(args) if args is not None else sys.argv)
    node: Node | None = None
    status = 0
    exec_ = None
    spinner: threading.Thread | None = None
    try:
        node = make_node()
        kind = executor
        if kind is None:
            kind = (
                node.get_parameter("executor").value
                if node.has_parameter("executor")
                else "single_threaded"
            )
        exec_ = kind(node) if callable(kind) else make_executor(kind)
        exec_.add_node(node)
        if on_started is not None:
            on_started(node)
        freeze_heap()
        if main_work is None:
            _spin(exec_)
        else:
            spinner = threading.Thread(
                target=_spin_then_stop, args=(exec_, node), name="executor", daemon=True
            )
            spinner.start()
            main_work(node)
    except KeyboardInterrupt:
        pass
    except ExternalShutdownException:
        pass
    except ParameterError as exc:
        report(node, f"refused: {exc}")
        status = 2
    except RuntimeError as exc:
        if rclpy.ok():  # else a signal ended rclpy while the node was starting: no error
            report(node, f"stopped: {exc}")
            status = 1
    finally:
        if exec_ is not None:
            exec_.shutdown(timeout_sec=1.0)
        if spinner is not None:
            spinner.join(timeout=5.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return status


def dump_stacks_on_sigusr1() -> None:
    """SIGUSR1 writes every thread's Python stack to stderr; the process goes on.
    (faulthandler writes from its C handler: it works while every Python thread is
    blocked, in a DDS wait or on the GIL.)"""
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def run_multithreaded(
    make_node: Callable[[], Node],
    *,
    args: Sequence[str] | None = None,
    threads: int = 4,
    on_started: Callable[[Node], None] | None = None,
) -> int:
    """`run_node` on a MultiThreadedExecutor of `threads` threads: for a node whose
    callbacks may block (a service that waits for a rollout, inference on a service
    call) while others must still answer (callback groups decide which run together)."""
    from rclpy.executors import MultiThreadedExecutor

    check("threads", threads, min_value=1)
    return run_node(
        make_node,
        args=args,
        executor=lambda _node: MultiThreadedExecutor(num_threads=threads),
        on_started=on_started,
    )


def report(node: Node | None, text: str) -> None:
    """One error line on the node's logger, or on stderr while no node is built yet."""
    if node is not None:
        node.get_logger().error(text)
    else:
        # The node was not built yet (its constructor refused a parameter): rclpy's
        # logging needs a node name, so use the process's stderr through logging.
        logging.basicConfig(level=logging.ERROR, format="[ERROR] %(message)s")
        _log.error(text)


def exit_main(main: Callable[[], int]) -> None:
    """For `if __name__ == "__main__": exit_main(main)`."""
    sys.exit(main())


@contextlib.contextmanager
def peeked_parameter(
    node_name: str, name: str, default: Any, description: str, *, context: Context | None = None
) -> Iterator[Any]:
    """The value parameter `name` of a node called `node_name` is given at start (command
    line, parameter files; remaps apply), validated as `declare` does, before that node
    is built: for a `main()` whose parameter chooses which node to build. Call it after
    `rclpy.init()` (inside `run_node`'s `make_node`) and build the node inside the block:

        with peeked_parameter(NODE_NAME, "served", False, DESCRIPTION) as served:
            return ServedEndpoint() if served else PolicyServer()

    A short-lived probe node of that name reads it and is destroyed before the block
    runs (two nodes of one name in one participant confuse the graph cache). A hidden
    keeper node, `_<node_name>_start`, lives until the block ends, because rmw_fastrtps
    ends a context's DDS participant with its last node: without it, the probe's
    destroy ended the participant a few milliseconds into discovering the graph and the
    node started a second one (a policy_server died of SIGSEGV inside that destroy on a
    loaded CI run). Probe and keeper have no parameter services, rosout or type
    description service: one /parameter_events publisher each."""
    quiet: dict[str, Any] = {
        "context": context,
        "start_parameter_services": False,
        "enable_rosout": False,
        "parameter_overrides": [Parameter("start_type_description_service", value=False)],
    }
    keeper = rclpy.create_node(f"_{node_name}_start", **quiet)
    try:
        probe = rclpy.create_node(node_name, **quiet)
        try:
            value = declare(probe, name, default, description)
        finally:
            probe.destroy_node()
        yield value
    finally:
        keeper.destroy_node()
