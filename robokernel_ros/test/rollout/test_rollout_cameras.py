"""Cameras for image policies: run_policy / eval_policy render what the policy needs
(required_cameras(), or the checkpoint's image inputs) plus cameras= / image_size=,
checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from robokernel_ros.policies.base import Policy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text

FRONT = {"pos": [0.6, 0.0, 0.5], "lookat": [0.0, 0.0, 0.1]}


class ImageProbe(Policy):
    """Needs camera 'front' at 32x40; records the image shapes it was given."""

    provider = "image_probe"

    def __init__(self, cameras=None) -> None:
        super().__init__()
        self.cameras = cameras or {"front": (32, 40)}
        self.seen: list[dict[str, tuple[int, ...]]] = []

    def required_cameras(self):
        return dict(self.cameras)

    def get_actions(self, observation, instruction="", **kwargs):
        self.seen.append({c: np.asarray(i).shape for c, i in observation["images"].items()})
        return [{k: 0.0 for k in self.action_keys}]


@pytest.fixture
def cell(tmp_path):
    c = SimWorkcell(trace_dir=tmp_path / "runs")
    c.add_robot("arm", "so101")
    yield c
    c.close()


def test_policy_object_cameras_are_rendered_at_its_size(cell):
    cell.add_camera("front", **FRONT)
    policy = ImageProbe()
    out = cell.run_policy("arm", policy_object=policy, n_steps=3, action_horizon=1)
    assert out["status"] == "success", envelope_text(out)
    assert policy.seen and all(s == {"front": (32, 40, 3)} for s in policy.seen)
    # the frames are in the trace and on the bag's camera topic
    j = envelope_json(out)
    assert (Path(j["trace_path"]) / "images" / "front").is_dir()
    from robokernel_ros.recording import iter_raw

    topics = {m.topic for m in iter_raw(j["bag_path"])}
    assert "/robokernel/camera/front/image" in topics


def test_missing_camera_is_refused_before_starting_naming_it(cell):
    policy = ImageProbe()
    out = cell.run_policy("arm", policy_object=policy, n_steps=3)
    text = envelope_text(out)
    assert out["status"] == "error"
    assert "camera 'front'" in text and "32x40" in text and "its cameras: []" in text, text
    assert policy.seen == [] and envelope_json(cell.list_policies_running())["count"] == 0
    out = cell.eval_policy("arm", policy_object=policy, max_steps=3)
    assert out["status"] == "error" and "camera 'front'" in envelope_text(out)


def test_cameras_option_adds_and_reuses_a_camera_and_checks_image_size(cell):
    policy = ImageProbe()
    out = cell.run_policy("arm", policy_object=policy, n_steps=2, cameras={"front": FRONT})
    assert out["status"] == "success", envelope_text(out)
    assert "front" in cell.scene.cameras()
    # the same definition again reuses the camera; another placement is refused
    assert (
        cell.run_policy("arm", policy_object=policy, n_steps=1, cameras={"front": FRONT})["status"]
        == "success"
    )
    moved = cell.run_policy(
        "arm", policy_object=policy, n_steps=1, cameras={"front": {"pos": [1.0, 0.0, 0.5]}}
    )
    assert moved["status"] == "error" and "placed differently" in envelope_text(moved)
    clash = cell.run_policy("arm", policy_object=policy, n_steps=1, image_size=(64, 64))
    assert clash["status"] == "error"
    assert "image_size=(64, 64)" in envelope_text(clash) and "(32, 40)" in envelope_text(clash)
    # a policy without images, with cameras named explicitly and a size: rendered as asked
    seen = []
    out = cell.run_policy(
        "arm", n_steps=2, cameras=["front"], image_size=24, observer=seen.append, trace_dir=None
    )
    assert out["status"] == "success", envelope_text(out)
    shapes = {
        np.asarray(e.data["images"]["front"]).shape
        for e in seen
        if e.kind == "observation" and e.data.get("images")
    }
    assert shapes == {(24, 24, 3)}


@pytest.mark.parametrize(
    ("kwargs", "needles"),
    [
        ({"cameras": "front"}, ["cameras='front'", "list of scene camera names"]),
        ({"cameras": {"top": {"lookat": [0, 0, 0]}}}, ["cameras['top']", "'pos' is required"]),
        ({"cameras": {"top": {"pos": [1, 0, 1], "zoom": 2}}}, ["cameras['top']", "['zoom']"]),
        ({"cameras": ["nope"]}, ["'nope' is not a camera of the scene"]),
        ({"cameras": {"top": {"pos": [0, 0, 0]}}}, ["cameras['top']", "lookat"]),
        ({"image_size": (0, 4)}, ["image_size=(0, 4)", "positive whole numbers"]),
        ({"image_size": "64"}, ["image_size='64'", "(height, width)"]),
        ({"image_size": 32}, ["image_size=(32, 32)", "no camera is rendered"]),
    ],
)
def test_camera_refusals(cell, kwargs, needles):
    for name, horizon in (("run_policy", "n_steps"), ("eval_policy", "max_steps")):
        out = getattr(cell, name)("arm", **{horizon: 2}, **kwargs)
        text = envelope_text(out)
        assert out["status"] == "error", text
        for needle in needles:
            assert needle in text, text
    assert "top" not in cell.scene.cameras()


def test_lerobot_act_with_one_64x64_camera_runs_end_to_end(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("lerobot")
    from fixtures.lerobot import build_tiny_checkpoint

    ckpt = build_tiny_checkpoint(
        tmp_path / "act", kind="act", cameras={"wrist": (64, 64)}, chunk_size=4, n_action_steps=4
    )
    cell = SimWorkcell(trace_dir=tmp_path / "runs")
    try:
        cell.add_robot("arm", "so101")
        config = {"path": str(ckpt), "device": "cpu"}
        refused = cell.run_policy("arm", policy_provider="lerobot", policy_config=config, n_steps=4)
        assert refused["status"] == "error" and "camera 'wrist'" in envelope_text(refused)
        assert "64x64" in envelope_text(refused)
        cell.add_camera("wrist", pos=(0.5, 0.2, 0.4), lookat=(0.0, 0.0, 0.1))
        # async_rtc=False: the world waits for each chunk (on this loaded 2-core machine the
        # realtime mode's measured inference time would make a 6-step run all holds)
        out = cell.run_policy(
            "arm", policy_provider="lerobot", policy_config=config, n_steps=6, seed=0,
            async_rtc=False,
        )  # fmt: skip
        assert out["status"] == "success", envelope_text(out)
        j = envelope_json(out)
        assert j["actions_applied"] > 0 and j["steps_advanced"] == 6
        assert j["positional_fallback_used"] is False
        frame = np.load(sorted((Path(j["trace_path"]) / "images" / "wrist").iterdir())[0])
        assert frame.shape == (64, 64, 3)
        # eval_policy builds the same camera for every episode
        out = cell.eval_policy(
            "arm", policy_provider="lerobot", policy_config=config, n_episodes=2, max_steps=4
        )
        assert out["status"] == "success", envelope_text(out)
        assert all(e["actions_applied"] == 4 for e in envelope_json(out)["episodes"])
    finally:
        cell.close()
