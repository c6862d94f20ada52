"""Process memory: freed camera-frame buffers are kept for reuse, not returned to the OS.

A process that moves camera frames allocates and frees ~0.9 MB a frame (640x480 rgb8)
dozens of times a second. glibc's malloc serves such a block with fresh pages from the
kernel (above its mmap threshold, which starts at 128 KiB) and gives the heap's top back
once it is larger than the trim threshold, so every frame faults in and zeroes its pages
again: two 640x480 cameras at 30 Hz cost the bag writer process ~3 ms of CPU per
observation that way, against ~1 ms with the blocks reused (bench/RESULTS.md, "The bag's
camera frames"). `retain_freed_memory()` fixes both thresholds, as `GLIBC_TUNABLES` would:
blocks up to 32 MiB come from the heap, and up to 64 MiB of freed heap stays mapped.
"""

from __future__ import annotations

import ctypes
import sys

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest mmap threshold on 64-bit machines
TRIM_THRESHOLD_BYTES = 64 << 20  # the freed heap top a process keeps (the writer queues <= 64 MiB)
_M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3


def retain_freed_memory() -> bool:
    """Set this process's malloc thresholds (above); True where they were set (glibc),
    False elsewhere (another libc keeps its own policy). Idempotent."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
