"""Plumbing every node of this package shares: QoS profiles, parameter declaration with
descriptors and validation, executors, and `main()`.

A node module stays thin: it defines a Node (or LifecycleNode) subclass and

    def main(args=None) -> int:
        return run_node(MyNode, args=args)

    # a node whose callbacks block (services that wait for work) on N threads:
    def main(args=None) -> int:
        return run_multithreaded(MyNode, args=args, threads=4)

`run_node` does `rclpy.init()`, builds the node, spins it, turns Ctrl-C into a clean
exit, stops the executor before `rclpy.shutdown()` (shutting rclpy down under a
spinning executor aborts the process in this build), and turns a `ParameterError`
raised while building or starting the node into one logged line and exit status 2
(a RuntimeError into one logged line and status 1). `run_multithreaded` is the same
on a MultiThreadedExecutor.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

_log = logging.getLogger(__name__)

# --- QoS, chosen on purpose -------------------------------------------------------------

#: Latched operator inputs (e-stop): reliable, transient_local, depth 1. A subscriber
#: that starts late (or restarts) receives the last value the publisher sent.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
ESTOP_QOS = LATCHED_QOS

#: Commands to controllers: reliable, volatile, depth 10 (what ros2_control's
#: forward_command_controller and joint_trajectory_controller subscribe with).
COMMAND_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

#: Subscribing to sensor streams (joint states, images): best effort, depth 5. A best
#: effort subscription matches both reliable and best-effort publishers.
SENSOR_QOS = qos_profile_sensor_data

#: Publishing /joint_states the way ros2_control's joint_state_broadcaster does
#: (reliable, depth 10), so that subscribers of either reliability match.
JOINT_STATE_PUB_QOS = COMMAND_QOS

#: A node's status topic: the latest value for late joiners (reliable, transient_local).
STATUS_QOS = LATCHED_QOS

#: A stream of discrete events (interventions, trace events): reliable, deep queue.
EVENT_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)

#: Live kernel events (KernelEvent): reliable, volatile, depth 1000 (an episode step
#: publishes about five events in a burst; a shallower history drops some before a
#: subscriber acks).
EVENTS_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1000,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


# --- kernel events as messages ------------------------------------------------------------


def event_json(data: Mapping[str, Any]) -> str:
    """An event's data as a JSON object, encoded by the kernel's encoder (non-finite
    numbers as null, as in the trace); images (arrays of 2+ dimensions) become their
    shape and dtype."""
    import numpy as np

    from robokernel_ros.kernel.trace import dumps_text

    def strip(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim >= 2:
            return {"shape": list(value.shape), "dtype": str(value.dtype)}
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        return value

    return dumps_text(strip(dict(data)))


def kernel_event_msg(event: Any) -> Any:
    """A kernel Event as a robokernel_interfaces/KernelEvent (stamp = the episode clock)."""
    from robokernel_interfaces.msg import KernelEvent

    msg = KernelEvent()
    # rounded to the nanosecond as the bag mirror stamps it, so both agree exactly
    msg.stamp.sec, msg.stamp.nanosec = divmod(max(0, round(float(event.t) * 1e9)), 1_000_000_000)
    msg.run_id = event.run_id
    msg.seq = int(event.seq)
    msg.kind = event.kind
    msg.step = int(event.step)
    msg.data_json = event_json(event.data)
    return msg


# --- parameters ---------------------------------------------------------------------------


class ParameterError(ValueError):
    """A parameter has a value outside its domain. The message names the parameter,
    the value and the domain."""

    def __init__(self, name: str, value: Any, domain: str) -> None:
        super().__init__(f"parameter {name}={value!r}: {domain}")
        self.name = name
        self.value = value
        self.domain = domain


_TYPES: dict[type, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
}


def declare(
    node: Node,
    name: str,
    default: Any,
    description: str,
    *,
    choices: Sequence[str] | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
    read_only: bool = True,
    array_type: type | None = None,
) -> Any:
    """Declare one parameter with a descriptor and return its validated value.

    `default` fixes the type (booleans are booleans: `"false"` is refused by rclpy's
    type check). For an array parameter whose default is empty, give `array_type`
    (str, float, int, bool). Numbers are also checked finite and within
    [min_value, max_value] (min exclusive when `min_exclusive`); strings within
    `choices`. Raises ParameterError naming the parameter, the value and the domain.
    """
    descriptor = ParameterDescriptor(
        name=name,
        description=description,
        read_only=read_only,
    )
    if choices is not None:
        descriptor.additional_constraints = "one of: " + ", ".join(choices)
    elif min_value is not None or max_value is not None:
        lo = "-inf" if min_value is None else repr(min_value)
        hi = "inf" if max_value is None else repr(max_value)
        descriptor.additional_constraints = f"{'(' if min_exclusive else '['}{lo}, {hi}]"
        if isinstance(default, int) and not isinstance(default, bool):
            descriptor.integer_range = [
                IntegerRange(
                    from_value=int(min_value if min_value is not None else -(2**63)),
                    to_value=int(max_value if max_value is not None else 2**63 - 1),
                    step=0,
                )
            ]
        elif isinstance(default, float) and not min_exclusive:
            descriptor.floating_point_range = [
                FloatingPointRange(
                    from_value=float(min_value if min_value is not None else -math.inf),
                    to_value=float(max_value if max_value is not None else math.inf),
                    step=0.0,
                )
            ]
    if isinstance(default, list | tuple) and not default:
        if array_type is None:
            raise TypeError(f"declare({name!r}): an empty array default needs array_type")
        typed_default: Any = {
            str: Parameter.Type.STRING_ARRAY,
            float: Parameter.Type.DOUBLE_ARRAY,
            int: Parameter.Type.INTEGER_ARRAY,
            bool: Parameter.Type.BOOL_ARRAY,
        }[array_type]
    else:
        typed_default = list(default) if isinstance(default, tuple) else default
    try:
        value = node.declare_parameter(name, typed_default, descriptor).value
    except rclpy.exceptions.InvalidParameterTypeException as exc:
        expected = _type_name(default, array_type)
        raise ParameterError(name, _override_value(node, name), f"must be {expected}") from exc
    except rclpy.exceptions.InvalidParameterValueException as exc:
        raise ParameterError(
            name, _override_value(node, name), descriptor.additional_constraints or str(exc)
        ) from exc
    if value is None and isinstance(default, list | tuple):
        value = []  # `name:=[]` on the command line has no element type
    return check(
        name,
        value,
        choices=choices,
        min_value=min_value,
        max_value=max_value,
        min_exclusive=min_exclusive,
    )


def check(
    name: str,
    value: Any,
    *,
    choices: Sequence[str] | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
) -> Any:
    """Validate one value against its domain; raise ParameterError when outside it."""
    if choices is not None and value not in choices:
        raise ParameterError(name, value, "must be one of " + ", ".join(map(repr, choices)))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ParameterError(name, value, "must be a finite number")
        if min_value is not None and (value <= min_value if min_exclusive else value < min_value):
            bound = f"> {min_value}" if min_exclusive else f">= {min_value}"
            raise ParameterError(name, value, f"must be {bound}")
        if max_value is not None and value > max_value:
            raise ParameterError(name, value, f"must be <= {max_value}")
    return value


def _type_name(default: Any, array_type: type | None) -> str:
    if isinstance(default, list | tuple):
        inner = array_type or (type(default[0]) if default else str)
        return f"an array of {inner.__name__}"
    return {
        bool: "a boolean (true/false)",
        int: "an integer",
        float: "a number",
        str: "a string",
    }.get(type(default), type(default).__name__)


def _override_value(node: Node, name: str) -> Any:
    override = getattr(node, "_parameter_overrides", {}).get(name)
    return getattr(override, "value", override)


# --- executors and main() -----------------------------------------------------------------

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


def run_node(
    make_node: Callable[[], Node],
    *,
    args: Sequence[str] | None = None,
    executor: str | Callable[[], Any] | None = None,
    on_started: Callable[[Node], None] | None = None,
) -> int:
    """`main()` of a node: init rclpy, build the node, spin until Ctrl-C or shutdown.

    `executor` None reads the `--executor` choice from the node's `executor` parameter
    when it has one, else uses the SingleThreadedExecutor; a string is one of
    EXECUTORS; a callable, given the built node, returns the executor to use. `on_started(node)` runs once
    after the node is built (e.g. a lifecycle node's autostart); a ParameterError or
    RuntimeError from it ends the process with status 2 or 1.
    Returns the exit status.
    """
    rclpy.init(args=list(args) if args is not None else sys.argv)
    node: Node | None = None
    status = 0
    exec_ = None
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
        if _is_events_executor(exec_):
            spin_until(exec_, lambda: False)
        else:
            # spin(), not a spin_once loop: MultiThreadedExecutor.spin_once returns at
            # once while a callback is still running in its pool, so the loop would
            # busy-wait for as long as a long service call (a rollout) runs.
            exec_.spin()
    except KeyboardInterrupt:
        pass
    except ExternalShutdownException:
        pass
    except ParameterError as exc:
        _report(node, f"refused: {exc}")
        status = 2
    except RuntimeError as exc:
        if rclpy.ok():  # else a signal ended rclpy while the node was starting: no error
            _report(node, f"stopped: {exc}")
            status = 1
    finally:
        if exec_ is not None:
            exec_.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return status


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


def _report(node: Node | None, text: str) -> None:
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
