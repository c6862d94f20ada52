"""Offscreen rendering with MuJoCo's EGL or OSMesa backend.

MuJoCo picks its OpenGL backend from the MUJOCO_GL environment variable when it is
first imported (`egl`: headless GPU or Mesa's software EGL; `osmesa`: pure software;
`glfw`: needs a display). Importing robokernel_ros.envs sets MUJOCO_GL=egl when it is
unset and no display is present, which only takes effect if mujoco was not imported yet.

An OpenGL context can be current on one thread at a time, so each thread that renders
(a rollout's worker, the API thread) gets its own context, made current for one frame
and released after it. One context per thread serves every image size: it renders into
a corner of an offscreen framebuffer as large as the largest image asked for so far
(creating a context uploads every mesh, which takes about a second with a software
renderer, so contexts are not made per size).

Quality: "fast" (the scene's default) renders without multisampling, shadows and
reflections - about 4x faster with Mesa's software renderer on a CPU-only machine;
"full" renders as the model's <visual> settings say.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any, Literal

import mujoco
import numpy as np

from . import _gl

log = logging.getLogger(__name__)

RenderQuality = Literal["fast", "full"]

INSTALL_HINT = (
    "Offscreen rendering needs an OpenGL backend: set MUJOCO_GL=egl (GPU or Mesa EGL; "
    "Debian/Ubuntu: `apt-get install libegl1 libgl1`, plus `libegl-mesa0` without an "
    "NVIDIA driver) or MUJOCO_GL=osmesa (software; `apt-get install libosmesa6`), "
    "before Python imports mujoco."
)


class RenderingUnavailable(RuntimeError):
    """No OpenGL backend could create an offscreen context."""


def rendering_backend() -> str:
    """The backend MuJoCo was asked to use (MUJOCO_GL), or 'glfw' (its default)."""
    return _gl.requested_backend or os.environ.get("MUJOCO_GL", "glfw") or "glfw"


def _unavailable(detail: str) -> RenderingUnavailable:
    missing = f" (lib{_gl.missing_library} is not installed)" if _gl.missing_library else ""
    return RenderingUnavailable(
        f"offscreen rendering is unavailable with MUJOCO_GL={rendering_backend()!r}{missing}: "
        f"{detail}. {INSTALL_HINT}"
    )


def _gl_context_class() -> Any:
    try:
        from mujoco.rendering.classic import gl_context  # mujoco >= 3.4
    except ImportError:  # pragma: no cover - older layout
        from mujoco import gl_context  # type: ignore[no-redef]
    cls = getattr(gl_context, "GLContext", None)
    if cls is None:
        raise _unavailable("MuJoCo has no OpenGL context")
    return cls


class _Context:
    """One thread's GL context, MuJoCo render context and abstract scene for one model."""

    def __init__(
        self, model: mujoco.MjModel, width: int, height: int, quality: RenderQuality
    ) -> None:
        self.model = model
        self.width, self.height = width, height
        if quality == "fast":
            model.vis.quality.offsamples = 0
        vis = model.vis.global_
        vis.offwidth = max(int(vis.offwidth), width)
        vis.offheight = max(int(vis.offheight), height)
        self.gl = _gl_context_class()(vis.offwidth, vis.offheight)
        self.gl.make_current()
        try:
            self.con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self.con)
        finally:
            _release(self.gl)
        self.scene = mujoco.MjvScene(model=model, maxgeom=10000)
        if quality == "fast":
            self.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            self.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self.option = mujoco.MjvOption()
        self.camera = mujoco.MjvCamera()

    def fits(self, width: int, height: int) -> bool:
        return width <= self.con.offWidth and height <= self.con.offHeight

    def render(self, data: mujoco.MjData, camera: int, width: int, height: int) -> np.ndarray:
        cam = self.camera
        if camera < 0:
            cam.type = mujoco.mjtCamera.mjCAMERA_FREE
            mujoco.mjv_defaultFreeCamera(self.model, cam)
        else:
            cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            cam.fixedcamid = camera
        rect = mujoco.MjrRect(0, 0, width, height)
        image = np.empty((height, width, 3), dtype=np.uint8)
        mujoco.mjv_updateScene(
            self.model, data, self.option, None, cam, mujoco.mjtCatBit.mjCAT_ALL.value, self.scene
        )
        with self.gl.as_current():
            mujoco.mjr_render(rect, self.scene, self.con)
            mujoco.mjr_readPixels(image, None, rect, self.con)
        return np.ascontiguousarray(image[::-1])

    def close(self) -> None:
        with contextlib.suppress(Exception), self.gl.as_current():
            self.con.free()
        with contextlib.suppress(Exception):
            self.gl.free()


class RendererCache:
    """One render context per thread for the current model generation."""

    def __init__(self, quality: RenderQuality = "fast") -> None:
        if quality not in ("fast", "full"):
            raise ValueError(f"render_quality={quality!r}: must be 'fast' or 'full'")
        self.quality: RenderQuality = quality
        self._local = threading.local()
        self._all: set[_Context] = set()
        self._guard = threading.Lock()

    def render(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        generation: int,
        camera: int,
        width: int,
        height: int,
    ) -> np.ndarray:
        entry: tuple[int, _Context] | None = getattr(self._local, "entry", None)
        if entry is not None and (entry[0] != generation or not entry[1].fits(width, height)):
            self._drop(entry[1])
            entry = None
        if entry is None:
            try:
                context = _Context(model, width, height, self.quality)
            except RenderingUnavailable:
                raise
            except (
                Exception
            ) as exc:  # the backends raise ImportError, RuntimeError, mujoco.FatalError
                raise _unavailable(f"{type(exc).__name__}: {exc}") from exc
            entry = (generation, context)
            self._local.entry = entry
            with self._guard:
                self._all.add(context)
        return entry[1].render(data, camera, width, height)

    def _drop(self, context: _Context) -> None:
        with self._guard:
            self._all.discard(context)
        context.close()

    def close(self) -> None:
        """Free every context (call when no other thread is rendering)."""
        self._local.entry = None
        with self._guard:
            contexts, self._all = list(self._all), set()
        for context in contexts:
            context.close()


def _release(gl: Any) -> None:
    """Un-bind whatever context is current on this thread (EGL), so the context can be
    made current on another thread later."""
    if os.environ.get("MUJOCO_GL") != "egl":
        return
    with contextlib.suppress(Exception):
        from mujoco import egl

        egl.EGL.eglMakeCurrent(
            egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_CONTEXT
        )
