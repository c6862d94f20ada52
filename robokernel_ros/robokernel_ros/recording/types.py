"""The rosbags typestore of the mirror: ROS 2 Kilted's standard types plus the project's own.

The project's message types are registered from the interface package's .msg files, so
there is one definition of each type: the installed share folder found through the ament
index (`AMENT_PREFIX_PATH`, as `ament_index_python` does) when ROS is sourced, otherwise
the source tree next to this package. Nothing here imports ROS.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

INTERFACES_PACKAGE = "robokernel_interfaces"

KERNEL_EVENT = "robokernel_interfaces/msg/KernelEvent"
ACTION_CHUNK = "robokernel_interfaces/msg/ActionChunk"
SHIELD_INTERVENTION = "robokernel_interfaces/msg/ShieldIntervention"
VERDICT = "robokernel_interfaces/msg/Verdict"
JOINT_STATE = "sensor_msgs/msg/JointState"
IMAGE = "sensor_msgs/msg/Image"
STRING = "std_msgs/msg/String"


def interface_msg_dir() -> Path:
    """The folder holding robokernel_interfaces' .msg files.

    Searched in order: every prefix of AMENT_PREFIX_PATH (`<prefix>/share/
    robokernel_interfaces/msg`), then the source tree (`<repo>/robokernel_interfaces/msg`).
    """
    candidates: list[Path] = []
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / INTERFACES_PACKAGE / "msg")
    # robokernel_ros/robokernel_ros/recording/types.py -> repository root is parents[3]
    here = Path(__file__).resolve()
    candidates.append(here.parents[3] / INTERFACES_PACKAGE / "msg")
    for folder in candidates:
        if (folder / "KernelEvent.msg").is_file():
            return folder
    searched = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"{INTERFACES_PACKAGE} .msg files not found (searched: {searched})")


@functools.cache
def typestore() -> Typestore:
    """ROS 2 Kilted's typestore with every robokernel_interfaces message registered."""
    store = get_typestore(Stores.ROS2_KILTED)
    folder = interface_msg_dir()
    types = {}
    for path in sorted(folder.glob("*.msg")):
        types.update(
            get_types_from_msg(
                path.read_text(encoding="utf-8"), f"{INTERFACES_PACKAGE}/msg/{path.stem}"
            )
        )
    store.register(types)
    return store
