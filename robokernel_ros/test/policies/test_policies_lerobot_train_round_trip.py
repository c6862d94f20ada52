"""Episodes recorded here, exported with `--convention lerobot`, trained by LeRobot's own
`lerobot-train`, served back through the lerobot provider: names all the way."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot_test_helpers import SO101, so101_observation
from robokernel_ros.kernel.trace import load_trace

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")

CONTROL_HZ = 50
FPS = 25  # resampled: every 2nd step
STEPS = 20
ENV_STATE = ["shoulder_pan.vel", "elbow_flex.vel"]


def _json(out: dict[str, Any]) -> dict[str, Any]:
    assert out["status"] == "success", out["content"]
    return next(c["json"] for c in out["content"] if "json" in c)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, lerobot_available: None) -> dict[str, Any]:
    from robokernel_ros.cli.export import main as export_main
    from robokernel_ros.rollout import SimWorkcell

    tmp = tmp_path_factory.mktemp("so101_export")
    cell = SimWorkcell()
    cell.add_robot("arm", "so101")
    report = _json(
        cell.eval_policy(
            "arm",
            policy_provider="mock",
            n_episodes=2,
            max_steps=STEPS,
            control_frequency=float(CONTROL_HZ),
            seed=0,
            trace_dir=str(tmp / "runs"),
            instruction="reach",
        )
    )
    runs = [Path(e["trace_path"]) for e in report["episodes"]]
    root = tmp / "dataset"
    argv = [*map(str, runs), "--repo-id", "rk/so101", "--root", str(root)]
    argv += ["--convention", "lerobot", "--fps", str(FPS), "--env-state", ",".join(ENV_STATE)]
    assert export_main([*argv, "--json"]) == 0
    return {"runs": runs, "root": root, "tmp": tmp}


@functools.cache
def _mujoco_range(joint: str) -> tuple[float, float]:
    import mujoco
    from robokernel_ros.envs.models import resolve_model

    model = mujoco.MjModel.from_xml_path(str(resolve_model("so101")))
    low, high = model.jnt_range[model.joint(joint).id]
    return float(low), float(high)


def _expected(q: float, joint: str) -> float:
    """LeRobot's so_follower value of a joint position, from the MJCF range mujoco reads."""
    low, high = _mujoco_range(joint)
    if joint == "gripper":
        return (min(max(q, low), high) - low) / (high - low) * 100
    mid = 0.0 if joint == "wrist_roll" else (low + high) / 2
    return math.degrees(q - mid)


def test_an_export_with_the_lerobot_convention_loads_with_so_follower_names_and_units(
    exported: dict[str, Any],
) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("rk/so101", root=exported["root"], video_backend="pyav")
    pos = [f"{j}.pos" for j in SO101]
    assert ds.meta.robot_type == "so101_follower" and ds.fps == FPS
    assert ds.meta.features["observation.state"]["names"] == pos
    assert ds.meta.features["action"]["names"] == pos
    assert ds.meta.features["observation.environment_state"]["names"] == ENV_STATE
    assert ds.num_episodes == 2 and len(ds) == 2 * STEPS * FPS // CONTROL_HZ
    i = 0
    for episode, run in enumerate(exported["runs"]):
        trace = load_trace(run)
        obs = {e.step: e.data["obs"] for e in trace.of_kind("observation")}
        actions = list(trace.of_kind("action"))
        for k in range(STEPS * FPS // CONTROL_HZ):
            item = ds[i]
            step = actions[2 * k]  # frame k at k / 25 s: the step at 2k / 50 s
            q = obs[step.step]["joint_positions"]
            assert int(item["episode_index"]) == episode and int(item["frame_index"]) == k
            np.testing.assert_allclose(
                item["observation.state"].numpy(),
                [_expected(q[j], j) for j in SO101],
                atol=1e-3,
            )
            np.testing.assert_allclose(
                item["action"].numpy(),
                [_expected(step.data["action"][j], j) for j in SO101],
                atol=1e-3,
            )
            velocities = obs[step.step]["joint_velocities"]
            np.testing.assert_allclose(
                item["observation.environment_state"].numpy(),
                [velocities["shoulder_pan"], velocities["elbow_flex"]],
                rtol=1e-5,
                atol=1e-6,
            )
            i += 1


def test_lerobot_train_on_the_export_serves_back_bound_by_name(
    exported: dict[str, Any], processes: Any
) -> None:
    from robokernel_ros.policies import create_policy
    from robokernel_ros.rollout import SimWorkcell

    out = exported["tmp"] / "train"
    args = [sys.executable, "-m", "lerobot.scripts.lerobot_train"]
    args += ["--dataset.repo_id=rk/so101", f"--dataset.root={exported['root']}"]
    args += ["--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false"]
    args += ["--policy.dim_model=32", "--policy.n_heads=2", "--policy.dim_feedforward=64"]
    args += ["--policy.n_encoder_layers=1", "--policy.n_decoder_layers=1"]
    args += ["--policy.n_vae_encoder_layers=1", "--policy.latent_dim=8"]
    args += ["--policy.chunk_size=5", "--policy.n_action_steps=5"]
    args += ["--steps=2", "--batch_size=2", "--num_workers=0", "--save_freq=2"]
    args += ["--wandb.enable=false", f"--output_dir={out}"]
    proc = processes.start("lerobot_train", args, env={"HF_HUB_OFFLINE": "1"})
    assert proc.wait(timeout=300) == 0, processes.log(proc)[-3000:]
    ckpt = out / "checkpoints" / "last" / "pretrained_model"
    assert json.loads((ckpt / "train_config.json").read_text())["dataset"]["root"] == str(
        exported["root"]
    )
    assert "names" not in json.dumps(json.loads((ckpt / "config.json").read_text()))

    policy = create_policy("lerobot", path=str(ckpt), device="cpu")
    policy.set_robot_state_keys(list(SO101))
    policy.bind_observation(so101_observation(image_size=None))
    binding = policy.binding_description()
    assert binding["convention"] == "so_follower" and binding["actions"] == list(SO101)
    assert binding["environment_state"] == ENV_STATE
    assert binding["state_source"] == os.path.join(str(exported["root"]), "meta", "info.json")

    cell = SimWorkcell()
    cell.add_robot("arm", "so101")

    report = _json(
        cell.eval_policy(
            "arm",
            policy_provider="lerobot",
            policy_config={"path": str(ckpt), "device": "cpu"},
            n_episodes=1,
            max_steps=10,
            seed=0,
            trace_dir=str(exported["tmp"] / "served"),
        )
    )
    episode = report["episodes"][0]
    assert report["positional_fallback_used"] is False
    assert episode["positional_fallback_used"] is False
    assert episode["actions_applied"] == 10
    meta = json.loads((Path(episode["trace_path"]) / "meta.json").read_text())
    for field in ("steps", "holds", "chunks"):  # the report carries the episode's counts
        assert episode[field] == meta[field] is not None


def test_the_range_mode_export_upsamples_by_repeating_steps(exported: dict[str, Any]) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from robokernel_ros.recording.export import export_lerobot

    root = exported["tmp"] / "range100"
    report = export_lerobot(
        exported["runs"][:1], repo_id="rk/r", root=root, convention="lerobot-range", fps=100
    )
    assert report.fps == 100 and report.frames == 2 * STEPS and report.env_state_names is None
    ds = LeRobotDataset("rk/r", root=root, video_backend="pyav")
    trace = load_trace(exported["runs"][0])
    obs = {e.step: e.data["obs"]["joint_positions"] for e in trace.of_kind("observation")}
    for k, action in enumerate(trace.of_kind("action")):
        q = obs[action.step]
        expected = []
        for j in SO101:
            low, high = _mujoco_range(j)
            scale = 100 if j == "gripper" else 200
            expected.append((q[j] - low) / (high - low) * scale - (0 if j == "gripper" else 100))
        for frame in (2 * k, 2 * k + 1):  # frames at 0.01 s, steps at 0.02 s
            np.testing.assert_allclose(ds[frame]["observation.state"].numpy(), expected, atol=1e-3)
