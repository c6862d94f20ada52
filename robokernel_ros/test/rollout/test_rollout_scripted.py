"""The demo and benchmark providers: the scripted one's acceleration bound and chunks
that continue the queued actions (realtime chunk swaps do not jump), and the mock's
plain-Python short chunks."""

from __future__ import annotations

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.policies.base import ActionRows
from robokernel_ros.policies.scripted import ScriptedPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json

KEYS = ["a", "b"]


def _policy(**config) -> ScriptedPolicy:
    policy = ScriptedPolicy(targets=[{"a": 1.0, "b": -0.5}, {"a": 0.0}], **config)
    policy.set_robot_state_keys(KEYS)
    policy.reset()
    return policy


def _commands(policy: ScriptedPolicy, steps: int) -> list[dict[str, float]]:
    """Closed loop on a perfect tracker: the joints are where the last command put them."""
    joints = {"a": 0.0, "b": 0.0}
    out = []
    for _ in range(steps):
        (action,) = policy.get_actions({"joint_positions": joints})
        out.append(action)
        joints = dict(action)
    return out


def test_max_accel_ramps_and_brakes_within_both_bounds():
    commands = _commands(_policy(max_delta=0.05, max_accel=0.005, tolerance=0.01), 200)
    for key in KEYS:
        values = [0.0] + [c[key] for c in commands]
        speeds = [b - a for a, b in zip(values, values[1:], strict=False)]
        assert max(abs(v) for v in speeds) <= 0.05 + 1e-12
        changes = [b - a for a, b in zip(speeds, speeds[1:], strict=False)]
        assert max(abs(c) for c in changes) <= 0.005 + 1e-12, key
    # it still gets there: the first waypoint, then the second
    assert commands[-1]["a"] == pytest.approx(0.0, abs=0.01)
    assert any(c["a"] == pytest.approx(1.0, abs=0.01) for c in commands)
    # without max_accel the speed jumps from rest to max_delta at once
    plain = _commands(_policy(max_delta=0.05, tolerance=0.01), 3)
    assert plain[0]["a"] == pytest.approx(0.05)


def test_max_accel_is_refused_unless_a_positive_number():
    with pytest.raises(ValueError, match=r"policy_config\['max_accel'\]=0: must be a positive"):
        ScriptedPolicy(targets=[{"a": 1.0}], max_accel=0)


def test_a_new_chunk_starts_with_the_queued_actions():
    policy = _policy(max_delta=0.05, max_accel=0.01, execution_horizon=6)
    first = policy.get_actions({"joint_positions": {"a": 0.0, "b": 0.0}})
    queued = first[3:]  # three not executed yet when the next observation is taken
    second = policy.get_actions({"joint_positions": first[2]}, queued_actions=queued)
    assert len(second) == 6
    assert second[:3] == queued  # the executing part is kept as it is
    speeds = [second[i + 1]["a"] - second[i]["a"] for i in range(5)]
    assert all(abs(b - a) <= 0.01 + 1e-12 for a, b in zip(speeds, speeds[1:], strict=False))


def test_realtime_chunked_rollout_has_no_jump_at_chunk_seams(tmp_path):
    """async_rtc with chunks of 10: every executed command moves by at most max_delta
    (before, a chunk planned 10 steps ahead replaced the queue with a jump)."""
    cell = SimWorkcell(trace_dir=tmp_path)
    cell.add_robot("arm", "so101")
    config = {
        "targets": [{"shoulder_pan": 0.6, "elbow_flex": 0.5}, {"shoulder_pan": -0.4}],
        "max_delta": 0.03,
        "max_accel": 0.006,
        "execution_horizon": 10,
    }
    out = cell.run_policy("arm", policy_provider="scripted", policy_config=config,
                          n_steps=150, async_rtc=True, seed=0, bag=False)  # fmt: skip
    result = envelope_json(out)
    assert out["status"] == "success", out
    actions = [e.data for e in load_trace(result["trace_path"]).of_kind("action")]
    executed = [a["action"]["shoulder_pan"] for a in actions if not a["hold"]]
    assert len(executed) > 100
    steps = [abs(b - a) for a, b in zip(executed, executed[1:], strict=False)]
    assert max(steps) <= 0.03 + 1e-9, max(steps)
    cell.close()


def test_mock_short_chunks_equal_the_numpy_path():
    """The mock computes chunks up to 16 actions in plain Python (cheaper on an idle
    server); the values are the numpy path's, bit for bit."""
    import robokernel_ros.policies.mock as mock

    def chunks(python_horizon: int, limits: dict) -> list:
        saved, mock._PYTHON_HORIZON = mock._PYTHON_HORIZON, python_horizon
        try:
            out = []
            for horizon in (2, 8, 16):
                policy = mock.MockPolicy(seed=3, execution_horizon=horizon)
                policy.set_robot_state_keys(["a", "b", "gripper"])
                policy.set_action_limits(limits)
                policy.reset(seed=3)
                out.extend(a for _ in range(20) for a in policy.get_actions({}))
            return out
        finally:
            mock._PYTHON_HORIZON = saved

    for limits in ({"a": (-1.0, 1.0), "b": (0.0, 2.0)}, {}):  # some keys clipped; none
        python, numpy = chunks(16, limits), chunks(0, limits)
        assert len(python) == 520 and python == numpy
        assert all(list(action) == ["a", "b", "gripper"] for action in python)


def test_mock_action_rows_are_its_actions_row_major():
    """get_action_rows (what the policy server sends) holds get_actions' values, row
    after row, for each of the mock's paths; columns the values lack are NaN."""
    import math

    import robokernel_ros.policies.mock as mock

    def pair(**config):
        policies = []
        for _ in range(2):
            policy = mock.MockPolicy(seed=5, **config)
            policy.set_robot_state_keys(["a", "b", "gripper"])
            policy.set_action_limits({"a": (-1.0, 1.0), "b": (0.0, 2.0)})
            policy.reset(seed=5)
            policies.append(policy)
        return policies

    for config in (
        {"execution_horizon": 8},  # plain Python
        {"execution_horizon": 40},  # numpy
        {"execution_horizon": 4, "noise": 0.1},  # numpy with noise
        {"execution_horizon": 3, "empty_chunks": [1]},
    ):
        by_dicts, by_rows = pair(**config)
        for _ in range(4):
            actions = by_dicts.get_actions({})
            rows = by_rows.get_action_rows({}, keys=("a", "b", "gripper"))
            assert rows.horizon == len(actions)
            assert rows.keys == ["a", "b", "gripper"]
            assert list(rows.values) == [a[k] for a in actions for k in rows.keys]
            assert rows.values == ActionRows.from_actions(actions, rows.keys).values

    # extra keys the columns do not name are left out; a column the actions lack is NaN
    by_dicts, by_rows = pair(execution_horizon=2, extra_keys=["junk"])
    actions = by_dicts.get_actions({})
    rows = by_rows.get_action_rows({}, keys=("a", "missing"))
    assert rows.keys == ["a", "missing"] and rows.horizon == 2
    assert rows.values[0::2] == [a["a"] for a in actions]
    assert all(math.isnan(v) for v in rows.values[1::2])
    # without columns: the first action's keys
    assert ActionRows.from_actions(actions).keys == ["a", "b", "gripper", "junk"]
    assert ActionRows.from_actions([]) == ActionRows([], [], 0)
