"""The safety package imports no ROS: checked in a fresh interpreter."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import robokernel_ros.safety

FORBIDDEN_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def test_importing_safety_loads_no_ros() -> None:
    modules = [m.name for m in pkgutil.iter_modules(robokernel_ros.safety.__path__)]
    assert "limits" in modules
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('robokernel_ros.safety.' + name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "robokernel_ros.safety.limits" in loaded
    leaked = [m for m in loaded if m.startswith(FORBIDDEN_PREFIXES)]
    assert leaked == [], f"robokernel_ros.safety pulled in {leaked}"
