"""SimWorkcell's operator channel (latched e-stop, clear_fault, reset_done, verdict) and its
privileged_every pass-through, on real MuJoCo."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from robokernel_ros.policies.base import register_provider
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text

GATE = threading.Event()
ENTERED = threading.Event()


class GatedOperatorPolicy(MockPolicy):
    """Its construction waits for GATE: the rollout is claimed but has no episode yet."""

    provider = "gated_operator"

    def __init__(self, **config):
        ENTERED.set()
        assert GATE.wait(30), "test gate never opened"
        super().__init__(**config)


register_provider("gated_operator", GatedOperatorPolicy, replace=True)


@pytest.fixture
def cell(tmp_path):
    c = SimWorkcell(trace_dir=tmp_path / "runs", bag=False)
    c.add_robot("arm", "so101")
    yield c
    GATE.set()
    c.clear_fault()
    c.close()


def _wait_running(cell, robot="arm", timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = envelope_json(cell.list_policies_running())["running"]
        if any(r["robots"] == [robot] and r["step"] > 0 for r in running):
            return True
        time.sleep(0.01)
    return False


def _paced(cell, **kwargs):
    """A rollout paced at 50 Hz (fast_mode=False): long enough to act on while it runs."""
    out = cell.start_policy("arm", n_steps=5000, fast_mode=False, **kwargs)
    assert out["status"] == "success", envelope_text(out)
    assert _wait_running(cell)
    return out


def test_estop_ends_the_episode_estopped_and_latches_until_clear_fault(cell):
    _paced(cell)
    assert cell.estopped is False
    out = cell.estop()
    assert out["status"] == "success" and envelope_json(out)["robots"] == ["arm"]
    assert cell.estopped is True
    j = envelope_json(cell.wait_policy("arm", timeout_s=30))
    assert j["outcome"] == "estopped" and j["stopped_reason"] == "estopped"
    assert j["steps_advanced"] < 5000
    # latched for the workcell: every rollout call is refused, naming clear_fault
    for refused in (
        cell.start_policy("arm", n_steps=5),
        cell.run_policy("arm", n_steps=5),
        cell.eval_policy("arm", max_steps=5),
        cell.run_multi_policy({"arm": "mock"}, n_steps=5),
    ):
        assert refused["status"] == "error" and "clear_fault()" in envelope_text(refused)
        assert "e-stop is latched" in envelope_text(refused)
    assert envelope_json(cell.list_policies_running())["count"] == 0  # nothing was started
    cleared = cell.clear_fault()
    assert cleared["status"] == "success" and envelope_json(cleared)["was_estopped"] is True
    assert cell.estopped is False
    again = cell.run_policy("arm", n_steps=5)
    assert again["status"] == "success" and envelope_json(again)["outcome"] == "truncated"


def test_estop_before_the_first_episode_ends_it_estopped(cell):
    GATE.clear()
    ENTERED.clear()
    out = cell.start_policy("arm", policy_provider="gated_operator", n_steps=100)
    assert out["status"] == "success"
    assert ENTERED.wait(10)  # claimed, building its policy: no operator channel yet
    cell.estop()
    GATE.set()
    j = envelope_json(cell.wait_policy("arm", timeout_s=30))
    assert j["steps_advanced"] == 0 and j["stopped_before_first_frame"] is True
    assert j["outcome"] == "estopped" and j["stopped_reason"] == "estopped"


def test_estop_with_nothing_running_still_latches(cell):
    out = cell.estop()
    assert out["status"] == "success" and "no rollout was running" in envelope_text(out)
    refused = cell.start_policy("arm", n_steps=5)
    assert refused["status"] == "error" and "clear_fault()" in envelope_text(refused)


def test_verdict_decides_the_running_episode(cell):
    _paced(cell)
    out = cell.verdict("success", note="looks right")
    assert out["status"] == "success" and envelope_json(out)["judged"] == ["arm"]
    cell.stop_policy("arm")
    j = envelope_json(cell.wait_policy("arm", timeout_s=30))
    assert j["outcome"] == "success"  # the stop's outcome, overridden by the verdict


def test_a_verdict_after_the_episode_updates_its_trace(cell):
    out = cell.run_policy("arm", n_steps=5)
    j = envelope_json(out)
    assert j["outcome"] == "truncated"
    given = cell.verdict("failure", note="dropped it", robot_name="arm")
    assert given["status"] == "success", envelope_text(given)
    meta = json.loads((Path(j["trace_path"]) / "meta.json").read_text())
    assert meta["outcome"] == "failure" and meta["verdict"]["note"] == "dropped it"


def test_verdict_and_reset_done_refusals(cell):
    bad = cell.verdict("maybe")
    assert bad["status"] == "error" and "outcome='maybe'" in envelope_text(bad)
    assert "['success', 'failure']" in envelope_text(bad)
    bad = cell.verdict("success", note=3)
    assert bad["status"] == "error" and "note=3" in envelope_text(bad)
    nothing = cell.verdict("success")
    assert nothing["status"] == "error" and "no episode has run" in envelope_text(nothing)
    idle = cell.reset_done()
    assert idle["status"] == "error" and "no episode is running" in envelope_text(idle)
    bad = cell.reset_done(robot_name=5)
    assert bad["status"] == "error" and "robot_name=5" in envelope_text(bad)


def test_reset_done_reaches_the_running_episode(cell):
    _paced(cell)
    try:
        out = cell.reset_done("arm")
        assert out["status"] == "success" and envelope_json(out)["confirmed"] == ["arm"]
        other = cell.reset_done("arm2")
        assert other["status"] == "error" and "'arm2'" in envelope_text(other)
    finally:
        cell.stop_policy("arm")
        cell.wait_policy("arm", timeout_s=30)


# --- privileged_every ------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "3", None])
def test_privileged_every_is_refused_by_name(value):
    with pytest.raises(ValueError, match=r"privileged_every=.*positive whole number"):
        SimWorkcell(trace_dir=None, privileged_every=value)


def test_privileged_every_reaches_the_runner(tmp_path):
    with SimWorkcell(trace_dir=tmp_path, bag=False, privileged_every=3) as cell:
        cell.add_robot("arm", "so101")
        steps: list[int] = []

        def watch(event):
            if event.kind == "privileged":
                steps.append(event.step)

        out = cell.run_policy("arm", n_steps=10, observer=watch)
        assert out["status"] == "success", envelope_text(out)
    assert steps == [0, 3, 6, 9, 10]  # every 3rd step and the final observation
