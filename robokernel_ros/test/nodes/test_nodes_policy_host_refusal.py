"""A policy-hosting node refused at construction (a bad parameter in PolicyHost's own
declarations or in the subclass's) leaves no node, and so no DDS participant, alive in
the process that built it; destroy_node works on a node that never started hosting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402
from robokernel_ros.nodes.policy_server import PolicyServer  # noqa: E402
from robokernel_ros.nodes.served_endpoint import ServedEndpoint  # noqa: E402
from robokernel_ros.ros.params import ParameterError  # noqa: E402
from robokernel_ros.ros.policy_host import PolicyHost  # noqa: E402


def _udp_sockets() -> int:
    """UDP sockets this process holds (a DDS participant holds several)."""
    inodes: set[str] = set()
    for table in ("udp", "udp6"):
        rows = Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
        inodes.update(f"socket:[{row.split()[9]}]" for row in rows)
    held = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            held += os.readlink(fd) in inodes
        except OSError:
            pass
    return held


@pytest.mark.parametrize(
    ("node_class", "parameter", "value", "refusal"),
    [
        (PolicyServer, "heartbeat_hz", 0.0, "heartbeat_hz"),  # PolicyHost's own
        (PolicyServer, "served", True, "served"),  # the lifecycle subclass's, after its mixin
        (ServedEndpoint, "action_keys", [], "action_keys"),  # the served subclass's
    ],
    ids=["policy_host", "policy_server", "served_endpoint"],
)
def test_a_refused_parameter_leaves_no_participant_behind(
    node_class, parameter, value, refusal
) -> None:
    before = _udp_sockets()
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        overrides = [Parameter(parameter, value=value)]
        if value == []:
            overrides = [Parameter(parameter, Parameter.Type.STRING_ARRAY, [])]
        with pytest.raises(ParameterError, match=refusal):
            node_class(context=context, parameter_overrides=overrides)
    finally:
        rclpy.try_shutdown(context=context)
        context.destroy()
    assert _udp_sockets() == before, "the refused node's DDS participant lives on"


def test_destroy_node_of_a_host_that_never_hosted() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        host = PolicyHost(context=context)
        host.destroy_node()  # no inference thread, no observation reader
        host.stop_hosting()  # a second stop does nothing
    finally:
        rclpy.try_shutdown(context=context)
        context.destroy()
