"""Scorers read traces only: the scoring package imports nothing of the rollout, the envs,
the policies, the nodes or ROS, neither loaded in a fresh interpreter nor anywhere in its
source (lazy imports inside functions included)."""

from __future__ import annotations

from boundary import ROS_PREFIXES, imports_of, modules_loaded_by, upward_imports

FORBIDDEN = tuple(f"robokernel_ros.{layer}" for layer in ("rollout", "envs", "policies", "nodes"))


def test_importing_scoring_loads_no_rollout_envs_policies_nodes_or_ros() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.scoring")
    assert {"scorers", "shadow", "compare", "report"} <= set(modules)
    assert "robokernel_ros.scoring.scorers" in loaded
    leaked = [m for m in loaded if m.startswith(ROS_PREFIXES + FORBIDDEN)]
    assert leaked == [], f"robokernel_ros.scoring pulled in {leaked}"


def test_the_scoring_source_imports_nothing_of_rollout_envs_policies_nodes_or_ros() -> None:
    assert imports_of("robokernel_ros.scoring", (*FORBIDDEN, "rclpy", "rosidl")) == {}


def test_the_scoring_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["scoring"]: a failure names the module, line and import."""
    assert upward_imports("scoring") == []
