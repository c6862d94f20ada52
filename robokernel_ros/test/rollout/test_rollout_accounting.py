"""Bounded per-episode state and the rollout's accounting (action health, holds, seams, inference
figures) against the events the kernel actually published; one-robot run_multi_policy keys."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest
from robokernel_ros.policies.base import PolicyAgent
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text
from robokernel_ros.rollout.health import ActionHealth
from robokernel_ros.rollout.multi import MultiAgent


@pytest.fixture(scope="module")
def cell():
    c = SimWorkcell(trace_dir=None)
    c.add_robot("arm", "so101")
    yield c
    c.close()


class Events:
    """An observer that keeps what the rollout's accounting must agree with."""

    def __init__(self) -> None:
        self.actions: list[dict] = []  # ACTION events' data, in order
        self.merges: list[tuple[int, dict]] = []

    def __call__(self, event) -> None:
        if event.kind == "action":
            self.actions.append(event.data)
        elif event.kind == "chunk.merge":
            self.merges.append((event.step, event.data))

    def holds(self) -> int:
        return sum(1 for a in self.actions if a["hold"])

    def seams(self) -> tuple[int, int]:
        """(hits, blocks): a merge after the first is a block when a hold ran since the last."""
        hits = blocks = 0
        for (prev, _), (step, _) in zip(self.merges, self.merges[1:], strict=False):
            held = any(a["hold"] for a in self.actions if prev <= a["step"] < step)
            blocks += held
            hits += not held
        return hits, blocks


# --- bounded state -------------------------------------------------------------------------


def test_the_agent_keeps_running_figures_not_every_chunk():
    policy = MockPolicy(execution_horizon=4)
    policy.set_robot_state_keys(["a", "b"])
    agent = PolicyAgent(policy, action_horizon=4, requery_empty=True)
    agent.reset(seed=0)
    obs = {"a": 0.0, "b": 0.0}
    for step in range(500):
        agent.act(obs, step)
    assert agent.inference_count == 500
    assert 0.0 < agent.inference_total_s / 500 <= agent.inference_max_s
    # running figures only: no chunk (no container of any kind) is kept
    assert {k: v for k, v in vars(agent).items() if isinstance(v, list | tuple | set | deque)} == {}
    agent.reset(seed=0)
    assert agent.inference_count == 0 and agent.inference_total_s == 0.0


def test_the_multi_agent_keeps_only_its_queues():
    policy = MockPolicy(execution_horizon=4)
    policy.set_robot_state_keys(["j"])
    agent = MultiAgent({"r": PolicyAgent(policy, action_horizon=4, requery_empty=True)}, ["r"], {})
    agent.reset(seed=0)
    for step in range(300):
        chunk = agent.act({"r/j": 0.0}, step)
        assert len(chunk) == 1 and list(chunk[0]) == ["r/j"]
        assert len(agent.queues["r"]) <= 3  # what is left of the robot's chunk of 4
    assert {k for k, v in vars(agent).items() if isinstance(v, list | set | deque)} == set()


def test_action_health_folds_shapes_exactly_and_stays_bounded():
    keys = frozenset({"a", "b", "c"})
    joints = frozenset({"ja", "jb"})

    def reference(actions):
        applied = credited = partial = named_n = resolved_n = 0
        errors: Counter = Counter()
        missing: Counter = Counter()
        for action in actions:
            named = set(action) if isinstance(action, dict) else set()
            resolved = named & keys
            applied += bool(resolved)
            if not named or (not resolved and named <= joints):
                continue
            credited += 1
            named_n += len(named)
            resolved_n += len(resolved)
            if named - keys:
                partial += 1
                errors.update(named - keys)
            missing.update(keys - named)
        return {
            "actions_applied": applied,
            "action_errors": dict(sorted(errors.items())),
            "action_resolution_rate": resolved_n / named_n if named_n else 0.0,
            "partial_action_failure_rate": partial / credited if credited else 0.0,
            "action_steps_credited": credited,
            "action_steps_with_unresolved_keys": partial,
            "action_missing_keys": dict(sorted(missing.items())),
        }

    rng = random.Random(3)
    pool = ["a", "b", "c", "ja", "jb", "x", "y"]
    actions = [{k: 0.0 for k in ("a", "b", "c")}] * 50 + [None, {}, {"ja": 1.0}]
    for i in range(400):  # far more shapes than MAX_SHAPES, some with fresh unknown keys
        chosen = rng.sample(pool, rng.randint(0, len(pool))) + ([f"u{i}"] if i % 7 == 0 else [])
        actions.append({k: 1.0 for k in chosen})
    health = ActionHealth(keys, joints)
    for action in actions[:200]:
        health.count(action)
    assert health.applied == reference(actions[:200])["actions_applied"]  # a read mid-way
    for action in actions[200:]:
        health.count(action)
    assert len(health._shapes) <= ActionHealth.MAX_SHAPES
    assert health.to_dict() == reference(actions)
    assert health.steps == len(actions)
    # counted by shape, n at once: the same figures
    by_shape = ActionHealth(keys, joints)
    for shape in {tuple(a) if isinstance(a, dict) else () for a in actions}:
        n = sum(1 for a in actions if (tuple(a) if isinstance(a, dict) else ()) == shape)
        by_shape.count_shape(shape, n)
    assert by_shape.to_dict() == reference(actions) and by_shape.steps == len(actions)


# --- the accounting agrees with the events -------------------------------------------------


def _check_against_events(j, events: Events, *, extra_key: str | None = None):
    executed = [a for a in events.actions if not a["hold"]]
    assert j["steps_advanced"] == len(events.actions)
    assert j["hold_steps"] == events.holds()
    assert j["actions_applied"] == len(executed)
    assert j["action_steps_credited"] == len(executed)
    if extra_key is None:
        assert j["action_errors"] == {} and j["action_resolution_rate"] == 1.0
    else:
        assert j["action_errors"] == {extra_key: len(executed)}
    assert j["chunk_prefetch_chunks_acquired"] >= len(events.merges)


def test_sync_accounting_matches_the_events(cell):
    events = Events()
    out = cell.run_policy(
        "arm",
        n_steps=37,
        action_horizon=5,
        policy_config={"execution_horizon": 8, "extra_keys": ["bogus"]},
        async_rtc=False,
        observer=events,
    )
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    _check_against_events(j, events, extra_key="bogus")
    assert j["hold_steps"] == 0 and len(events.merges) == 8  # ceil(37 / 5)
    assert j["chunk_prefetch_chunks_acquired"] == 8
    assert j["avg_inference_ms"] > 0 and j["max_inference_ms"] >= j["avg_inference_ms"]


def test_async_accounting_with_holds_and_blocked_seams_matches_the_events(cell):
    # 100 ms per chunk at 50 Hz: a chunk arrives ~5 steps after its request, 4 actions
    # before the queue runs dry (refill at half the horizon): the first steps hold and every
    # seam starves.
    events = Events()
    out = cell.run_policy(
        "arm",
        n_steps=60,
        action_horizon=8,
        policy_config={"execution_horizon": 8, "latency_s": 0.1},
        async_rtc=True,
        observer=events,
    )
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    _check_against_events(j, events)
    hits, blocks = events.seams()
    assert (j["chunk_prefetch_hits"], j["chunk_prefetch_blocks"]) == (hits, blocks)
    assert j["hold_steps"] > 0 and blocks > 0  # the case exercised
    # every merged chunk, and perhaps one still in flight when the budget ran out
    assert len(events.merges) <= j["chunk_prefetch_chunks_acquired"] <= len(events.merges) + 1


def test_an_operator_stop_with_actions_queued_counts_its_hold(cell):
    events = Events()

    def stop_at_7(step, observation):
        if step == 7:
            cell.stop_policy("arm")

    out = cell.run_policy(
        "arm",
        n_steps=50,
        action_horizon=10,
        policy_config={"execution_horizon": 10},
        async_rtc=False,
        on_frame=stop_at_7,
        observer=events,
    )
    j = envelope_json(out)
    assert j["stopped_reason"] == "stopped", envelope_text(out)
    # the stop's hold ran while 2 actions of the first chunk were still queued
    assert events.actions[-1]["hold"] and not any(a["hold"] for a in events.actions[:-1])
    _check_against_events(j, events)
    assert j["hold_steps"] == 1 and j["actions_applied"] == j["steps_advanced"] - 1


def test_one_robot_run_multi_policy_keys_resolve(cell):
    events = Events()
    out = cell.run_multi_policy({"arm": "mock"}, n_steps=10, observer=events)
    j = envelope_json(out)
    assert out["status"] == "success", envelope_text(out)
    # the env is keyed "robot/actuator" like the composed actions: nothing unknown, nothing
    # held (before, every key was unknown and every actuator was filled from the hold action)
    assert j["compat"]["unknown_keys"] == [] and j["compat"]["missing_keys"] == []
    assert j["compat"]["action_resolution_rate"] == 1.0
    assert j["action_resolution_rate"] == 1.0 and j["actions_applied"] == 10
    assert j["actions_applied_per_robot"] == {"arm": 10}
    executed = events.actions[0]["action"]
    assert sorted(executed) == sorted(f"arm/{k}" for k in cell.scene.robot_action_keys("arm"))
