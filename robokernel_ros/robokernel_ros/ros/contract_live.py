"""A topic contract against a live ROS graph: the types its topics carry, and how they flow.

    types = graph_types(node, ["/joint_states", "/ft/wrench"], timeout_s=5.0)
    contract = resolve_on_graph(node, contract, timeout_s=10.0)   # untyped streams filled
    status = check_live(contract, duration_s=3.0)                 # `robokernel contract check FILE --live`

`graph_types` polls the node's view of the graph (publishers and subscriptions alike)
until every topic is there or the time is up. `resolve_on_graph` fills the `type` a
contract leaves out from it (ContractError naming the stream's key and topic when a
topic is not on the graph, or carries a type the contract cannot read). `live_report`
subscribes to every stream's topic, waits until each subscription has matched the
publishers the graph shows (`await_matches`, up to `discovery_s`) and each state source
and camera has sent a first message (`await_first_messages`, up to `discovery_s` more:
DDS pairs the two ends one at a time), then measures for `duration_s` what arrived: the message count, the rate over the receipt times, the
first and last header stamps; `check_live` prints that as a table, and is the `--live`
half of `robokernel contract check` (its output is the command's: it writes to stdout).

Exit status of check_live: 0 when every state source and camera was found, has a
type the contract reads, and sent messages; 1 otherwise (each cause on a line). An
action or command topic that is absent is reported, not failed: on a robot that is
deployed (no teleop leader) nobody publishes the recorded action, and a controller's
command topic carries nothing until the workcell runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from robokernel_ros.contract import ContractError, header_stamp_ns, stream_names
from robokernel_ros.ros.env_config import full_type_name, message_class

#: roles whose topics must flow for a check to pass
REQUIRED_ROLES = ("state", "images")


def graph_types(node: Any, topics: Iterable[str], timeout_s: float) -> dict[str, str]:
    """{topic: "pkg/msg/Type"} for each of `topics` on the graph (the first type when a
    topic carries several), polling until all are there or `timeout_s` has passed."""
    wanted = set(topics)
    deadline = time.monotonic() + timeout_s
    found: dict[str, str] = {}
    while True:
        for name, types in node.get_topic_names_and_types():
            if name in wanted and types:
                found[name] = types[0]
        if wanted <= set(found) or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def _role_streams(contract: Any, roles: Sequence[str]) -> list[tuple[str, str, Any]]:
    """(role, key path, stream) of the contract's streams in `roles`."""
    out = []
    for key, stream in contract.streams():
        role = key.split("[", 1)[0].split(".", 1)[0]
        if role in roles:
            out.append((role, key, stream))
    return out


def resolve_on_graph(
    node: Any, contract: Any, timeout_s: float, *, roles: Sequence[str] = ("state", "images")
) -> Any:
    """The contract with the untyped streams of `roles` typed from the graph (see the
    module docstring). Returns it unchanged, at once, when every one is typed."""
    from robokernel_ros.contract.fields import IMAGE_TYPES, TYPES

    untyped = [(r, k, s) for r, k, s in _role_streams(contract, roles) if not s.type]
    if not untyped:
        return contract
    types = graph_types(node, {s.topic for _, _, s in untyped}, timeout_s)
    problems = []
    filled: dict[str, str] = {}
    for role, key, stream in untyped:
        found = types.get(stream.topic)
        allowed = IMAGE_TYPES if role == "images" else tuple(TYPES)
        if found is None:
            problems.append(
                f"{key}.topic: {stream.topic} is not on the graph within {timeout_s:g} s, "
                "so its type is not known (give `type`, or start its publisher first)"
            )
        elif full_type_name(found) not in allowed:
            problems.append(
                f"{key}: topic {stream.topic} carries {found}, which is not supported; "
                f"one of {list(allowed)}"
            )
        else:
            filled[stream.topic] = full_type_name(found)
    if problems:
        raise ContractError(contract.origin, problems)

    def typed(s: Any) -> Any:
        return replace(s, type=filled[s.topic]) if not s.type and s.topic in filled else s

    return replace(
        contract,
        state=tuple(typed(s) for s in contract.state) if "state" in roles else contract.state,
        action=tuple(typed(s) for s in contract.action) if "action" in roles else contract.action,
        images={k: typed(s) for k, s in contract.images.items()}
        if "images" in roles
        else contract.images,
    )


@dataclass
class StreamReport:
    """What one stream's topic showed on the graph."""

    key: str  # the contract's key path: state[0], images.front, command[1], ...
    topic: str
    type: str = ""  # found on the graph ('' = not there)
    fields: str = ""  # the entries the contract reads
    messages: int = 0
    rate_hz: float | None = None
    first_stamp_ns: int | None = None
    last_stamp_ns: int | None = None
    problem: str = ""
    required: bool = True
    _received: list[float] = field(default_factory=list, repr=False)

    def on_message(self, msg: Any) -> None:
        now = time.monotonic()
        self.messages += 1
        if len(self._received) < 2:
            self._received.append(now)
        else:
            self._received[1] = now
        stamp = header_stamp_ns(msg)
        if stamp is not None:
            if self.first_stamp_ns is None:
                self.first_stamp_ns = stamp
            self.last_stamp_ns = stamp

    def restart(self) -> None:
        """Forget what arrived so far (the measuring window opens now)."""
        self.messages = 0
        self._received.clear()
        self.first_stamp_ns = self.last_stamp_ns = None

    def finish(self) -> None:
        if self.messages >= 2 and self._received[1] > self._received[0]:
            self.rate_hz = (self.messages - 1) / (self._received[1] - self._received[0])


def _streams_to_check(contract: Any) -> list[tuple[str, Any, bool, str]]:
    """(key, stream, required, fields) of every topic the contract names."""
    out = []
    for key, stream in contract.streams():
        role = key.split("[", 1)[0].split(".", 1)[0]
        if role == "images":
            fields = "image"
        else:
            names = stream_names(stream)
            fields = (f"{stream.field or 'default'}: " if stream.field else "") + (
                ", ".join(names) if names else "(after the type is known)"
            )
        out.append((key, stream, role in REQUIRED_ROLES, fields))
    for i, command in enumerate(contract.commands):
        out.append(
            (
                f"command[{i}] {command.name}",
                command,
                False,
                f"{command.kind}: " + ", ".join(command.joints),
            )
        )
    return out


def live_report(
    contract: Any, duration_s: float, *, discovery_s: float = 5.0
) -> tuple[list[StreamReport], list[str]]:
    """Every stream of `contract` on the live graph (see the module docstring): its
    report, and the contract's type problems against what the graph carries."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from robokernel_ros.contract import resolve_types
    from robokernel_ros.ros.qos import SENSOR_QOS

    checks = _streams_to_check(contract)
    reports = [
        StreamReport(key, s.topic, fields=fields, required=required)
        for key, s, required, fields in checks
    ]
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("robokernel_contract_check", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        try:
            types = graph_types(node, {r.topic for r in reports}, discovery_s)
            subscriptions = []
            flowing: list[StreamReport] = []  # the required streams, subscribed
            for report in reports:
                found = types.get(report.topic)
                if found is None:
                    report.problem = f"not on the graph within {discovery_s:g} s"
                    continue
                report.type = full_type_name(found)
                try:
                    msg_type = message_class(report.type)
                except ValueError as exc:
                    report.problem = str(exc)
                    continue
                subscriptions.append(
                    node.create_subscription(msg_type, report.topic, report.on_message, SENSOR_QOS)
                )
                if report.required:
                    flowing.append(report)
            await_matches(executor, node, subscriptions, discovery_s)
            await_first_messages(executor, flowing, discovery_s)
            for report in reports:
                report.restart()
            deadline = time.monotonic() + duration_s
            while time.monotonic() < deadline:
                executor.spin_once(timeout_sec=min(0.05, max(0.0, deadline - time.monotonic())))
        finally:
            executor.shutdown(timeout_sec=1.0)
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=context)
    for report in reports:
        report.finish()
        if not report.problem and report.messages == 0 and report.type:
            report.problem = f"no message within {duration_s:g} s"
    problems = []
    try:
        resolve_types(contract, {r.topic: r.type for r in reports if r.type})
    except ContractError as exc:  # a topic that is not there is reported per stream above
        problems = [p for p in exc.problems if not p.endswith("is not there")]
    return reports, problems


def await_matches(executor: Any, node: Any, subscriptions: Sequence[Any], timeout_s: float) -> bool:
    """Spin until every subscription whose topic has a publisher on the graph has matched
    one, or `timeout_s` has passed (False then). The measuring window opens after it:
    `--duration` measures how a stream flows, not how long discovery takes (a loaded
    machine's check once saw no joint state in 1.5 s from a 100 Hz robot). A topic that
    no publisher is on is not waited for."""
    deadline = time.monotonic() + timeout_s

    def unmatched() -> list[Any]:
        return [
            sub
            for sub in subscriptions
            if sub.get_publisher_count() < 1 and node.count_publishers(sub.topic_name) >= 1
        ]

    while unmatched():
        if time.monotonic() >= deadline:
            return False
        executor.spin_once(timeout_sec=0.05)
    return True


def await_first_messages(executor: Any, reports: Sequence[StreamReport], timeout_s: float) -> bool:
    """Spin until each of `reports` has had a message, or `timeout_s` has passed (False
    then). A reader's match says only that it knows the writer: a writer that has not
    learned of the reader yet sends it nothing (a loaded CI run's check matched the test
    process's wrench publisher, then got nothing from it in its 1.5 s window)."""
    deadline = time.monotonic() + timeout_s
    while any(r.messages == 0 for r in reports):
        if time.monotonic() >= deadline:
            return False
        executor.spin_once(timeout_sec=0.05)
    return True


def _stamp(ns: int | None) -> str:
    return "-" if ns is None else f"{ns * 1e-9:.3f}"


def format_report(reports: Sequence[StreamReport], problems: Sequence[str]) -> list[str]:
    """The table `check_live` prints, one line per stream, then the problems."""
    rows = [("key", "topic", "type", "fields", "msgs", "rate_hz", "first_stamp", "last_stamp")]
    for r in reports:
        rows.append(
            (
                r.key,
                r.topic,
                r.type or "-",
                r.fields,
                str(r.messages),
                "-" if r.rate_hz is None else f"{r.rate_hz:.1f}",
                _stamp(r.first_stamp_ns),
                _stamp(r.last_stamp_ns),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for r in reports:
        if r.problem:
            level = "error" if r.required else "note"
            lines.append(f"{level}: {r.key} {r.topic}: {r.problem}")
    lines += [f"error: {p}" for p in problems]
    return lines


def live_status(reports: Sequence[StreamReport], problems: Sequence[str]) -> int:
    """0 when every required stream flows and the types agree, else 1."""
    return 1 if problems or any(r.required and r.problem for r in reports) else 0


def check_live(contract: Any, duration_s: float) -> int:
    """`robokernel contract check FILE --live`: the table on stdout, the exit status."""
    reports, problems = live_report(contract, duration_s)
    sys.stdout.write("\n".join(format_report(reports, problems)) + "\n")
    return live_status(reports, problems)
