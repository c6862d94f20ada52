"""Node parameters described once (ros.params): a frozen dataclass of param() fields is
declared on a real rclpy node with its descriptors (range, choices) and read back typed;
a value outside its domain is refused with one line naming the parameter and the domain."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import FrozenInstanceError, dataclass

import pytest
import rclpy
from rclpy.parameter import Parameter
from robokernel_ros.ros.params import ParameterError, declare_params, describe_params, param


@dataclass(frozen=True)
class ProbeParams:
    period_s: float = param(0.1, "heartbeat period", min_value=0.001, max_value=10.0)
    mode: str = param("position", "command interface", choices=("position", "velocity"))
    joints: tuple[str, ...] = param((), "joint names", array_type=str)
    depth: int = param(10, "history depth", min_value=1)
    enabled: bool = param(True, "on or off")


@pytest.fixture
def context() -> Iterator[rclpy.Context]:
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.try_shutdown(context=context)


def _node(context: rclpy.Context, overrides: list[Parameter]) -> rclpy.node.Node:
    return rclpy.create_node("params_probe", context=context, parameter_overrides=overrides)


def test_the_dataclass_is_declared_with_its_domains_and_read_back_typed(context) -> None:
    node = _node(
        context,
        [Parameter("period_s", value=0.25), Parameter("joints", value=["a", "b"])],
    )
    try:
        params = declare_params(node, ProbeParams)
        assert params == ProbeParams(
            period_s=0.25, mode="position", joints=("a", "b"), depth=10, enabled=True
        )
        with pytest.raises(FrozenInstanceError):
            params.period_s = 1.0  # type: ignore[misc]
        period, mode, depth = node.describe_parameters(["period_s", "mode", "depth"])
        assert (period.floating_point_range[0].from_value, period.floating_point_range[0].to_value) == (0.001, 10.0)  # fmt: skip
        assert period.description == "heartbeat period" and period.read_only
        assert mode.additional_constraints == "one of: position, velocity"
        assert depth.integer_range[0].from_value == 1
    finally:
        node.destroy_node()


@pytest.mark.parametrize(
    ("override", "words"),
    [
        (Parameter("period_s", value=20.0), "parameter period_s=20.0: [0.001, 10.0]"),
        (
            Parameter("mode", value="torque"),
            "parameter mode='torque': must be one of 'position', 'velocity'",
        ),
        (Parameter("enabled", value="false"), "parameter enabled='false': must be a boolean"),
        (Parameter("depth", value=0), "parameter depth=0: [1, "),
    ],
)
def test_a_value_outside_its_domain_is_refused_in_one_line_naming_it(
    context, override: Parameter, words: str
) -> None:
    node = _node(context, [override])
    try:
        with pytest.raises(ParameterError) as info:
            declare_params(node, ProbeParams)
        assert str(info.value).startswith(words), str(info.value)
        assert "\n" not in str(info.value) and info.value.name == override.name
    finally:
        node.destroy_node()


def test_described_once_under_a_prefix_and_an_array_default_is_a_tuple() -> None:
    described = describe_params(ProbeParams, prefix="arm.")
    assert [p.name for p in described] == [
        "arm.period_s",
        "arm.mode",
        "arm.joints",
        "arm.depth",
        "arm.enabled",
    ]
    assert described[1].choices == ("position", "velocity") and described[2].array_type is str
    with pytest.raises(TypeError, match="tuple"):
        param([], "a list default")
