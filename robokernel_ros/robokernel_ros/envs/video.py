"""MP4 recording of a scene camera (H.264 via PyAV, offscreen rendering)."""

from __future__ import annotations

import logging
import math
from fractions import Fraction
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .protocol import SimScene

log = logging.getLogger(__name__)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}={value!r}: must be a positive whole number")
    return int(value)


class VideoRecorder:
    """Render `camera` of `scene` into an MP4 file, one frame per add_frame().

    The camera is checked and one frame rendered in the constructor, so a bad camera
    name or a missing OpenGL backend fails before any episode runs. Frames are H.264
    (yuv420p; an odd width or height is padded by one pixel). camera=None records from
    MuJoCo's free camera.

        rec = VideoRecorder("out.mp4", fps=30, width=320, height=240, camera="front", scene=scene)
        for _ in range(n):
            env.step(action)
            rec.add_frame()
        frames = rec.close()
    """

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        fps: float,
        width: int,
        height: int,
        camera: str | None,
        scene: SimScene,
        crf: int = 23,
    ) -> None:
        if not isinstance(path, str | PathLike) or not str(path).strip():
            raise ValueError(f"path={path!r}: must be a file path ending in .mp4")
        file = Path(path).expanduser()
        if file.suffix.lower() != ".mp4":
            raise ValueError(f"path={str(path)!r}: must end in .mp4")
        if file.exists() and file.is_dir():
            raise ValueError(f"path={str(path)!r}: is a directory")
        if (
            isinstance(fps, bool)
            or not isinstance(fps, int | float)
            or not math.isfinite(fps)
            or fps <= 0
        ):
            raise ValueError(f"fps={fps!r}: must be a positive finite number")
        self.width = _positive_int("width", width)
        self.height = _positive_int("height", height)
        if camera is not None and not isinstance(camera, str):
            raise ValueError(f"camera={camera!r}: must be a camera name or None (the free camera)")
        scene.camera_id(camera)  # ValueError naming the camera and the available ones
        self.path = file
        self.fps = float(fps)
        self.camera = camera
        self.scene = scene
        self.frames = 0
        self._closed = False
        # Probe: render once now (raises RenderingUnavailable without a GL backend).
        scene.render(camera, width=self.width, height=self.height)
        import av  # deferred: only recording needs it

        file.parent.mkdir(parents=True, exist_ok=True)
        self._container = av.open(str(file), mode="w")
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        rate = Fraction(self.fps).limit_denominator(1001)
        self._stream = self._container.add_stream(codec, rate=rate)
        self._stream.width = self.width + self.width % 2
        self._stream.height = self.height + self.height % 2
        self._stream.pix_fmt = "yuv420p"
        if codec == "libx264":
            self._stream.options = {"preset": "veryfast", "crf": str(int(crf))}
        self._time_base = Fraction(1) / rate
        self._av = av

    def add_frame(self, image: np.ndarray | None = None) -> None:
        """Render the camera now (or take `image`, HxWx3 uint8 of the recorder's size) and
        encode it."""
        if self._closed:
            raise RuntimeError(f"VideoRecorder({str(self.path)!r}) is closed")
        if image is None:
            image = self.scene.render(self.camera, width=self.width, height=self.height)
        elif image.shape != (self.height, self.width, 3) or image.dtype != np.uint8:
            raise ValueError(
                f"image: must be a {self.height}x{self.width}x3 uint8 array, got {image.shape} {image.dtype}"
            )
        if image.shape[0] % 2 or image.shape[1] % 2:
            image = np.pad(
                image, ((0, image.shape[0] % 2), (0, image.shape[1] % 2), (0, 0)), mode="edge"
            )
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
        frame.pts = self.frames
        frame.time_base = self._time_base
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> int:
        """Flush and close the file; returns the number of frames written. Idempotent."""
        if self._closed:
            return self.frames
        self._closed = True
        try:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        finally:
            self._container.close()
        log.info("wrote %d frames to %s", self.frames, self.path)
        return self.frames

    def __enter__(self) -> VideoRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True) and hasattr(self, "_container"):
            try:
                self.close()
            except Exception:  # interpreter shutdown
                pass
