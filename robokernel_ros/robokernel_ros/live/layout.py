"""The workcell's Foxglove layout: what a user sees on connecting (or opening the MCAP).

    write_layout(path, joints=("shoulder_pan", ...), action_keys=(...), cameras=("wrist",))

Panels: the camera frames (one Image panel per camera, side by side), the robot's bodies
in a 3D panel (the scene channel), a Plot of the
observed joint positions and one of the commanded actions (one series per name, filtered
by name so the legend reads as the robot's joints), the kernel's log lines, and the
episode progress. Built with foxglove-sdk's `foxglove.layouts`; import it in the app
with Layouts > Import from file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import foxglove.layouts as fl

from .channels import ACTION_TOPIC, JOINTS_TOPIC, PROGRESS_TOPIC, SCENE_FRAME, camera_topic

LAYOUT_FILE = "foxglove_layout.json"


def _series(topic: str, names: Sequence[str]) -> list[fl.PlotSeries]:
    if not names:  # names unknown yet: one series per array index
        return [fl.PlotSeries(value=f"{topic}.joints[:].position", array_expansion="byIndex")]
    return [
        fl.PlotSeries(value=f'{topic}.joints[:]{{name=="{n}"}}.position', label=n) for n in names
    ]


def workcell_layout(
    *, joints: Sequence[str] = (), action_keys: Sequence[str] = (), cameras: Sequence[str] = ()
) -> fl.Layout:
    """The layout of the live view's channels (see live.channels for the topics)."""
    plots = fl.SplitContainer(
        direction="column",
        items=[
            fl.SplitItem(content=fl.PlotPanel(title="joint positions",
                                              config=fl.PlotConfig(paths=_series(JOINTS_TOPIC, joints)))),
            fl.SplitItem(content=fl.PlotPanel(title="commanded actions",
                                              config=fl.PlotConfig(paths=_series(ACTION_TOPIC, action_keys)))),
        ],
    )  # fmt: skip
    scene = fl.ThreeDeePanel(title="robot", config=fl.ThreeDeeConfig(follow_tf=SCENE_FRAME))
    side = fl.SplitContainer(
        direction="column",
        items=[
            fl.SplitItem(proportion=2, content=scene),
            fl.SplitItem(proportion=2, content=fl.LogPanel(title="kernel events")),
            fl.SplitItem(content=fl.RawMessagesPanel(title="episode progress",
                                                     config=fl.RawMessagesConfig(topic_path=PROGRESS_TOPIC))),
        ],
    )  # fmt: skip
    top: list[fl.SplitItem] = [
        fl.SplitItem(content=fl.ImagePanel(title=c, config=fl.ImageConfig(
            image_mode=fl.ImageModeConfig(image_topic=camera_topic(c)))))
        for c in cameras
    ]  # fmt: skip
    row = fl.SplitContainer(
        direction="row",
        items=[fl.SplitItem(proportion=2, content=plots), fl.SplitItem(content=side)],
    )
    if not top:
        return fl.Layout(content=row)
    return fl.Layout(
        content=fl.SplitContainer(
            direction="column",
            items=[
                fl.SplitItem(content=fl.SplitContainer(direction="row", items=top)),
                fl.SplitItem(proportion=2, content=row),
            ],
        )
    )


def write_layout(path: Path | str, **names: Sequence[str]) -> Path:
    """Write workcell_layout(**names) as a Foxglove layout JSON file; returns the path."""
    path = Path(path)
    layout = json.loads(workcell_layout(**names).to_json())
    path.write_text(json.dumps(layout, indent=1) + "\n")
    return path
