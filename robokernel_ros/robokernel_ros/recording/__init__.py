"""rosbag2 mirror of the kernel's traces, the bag reader, recovery and dataset export.

    from robokernel_ros.recording import BagMirror, load_bag_trace, recover_bag
    from robokernel_ros.recording import expand_paths, load_episode  # which paths hold episodes

Importing this package teaches `kernel.load_trace` to read bag folders too, and the run
directories `import-bag` makes (recording.importer).
"""

from .discovery import expand_paths, is_trace, load_episode
from .importer_trace import register as _register_imported
from .mirror import (
    BAG_DIR,
    DEFAULT_PREFIX,
    BagMirror,
    EpisodeBagMirror,
    bag_path_for,
    camera_topic,
    mirror_trace,
)
from .reader import BagTrace, is_bag, iter_raw, load_bag_trace, register
from .recover import RecoveryReport, recover_bag

register()
_register_imported()  # run directories made by import-bag: frames read from their bag

__all__ = [
    "BAG_DIR",
    "DEFAULT_PREFIX",
    "BagMirror",
    "EpisodeBagMirror",
    "BagTrace",
    "RecoveryReport",
    "bag_path_for",
    "camera_topic",
    "expand_paths",
    "is_bag",
    "is_trace",
    "iter_raw",
    "load_bag_trace",
    "load_episode",
    "mirror_trace",
    "recover_bag",
]
