"""`robokernel limits FILE...`: merged limits per joint with their sources; a bad file
is named on stderr and the exit status is 1."""

from __future__ import annotations

import json
from pathlib import Path

from robokernel_ros.cli import main as robokernel

FIXTURES = Path(__file__).with_name("fixtures")
URDF = FIXTURES / "arm_ros2_control.urdf"
UR = FIXTURES / "ur5e_joint_limits.yaml"


def test_limits_prints_each_joint_with_its_sources(capsys):
    assert robokernel(["limits", str(URDF), str(UR)]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines()}
    assert (
        "position [-2.8, 2.8] (arm_ros2_control.urdf <safety_controller>), velocity <= 2 "
        "(arm_ros2_control.urdf <limit>)" in lines["joint1"]
    )
    assert "effort <= 150 (ur5e_joint_limits.yaml; not enforced)" in lines["elbow_joint"]
    assert "position [-3.14159, 3.14159] (ur5e_joint_limits.yaml)" in lines["elbow_joint"]
    assert str(URDF.resolve()) in out

    assert (
        robokernel(["limits", "--json", "--joints", "joint2,elbow_joint", str(URDF), str(UR)]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert list(report) == ["joint2", "elbow_joint"]
    assert report["joint2"]["limits"]["max_velocity"] == 1.0
    assert report["joint2"]["sources"]["max_velocity"] == "arm_ros2_control.urdf <ros2_control>"


def test_limits_refuses_a_bad_file_naming_it(tmp_path, capsys):
    bad = tmp_path / "ur_typo.yaml"
    bad.write_text(UR.read_text().replace("max_velocity: !degrees  180.0", "max_velocityy: 3.1", 1))
    assert robokernel(["limits", str(URDF), str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(bad) in captured.err and "max_velocityy" in captured.err
    assert robokernel(["limits", "--joints", "joint1,nope", str(URDF)]) == 1
    assert "['nope'] have no limits" in capsys.readouterr().err
    assert robokernel(["limits", str(tmp_path / "missing.urdf")]) == 1
    err = capsys.readouterr().err
    assert "missing.urdf" in err and "cannot be read" in err
