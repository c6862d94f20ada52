"""The envs modules import each other without a cycle (the scene builds environments; an
environment knows the scene only through the SimScene protocol)."""

from __future__ import annotations

from boundary import import_cycles, upward_imports


def test_envs_modules_import_each_other_without_a_cycle() -> None:
    assert import_cycles("robokernel_ros.envs") == []


def test_the_cycle_finder_sees_a_cycle_under_type_checking(tmp_path, monkeypatch) -> None:
    package = tmp_path / "cyclic_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import B\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nB = 1\n"
    )
    (package / "c.py").write_text("def f():\n    from cyclic_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic_pkg") == [["a", "b"]]


def test_the_envs_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["envs"]: a failure names the module, line and import."""
    assert upward_imports("envs") == []
