"""LeRobot checkpoints driving the SO-101 in real MuJoCo episodes: through the kernel's
EpisodeRunner (ACT and Diffusion with a rendered 64x64 camera; the RTC policy in the
realtime mode) and through the rollout API's run_policy (policy_provider="lerobot")."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.lerobot import TINY_FLOW_PLUGIN, build_tiny_checkpoint
from lerobot_test_helpers import SO101
from robokernel_ros.policies import PolicyAgent, create_policy

pytestmark = pytest.mark.usefixtures("lerobot_available")

envs = pytest.importorskip("robokernel_ros.envs")
if not hasattr(envs, "MujocoScene"):
    pytest.skip("the MuJoCo envs are not in this tree yet", allow_module_level=True)

from robokernel_ros.kernel import EpisodeRunner, Timing  # noqa: E402


@pytest.fixture(scope="module")
def so101_env():
    scene = envs.MujocoScene()
    scene.add_robot("arm", "so101")
    scene.add_camera("front", pos=(0.6, 0.0, 0.5), lookat=(0.0, 0.0, 0.1))
    env = scene.make_env("arm", control_hz=50, cameras=["front"], image_size=(64, 64))
    yield env
    scene.close()


def report_json(envelope: dict) -> dict:
    return next(part["json"] for part in envelope["content"] if "json" in part)


def run_episode(env, policy, steps: int, **runner_kwargs):
    policy.set_robot_state_keys(env.env_spec.action_keys)
    agent = PolicyAgent(policy)
    return EpisodeRunner(env, agent, **runner_kwargs).run(steps, seed=0, instruction="reach")


@pytest.mark.parametrize(("fixture", "steps"), [("ckpt_act", 12), ("ckpt_diffusion", 8)])
def test_checkpoint_drives_a_mujoco_episode(so101_env, request, fixture: str, steps: int) -> None:
    path: Path = request.getfixturevalue(fixture)
    assert tuple(so101_env.env_spec.action_keys) == SO101
    policy = create_policy("lerobot", path=str(path), device="cpu")
    record = run_episode(so101_env, policy, steps)
    assert record.error is None, record.error
    assert record.steps == steps
    assert record.chunks == -(-steps // policy.execution_horizon)
    assert not any(policy.binding_report().values())
    assert policy.binding_description()["cameras"] == {"front": "front"}
    # the same checkpoint again (a second episode's create_policy) is a cache hit
    again = create_policy("lerobot", path=str(path), device="cpu")
    assert again.load_cache_hit and again._loaded is policy._loaded
    assert run_episode(so101_env, again, 4).error is None


def test_rtc_policy_in_the_realtime_mode_gets_queue_and_delay(so101_env, ckpt_flow: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_flow), device="cpu", plugins=[TINY_FLOW_PLUGIN])
    calls = policy._loaded.model.calls
    before = len(calls)
    timing = Timing(
        mode="realtime", clock="virtual", latency_s=0.03, refill_steps=3
    )  # merged 2 steps later at 50 Hz
    # 30 steps: the first chunk starts at its first action (the robot held while it was
    # computed), so three chunks take more steps than the 2-step delay alone suggests
    record = run_episode(so101_env, policy, 30, timing=timing)
    assert record.error is None, record.error
    mine = calls[before:]
    assert len(mine) >= 3
    assert all(c["inference_delay"] == 2 for c in mine)
    later = [c["prev_chunk_left_over"] for c in mine[1:]]
    assert all(p is not None and p.shape[1] == 6 and 1 <= p.shape[0] <= 12 for p in later)


def test_run_policy_with_the_lerobot_provider(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The rollout API end to end (state-only checkpoint: run_policy renders no cameras)."""
    from robokernel_ros.rollout import SimWorkcell

    path = build_tiny_checkpoint(
        tmp_path_factory.mktemp("flow_state_only") / "ckpt",
        kind="tiny_flow",
        cameras={},
        chunk_size=8,
    )
    cell = SimWorkcell(trace_dir=None)
    try:
        cell.add_robot("arm", "so101")
        config = {"path": str(path), "device": "cpu", "plugins": [TINY_FLOW_PLUGIN]}
        # async_rtc=False: the world waits for each chunk (this loaded 2-core machine's
        # inference time would otherwise decide how many steps are holds)
        first = cell.run_policy(
            "arm",
            policy_provider="lerobot",
            policy_config=config,
            n_steps=12,
            seed=0,
            async_rtc=False,
        )
        assert first["status"] == "success", first
        report = report_json(first)
        assert report["actions_applied"] > 0
        assert report["policy_rtc_enabled"] is True
        assert report["positional_fallback_used"] is False
        assert report["policy_load_cache_hit"] is False and report["policy_load_time_s"] > 0
        second = cell.run_policy(
            "arm",
            policy_provider="lerobot",
            policy_config=config,
            n_steps=4,
            seed=1,
            async_rtc=False,
        )
        assert second["status"] == "success", second
        assert report_json(second)["policy_load_cache_hit"] is True
        # an eval of several episodes on a cached checkpoint says so too (issue #17, defect 10)
        evaluated = cell.eval_policy(
            "arm", policy_provider="lerobot", policy_config=config, n_episodes=2, max_steps=3,
            async_rtc=False,
        )  # fmt: skip
        assert evaluated["status"] == "success", evaluated
        j = report_json(evaluated)
        assert j["policy_load_cache_hit"] is True
        assert [e["policy_load_cache_hit"] for e in j["episodes"]] == [True, True]
    finally:
        cell.close()
