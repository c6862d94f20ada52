"""The lerobot provider on real LeRobot ACT and Diffusion checkpoints (random weights, built
from their config classes, saved with save_pretrained): loading, chunks, binding by
name, refusals, the load cache, devices."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from lerobot_test_helpers import SO101, so101_observation
from robokernel_ros.policies import PolicyAgent, create_policy, preflight

pytestmark = pytest.mark.usefixtures("lerobot_available")


def direct_chunk(path: Path, state: list[float], image) -> object:
    """The chunk LeRobot itself computes for one observation (its own API, no provider)."""
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    cfg = PreTrainedConfig.from_pretrained(str(path))
    cfg.device = "cpu"
    model = get_policy_class(cfg.type).from_pretrained(str(path), config=cfg).eval()
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(path))
    batch = {
        "observation.state": torch.tensor([state], dtype=torch.float32),
        "observation.images.front": torch.from_numpy(image).float().div(255).permute(2, 0, 1)[None],
        "task": "",
    }
    with torch.inference_mode():
        return post(model.predict_action_chunk(pre(batch)))[0].numpy()


def test_act_chunks_have_the_policy_shape(ckpt_act: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    policy.set_robot_state_keys(SO101)
    policy.reset(instruction="pick", seed=0)
    chunk = policy.get_actions(so101_observation(), "pick")
    assert len(chunk) == policy.execution_horizon == 5
    assert all(list(a) == list(SO101) and all(math.isfinite(v) for v in a.values()) for a in chunk)
    # what the policy server sends: the same chunk as rows, without the dicts (ACT in
    # eval mode is deterministic); columns the model does not output are NaN
    rows = policy.get_action_rows(so101_observation(), "pick", keys=SO101)
    assert rows.keys == list(SO101) and rows.horizon == 5
    assert list(rows.values) == [a[k] for a in chunk for k in SO101]
    other = policy.get_action_rows(so101_observation(), "pick", keys=["gripper", "extra"])
    assert other.values[0::2] == [a["gripper"] for a in chunk]
    assert all(math.isnan(v) for v in other.values[1::2])
    assert policy.is_chunk_emitting() and not policy.supports_rtc
    assert policy.binding_report() == {
        "positional_fallback_used": False,
        "generic_state_keys_used": False,
        "missing_state_keys_used": False,
    }
    report = policy.load_report()
    assert set(report) == {
        "policy_load_time_s",
        "policy_load_cache_hit",
        "policy_resident_rss_mb",
        "policy_rtc_enabled",
    }
    assert report["policy_resident_rss_mb"] > 50 and report["policy_rtc_enabled"] is False


def test_full_chunk_and_overrides(ckpt_act: Path) -> None:
    full = create_policy("lerobot", path=str(ckpt_act), device="cpu", full_chunk=True)
    full.set_robot_state_keys(SO101)
    assert len(full.get_actions(so101_observation())) == 10  # chunk_size
    shorter = create_policy(
        "lerobot", path=str(ckpt_act), device="cpu", overrides={"n_action_steps": 3}
    )
    shorter.set_robot_state_keys(SO101)
    assert shorter.execution_horizon == 3 and len(shorter.get_actions(so101_observation())) == 3
    assert not shorter.load_cache_hit  # an override is a different model configuration


def test_diffusion_chunks_and_episode_reset(ckpt_diffusion: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_diffusion), device="cpu")
    policy.set_robot_state_keys(SO101)
    assert policy.policy_type == "diffusion" and policy.execution_horizon == 4
    for episode in range(2):
        policy.reset(seed=episode)
        for step in range(2):
            chunk = policy.get_actions(so101_observation(seed=step))
            assert len(chunk) == 4 and all(len(a) == 6 for a in chunk)
    # min-max normalised actions come back inside the dataset range [-1, 1]
    assert all(-1.0001 <= v <= 1.0001 for a in chunk for v in a.values())


def test_binding_by_name_matches_lerobot_itself(ckpt_root: Path) -> None:
    """Checkpoint names in another order than the robot's: the provider reorders both ways."""
    from fixtures.lerobot import build_tiny_checkpoint

    order = ("gripper", "wrist_roll", "shoulder_pan", "elbow_flex", "shoulder_lift", "wrist_flex")
    path = build_tiny_checkpoint(
        ckpt_root / "act_permuted", kind="act", state_names=order, chunk_size=4, seed=3
    )
    obs = so101_observation(seed=5)
    policy = create_policy("lerobot", path=str(path), device="cpu")
    policy.set_robot_state_keys(SO101)
    chunk = policy.get_actions(obs)
    expected = direct_chunk(
        path, [obs["joint_positions"][j] for j in order], obs["images"]["front"]
    )
    for row, action in zip(expected, chunk, strict=True):
        for i, joint in enumerate(order):
            assert action[joint] == pytest.approx(float(row[i]), abs=1e-5)
    assert policy.binding_description()["state"] == [f"{j}.pos" for j in order]
    assert not any(policy.binding_report().values())


def test_explicit_mapping_in_policy_config(ckpt_root: Path) -> None:
    from fixtures.lerobot import build_tiny_checkpoint

    path = build_tiny_checkpoint(
        ckpt_root / "act_generic",
        kind="act",
        state_names=[f"m{i}" for i in range(6)],
        chunk_size=4,
        declare_names=False,
    )
    # no names anywhere: bound by position, and reported
    positional = create_policy("lerobot", path=str(path), device="cpu")
    positional.set_robot_state_keys(SO101)
    positional.get_actions(so101_observation())
    assert positional.binding_report()["positional_fallback_used"] is True
    # generic names in the checkpoint: also positional, reported as generic
    (path / "feature_names.json").write_text(
        json.dumps({"observation.state": [f"motor_{i}" for i in range(6)]})
    )
    generic = create_policy("lerobot", path=str(path), device="cpu")
    generic.set_robot_state_keys(SO101)
    generic.get_actions(so101_observation())
    assert generic.binding_report()["generic_state_keys_used"] is True
    # an explicit mapping: by name, nothing to report
    mapped = create_policy(
        "lerobot",
        path=str(path),
        device="cpu",
        state_keys=[f"{j}.pos" for j in reversed(SO101)],
        action_keys=list(reversed(SO101)),
    )
    mapped.set_robot_state_keys(SO101)
    chunk = mapped.get_actions(so101_observation())
    assert list(chunk[0]) == list(reversed(SO101))
    assert not any(mapped.binding_report().values())
    assert mapped.binding_description()["state_source"] == "policy_config:state_keys"


def test_dimension_mismatch_is_refused_before_the_first_step(ckpt_root: Path) -> None:
    from fixtures.lerobot import build_tiny_checkpoint

    seven = (*SO101, "elbow_roll")
    path = build_tiny_checkpoint(ckpt_root / "act7", kind="act", state_names=seven, chunk_size=4)
    policy = create_policy("lerobot", path=str(path), device="cpu")
    with pytest.raises(ValueError) as info:
        policy.set_robot_state_keys(SO101)
    assert "(7,)" in str(info.value) and "elbow_roll" in str(info.value)
    unnamed = build_tiny_checkpoint(
        ckpt_root / "act7_unnamed", kind="act", state_names=seven, chunk_size=4, declare_names=False
    )
    policy = create_policy("lerobot", path=str(unnamed), device="cpu")
    with pytest.raises(ValueError) as info:
        policy.set_robot_state_keys(SO101)
    assert "(7,)" in str(info.value) and "(6,)" in str(info.value)
    # the state side: a 7-entry state on a 6-joint robot, refused at the first observation
    policy = create_policy(
        "lerobot", path=str(unnamed), device="cpu", action_keys=[*SO101, SO101[0]][:7]
    )
    with pytest.raises(ValueError):
        policy.set_robot_state_keys(SO101)  # two indices on one key
    policy = create_policy(
        "lerobot", path=str(path), device="cpu", action_keys=list(SO101) + ["gripper"]
    )
    with pytest.raises(ValueError):
        policy.set_robot_state_keys(SO101)


def test_missing_state_keys_refused_or_reported(ckpt_root: Path) -> None:
    from fixtures.lerobot import build_tiny_checkpoint

    path = build_tiny_checkpoint(
        ckpt_root / "act_extra_state",
        kind="act",
        state_names=(*SO101, "conveyor"),
        action_names=SO101,
        chunk_size=4,
    )
    policy = create_policy("lerobot", path=str(path), device="cpu")
    policy.set_robot_state_keys(SO101)
    with pytest.raises(ValueError) as info:
        policy.get_actions(so101_observation())
    assert "conveyor.pos" in str(info.value) and "(7,)" in str(info.value)
    lenient = create_policy("lerobot", path=str(path), device="cpu", allow_missing_state_keys=True)
    lenient.set_robot_state_keys(SO101)
    assert len(lenient.get_actions(so101_observation())) == 4
    assert lenient.binding_report()["missing_state_keys_used"] is True


def test_camera_shape_mismatch_refused(ckpt_act: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    policy.set_robot_state_keys(SO101)
    assert policy.required_cameras() == {"front": (64, 64)}
    with pytest.raises(ValueError) as info:
        policy.bind_observation(so101_observation(image_size=(96, 96)))
    assert "(3, 64, 64)" in str(info.value) and "(96, 96, 3)" in str(info.value)
    with pytest.raises(ValueError, match="front"):
        policy.get_actions(so101_observation(image_size=None))


def test_load_cache_reuses_the_checkpoint(ckpt_diffusion: Path) -> None:
    from robokernel_ros.policies.lerobot import cached_checkpoints, clear_cache

    clear_cache()
    first = create_policy("lerobot", path=str(ckpt_diffusion), device="cpu")
    second = create_policy("lerobot", path=str(ckpt_diffusion) + "/", device="cpu")
    assert first.load_cache_hit is False and second.load_cache_hit is True
    assert second._loaded is first._loaded
    assert second.load_time_s < first.load_time_s
    assert second.checkpoint_load_time_s == first.checkpoint_load_time_s
    assert (str(ckpt_diffusion.resolve()), "cpu") in [
        (str(Path(p).resolve()), d) for p, d in cached_checkpoints()
    ]
    clear_cache()
    assert create_policy("lerobot", path=str(ckpt_diffusion), device="cpu").load_cache_hit is False


def test_policy_agent_drives_it(ckpt_act: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    policy.set_robot_state_keys(SO101)
    agent = PolicyAgent(policy, action_horizon=2)
    agent.reset(instruction="stack", seed=1)
    assert len(agent.act(so101_observation(), 0)) == 2
    assert agent.supports_rtc is False


def test_devices(ckpt_act: Path) -> None:
    import torch

    auto = create_policy("lerobot", path=str(ckpt_act), device="auto")
    assert auto.device == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device='gpu'"):
        preflight("lerobot", {"path": str(ckpt_act), "device": "gpu"})
    if torch.cuda.is_available():
        cuda = create_policy("lerobot", path=str(ckpt_act), device="cuda")
        cuda.set_robot_state_keys(SO101)
        assert len(cuda.get_actions(so101_observation())) == 5
    else:
        for device in ("cuda", "cuda:0"):
            with pytest.raises(ValueError) as info:
                preflight("lerobot", {"path": str(ckpt_act), "device": device})
            assert f"device={device!r}" in str(info.value) and "CUDA is not available" in str(
                info.value
            )
            with pytest.raises(ValueError, match="CUDA is not available"):
                create_policy("lerobot", path=str(ckpt_act), device=device)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({}, "path=None"),
        ({"path": "/nonexistent/ckpt"}, "not a folder"),
        ({"device": "cpu", "batch": 2}, "['batch']"),
        ({"full_chunk": "false"}, "full_chunk='false'"),
        ({"allow_missing_state_keys": 1}, "allow_missing_state_keys=1"),
        ({"rtc": "yes"}, "rtc='yes'"),
        ({"overrides": {"no_such_field": 1}}, "['no_such_field']"),
        ({"state_keys": ["a", "b"]}, "shape (2,)"),
        ({"action_keys": "shoulder_pan"}, "action_keys='shoulder_pan'"),
        ({"cameras": {"wrist": "front"}}, "['wrist']"),
    ],
)
def test_preflight_refusals(ckpt_act: Path, config: dict, words: str) -> None:
    full = {"path": str(ckpt_act), **config} if "path" not in config and config != {} else config
    with pytest.raises(ValueError) as info:
        preflight("lerobot", full)
    assert words in str(info.value)


def test_folder_without_processors_is_refused(ckpt_act: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(ckpt_act / "config.json", bare / "config.json")
    with pytest.raises(ValueError, match="policy_preprocessor.json"):
        preflight("lerobot", {"path": str(bare)})
    with pytest.raises(ValueError, match="no config.json"):
        preflight("lerobot", {"path": str(tmp_path)})


def test_rtc_true_refused_for_a_policy_without_rtc(ckpt_act: Path) -> None:
    with pytest.raises(ValueError, match="rtc=True"):
        create_policy("lerobot", path=str(ckpt_act), device="cpu", rtc=True)
