"""The layers' import rule, checked in fresh interpreters: nothing below `ros/` imports
rclpy (or any ROS message package, `robokernel_ros.ros` or `robokernel_ros.nodes`), and
`ros/` imports no node."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from boundary import ROS_PREFIXES, modules_loaded_by, upward_imports

#: Every layer below ros/ (tasks/ once it exists).
BELOW_ROS = (
    "kernel",
    "safety",
    "tasks",
    "policies",
    "envs",
    "contract",
    "rollout",
    "recording",
    "scoring",
)
ROS_CODE = (*ROS_PREFIXES, "robokernel_ros.ros.")


def _leaks(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.startswith(ROS_CODE) or m == "robokernel_ros.ros"]


@pytest.mark.parametrize("layer", BELOW_ROS)
def test_no_layer_below_ros_imports_rclpy(layer: str) -> None:
    package = f"robokernel_ros.{layer}"
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} does not exist yet")
    modules, loaded = modules_loaded_by(package)
    assert modules, f"{package} has no modules"
    assert all(f"{package}.{m}" in loaded for m in modules)
    assert _leaks(loaded) == [], f"{package} pulled in {_leaks(loaded)}"


def test_ros_imports_no_node() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.ros")
    assert {"wire", "transport", "qos", "params", "remote_policy", "ros_env"} <= set(modules)
    assert "rclpy" in loaded and "robokernel_ros.ros.transport" in loaded
    nodes = [m for m in loaded if m.startswith("robokernel_ros.nodes")]
    assert nodes == [], f"robokernel_ros.ros pulled in {nodes}"


def test_the_policy_registry_names_remote_without_importing_ros() -> None:
    """`remote` is listed, and a mock policy built, with rclpy never imported; asking for
    `remote` itself imports its module (robokernel_ros.ros.remote_policy)."""
    code = (
        "import json, sys\n"
        "from robokernel_ros.policies import available_providers, create_policy, provider_class\n"
        "names = available_providers()\n"
        "create_policy('mock').close()\n"
        "before = sorted(sys.modules)\n"
        "remote = provider_class('remote')\n"
        "print(json.dumps([names, before, remote.__module__, 'rclpy' in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    names, before, module, rclpy_after = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"mock", "scripted", "lerobot", "remote"} <= set(names)
    assert _leaks(before) == [], f"listing providers pulled in {_leaks(before)}"
    assert module == "robokernel_ros.ros.remote_policy" and rclpy_after


def test_the_ros_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["ros"]: a failure names the module, line and import."""
    assert upward_imports("ros") == []
