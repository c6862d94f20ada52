"""The policies layer imports the kernel and the envs only (a provider of a layer above
is an entry point, never a name here): its source, lazy imports included."""

from __future__ import annotations

from boundary import upward_imports


def test_the_policies_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["policies"]: a failure names the module, line and import."""
    assert upward_imports("policies") == []
