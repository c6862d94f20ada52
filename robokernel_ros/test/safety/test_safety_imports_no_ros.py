"""The safety package imports no ROS: checked in a fresh interpreter."""

from __future__ import annotations

from boundary import ROS_PREFIXES, modules_loaded_by, upward_imports


def test_importing_safety_loads_no_ros() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.safety")
    assert "limits" in modules
    assert "robokernel_ros.safety.limits" in loaded
    leaked = [m for m in loaded if m.startswith(ROS_PREFIXES)]
    assert leaked == [], f"robokernel_ros.safety pulled in {leaked}"


def test_the_safety_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["safety"]: a failure names the module, line and import."""
    assert upward_imports("safety") == []
