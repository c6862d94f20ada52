"""Import-boundary checks: what importing every module of a package loads, in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

ROS_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def modules_loaded_by(package: str) -> tuple[list[str], list[str]]:
    """(the package's modules, every module a fresh interpreter has loaded after importing
    each of them)."""
    # `__main__` is a command (importing it runs it), not a module of the package.
    names = [
        m.name
        for m in pkgutil.iter_modules(importlib.import_module(package).__path__)
        if m.name != "__main__"
    ]
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        f"    importlib.import_module({package!r} + '.' + name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return names, json.loads(out.stdout.strip().splitlines()[-1])
