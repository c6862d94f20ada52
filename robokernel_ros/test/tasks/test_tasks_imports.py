"""The tasks layer stands on the kernel alone: no rollout, envs, policies, scoring or ROS,
neither loaded in a fresh interpreter nor imported anywhere in its source."""

from __future__ import annotations

from boundary import ROS_PREFIXES, imports_of, modules_loaded_by, upward_imports

ABOVE_OR_BESIDE = tuple(
    f"robokernel_ros.{layer}" for layer in ("rollout", "envs", "policies", "scoring", "nodes")
)


def test_importing_tasks_loads_no_rollout_envs_policies_scoring_or_ros() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.tasks")
    assert {"predicates", "context", "benchmarks", "goals"} <= set(modules)
    assert "robokernel_ros.tasks.context" in loaded
    leaked = [m for m in loaded if m.startswith(ROS_PREFIXES + ABOVE_OR_BESIDE + ("mujoco",))]
    assert leaked == [], f"robokernel_ros.tasks pulled in {leaked}"


def test_the_tasks_source_imports_only_the_kernel_of_the_package() -> None:
    found = imports_of("robokernel_ros.tasks", ("robokernel_ros", "rclpy", "mujoco"))
    outside = {
        module: [
            n for n in names if not n.startswith(("robokernel_ros.kernel", "robokernel_ros.tasks"))
        ]
        for module, names in found.items()
    }
    assert {m: n for m, n in outside.items() if n} == {}


def test_the_tasks_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["tasks"]: a failure names the module, line and import."""
    assert upward_imports("tasks") == []
