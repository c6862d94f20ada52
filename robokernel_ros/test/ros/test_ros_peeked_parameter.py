"""ros.node.peeked_parameter: a main() reads the parameter that chooses which node to
build (the policy server's `served`) from its start arguments, and the node it builds
joins the DDS participant the probe started: rmw_fastrtps ends a context's participant
with its last node, and a probe destroyed before the real node existed ended one a few
milliseconds into discovery (a SIGSEGV inside that destroy on a loaded CI run).
Real rclpy, a context of this test's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from robokernel_ros.ros.node import peeked_parameter  # noqa: E402
from robokernel_ros.ros.params import ParameterError  # noqa: E402

NAME = "peek_probe_test"


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _context(args: list[str]) -> rclpy.Context:
    context = rclpy.Context()
    rclpy.init(context=context, args=["peek", "--ros-args", *args])
    return context


def test_the_probe_reads_a_params_file_and_leaves_the_participant_to_the_node(
    tmp_path: Path,
) -> None:
    params = tmp_path / "served.yaml"
    params.write_text(f"{NAME}:\n  ros__parameters:\n    served: true\n")
    context = _context(["--params-file", str(params)])
    node = None
    try:
        before = _threads()
        with peeked_parameter(NAME, "served", False, "test", context=context) as served:
            # The probe is gone, and the participant it started still runs: its DDS
            # threads (a dozen in Fast DDS 3) are still there for the node to join.
            # Without a keeper they end with the probe (measured: 18 threads to 7).
            assert _threads() - before >= 5
            node = rclpy.create_node(NAME, context=context)
        assert served is True
        names = node.get_node_names()
        assert names.count(NAME) == 1  # the probe did not outlive the block
        assert f"_{NAME}_start" not in names  # nor did the keeper
        infos = node.get_publishers_info_by_topic("/parameter_events")
        assert [i.node_name for i in infos if i.node_name == NAME] == [NAME]
    finally:
        if node is not None:
            node.destroy_node()
        context.try_shutdown()


def test_the_default_when_unset_and_a_clear_error_for_a_wrong_type() -> None:
    context = _context([])
    try:
        with peeked_parameter(NAME, "served", False, "test", context=context) as served:
            assert served is False
    finally:
        context.try_shutdown()
    context = _context(["-p", "served:=often"])
    try:
        with (
            pytest.raises(ParameterError, match="served"),
            peeked_parameter(NAME, "served", False, "test", context=context),
        ):
            pytest.fail("the block ran after a parameter of the wrong type")
    finally:
        context.try_shutdown()
