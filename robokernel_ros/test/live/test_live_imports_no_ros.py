"""The live view imports no ROS: checked in a fresh interpreter."""

from __future__ import annotations

from boundary import ROS_PREFIXES, modules_loaded_by, upward_imports


def test_importing_live_loads_no_ros() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.live")
    assert {"view", "channels", "layout", "options", "proto"} <= set(modules)
    assert "robokernel_ros.live.view" in loaded
    leaked = [m for m in loaded if m.startswith(ROS_PREFIXES)]
    assert leaked == [], f"robokernel_ros.live pulled in {leaked}"


def test_the_live_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["live"]: a failure names the module, line and import."""
    assert upward_imports("live") == []
