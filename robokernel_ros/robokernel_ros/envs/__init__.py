"""Environments: MuJoCo scenes of packaged or user robots, as kernel Environments.

    from robokernel_ros.envs import MujocoScene, resolve_model
    scene = MujocoScene()
    scene.add_robot("arm", "so101")            # actuators "arm/shoulder_pan", ...
    env = scene.make_env("arm", control_hz=50)  # action keys "shoulder_pan", ...
    obs = env.reset(seed=0)
    result = env.step({"shoulder_pan": 0.3})

Imports no ROS (the ROS robot environment belongs to the nodes).
"""

from . import _gl

# MuJoCo reads MUJOCO_GL once, when it is imported: settle it first (see _gl).
_gl.prepare()

from .env import MujocoEnv  # noqa: E402
from .model_info import actuator_kind  # noqa: E402
from .models import PACKAGED_MODELS, packaged_models, resolve_model  # noqa: E402
from .render import RenderingUnavailable, rendering_backend  # noqa: E402
from .scene import MujocoScene  # noqa: E402
from .video import VideoRecorder  # noqa: E402

__all__ = [
    "PACKAGED_MODELS",
    "MujocoEnv",
    "MujocoScene",
    "RenderingUnavailable",
    "VideoRecorder",
    "actuator_kind",
    "packaged_models",
    "rendering_backend",
    "resolve_model",
]
