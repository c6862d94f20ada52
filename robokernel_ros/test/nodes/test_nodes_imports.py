"""The nodes import the ros layer and what lies below it, never the cli."""

from __future__ import annotations

from boundary import upward_imports


def test_the_nodes_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["nodes"]: a failure names the module, line and import."""
    assert upward_imports("nodes") == []
