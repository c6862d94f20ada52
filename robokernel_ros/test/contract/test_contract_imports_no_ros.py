"""The contract package sits below recording/ and ros/: it imports no ROS and nothing of
the rollout, recording, scoring, ros or nodes layers (source and a fresh interpreter)."""

from __future__ import annotations

from boundary import ROS_PREFIXES, imports_of, modules_loaded_by, upward_imports

ABOVE = tuple(
    f"robokernel_ros.{layer}" for layer in ("rollout", "recording", "scoring", "ros", "nodes")
)


def test_importing_the_contract_loads_no_ros_and_no_layer_above_it() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.contract")
    assert {"spec", "fields"} <= set(modules)
    leaked = [m for m in loaded if m.startswith(ROS_PREFIXES + ABOVE)]
    assert leaked == [], f"robokernel_ros.contract pulled in {leaked}"


def test_the_contract_source_imports_no_ros_and_no_layer_above_it() -> None:
    assert imports_of("robokernel_ros.contract", (*ABOVE, "rclpy", "rosidl")) == {}


def test_the_contract_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["contract"]: a failure names the module, line and import."""
    assert upward_imports("contract") == []
