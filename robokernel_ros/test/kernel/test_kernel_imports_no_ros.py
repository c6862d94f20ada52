"""The kernel imports no ROS, torch or MuJoCo: checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "torch", "mujoco")


def test_importing_the_kernel_loads_no_ros() -> None:
    code = (
        "import json, sys\n"
        "import robokernel_ros.kernel\n"
        "from robokernel_ros.kernel import *\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert "robokernel_ros.kernel" in modules
    loaded = [m for m in modules if m.split(".")[0].startswith(FORBIDDEN_PREFIXES)]
    assert loaded == [], f"the kernel pulled in {loaded}"
