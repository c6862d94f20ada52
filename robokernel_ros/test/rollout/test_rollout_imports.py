"""The rollout modules import each other without a cycle, and the documented names stay."""

from __future__ import annotations

import robokernel_ros.rollout as rollout
from boundary import import_cycles, upward_imports


def test_rollout_modules_import_each_other_without_a_cycle() -> None:
    assert import_cycles("robokernel_ros.rollout") == []


def test_the_public_names_import_from_the_package() -> None:
    for name in ("SimWorkcell", "PolicyRunner", "RolloutControl", "RolloutPlan", "plan_run",
                 "plan_eval", "plan_multi", "RunRequest", "EvalRequest", "MultiRequest",
                 "EpisodeResult", "EpisodeSink", "EpisodeSinkContext", "RecordingFrameError",
                 "seed_everything", "DEFAULT_TRACE_DIR", "envelope_json"):  # fmt: skip
        assert name in rollout.__all__ and getattr(rollout, name) is not None


def test_the_rollout_source_imports_only_the_layers_below_it() -> None:
    """boundary.LAYER_IMPORTS["rollout"]: a failure names the module, line and import."""
    assert upward_imports("rollout") == []
