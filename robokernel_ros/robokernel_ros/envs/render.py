"""Offscreen rendering with MuJoCo's EGL or OSMesa backend.

MuJoCo picks its OpenGL backend from the MUJOCO_GL environment variable when it is
first imported (`egl`: headless GPU or Mesa's software EGL; `osmesa`: pure software;
`glfw`: needs a display). Importing robokernel_ros.envs sets MUJOCO_GL=egl when it is
unset and no display is present, which only takes effect if mujoco was not imported yet.

An OpenGL context can be current on one thread at a time, so renderers are kept per
thread (a rollout renders on its worker thread, a user on the API thread) and the
context is released after every frame.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

import mujoco
import numpy as np

log = logging.getLogger(__name__)

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
    return os.environ.get("MUJOCO_GL", "glfw") or "glfw"


class RendererCache:
    """mujoco.Renderer objects keyed by (model generation, width, height), one set per thread."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[mujoco.Renderer] = []  # every renderer made, to close them all
        self._guard = threading.Lock()

    def _get(
        self, model: mujoco.MjModel, generation: int, width: int, height: int
    ) -> mujoco.Renderer:
        cache: dict[tuple[int, int, int], mujoco.Renderer] | None = getattr(
            self._local, "cache", None
        )
        if cache is None:
            cache = self._local.cache = {}
        key = (generation, width, height)
        renderer = cache.get(key)
        if renderer is not None:
            return renderer
        for stale in [k for k in cache if k[0] != generation]:
            self._close(cache.pop(stale))
        vis = model.vis.global_
        if width > vis.offwidth:
            vis.offwidth = width
        if height > vis.offheight:
            vis.offheight = height
        try:
            renderer = mujoco.Renderer(model, height=height, width=width)
        except Exception as exc:  # the backends raise ImportError, RuntimeError, mujoco.FatalError
            raise RenderingUnavailable(
                f"offscreen rendering failed with MUJOCO_GL={rendering_backend()!r}: "
                f"{type(exc).__name__}: {exc}. {INSTALL_HINT}"
            ) from exc
        _release(renderer)
        cache[key] = renderer
        with self._guard:
            self._all.append(renderer)
        return renderer

    def render(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        generation: int,
        camera: int | mujoco.MjvCamera,
        width: int,
        height: int,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        renderer = self._get(model, generation, width, height)
        with _current(renderer):
            renderer.update_scene(data, camera=camera)
            return renderer.render(out=out)

    def _close(self, renderer: mujoco.Renderer) -> None:
        with self._guard:
            if renderer in self._all:
                self._all.remove(renderer)
        try:
            renderer.close()
        except Exception as exc:  # a context current on a finished thread cannot be freed
            log.debug("closing a renderer failed: %s", exc)

    def close(self) -> None:
        """Free the renderers of the calling thread and forget the others'."""
        cache = getattr(self._local, "cache", None) or {}
        for renderer in list(cache.values()):
            self._close(renderer)
        cache.clear()
        with self._guard:
            others, self._all = self._all, []
        for renderer in others:
            with contextlib.suppress(Exception):
                renderer.close()


def _gl_context(renderer: mujoco.Renderer) -> Any:
    return getattr(renderer, "_gl_context", None)


@contextlib.contextmanager
def _current(renderer: mujoco.Renderer):
    """Make the renderer's context current for one frame, then release it (restoring
    whatever was current before), so another thread can use its own context later."""
    ctx = _gl_context(renderer)
    as_current = getattr(ctx, "as_current", None)
    if as_current is None:
        yield
        return
    with as_current():
        yield


def _release(renderer: mujoco.Renderer) -> None:
    """mujoco.Renderer leaves its context current after construction: release it."""
    ctx = _gl_context(renderer)
    if ctx is None:
        return
    backend = rendering_backend()
    with contextlib.suppress(Exception):
        if backend == "egl":
            from mujoco import egl

            egl.EGL.eglMakeCurrent(
                egl.EGL_DISPLAY,
                egl.EGL.EGL_NO_SURFACE,
                egl.EGL.EGL_NO_SURFACE,
                egl.EGL.EGL_NO_CONTEXT,
            )
        elif backend == "osmesa":
            from mujoco import osmesa

            osmesa.GL.osmesa.OSMesaMakeCurrent(None, None, osmesa.GL.GL_UNSIGNED_BYTE, 0, 0)
