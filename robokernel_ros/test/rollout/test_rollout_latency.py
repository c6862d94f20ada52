"""eval_policy's latency_s (the virtual clock's inference latency), the scripted policy's
injected inference time, and the trace's merges that dropped actions: what
bench/fidelity.py compares with the ROS workcell's wall clock."""

from __future__ import annotations

import time

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.policies.scripted import ScriptedPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json
from robokernel_ros.scoring import TimingScorer, score_trace

CONFIG = {
    "targets": [{"shoulder_pan": 0.6, "elbow_flex": 0.5}, {"shoulder_pan": -0.4}],
    "max_delta": 0.04,
    "max_accel": 0.008,
    "execution_horizon": 10,
}


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    cell = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"), bag=False)
    cell.add_robot("arm", "so101")
    yield cell
    cell.close()


def _eval(cell, **kwargs):
    kwargs = {"policy_provider": "scripted", "policy_config": CONFIG, "n_episodes": 1,
              "max_steps": 60, "seed": 0, "async_rtc": True, **kwargs}  # fmt: skip
    return cell.eval_policy("arm", **kwargs)


@pytest.mark.parametrize(("latency_s", "delay"), [(0.0, 1), (0.03, 2), (0.08, 5)])
def test_latency_s_fixes_every_merge_delay_on_the_virtual_clock(cell, latency_s, delay):
    out = _eval(cell, latency_s=latency_s)
    assert out["status"] == "success", out
    trace = load_trace(envelope_json(out)["episodes"][0]["trace_path"])
    assert trace.meta["timing"]["latency_s"] == latency_s
    merges = [e.data for e in trace.events if e.kind == "chunk.merge"]
    assert len(merges) >= 5
    assert all(m["arrival_step"] - m["obs_step"] == delay for m in merges)
    assert all(m["inference_s"] == latency_s for m in merges)
    # Chunks of 8 (action_horizon) refilled at 4 left, aligned by the robot's progress:
    # the first chunk found the robot holding (nothing dropped); a refill drops what the
    # robot executed during its delay: all `delay` steps' actions while the 4 queued
    # last, the 4 queued when the delay is longer (the robot then held the rest).
    executed = min(delay, 4)
    assert [m["dropped"] for m in merges] == [0] + [executed] * (len(merges) - 1)
    scored = score_trace(trace, [TimingScorer()])
    assert scored["dropped_merges"] == len(merges) - 1
    assert scored["dropped_actions"] == executed * (len(merges) - 1)
    # holds: the first chunk's wait, then, for a delay past 4 steps, delay - 4 per cycle
    # (the last cycle may be cut short by the end of the episode)
    holds = scored["holds"]
    per_cycle = delay - executed
    assert delay + per_cycle * (len(merges) - 1) <= holds <= delay + per_cycle * len(merges)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"latency_s": -0.01}, r"latency_s=-0.01: must be finite seconds >= 0"),
        ({"latency_s": float("nan")}, r"latency_s=nan: must be finite seconds >= 0"),
        ({"latency_s": True}, r"latency_s=True: must be finite seconds >= 0"),
        ({"latency_s": 0.03, "async_rtc": False}, r"latency_s=0.03: only the realtime mode"),
        ({"latency_s": 0.03, "fast_mode": False}, r"latency_s=0.03: a paced call"),
    ],
)
def test_latency_s_is_refused_by_name_outside_its_domain(cell, kwargs, message):
    import re

    out = _eval(cell, **kwargs)
    assert out["status"] == "error"
    assert re.search(message, out["content"][0]["text"]), out


def test_scripted_latency_s_sleeps_in_every_inference_and_is_checked():
    policy = ScriptedPolicy(targets=[{"a": 1.0}], latency_s=0.05)
    policy.set_robot_state_keys(["a"])
    policy.reset()
    started = time.monotonic()
    policy.get_actions({"joint_positions": {"a": 0.0}})
    assert time.monotonic() - started >= 0.05
    for bad in (-0.1, float("inf"), "0.1"):
        with pytest.raises(ValueError, match=r"policy_config\['latency_s'\]=.*finite seconds >= 0"):
            ScriptedPolicy(targets=[{"a": 1.0}], latency_s=bad)
