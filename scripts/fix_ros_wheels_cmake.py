"""Point the ROS wheels' exported CMake files at this venv's Python folders.

The message wheels were built in /opt/python/cp312-cp312 and their exported CMake
targets name include folders of that machine; CMake refuses imported targets whose
folders do not exist. Rewriting the two prefixes to this interpreter's own include
folder and site-packages makes `colcon build` of interface packages work.
Idempotent: a second run finds nothing to rewrite.
"""

import sys
import sysconfig
from pathlib import Path

BUILD_INCLUDE = "/opt/python/cp312-cp312/include/python3.12"
BUILD_NUMPY = "/opt/python/cp312-cp312/lib/python3.12/site-packages/numpy/_core/include"


def main() -> int:
    prefix = Path(sys.prefix)
    include = sysconfig.get_paths()["include"]
    numpy_include = str(Path(sysconfig.get_paths()["purelib"]) / "numpy/_core/include")
    rewritten = 0
    for path in (prefix / "share").rglob("*.cmake"):
        text = path.read_text(errors="surrogateescape")
        if BUILD_INCLUDE not in text and BUILD_NUMPY not in text:
            continue
        text = text.replace(BUILD_NUMPY, numpy_include).replace(BUILD_INCLUDE, include)
        path.write_text(text, errors="surrogateescape")
        rewritten += 1
    print(f"fix_ros_wheels_cmake: rewrote {rewritten} CMake files under {prefix / 'share'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
