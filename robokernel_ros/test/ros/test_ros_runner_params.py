"""The runner node's parameters are one typed description (ros.runner_params.RunnerParams):
declared on a real node with their descriptors, read back typed, refused by name outside
their domain, checked across parameters, and estop_required's default set by env."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import fields

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402
from robokernel_ros.ros.params import ParameterError, declare_params  # noqa: E402
from robokernel_ros.ros.runner_params import (  # noqa: E402
    RunnerParams,
    declare_estop_required,
)


@pytest.fixture
def context() -> Iterator[rclpy.Context]:
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    rclpy.try_shutdown(context=context)


def _declared(context, **overrides: object) -> tuple[object, RunnerParams, bool]:
    node = rclpy.create_node(
        "runner_params_probe",
        context=context,
        parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()],
    )
    params = declare_params(node, RunnerParams)
    return node, params, declare_estop_required(node, params)


def test_every_field_is_declared_with_its_doc_and_read_back_typed(context) -> None:
    node, params, estop_required = _declared(context)
    try:
        names = [f.name for f in fields(RunnerParams)]
        assert len(names) == 26 and all(node.has_parameter(n) for n in names)
        assert node.has_parameter("estop_required")  # the 27th, its default by env
        described = node.describe_parameters(["control_frequency", "env", "joints"])
        assert described[0].floating_point_range == [] and described[0].read_only
        assert "(0.0, 10000.0]" in described[0].additional_constraints
        assert described[1].additional_constraints == "one of: sim, ros"
        assert params.joints == () and params.control_frequency == 50.0
        assert estop_required is False  # env=sim: the e-stop topic is optional
    finally:
        node.destroy_node()


def test_env_ros_requires_the_estop_by_default_and_takes_joints_as_a_tuple(context) -> None:
    node, params, estop_required = _declared(context, env="ros", joints=["a", "b"])
    try:
        assert estop_required is True and params.joints == ("a", "b")
        params.check()
    finally:
        node.destroy_node()


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        ({"env": "mujoco"}, "parameter env='mujoco': must be one of 'sim', 'ros'"),
        ({"estop_timeout_s": 0.0}, "parameter estop_timeout_s=0.0: must be > 0.0"),
        ({"control_priority": 100}, "parameter control_priority=100"),
        ({"publish_events": "false"}, "parameter publish_events='false': must be a boolean"),
    ],
)
def test_a_value_outside_its_domain_is_refused_naming_it(context, overrides, refusal) -> None:
    with pytest.raises(ParameterError) as caught:
        _declared(context, **overrides)
    assert str(caught.value).startswith(refusal), str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        ({"camera_names": ["front"]}, "parameter camera_topics=[]: must have one topic per"),
        ({"env": "ros"}, "parameter joints=[]: env=ros needs the joint names"),
        (
            {"env": "ros", "joints": ["a", "b"], "reset_positions": [0.0]},
            "parameter reset_positions=[0.0]: must be [] or one value per joint (2)",
        ),
    ],
)
def test_the_checks_across_parameters_name_the_parameter(context, overrides, refusal) -> None:
    node, params, _ = _declared(context, **overrides)
    try:
        with pytest.raises(ParameterError, match="^" + re.escape(refusal)):
            params.check()
    finally:
        node.destroy_node()
