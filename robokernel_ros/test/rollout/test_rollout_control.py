"""start/stop races, list_policies_running vs stop_policy, scene mutations refused during a rollout."""

from __future__ import annotations

import threading
import time

import pytest
from robokernel_ros.policies.base import register_provider
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import SceneBusyError, SimWorkcell, envelope_json, envelope_text

GATE = threading.Event()
ENTERED = threading.Event()


class GatedPolicy(MockPolicy):
    """Its construction waits for GATE: the rollout is claimed but has not drawn a frame."""

    provider = "gated"

    def __init__(self, **config):
        ENTERED.set()
        assert GATE.wait(30), "test gate never opened"
        super().__init__(**config)


register_provider("gated", GatedPolicy, replace=True)


@pytest.fixture
def gate():
    GATE.clear()
    ENTERED.clear()
    yield GATE
    GATE.set()


@pytest.fixture(scope="module")
def cell():
    c = SimWorkcell(trace_dir=None, max_concurrent=1)
    c.add_robot("arm", "so101")
    c.add_robot("arm2", "so101", pos=(0.5, 0, 0))
    yield c
    c.close()


def running(cell):
    return envelope_json(cell.list_policies_running())


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_start_returns_at_once_and_wait_gives_the_result(cell):
    t0 = time.monotonic()
    out = cell.start_policy("arm", n_steps=30, policy_config={"latency_s": 0.01})
    assert out["status"] == "success" and time.monotonic() - t0 < 1.0
    assert envelope_json(out)["robot_name"] == "arm"
    assert "arm" in running(cell)["robots"]
    busy = cell.start_policy("arm", n_steps=5)
    assert busy["status"] == "error" and "already running a policy (start_policy" in envelope_text(
        busy
    )
    assert "stop_policy(robot_name='arm')" in envelope_text(busy)
    result = cell.wait_policy("arm", timeout_s=30)
    assert result["status"] == "success" and envelope_json(result)["steps_advanced"] == 30
    assert running(cell)["count"] == 0


def test_stop_before_the_first_frame(cell, gate):
    out = cell.start_policy("arm", policy_provider="gated", n_steps=100)
    assert out["status"] == "success"
    assert ENTERED.wait(10)  # claimed and building its policy: no frame yet
    stop = cell.stop_policy("arm")
    assert stop["status"] == "success" and envelope_json(stop)["stopped"] == ["arm"]
    gate.set()
    result = envelope_json(cell.wait_policy("arm", timeout_s=30))
    assert result["stopped_reason"] == "stopped" and result["steps_advanced"] == 0
    assert result["stopped_before_first_frame"] is True


def test_stop_while_queued_and_list_agrees_with_stop(cell, gate):
    assert cell.start_policy("arm", policy_provider="gated", n_steps=100000)["status"] == "success"
    assert ENTERED.wait(10)
    queued = cell.start_policy("arm2", n_steps=50)  # max_concurrent=1: waits behind 'arm'
    assert queued["status"] == "success"
    listing = running(cell)
    states = {r["robots"][0]: r["state"] for r in listing["running"]}
    assert states == {"arm": "running", "arm2": "queued"}
    stop = cell.stop_policy("arm2")
    assert stop["status"] == "success" and envelope_json(stop)["states"] == {"arm2": "queued"}
    # the queued rollout is still in flight until its thread sees the stop: list and stop agree
    assert "arm2" in running(cell)["robots"]
    gate.set()
    assert cell.stop_policy("arm")["status"] == "success"
    arm = envelope_json(cell.wait_policy("arm", timeout_s=30))
    arm2 = envelope_json(cell.wait_policy("arm2", timeout_s=30))
    assert arm["stopped_reason"] == "stopped" and arm2["stopped_before_first_frame"] is True
    assert arm2["steps_advanced"] == 0
    assert running(cell)["count"] == 0
    idle = cell.stop_policy("arm2")
    assert idle["status"] == "error" and "policy was not running on 'arm2'" in envelope_text(idle)


def test_idle_stop_names_the_rollout_in_flight(cell):
    assert (
        cell.start_policy("arm", n_steps=100000, policy_config={"latency_s": 0.002})["status"]
        == "success"
    )
    try:
        assert wait_for(lambda: "arm" in running(cell)["robots"])
        idle = cell.stop_policy("arm2")
        text = envelope_text(idle)
        assert idle["status"] == "error"
        assert "policy was not running on 'arm2'" in text and "'arm' (start_policy" in text
        assert "stop_policy(robot_name='arm')" in text
        assert running(cell)["robots"] == ["arm"]  # the same population, at the same instant
    finally:
        cell.stop_policy("arm")
        cell.wait_policy("arm", timeout_s=30)


def test_blocking_run_policy_is_listed_and_stopped_by_a_bare_stop(cell):
    box = {}
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "out", cell.run_policy("arm", n_steps=100000, policy_config={"latency_s": 0.002})
        )
    )
    thread.start()
    try:
        assert wait_for(lambda: running(cell)["count"] == 1)
        entry = running(cell)["running"][0]
        assert entry["robots"] == ["arm"] and entry["call"] == "run_policy"
        assert wait_for(
            lambda: running(cell)["running"] and running(cell)["running"][0]["step"] > 2
        )
        stop = cell.stop_policy()  # no robot_name: every rollout (the e-stop fanout's shape)
        assert envelope_json(stop)["stopped"] == ["arm"]
    finally:
        thread.join(30)
    result = envelope_json(box["out"])
    assert result["stopped_reason"] == "stopped" and 2 < result["steps_advanced"] < 100000
    assert running(cell)["count"] == 0
    assert envelope_text(cell.stop_policy()) == "no policies running: nothing to stop"


MUTATIONS = [
    ("add_robot", ("arm3", "so101"), {}),
    ("remove_robot", ("arm2",), {}),
    ("add_object", ("cube",), {}),
    ("remove_object", ("cube",), {}),
    ("move_object", ("cube", (0, 0, 1)), {}),
    ("add_camera", ("cam",), {"pos": (1, 1, 1)}),
    ("remove_camera", ("cam",), {}),
    ("load_scene", ("/nonexistent.xml",), {}),
    ("set_gravity", ((0, 0, -1),), {}),
    ("set_timestep", (0.001,), {}),
    ("reset", (), {}),
]


def test_scene_mutations_are_refused_while_a_rollout_drives(cell, gate):
    assert cell.start_policy("arm", policy_provider="gated", n_steps=100000)["status"] == "success"
    assert ENTERED.wait(10)
    try:
        for name, args, kwargs in MUTATIONS:
            out = getattr(cell, name)(*args, **kwargs)
            text = envelope_text(out)
            assert out["status"] == "error", name
            if name in ("remove_object", "move_object", "remove_camera", "load_scene"):
                # argument errors may be reported first; the guard still must not let them through
                assert (
                    "refused" in text
                    or "no such" in text
                    or "not a camera" in text
                    or "does not exist" in text
                    or "cannot" in text
                ), text
                continue
            assert f"{name} refused" in text and "'arm' (start_policy" in text, text
            assert "stop_policy(robot_name='arm')" in text
        with pytest.raises(SceneBusyError):
            cell.scene.add_object("cube")
        assert cell.scene.robots() == ["arm", "arm2"] and cell.scene.objects() == []
    finally:
        gate.set()
        cell.stop_policy("arm")
        cell.wait_policy("arm", timeout_s=30)
    out = cell.add_object("cube", pos=(0.3, 0.3, 0.05))
    assert out["status"] == "success" and "cube" in envelope_json(out)["objects"]
    assert cell.remove_object("cube")["status"] == "success"


def test_stop_reports_the_last_error(cell):
    out = cell.run_policy("arm2", n_steps=5, policy_config={"fail_on_call": 0})
    assert out["status"] == "error"
    idle = cell.stop_policy("arm2")
    assert "ended in error" in envelope_text(idle) and "policy_error" in envelope_text(idle)
