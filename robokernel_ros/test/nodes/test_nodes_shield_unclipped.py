"""A policy within the joint limits passes the safety_shield unclipped on the workcell (the
demo graph as real processes), resets and first chunks included: the reset ramps from
the last command to the reset pose within the limits (RosRobotEnv.reset, the runner's
limits_file), and the scripted policy's command starts at the robot's actuator target,
not at the measured pose that sags below it. Before both, the shield clipped 16.6 % of
an eval's commands at 50 Hz (bench/RESULTS.md), nearly all at resets and first chunks."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.demo import NAMESPACE, workcell_graph  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import EVENT_QOS, SENSOR_QOS, STATUS_QOS  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from robokernel_interfaces.msg import ShieldIntervention, ShieldState  # noqa: E402
from robokernel_interfaces.srv import EvalPolicy  # noqa: E402

NS = NAMESPACE


def _stamp(msg) -> float:
    return msg.stamp.sec + msg.stamp.nanosec * 1e-9


def test_an_eval_within_the_limits_is_not_clipped_at_resets_or_first_chunks(
    processes, tmp_path, ros
) -> None:
    procs = {
        n.name: processes.start(n.name, n.argv())
        for n in workcell_graph(trace_dir=str(tmp_path / "runs"))
    }
    states = ros.collect(ShieldState, f"{NS}/safety_shield/state", STATUS_QOS)
    interventions = ros.collect(ShieldIntervention, f"{NS}/safety_shield/interventions", EVENT_QOS)
    joints = ros.collect(JointState, "/joint_states", SENSOR_QOS)
    assert ros.wait_for(EvalPolicy, f"{NS}/eval_policy", 60), processes.log(procs["runner"])
    for name in ("policy_server", "runner"):
        wait_active(ros.node, f"{NS}/{name}", timeout_s=60)
    assert ros.wait_until(lambda: joints and states and states[-1].state == "active", 60), (
        states[-1:],
        processes.log(procs["safety_shield"]),
    )
    before = states[-1]
    # Two episodes: the second one's reset ramps the arm back from the last waypoint.
    request = EvalPolicy.Request(
        robot_name="arm", policy_provider="remote", n_episodes=2, max_steps=200, async_rtc=True
    )
    started = time.time()
    response = ros.call(EvalPolicy, f"{NS}/eval_policy", request, timeout_s=120)
    ended = time.time()
    assert response.ok, (response.message, processes.log(procs["runner"]))
    report = json.loads(response.report_json)
    # each ran its 200 steps (4 s: the waypoints are reached in ~2 s, the rest holds there)
    assert [ep["steps_advanced"] for ep in report["episodes"]] == [200, 200], report["episodes"]
    # The shield's counters, from a state it published after the eval ended (every 0.5 s).
    assert ros.wait_until(lambda: _stamp(states[-1]) > ended, 10), states[-1]
    after = states[-1]
    commands = sum(getattr(after, k) - getattr(before, k) for k in ("passed", "clipped", "refused"))
    assert commands > 100, commands
    assert after.refused == before.refused, after
    clipped = [
        (round(_stamp(m) - started, 3), m.guard, m.joint)
        for m in interventions
        if m.action == "clipped" and started <= _stamp(m) <= ended
    ]
    # The target: under 1 % (a stall of this loaded machine may cost one).
    assert len(clipped) < 0.01 * commands, (len(clipped), commands, clipped[:10])
