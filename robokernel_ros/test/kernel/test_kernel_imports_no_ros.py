"""The kernel's import boundary: importing every kernel module, in a fresh interpreter,
loads nothing of robokernel_ros outside the kernel, no ROS, torch or MuJoCo."""

from __future__ import annotations

from boundary import ROS_PREFIXES, modules_loaded_by, upward_imports

FORBIDDEN_PREFIXES = (*ROS_PREFIXES, "torch", "mujoco", "rosbags")


def test_importing_the_kernel_loads_nothing_outside_it() -> None:
    modules, loaded = modules_loaded_by("robokernel_ros.kernel")
    assert {"runner", "served", "operator", "trace", "trace.jsonl", "trace.store"} <= set(modules)
    assert {"robokernel_ros.kernel.runner", "robokernel_ros.kernel.trace.load"} <= set(loaded)
    ours = [m for m in loaded if m.split(".")[0] == "robokernel_ros"]
    outside = [
        m for m in ours if m != "robokernel_ros" and not m.startswith("robokernel_ros.kernel")
    ]
    assert outside == [], f"the kernel pulled in {outside}"
    leaked = [m for m in loaded if m.split(".")[0].startswith(FORBIDDEN_PREFIXES)]
    assert leaked == [], f"the kernel pulled in {leaked}"


def test_loading_a_trace_imports_no_reader_outside_the_kernel(tmp_path) -> None:
    """load_trace dispatches to registered readers only: the kernel never imports one."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from robokernel_ros.kernel import load_trace\n"
        "try:\n"
        f"    load_trace({str(tmp_path)!r})\n"
        "except ValueError as exc:\n"
        "    print(json.dumps([str(exc), sorted(sys.modules)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    message, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "not a trace" in message and "run_dir" in message
    assert [m for m in loaded if m.startswith("robokernel_ros.recording")] == []


def test_load_trace_of_a_bag_without_its_reader_says_what_to_import(tmp_path):
    """A bag folder read with only the kernel imported: the error names the import to add."""
    import subprocess
    import sys

    (tmp_path / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
    code = (
        "from robokernel_ros.kernel import load_trace\n"
        "try:\n"
        f"    load_trace({str(tmp_path)!r})\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "import robokernel_ros.recording" in out.stdout, out.stdout


def test_the_kernel_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["kernel"]: a failure names the module, line and import."""
    assert upward_imports("kernel") == []
