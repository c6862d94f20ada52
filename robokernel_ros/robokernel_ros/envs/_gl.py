"""Choose MuJoCo's OpenGL backend before mujoco is imported (no mujoco import here).

MuJoCo reads MUJOCO_GL once, at import. Two things are settled here:
- on a Linux machine without a display and without MUJOCO_GL, use "egl";
- when MUJOCO_GL names EGL or OSMesa and its library is not installed, `import mujoco`
  itself fails (PyOpenGL raises an AttributeError deep inside). Physics needs no OpenGL,
  so the backend is disabled instead and the request is remembered: rendering then
  raises RenderingUnavailable naming the requested backend and how to install it.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}

requested_backend: str = ""  # what MUJOCO_GL asked for, before any change made here
missing_library: str = ""  # the library that was not found, when the backend was disabled


def prepare() -> None:
    global requested_backend, missing_library
    if "mujoco" in sys.modules:  # too late to change anything
        requested_backend = os.environ.get("MUJOCO_GL", "")
        return
    if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
    requested_backend = os.environ.get("MUJOCO_GL", "")
    library = _LIBRARIES.get(requested_backend.lower().strip())
    if library and ctypes.util.find_library(library) is None:
        missing_library = library
        os.environ["MUJOCO_GL"] = "disable"
        log.warning(
            "MUJOCO_GL=%s but lib%s is not installed: offscreen rendering is disabled "
            "(physics is unaffected)",
            requested_backend,
            library,
        )
