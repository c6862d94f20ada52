"""The live view imports no ROS: checked in a fresh interpreter."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import robokernel_ros.live

FORBIDDEN_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def test_importing_live_loads_no_ros() -> None:
    modules = [m.name for m in pkgutil.iter_modules(robokernel_ros.live.__path__)]
    assert {"view", "channels", "layout", "options", "proto"} <= set(modules)
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('robokernel_ros.live.' + name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "robokernel_ros.live.view" in loaded
    leaked = [m for m in loaded if m.startswith(FORBIDDEN_PREFIXES)]
    assert leaked == [], f"robokernel_ros.live pulled in {leaked}"
