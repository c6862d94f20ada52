"""Import-boundary checks: what importing every module of a package loads, in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

ROS_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def modules_loaded_by(package: str) -> tuple[list[str], list[str]]:
    """(the package's modules, its subpackages' as "sub.module", every module a fresh
    interpreter has loaded after importing each of them)."""
    root = importlib.import_module(package)
    prefix = package + "."
    names = [m.name[len(prefix) :] for m in pkgutil.walk_packages(root.__path__, prefix)]
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
