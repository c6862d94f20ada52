"""A camera frame handed out again read-only (a camera slower than the loop) is recorded
once; a writable array, which could have been changed in place, is recorded every time."""

from __future__ import annotations

import numpy as np
from robokernel_ros.kernel.events import EventBus
from robokernel_ros.kernel.recorder import EpisodeRecorder


def _recorded(frames: list[dict], image_every: int = 1) -> list[int]:
    bus = EventBus()
    events = []
    bus.subscribe(events.append)
    rec = EpisodeRecorder(bus, None, image_every=image_every)
    for step, images in enumerate(frames):
        rec.observation(step, {"joint_positions": {"j": 0.0}, "images": images})
    return [e.step for e in events if "images" in e.data]


def _frame(value: int, writeable: bool) -> np.ndarray:
    frame = np.full((4, 4, 3), value, dtype=np.uint8)
    frame.flags.writeable = writeable
    return frame


def test_a_read_only_frame_seen_again_is_not_recorded_again() -> None:
    a, b = _frame(1, False), _frame(2, False)
    steps = [{"cam": a}, {"cam": a}, {"cam": a}, {"cam": b}, {"cam": b}]
    assert _recorded(steps) == [0, 3]


def test_every_frame_is_recorded_when_one_camera_has_a_new_one_or_arrays_are_writable() -> None:
    a, b, c = _frame(1, False), _frame(2, False), _frame(3, False)
    assert _recorded([{"x": a, "y": b}, {"x": a, "y": c}, {"x": a, "y": c}]) == [0, 1]
    w = _frame(1, True)  # the same object, but it may have been rendered into in place
    assert _recorded([{"cam": w}, {"cam": w}, {"cam": w}]) == [0, 1, 2]
    assert _recorded([{"cam": a}, {"cam": a}, {"cam": a}], image_every=2) == [0]
