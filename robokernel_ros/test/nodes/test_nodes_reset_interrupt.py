"""A stop, an e-stop or a deactivate during a ROS env's reset ends the reset at its next
tick, with the operator's outcome (estopped, stopped), not the reset's timeout and
env_error; the episode's trace and bag are complete.

The simulated workcell graph as real processes (sim_robot, safety_shield, estop_panel,
policy_server, runner) with one change: the gripper's reset position lies beyond its
joint limit, so the shield clips every reset command there and the robot never gets
within reset_tolerance: the reset would run its whole reset_timeout_s (10 s)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import robokernel_ros.recording  # noqa: E402, F401 - registers the rosbag2 reader with load_trace
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState  # noqa: E402
from robokernel_ros.demo import NAMESPACE, workcell_graph  # noqa: E402
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import STATUS_QOS  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402
from test_nodes_takeover import SLACK  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402
from robokernel_interfaces.srv import ListPoliciesRunning, StartPolicy, StopPolicy  # noqa: E402

NS = NAMESPACE
RESET_TIMEOUT_S = 10.0  # RosRobotEnv's default: what the reset would run without the fix
# every joint at 0 but the gripper, 0.25 rad beyond its upper limit (1.74533 rad)
UNREACHABLE = "[0.0, 0.0, 0.0, 0.0, 0.0, 2.0]"


@pytest.fixture
def unreachable_reset(processes, tmp_path, ros):
    trace_dir = tmp_path / "runs"
    nodes = workcell_graph(trace_dir=str(trace_dir))
    for node in nodes:
        if node.name == "runner":
            node.params["reset_positions"] = UNREACHABLE
        if node.name == "runner" or node.executable == "safety_shield":
            # the node tests' slack for the panel's heartbeat on a loaded machine (a full
            # run's runner latched "source lost" after 667 ms of silence while it
            # configured, with nothing pressed; a latch by press is what this test uses)
            node.params.update(SLACK)
    procs = {n.name: processes.start(n.name, n.argv()) for n in nodes}
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    # every shield of the graph (the gripper may have one of its own)
    shields = {
        n.name: ros.collect(ShieldState, f"{NS}/{n.name}/state", STATUS_QOS)
        for n in nodes
        if n.executable == "safety_shield"
    }
    assert ros.wait_for(StartPolicy, f"{NS}/start_policy", 60), processes.log(procs["runner"])
    for name in ("policy_server", "runner"):
        wait_active(ros.node, f"{NS}/{name}", timeout_s=60)
    for name, states in shields.items():
        assert ros.wait_until(lambda s=states: s and s[-1].state == "active", 30), processes.log(
            procs[name]
        )
    assert not ros.answered(
        StartPolicy, f"{NS}/start_policy", StartPolicy.Request(robot_name="no_such_robot")
    ).ok
    return procs, trace_dir, events, shields


def _ends(events) -> list[dict]:
    return [json.loads(e.data_json) for e in list(events) if e.kind == "episode.end"]


def _running(ros) -> list[str]:
    return list(ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=5).robots)


def _stop(ros) -> None:
    reply = ros.call(StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name=""), 10)
    assert reply.ok, reply.message


def _estop(ros) -> None:
    assert ros.call(Trigger, f"{NS}/estop_panel/press", timeout_s=10).success


def _deactivate(ros) -> None:
    request = ChangeState.Request()
    request.transition.id = Transition.TRANSITION_DEACTIVATE
    assert ros.call(ChangeState, f"{NS}/runner/change_state", request, timeout_s=30).success


@pytest.mark.parametrize(
    ("call", "outcome", "status"),
    [
        (_estop, "estopped", "estopped: e-stop during env.reset()"),
        (_stop, "stopped", "stopped: operator stop"),
        (_deactivate, "stopped", "stopped: operator stop (deactivated) during env.reset()"),
    ],
    ids=["estop", "stop_policy", "deactivate"],
)
def test_an_operator_call_during_the_reset_ends_it_with_its_outcome_and_a_complete_trace(
    unreachable_reset, ros, call, outcome, status
) -> None:
    procs, trace_dir, events, shields = unreachable_reset

    def clipped() -> int:
        return sum(states[-1].clipped for states in shields.values())

    before = clipped()
    started = ros.call(
        StartPolicy,
        f"{NS}/start_policy",
        StartPolicy.Request(robot_name="arm", policy_provider="remote", n_steps=500),
    )
    assert started.ok, started.message
    # In the reset: a shield clips its commands at the gripper's limit, no step has run.
    assert ros.wait_until(lambda: clipped() > before, 30), "no reset command clipped"
    assert not any(e.kind == "action" for e in list(events)), "the episode is past its reset"
    called = time.monotonic()
    call(ros)
    assert ros.wait_until(lambda: _ends(events), RESET_TIMEOUT_S), "the reset ran on"
    ended_s = time.monotonic() - called
    end = _ends(events)[-1]
    assert end["outcome"] == outcome and status in end["status"], end
    assert end["steps"] == 0, end
    # at its next tick, give or take a loaded machine: far from the 10 s of the timeout
    assert ended_s < RESET_TIMEOUT_S / 2, f"the episode ended {ended_s:.1f} s after the call"
    run_dirs = [p for p in Path(trace_dir).iterdir() if (p / "events.jsonl").is_file()]
    assert len(run_dirs) == 1
    trace = load_trace(run_dirs[0])
    assert trace.meta.get("outcome") == outcome
    kinds = [e.kind for e in trace.events]
    # the episode's events, the shields' report the last before episode.end (the reset's
    # commands are the episode's), nothing after it
    assert kinds[0] == "episode.start" and kinds[-2:] == ["shield.report", "episode.end"], kinds
    episode = kinds
    assert ros.wait_until(lambda: not _running(ros), 15)  # the rollout closed its bag
    bag = load_trace(run_dirs[0] / "bag")
    assert [e.kind for e in bag.events][: len(episode)] == episode
