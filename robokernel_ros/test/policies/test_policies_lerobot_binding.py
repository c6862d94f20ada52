"""Name binding between robot keys and LeRobot features, and the provider's import hygiene.

Pure Python: runs without torch/lerobot (the install refusal is checked in a
subprocess that hides them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from lerobot_test_helpers import SO101, so101_observation
from robokernel_ros.policies.lerobot_binding import (
    BindingError,
    DeclaredNames,
    PolicyFeatures,
    bind_actions,
    bind_cameras,
    bind_state,
    flatten_names,
    is_generic_name,
    merge_explicit,
    read_checkpoint_names,
)


def features(state: int | None = 6, action: int = 6, cameras: dict | None = None) -> PolicyFeatures:
    return PolicyFeatures(
        policy_type="act",
        state_dim=state,
        action_dim=action,
        cameras={"front": (3, 64, 64)} if cameras is None else cameras,
    )


def test_generic_names() -> None:
    for name in ("state_0", "motor_3", "7", "joint_12", "observation.state_2", "main.5"):
        assert is_generic_name(name), name
    for name in ("shoulder_pan", "shoulder_pan.pos", "gripper", "joint_a"):
        assert not is_generic_name(name), name


def test_flatten_dataset_names() -> None:
    assert flatten_names({"motors": ["a", "b"]}) == ["a", "b"]
    assert flatten_names(["a", ["b", "c"]]) == ["a", "b", "c"]
    assert flatten_names(None) is None


def test_actions_bind_by_name_in_the_policy_order() -> None:
    names = DeclaredNames(action_names=[f"{j}.pos" for j in reversed(SO101)], action_source="test")
    binding = bind_actions(features(), names, SO101)
    assert binding.keys == list(reversed(SO101))
    assert not binding.positional and not binding.generic


def test_actions_fall_back_to_position_and_say_so() -> None:
    binding = bind_actions(features(), DeclaredNames(), SO101)
    assert binding.keys == list(SO101) and binding.positional and not binding.generic
    generic = bind_actions(
        features(), DeclaredNames(action_names=[f"motor_{i}" for i in range(6)]), SO101
    )
    assert generic.positional and generic.generic


def test_action_dimension_mismatch_names_both_shapes() -> None:
    with pytest.raises(BindingError) as info:
        bind_actions(features(action=7), DeclaredNames(), SO101)
    assert "(7,)" in str(info.value) and "(6,)" in str(info.value)
    names = DeclaredNames(action_names=[*SO101, "elbow_roll"], action_source="feature_names.json")
    with pytest.raises(BindingError) as info:
        bind_actions(features(action=7), names, SO101)
    assert "(7,)" in str(info.value) and "elbow_roll" in str(info.value)


def test_state_binds_by_name_including_velocities() -> None:
    obs = so101_observation()
    names = DeclaredNames(
        state_names=["gripper.pos", "shoulder_pan", "elbow_flex.vel"], state_source="test"
    )
    binding = bind_state(features(state=3), names, obs)
    assert binding is not None and binding.vector(obs) == pytest.approx([0.6, 0.1, -0.03])
    assert not binding.positional and not binding.missing


def test_missing_state_names_are_refused_unless_allowed() -> None:
    obs = so101_observation()
    names = DeclaredNames(
        state_names=[*(f"{j}.pos" for j in SO101), "elbow_roll.pos"], state_source="ckpt"
    )
    with pytest.raises(BindingError) as info:
        bind_state(features(state=7), names, obs)
    assert (
        "elbow_roll.pos" in str(info.value)
        and "(7,)" in str(info.value)
        and "(6,)" in str(info.value)
    )
    binding = bind_state(features(state=7), names, obs, allow_missing=True)
    assert binding is not None and binding.missing == ["elbow_roll.pos"]
    assert binding.vector(obs)[-1] == 0.0


def test_state_positional_fallback_and_mismatch() -> None:
    obs = so101_observation()
    binding = bind_state(features(), DeclaredNames(), obs)
    assert binding is not None and binding.positional and binding.sources == list(SO101)
    with pytest.raises(BindingError) as info:
        bind_state(features(state=7), DeclaredNames(), obs)
    assert "(7,)" in str(info.value) and "(6,)" in str(info.value)


def test_explicit_names_win_over_the_checkpoint() -> None:
    declared = DeclaredNames(
        state_names=["a"] * 6, action_names=["b"] * 6, state_source="x", action_source="x"
    )
    merged = merge_explicit(
        declared, {"action_keys": list(SO101), "cameras": {"observation.images.front": "wrist"}}
    )
    assert (
        merged.action_names == list(SO101) and merged.action_source == "policy_config:action_keys"
    )
    assert merged.state_names == ["a"] * 6
    assert merged.camera_map == {"front": "wrist"}


def test_cameras_bind_by_name_position_or_map() -> None:
    obs = so101_observation(camera="front")
    assert bind_cameras(features(), DeclaredNames(), obs).robot_camera == {"front": "front"}
    other = so101_observation(camera="overhead")
    positional = bind_cameras(features(), DeclaredNames(), other)
    assert positional.positional and positional.robot_camera == {"front": "overhead"}
    two = features(cameras={"front": (3, 64, 64), "wrist": (3, 64, 64)})
    with pytest.raises(BindingError, match="wrist"):
        bind_cameras(two, DeclaredNames(), obs)


def test_camera_shape_mismatch_names_both_shapes() -> None:
    obs = so101_observation(image_size=(96, 128))
    with pytest.raises(BindingError) as info:
        bind_cameras(features(), DeclaredNames(), obs)
    assert "(3, 64, 64)" in str(info.value) and "(96, 128, 3)" in str(info.value)


def test_checkpoint_names_from_sidecar_and_config(tmp_path: Path) -> None:
    (tmp_path / "feature_names.json").write_text(
        json.dumps(
            {
                "observation.state": {"names": {"motors": ["a.pos", "b.pos"]}},
                "cameras": {"top": "front"},
            }
        )
    )
    names = read_checkpoint_names(tmp_path, {"action_feature_names": ["a", "b"]})
    assert names.state_names == ["a.pos", "b.pos"] and names.state_source == "feature_names.json"
    assert (
        names.action_names == ["a", "b"]
        and names.action_source == "config.json:action_feature_names"
    )
    assert names.camera_map == {"top": "front"}


def test_provider_module_imports_without_torch_and_refuses_with_the_install_command(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("{}")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        sys.modules["lerobot"] = None
        from robokernel_ros.policies import available_providers, create_policy, preflight
        assert "lerobot" in available_providers()
        for call in (lambda: preflight("lerobot", {{"path": {str(tmp_path)!r}}}),
                     lambda: create_policy("lerobot", path={str(tmp_path)!r})):
            try:
                call()
            except ValueError as exc:
                assert isinstance(exc, ImportError), type(exc)
                print("REFUSED:", exc)
            else:
                raise SystemExit("not refused")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("REFUSED:") == 2
    assert "pip install 'lerobot[diffusion]==0.6.1'" in out.stdout and "make setup" in out.stdout


def test_importing_the_provider_does_not_import_torch() -> None:
    script = (
        "import sys; import robokernel_ros.policies.lerobot, robokernel_ros.policies.lerobot_binding; "
        "print('torch' in sys.modules, 'lerobot' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
