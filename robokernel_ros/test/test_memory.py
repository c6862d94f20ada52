"""memory.retain_freed_memory: freed frame-sized buffers are reused, not faulted in again."""

from __future__ import annotations

import subprocess
import sys

_FAULTS = """
import resource, sys
from robokernel_ros.memory import retain_freed_memory

def faults_per_round():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):  # four 640x480 rgb8 frames alive at once, then freed
        frames = [bytearray(921_600) for _ in range(4)]
        del frames
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 40

plain = faults_per_round()
assert retain_freed_memory() is True
faults_per_round()  # the heap grows once
print(plain, faults_per_round())
"""


def test_freed_frames_are_reused_not_faulted_in_again():
    """In a fresh interpreter (the setting is process-wide): glibc's default gives the
    frames' pages back and faults them in again every round (~900 page faults); after
    retain_freed_memory() a round faults in (almost) none."""
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS], capture_output=True, text=True, timeout=60, check=True
    )
    plain, retained = map(float, out.stdout.split())
    assert plain > 400, f"glibc's default reused the frames already ({plain} faults a round)"
    assert retained < 20, f"{retained} page faults a round after retain_freed_memory()"
