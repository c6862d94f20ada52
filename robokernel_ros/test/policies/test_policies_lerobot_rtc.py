"""Real-time chunking: the kernel's RTC context reaches a LeRobot policy that supports it.

The policy is `tiny_flow`, a LeRobot policy plugin built here (test/fixtures/lerobot): a
small MLP velocity field sampled with LeRobot's own `euler_integrate` + `RTCProcessor`
guidance (the RTC code SmolVLA/pi0 run). SmolVLA and pi0 themselves cannot be built
offline on these machines (hub processors; 9-18 GB), so this is the RTC policy tested.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.lerobot import TINY_FLOW_PLUGIN
from lerobot_test_helpers import SO101, so101_observation
from robokernel_ros.policies import PolicyAgent, create_policy

pytestmark = pytest.mark.usefixtures("lerobot_available")


def flow_policy(path: Path, **extra):
    policy = create_policy(
        "lerobot", path=str(path), device="cpu", plugins=[TINY_FLOW_PLUGIN], **extra
    )
    policy.set_robot_state_keys(SO101)
    return policy


def test_rtc_policy_reports_rtc_and_chunks(ckpt_flow: Path) -> None:
    policy = flow_policy(ckpt_flow)
    assert policy.supports_rtc and policy.is_chunk_emitting()
    assert policy.load_report()["policy_rtc_enabled"] is True
    assert policy.execution_horizon == 6
    chunk = policy.get_actions(so101_observation())
    # with RTC the whole chunk (chunk_size 12) comes back; 6 run before the next request
    assert len(chunk) == 12 and list(chunk[0]) == list(
        reversed(SO101)
    )  # the policy's order, robot keys


def test_queued_actions_and_delay_reach_lerobot_in_model_space(ckpt_flow: Path) -> None:
    import torch

    policy = flow_policy(ckpt_flow)
    model = policy._loaded.model
    agent = PolicyAgent(policy)
    assert agent.supports_rtc is True
    agent.reset(instruction="pick the cube", seed=0)
    first = agent.act(so101_observation(), 0)
    assert (
        model.calls[-1]["inference_delay"] is None
        or model.calls[-1]["prev_chunk_left_over"] is None
    )
    queued = first[2:]
    agent.act(so101_observation(), 2, queued_actions=queued, delay_steps=3)
    call = model.calls[-1]
    assert call["inference_delay"] == 3
    prev = call["prev_chunk_left_over"]
    assert tuple(prev.shape) == (10, 6)
    # the robot-space actions, in the policy's action order (reversed joints), normalised
    # with the checkpoint's action stats (mean 0, std 0.5)
    order = list(reversed(SO101))
    expected = torch.tensor([[a[k] for k in order] for a in queued]) / 0.5
    assert torch.allclose(prev, expected, atol=1e-5)
    assert call["task"] in ("pick the cube", ["pick the cube"])
    assert policy.last_rtc_call == {
        "inference_delay": 3,
        "queued": 10,
        "prev_chunk_left_over_shape": (10, 6),
    }


def test_rtc_guidance_blends_the_new_chunk_into_the_queued_one(ckpt_flow: Path) -> None:
    """With the leftover, the new chunk's first steps follow it (LeRobot's RTC guidance);
    without RTC the same noise gives a chunk that ignores it."""
    import torch

    with_rtc = flow_policy(ckpt_flow, rtc={"execution_horizon": 6, "max_guidance_weight": 10.0})
    without = flow_policy(ckpt_flow, rtc=False)
    assert without.supports_rtc is False and with_rtc.supports_rtc is True
    obs = so101_observation()
    leftover = [{k: 0.8 for k in SO101} for _ in range(6)]
    torch.manual_seed(7)
    blended = with_rtc.get_actions(obs, queued_actions=leftover, delay_steps=2)
    torch.manual_seed(7)
    plain = without.get_actions(obs, queued_actions=leftover, delay_steps=2)  # ignored: no RTC
    assert without._loaded.model.calls[-1]["prev_chunk_left_over"] is None

    def gap(chunk, n):
        return sum(abs(chunk[i][k] - 0.8) for i in range(n) for k in SO101) / (n * len(SO101))

    assert gap(blended, 2) < 0.5 * gap(plain, 2)
    assert gap(blended, 2) < 0.1


def test_policy_without_rtc_never_gets_rtc_arguments(ckpt_act: Path) -> None:
    policy = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    policy.set_robot_state_keys(SO101)
    assert not policy.supports_rtc and PolicyAgent(policy).supports_rtc is False
    chunk = policy.get_actions(
        so101_observation(), queued_actions=[{k: 0.0 for k in SO101}], delay_steps=1
    )
    assert len(chunk) == 5 and policy.last_rtc_call is None


def test_unknown_keyword_refused(ckpt_flow: Path) -> None:
    policy = flow_policy(ckpt_flow)
    with pytest.raises(ValueError, match="noise"):
        policy.get_actions(so101_observation(), noise=None)
    with pytest.raises(ValueError, match="lacks"):
        policy.get_actions(
            so101_observation(), queued_actions=[{"shoulder_pan": 0.0}], delay_steps=0
        )
