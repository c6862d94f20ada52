"""An image policy from the shell (issue #17, defect 5): a checkpoint that reads a `front`
camera runs on a packaged robot with --add-camera front (a preset) or a spec, and the
refusal without it says how to add it on the shell."""

from __future__ import annotations

import json
from pathlib import Path

from robokernel_ros import cli


def test_eval_an_image_checkpoint_with_a_camera_preset_or_spec(ckpt_act: Path, capsys) -> None:
    base = ["eval", "--robot", "so101", "--policy", "lerobot", "--max-steps", "3", "--no-trace",
            "--policy-config", json.dumps({"path": str(ckpt_act), "device": "cpu"})]  # fmt: skip
    assert cli.main(base) == 1
    err = capsys.readouterr().err
    assert "camera 'front'" in err and "--add-camera front" in err

    assert cli.main([*base, "--add-camera", "front", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # lerobot's own prints went to stderr
    assert report["episodes"][0]["actions_applied"] == 3

    spec = json.dumps({"pos": [0.5, 0.1, 0.4], "lookat": [0.1, 0.0, 0.1]})
    assert cli.main([*base, "--add-camera", f"front={spec}", "--image-size", "64x64"]) == 0
    capsys.readouterr()
    assert cli.main([*base, "--add-camera", "front={not json"]) == 2
    assert "--add-camera='front={not json'" in capsys.readouterr().err
