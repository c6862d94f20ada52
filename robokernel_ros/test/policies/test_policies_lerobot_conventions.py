"""LeRobot's so_follower convention: checkpoints trained on lerobot-record-style data
(`shoulder_pan.pos`, degrees, gripper 0..100) bound by name and driven in radians."""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from lerobot_test_helpers import SO101, so101_observation
from robokernel_ros.policies.conventions import get_convention, so101_calibration

# The checkpoint emits exactly this action (degrees; the gripper 0..100): 90 degrees on
# the joint at index 0, the gripper at 50 %.
ACTION_MEAN = [90.0, 0.0, 0.0, 0.0, 0.0, 50.0]
SHUFFLED = ("elbow_flex", "shoulder_pan", "wrist_roll", "shoulder_lift", "wrist_flex", "gripper")


def _gripper_half() -> float:
    low, high = so101_calibration()["gripper"]
    return low + (high - low) / 2


def _with_training_dataset(ckpt: Path, root: Path, names: tuple[str, ...]) -> Path:
    """What lerobot-train leaves: train_config.json naming a local dataset whose
    meta/info.json has lerobot-record's names and robot_type."""
    pos = [f"{n}.pos" for n in names]
    (root / "meta").mkdir(parents=True)
    info = {
        "robot_type": "so101_follower",
        "fps": 30,
        "features": {
            "observation.state": {"dtype": "float32", "shape": [6], "names": pos},
            "action": {"dtype": "float32", "shape": [6], "names": pos},
        },
    }
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (ckpt / "train_config.json").write_text(
        json.dumps({"dataset": {"repo_id": "someone/so101_pick", "root": str(root)}})
    )
    return ckpt


@pytest.fixture(scope="module")
def ckpt_degrees(ckpt_root: Path) -> Path:
    """A tiny ACT without names of its own, constant output ACTION_MEAN."""
    from fixtures.lerobot import build_tiny_checkpoint

    return build_tiny_checkpoint(
        ckpt_root / "act_degrees", kind="act", declare_names=False, action_mean=ACTION_MEAN
    )


def _served(path: Path, **config):
    from robokernel_ros.policies import create_policy

    policy = create_policy("lerobot", path=str(path), device="cpu", **config)
    policy.set_robot_state_keys(list(SO101))
    return policy


def test_a_lerobot_record_checkpoint_binds_by_name_and_commands_radians(
    ckpt_degrees: Path, tmp_path: Path
) -> None:
    ckpt = shutil.copytree(ckpt_degrees, tmp_path / "ckpt")
    _with_training_dataset(ckpt, tmp_path / "dataset", SO101)
    policy = _served(ckpt)
    obs = so101_observation()
    actions = policy.get_actions(obs)
    assert policy.positional_fallback_used is False
    binding = policy.binding_description()
    assert binding["convention"] == "so_follower" and binding["robot_type"] == "so101_follower"
    assert binding["state_source"].endswith("meta/info.json")
    assert actions[0]["shoulder_pan"] == pytest.approx(math.pi / 2, abs=1e-4)  # 90 degrees
    for joint in ("shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"):
        assert actions[0][joint] == pytest.approx(0.0, abs=1e-6)
    assert actions[0]["gripper"] == pytest.approx(_gripper_half(), abs=1e-5)
    # the observation reaches the policy in degrees (0.1 rad on shoulder_pan = 5.73 degrees)
    state = policy._state_binding.vector(obs)
    assert state[0] == pytest.approx(math.degrees(0.1), abs=1e-4)
    low, high = so101_calibration()["gripper"]
    assert state[5] == pytest.approx((0.6 - low) / (high - low) * 100, abs=1e-4)


def test_the_same_checkpoint_with_its_names_shuffled_binds_each_index_to_its_name(
    ckpt_degrees: Path, tmp_path: Path
) -> None:
    ckpt = shutil.copytree(ckpt_degrees, tmp_path / "ckpt")
    _with_training_dataset(ckpt, tmp_path / "dataset", SHUFFLED)
    policy = _served(ckpt)
    action = policy.get_actions(so101_observation())[0]
    assert policy.positional_fallback_used is False
    assert policy.binding_description()["state"] == [f"{n}.pos" for n in SHUFFLED]
    assert action["elbow_flex"] == pytest.approx(math.pi / 2, abs=1e-4)  # index 0 now
    assert action["shoulder_pan"] == pytest.approx(0.0, abs=1e-6)
    assert action["gripper"] == pytest.approx(_gripper_half(), abs=1e-5)


def test_a_checkpoint_without_names_warns_and_flags_positional_binding(
    ckpt_degrees: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="robokernel_ros.policies.lerobot"):
        policy = _served(ckpt_degrees)
        action = policy.get_actions(so101_observation())[0]
    assert policy.positional_fallback_used is True
    assert "bound by position" in caplog.text
    assert action["shoulder_pan"] == pytest.approx(90.0, abs=1e-4)  # no convention: as emitted
    # names and the convention from policy_config bind the same checkpoint by name
    named = _served(
        ckpt_degrees,
        feature_names={"observation.state": [f"{n}.pos" for n in SHUFFLED], "action": SHUFFLED},
        robot_type="so101_follower",
    )
    action = named.get_actions(so101_observation())[0]
    assert named.positional_fallback_used is False
    assert named.binding_description()["action_source"] == "policy_config:feature_names"
    assert action["elbow_flex"] == pytest.approx(math.pi / 2, abs=1e-4)


def test_the_range_mode_maps_the_packaged_models_joint_range_to_plus_minus_100() -> None:
    import mujoco
    from robokernel_ros.envs.models import resolve_model

    model = mujoco.MjModel.from_xml_path(str(resolve_model("so101")))
    conv = get_convention("so_follower_range")
    for name in SO101:
        low, high = model.jnt_range[model.joint(name).id]
        unit = conv.unit(f"{name}.pos")
        bottom = 0.0 if name == "gripper" else -100.0  # the gripper is always 0..100
        assert unit.to_lerobot(high) == pytest.approx(100.0, abs=1e-3)
        assert unit.to_lerobot(low) == pytest.approx(bottom, abs=1e-3)
        assert unit.to_robot(unit.to_lerobot(0.3)) == pytest.approx(0.3, abs=1e-9)
    # LeRobot clamps range-mode commands to the calibrated range, as the motor bus does
    assert conv.to_robot("elbow_flex", np.array([150.0]))[0] == pytest.approx(
        float(model.jnt_range[model.joint("elbow_flex").id][1]), abs=1e-6
    )


def test_the_lerobot_export_refuses_what_it_cannot_write_by_name(tmp_path: Path) -> None:
    from robokernel_ros.policies.conventions import convention_for_joints
    from robokernel_ros.recording.export import export_lerobot

    with pytest.raises(ValueError, match=r"match no LeRobot robot family .*so_follower"):
        convention_for_joints(["j0", "j1", "j2"])
    for kwargs, message in (
        ({"convention": "lerobot-degrees"}, r"convention='lerobot-degrees': must be one of"),
        ({"fps": 0}, r"fps=0: must be a whole number"),
        ({"fps": True}, r"fps=True"),
        ({"env_state": "shoulder_pan.vel"}, r"env_state='shoulder_pan.vel': must be a list"),
    ):
        with pytest.raises(ValueError, match=message):
            export_lerobot([tmp_path], repo_id="a/b", root=tmp_path / "ds", **kwargs)
    assert not (tmp_path / "ds").exists()


def test_the_provider_refuses_an_unknown_convention_or_malformed_feature_names(
    ckpt_degrees: Path,
) -> None:
    from robokernel_ros.policies.lerobot import LerobotPolicy

    base = {"path": str(ckpt_degrees), "device": "cpu"}
    with pytest.raises(ValueError, match=r"convention='degrees': must be one of \['none', 'so_"):
        LerobotPolicy.preflight({**base, "convention": "degrees"})
    with pytest.raises(ValueError, match=r"feature_names=.*must map feature keys"):
        LerobotPolicy.preflight({**base, "feature_names": {"action": "shoulder_pan.pos"}})
