"""Batched inference: one LeRobot forward pass for many observations, equal to one at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from lerobot_test_helpers import SO101
from robokernel_ros.policies import create_policy
from robokernel_ros.policies.base import batch_refusal
from robokernel_ros.policies.batching import BatchServer
from robokernel_ros.rollout import SimWorkcell, envelope_json


def observation(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {**{j: float(v) for j, v in zip(SO101, rng.uniform(-1, 1, len(SO101)), strict=True)},
            "images": {"front": rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)}}  # fmt: skip


def test_a_batch_gives_each_observation_the_chunk_it_gets_alone(ckpt_act):
    policy = create_policy("lerobot", path=str(ckpt_act), device="cpu")
    policy.set_robot_state_keys(list(SO101))
    observations = [observation(i) for i in range(5)]
    alone = [policy.get_actions(o) for o in observations]
    batched = policy.get_actions_batch(observations, [""] * 5)
    for a, b in zip(alone, batched, strict=True):
        assert len(a) == len(b) == 5
        for x, y in zip(a, b, strict=True):
            assert x.keys() == y.keys()
            np.testing.assert_allclose([x[k] for k in x], [y[k] for k in x], rtol=1e-4, atol=1e-5)


def test_the_server_batches_concurrent_callers(ckpt_act):
    server = BatchServer(
        "lerobot", {"path": str(ckpt_act), "device": "cpu"}, max_batch=4, max_wait_ms=200
    )
    try:
        server.bind(list(SO101), {})
        answers: dict[int, dict] = {}
        threads = [threading.Thread(target=lambda i=i: answers.update({i: server.infer(observation(i))}))
                   for i in range(4)]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(answers) == [0, 1, 2, 3]
        assert server.stats()["max_batch_seen"] >= 2  # 4 callers within 200 ms share a pass
        alone = server.policy.get_actions(observation(2))
        np.testing.assert_allclose([a[k] for a in answers[2]["chunk"] for k in a],
                                   [a[k] for a in alone for k in a], rtol=1e-4, atol=1e-5)  # fmt: skip
    finally:
        server.close()


def test_providers_that_cannot_batch_say_why(ckpt_act, ckpt_diffusion):
    assert batch_refusal("lerobot", {"path": str(ckpt_act)}) is None
    assert "observation history" in batch_refusal("lerobot", {"path": str(ckpt_diffusion)})
    assert "does not batch" in batch_refusal("mock", {})


def test_a_parallel_eval_with_batched_inference(ckpt_act, tmp_path):
    ray = pytest.importorskip("ray")
    cell = SimWorkcell(trace_dir=tmp_path)
    try:
        cell.add_robot("arm", "so101")
        cell.add_camera("front", pos=(0.6, 0, 0.5), lookat=(0, 0, 0.1))
        config = {"path": str(ckpt_act), "device": "cpu"}
        refused = cell.eval_policy(
            "arm", policy_provider="mock", n_episodes=2, workers=2, batch_inference=True
        )
        assert refused["status"] == "error" and "cannot batch" in refused["content"][0]["text"]
        one = cell.eval_policy(
            "arm", policy_provider="lerobot", policy_config=config, batch_inference=True
        )
        assert one["status"] == "error" and "workers=1" in one["content"][0]["text"]
        out = envelope_json(cell.eval_policy("arm", policy_provider="lerobot", policy_config=config,
                                             n_episodes=4, max_steps=20, seed=0, workers=2,
                                             batch_inference=True))  # fmt: skip
    finally:
        cell.close()
        ray.shutdown()
    assert out["parallel"]["episodes_completed"] == 4
    assert all(e["steps_advanced"] == 20 and e["actions_applied"] == 20 for e in out["episodes"])
    batching = out["parallel"]["batching"]
    assert batching["batches"] >= 4 * 20 // 5 / 2  # chunks of 5: 16 requests, some shared
    assert batching["queue_wait_p50_ms"] is not None
