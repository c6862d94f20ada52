"""The layers hold (DESIGN.md's import rule): no import cycle among the project's modules,
every module in a layer with a row in boundary.LAYER_IMPORTS, and the layers without a test
folder of their own (cli, flywheel, memory, process) import only what their row allows. Each
other layer's row is checked by its folder's import test. The checks read the AST of every
module (lazy imports and TYPE_CHECKING blocks count); the finders are shown failing on
packages made for the purpose."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from boundary import (
    LAYER_IMPORTS,
    cycle_imports,
    import_cycles,
    import_graph,
    layer_of,
    private_imports,
    upward_imports,
)


def test_the_projects_modules_import_each_other_without_a_cycle() -> None:
    assert import_cycles("robokernel_ros") == [], cycle_imports("robokernel_ros")


def test_each_subcommand_module_imports_first_in_a_fresh_interpreter() -> None:
    """A subcommand module imports the command's registry (robokernel_ros.cli), which loads
    the subcommand modules by name only when it runs: imported before anything else, each
    one imports (an import-time circle through the registry would fail here)."""
    from robokernel_ros.cli import SUBCOMMAND_MODULES

    runs = {
        module: subprocess.Popen(
            [sys.executable, "-c", f"import {module}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for module in SUBCOMMAND_MODULES
    }
    failed = {}
    try:
        for module, run in runs.items():
            _, err = run.communicate(timeout=300)
            if run.returncode != 0:
                failed[module] = err.strip().splitlines()[-1:]
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert all(run.returncode is not None for run in runs.values())
    assert len(runs) >= 7 and failed == {}


def test_no_module_imports_another_modules_private_name() -> None:
    assert private_imports("robokernel_ros") == []


def test_every_module_of_the_project_is_in_a_layer_with_a_row() -> None:
    layers = {layer_of(m): m for m in import_graph("robokernel_ros")}
    layers.pop("")  # the package itself (its version)
    assert {name: m for name, m in layers.items() if name not in LAYER_IMPORTS} == {}
    assert {"kernel", "recording", "scoring", "live", "ros", "nodes", "cli"} <= set(layers)


def test_no_layer_imports_the_cli_or_the_nodes() -> None:
    for layer, allowed in LAYER_IMPORTS.items():
        assert "cli" not in allowed or layer == "cli"
        assert "nodes" not in allowed or layer == "nodes"
    assert "nodes" not in LAYER_IMPORTS["cli"]


def test_the_command_modules_are_the_cli_layer() -> None:
    for module in (
        "robokernel_ros.cli",
        "robokernel_ros.cli.output",
        "robokernel_ros.cli.export",
        "robokernel_ros.cli.import_bag",
        "robokernel_ros.demo",
        "robokernel_ros.scoring.__main__",
    ):
        assert layer_of(module) == "cli", module
    assert layer_of("robokernel_ros.recording.export") == "recording"
    assert layer_of("robokernel_ros.kernel.trace.load") == "kernel"


def test_every_subcommand_module_sits_in_the_cli_package() -> None:
    """No layer keeps a command module of its own (a cli.py or *_cli.py): the command's
    modules are robokernel_ros.cli's, and a layer's __main__.py only calls one of them."""
    from robokernel_ros.cli import SUBCOMMAND_MODULES

    assert all(m.startswith("robokernel_ros.cli.") for m in SUBCOMMAND_MODULES)
    stray = [
        m
        for m in import_graph("robokernel_ros")
        if layer_of(m) != "cli" and m.rsplit(".", 1)[-1].endswith("cli")
    ]
    assert stray == []


@pytest.mark.parametrize("layer", ["cli", "flywheel", "memory", "process"])
def test_a_layer_without_a_test_folder_imports_only_its_row(layer: str) -> None:
    assert upward_imports(layer) == []


def _package(root, name: str, files: dict[str, str]) -> None:
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / name / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_layer_check_names_the_offending_import(tmp_path, monkeypatch) -> None:
    _package(
        tmp_path,
        "layered_pkg",
        {
            "kernel/__init__.py": "",
            "kernel/spec.py": "X = 1\n",
            "kernel/loop.py": "def f():\n    from ..recording import mirror\n",
            "kernel/registry.py": "LAZY = {'bag': 'layered_pkg.recording.mirror'}\n",
            "recording/__init__.py": "",
            "recording/mirror.py": "from layered_pkg.kernel.spec import X\n",
            "recording/reader.py": "from .mirror import X, _Y\nfrom . import _helpers\n",
            "recording/_helpers.py": "",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert upward_imports("kernel", "layered_pkg") == [
        "kernel.loop:2 imports recording (kernel may import nothing)",
        "kernel.loop:2 imports recording.mirror (kernel may import nothing)",
        "kernel.registry:1 names recording.mirror (kernel may import nothing)",
    ]
    assert upward_imports("recording", "layered_pkg") == []
    assert private_imports("layered_pkg") == ["recording.reader:1 imports recording.mirror._Y"]


def test_the_cycle_finder_sees_a_name_read_from_a_package_still_importing(
    tmp_path, monkeypatch
) -> None:
    """`from pkg import name` inside pkg/ reads pkg/__init__ while it imports: a cycle;
    `from . import module` and a parent package imported first are none."""
    _package(
        tmp_path,
        "reexporting_pkg",
        {
            "__init__.py": "from .a import A\nfrom .b import B\n",
            "a.py": "from . import c\nA = 1\n",
            "b.py": "from reexporting_pkg import A\nB = A\n",
            "c.py": "C = 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("reexporting_pkg") == [["__init__", "b"]]
    assert cycle_imports("reexporting_pkg") == ["__init__:2 imports b", "b:1 imports __init__"]
