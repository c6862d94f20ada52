"""The recording layer stands below rollout, live, scoring and ros: its source imports
nothing of them (lazy imports included), trace discovery included."""

from __future__ import annotations

from boundary import upward_imports


def test_the_recording_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["recording"]: a failure names the module, line and import."""
    assert upward_imports("recording") == []
