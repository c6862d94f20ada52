"""Sentry mode's wire field (issue #40): RunPolicy / StartPolicy's sentry_rotate_s reaches
the rollout API (0: one episode), a value outside its domain is refused naming the field,
WorkcellClient sends None as 0, and `robokernel ros run_policy --help` lists it."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.cli.ros import call_help  # noqa: E402
from robokernel_ros.ros.client import fill_fields  # noqa: E402
from robokernel_ros.ros.requests import Refused, run_kwargs  # noqa: E402

from robokernel_interfaces.action import RunPolicy  # noqa: E402
from robokernel_interfaces.srv import StartPolicy  # noqa: E402


@pytest.mark.parametrize("message", [RunPolicy.Goal, StartPolicy.Request])
def test_the_wire_field_reaches_the_api_and_zero_means_one_episode(message) -> None:
    assert run_kwargs(message(), "arm", None)["sentry_rotate_s"] is None
    assert run_kwargs(message(sentry_rotate_s=60.0), "arm", None)["sentry_rotate_s"] == 60.0


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_value_outside_the_domain_is_refused_naming_the_field(value) -> None:
    with pytest.raises(Refused) as refused:
        run_kwargs(RunPolicy.Goal(sentry_rotate_s=value), "arm", None)
    assert str(refused.value).startswith(
        f"sentry_rotate_s={value!r}: must be 0 (one episode) or positive finite seconds"
    )


def test_the_client_sends_none_as_zero_and_the_help_lists_the_field() -> None:
    assert fill_fields(RunPolicy.Goal(), {"sentry_rotate_s": None}).sentry_rotate_s == 0.0
    assert fill_fields(RunPolicy.Goal(), {"sentry_rotate_s": 30}).sentry_rotate_s == 30.0
    assert "sentry_rotate_s" in call_help("run_policy")
    assert "sentry_rotate_s" in call_help("start_policy")
