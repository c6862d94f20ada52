"""Without a working OpenGL backend: physics still runs, rendering fails clearly."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

SCRIPT = """
from robokernel_ros.envs import MujocoScene, RenderingUnavailable, VideoRecorder
scene = MujocoScene()
scene.add_object("cube", pos=(0, 0, 1))
scene.step(100)
print("physics ok", round(scene.object_pose("cube")[0][2], 3))
for attempt in (lambda: scene.render(None, 16, 16),
                lambda: VideoRecorder("/tmp/never.mp4", fps=10, width=16, height=16, camera=None, scene=scene)):
    try:
        attempt()
        print("rendered")
    except RenderingUnavailable as exc:
        print("unavailable:", exc)
"""


@pytest.mark.skipif(
    ctypes.util.find_library("OSMesa") is not None,
    reason="libOSMesa is installed here, so MUJOCO_GL=osmesa cannot show the missing-backend path",
)
def test_a_missing_backend_disables_rendering_with_a_message_naming_mujoco_gl() -> None:
    env = {**os.environ, "MUJOCO_GL": "osmesa"}
    env.pop("PYOPENGL_PLATFORM", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("physics ok") and float(lines[0].split()[-1]) < 0.9
    for line in lines[1:]:
        assert line.startswith("unavailable:")
        assert "MUJOCO_GL='osmesa'" in line and "libOSMesa is not installed" in line
        assert "apt-get install libosmesa6" in line and "MUJOCO_GL=egl" in line
    assert len(lines) == 3
    assert not os.path.exists("/tmp/never.mp4")
