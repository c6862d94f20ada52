"""The same trace scores the same with or without its meta.json (issue #17, defect 8):
meta comes from the trace's episode.start/episode.end when the file is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

from robokernel_ros.kernel.trace import META_FILE, load_trace
from robokernel_ros.scoring import score_paths


def test_scores_without_meta_json_equal_the_scores_with_it(tmp_path: Path, record_episode):
    def cubic(s: int) -> dict[str, float]:  # a(t) = t^3: jerk 6 at the control period
        return {k: (s / 50.0) ** 3 for k in ("shoulder", "elbow", "gripper")}

    run_dir, _ = record_episode(
        storage=None, steps=30, success_at=None, control_hz=50.0, action_fn=cubic
    )
    bare = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, bare)
    (bare / META_FILE).unlink()

    assert load_trace(bare).meta == load_trace(run_dir).meta
    with_meta = score_paths([run_dir])["episodes"][0]
    without = score_paths([bare])["episodes"][0]
    with_meta.pop("path"), without.pop("path")
    assert without == with_meta
    assert without["run_id"] == run_dir.name and without["nominal_control_hz"] == 50.0
    assert abs(without["action_jerk_rms"] - 6.0) < 1e-6  # differences at 50 Hz, not 1 Hz
