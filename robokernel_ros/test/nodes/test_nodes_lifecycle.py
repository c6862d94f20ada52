"""The runner and the policy_server as lifecycle nodes, between real processes: each one
through configure / activate / deactivate / activate / cleanup (over ~/change_state, as a
lifecycle manager drives them), with what each state serves; a rollout stopped by
deactivate; the runner's refusal of a policy server that is not active; autostart."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import robokernel_ros.recording  # noqa: E402, F401 - registers the rosbag2 reader with load_trace
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.ros import wire  # noqa: E402
from robokernel_ros.ros.lifecycle import LifecyclePeer, wait_active  # noqa: E402
from robokernel_ros.ros.qos import CHUNK_QOS, OBSERVATION_QOS, STATUS_QOS  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from robokernel_interfaces.msg import ActionChunk, Observation, PolicyServerStatus  # noqa: E402
from robokernel_interfaces.srv import (  # noqa: E402
    GetActionChunk,
    ListPoliciesRunning,
    RunPolicy,
)

SERVER = "robokernel_ros.nodes.policy_server"


def _server(processes, ns: str, *params: str):
    """The mock policy (chunks of 4) on a policy_server; its action keys are those of the
    first observation unless `params` name them."""
    args = ["--ros-args", "-r", f"__ns:={ns}"]
    for item in ("provider:=mock", *params):
        args += ["-p", item]
    # amplitude 0.1: a served mock gets no action limits from the robot, so its amplitude
    # is absolute; the default 0.3 takes the SO-101's gripper below its -0.17 limit at some
    # phases (seeded per episode), every action refused, and the run ends error
    args += ["-p", 'policy_config_json:=\'{"execution_horizon": 4, "amplitude": 0.1}\'']
    return processes.python(f"policy_server{ns.replace('/', '_')}", SERVER, *args)


def _observation(step: int) -> Observation:
    return wire.observation_to_msg(
        {"joint_positions": {"a": 0.0, "b": 1.0}}, run_id="lc", step=step
    )


def _chunk(ros, ns: str, step: int) -> GetActionChunk.Response:
    request = GetActionChunk.Request(observation=_observation(step))
    return ros.answered(GetActionChunk, f"{ns}/get_action_chunk", request, timeout_s=30)


def _change(peer: LifecyclePeer, transition: str, expect: str) -> None:
    assert peer.change(transition, timeout_s=60), f"{transition} of {peer.target} failed"
    assert peer.state(10) == expect


def test_policy_server_transitions_and_what_each_state_serves(processes, ros) -> None:
    ns = "/lc_ps"
    server = _server(processes, ns, "action_keys:=[a,b]")
    statuses = ros.collect(PolicyServerStatus, f"{ns}/policy_server/status", STATUS_QOS)
    chunks = ros.collect(ActionChunk, f"{ns}/action_chunk", CHUNK_QOS)
    peer = LifecyclePeer(ros.node, f"{ns}/policy_server")
    assert peer.state(60) == "unconfigured", processes.log(server)
    # Unconfigured: no policy, the heartbeat says so, a chunk is refused naming the state.
    assert ros.wait_until(lambda: statuses, 30)
    assert not statuses[-1].ready and "unconfigured" in statuses[-1].detail
    refused = _chunk(ros, ns, 0)
    assert not refused.ok and "unconfigured" in refused.message, refused.message
    # Unconfigured, the data path does not exist (configure creates it, cleanup destroys it).
    assert ros.node.count_publishers(f"{ns}/action_chunk") == 0
    assert ros.node.count_subscribers(f"{ns}/observation") == 0

    _change(peer, "configure", "inactive")
    assert "loaded in" in processes.log(server)
    assert ros.wait_until(lambda: ros.node.count_publishers(f"{ns}/action_chunk") == 1, 30)
    refused = _chunk(ros, ns, 1)
    assert not refused.ok and "inactive" in refused.message, refused.message
    assert ros.wait_until(lambda: "inactive" in statuses[-1].detail, 10)
    assert not statuses[-1].ready
    # An observation on the topic while inactive is taken and not answered.
    publisher = ros.node.create_publisher(Observation, f"{ns}/observation", OBSERVATION_QOS)
    assert ros.wait_until(lambda: publisher.get_subscription_count() >= 1, 30)
    publisher.publish(_observation(2))
    assert ros.wait_until(lambda: "observation of step 2 ignored" in processes.log(server), 30)

    _change(peer, "activate", "active")
    ros.wait_matched(f"{ns}/action_chunk", 30)  # the collector matched configure's publisher
    answered = _chunk(ros, ns, 3)
    assert answered.ok and answered.chunk.obs_step == 3 and answered.chunk.horizon == 4
    assert ros.wait_until(lambda: statuses[-1].ready, 10)
    publisher.publish(_observation(4))
    assert ros.wait_until(lambda: any(c.obs_step == 4 for c in chunks), 30)
    assert [c.obs_step for c in chunks] == [4], (
        "the observation of the inactive server was answered"
    )

    _change(peer, "deactivate", "inactive")
    refused = _chunk(ros, ns, 5)
    assert not refused.ok and "inactive" in refused.message, refused.message
    _change(peer, "activate", "active")
    assert _chunk(ros, ns, 6).ok
    _change(peer, "deactivate", "inactive")
    _change(peer, "cleanup", "unconfigured")
    refused = _chunk(ros, ns, 7)
    assert not refused.ok and "unconfigured" in refused.message, refused.message
    assert ros.wait_until(lambda: "freed" in statuses[-1].detail and not statuses[-1].ready, 10)
    assert ros.wait_until(
        lambda: (
            ros.node.count_publishers(f"{ns}/action_chunk") == 0
            and publisher.get_subscription_count() == 0
        ),
        30,
    ), "cleanup left the action_chunk publisher or the observation subscription"
    # configured again: the policy is loaded again, the data path made again
    _change(peer, "configure", "inactive")
    _change(peer, "activate", "active")
    assert _chunk(ros, ns, 8).ok
    assert ros.wait_until(lambda: publisher.get_subscription_count() == 1, 30)
    ros.wait_matched(f"{ns}/action_chunk", 30)  # ... and the publisher configure made again
    publisher.publish(_observation(9))
    assert ros.wait_until(lambda: any(c.obs_step == 9 for c in chunks), 30)
    assert server.poll() is None, processes.log(server)


def _run(ros, ns: str, provider: str = "mock") -> RunPolicy.Response:
    # synchronous (async_rtc off): each step waits for its chunk, whatever the latency
    request = RunPolicy.Request(robot_name="arm", policy_provider=provider, n_steps=5, async_rtc=0)
    return ros.call(RunPolicy, f"{ns}/run_policy", request, timeout_s=60)


def _remote_refusal(ros, ns: str) -> str:
    """The refusal of a remote run once the runner has discovered the policy server (its
    get_state client matched: until then the refusal says the server did not answer)."""
    deadline = time.monotonic() + 60
    while True:
        refused = _run(ros, ns, "remote")
        assert not refused.ok, "the runner started against a policy server that is not active"
        if "no answer" not in refused.message or time.monotonic() > deadline:
            return refused.message


def _idle(ros, ns: str) -> bool:
    listed = ros.call(ListPoliciesRunning, f"{ns}/list_policies_running", timeout_s=10)
    return listed.ok and list(listed.robots) == []


def test_runner_transitions_refusals_and_a_deactivate_mid_run(processes, ros, sim_runner) -> None:
    ns = "/lc_rn"
    proc, trace_dir = sim_runner(ns, "server_ready_timeout_s:=2.0", autostart=False)
    states = ros.collect(String, f"{ns}/runner/state", STATUS_QOS)
    peer = LifecyclePeer(ros.node, f"{ns}/runner")
    assert peer.state(60) == "unconfigured", processes.log(proc)
    # Unconfigured: a long call is refused naming the state; the quick calls answer.
    refused = _run(ros, ns)
    assert not refused.ok and "unconfigured" in refused.message, refused.message
    assert _idle(ros, ns)

    _change(peer, "configure", "inactive")
    assert ros.wait_until(lambda: states and json.loads(states[-1].data)["state"] == "inactive", 10)
    state = json.loads(states[-1].data)
    assert state["configure_s"] > 0 and "configured in" in state["detail"], state
    refused = _run(ros, ns)
    assert not refused.ok and "inactive" in refused.message, refused.message

    _change(peer, "activate", "active")
    assert _run(ros, ns).ok

    # The policy server is not known to be active: refused, naming it and its state.
    refused = _run(ros, ns, "remote")
    assert not refused.ok and f"{ns}/policy_server" in refused.message, refused.message
    assert "no answer" in refused.message, refused.message
    _server(processes, ns)
    server = LifecyclePeer(ros.node, f"{ns}/policy_server")
    assert server.state(60) == "unconfigured"
    refused = _remote_refusal(ros, ns)
    assert f"{ns}/policy_server" in refused and "'unconfigured'" in refused, refused
    _change(server, "configure", "inactive")
    refused = _remote_refusal(ros, ns)
    assert "'inactive'" in refused, refused
    _change(server, "activate", "active")
    ran = _run(ros, ns, "remote")
    assert ran.ok, ran.message

    # Deactivate mid-run: the rollout is stopped with hold before the transition returns,
    # the episode ends "stopped" (deactivated) with its trace and bag complete.
    box: dict = {}
    request = RunPolicy.Request(
        robot_name="arm", policy_provider="mock", n_steps=100000, control_frequency=50.0
    )
    request.extra_json = json.dumps({"fast_mode": False})  # wall-clock steps: time to act
    thread = threading.Thread(
        target=lambda: box.update(
            response=ros.call(RunPolicy, f"{ns}/run_policy", request, timeout_s=120)
        ),
        daemon=True,
    )
    thread.start()
    assert ros.wait_until(lambda: not _idle(ros, ns), 30), box.get("response")
    _change(peer, "deactivate", "inactive")
    assert _idle(ros, ns), "deactivate returned with a rollout still running"
    thread.join(timeout=30)
    response = box["response"]
    assert not response.ok and "lifecycle (deactivated)" in response.message, response.message
    report = json.loads(response.report_json)
    assert report["stopped_reason"] == "deactivated", (response.message, report)
    trace = load_trace(report["trace_path"])
    (end,) = trace.of_kind("episode.end")
    assert end.data["outcome"] == "stopped", end.data
    assert 0 < len(trace.of_kind("action")) < 100000
    bag = load_trace(Path(report["bag_path"]))
    assert [e.kind for e in bag.events] == [e.kind for e in trace.events]
    refused = _run(ros, ns)
    assert not refused.ok and "inactive" in refused.message, refused.message

    # The same for an action (an eval): its goal ends with the episode stopped, deactivated.
    _change(peer, "activate", "active")
    assert _run(ros, ns).ok
    from robokernel_ros.ros.client import WorkcellClient

    feedback: list = []
    with WorkcellClient(ns, server_timeout_s=60.0) as client:
        eval_box: dict = {}
        goal = threading.Thread(
            target=lambda: eval_box.update(result=client.eval_policy(
                robot_name="arm", policy_provider="mock", n_episodes=3, max_steps=100000,
                extra={"fast_mode": False, "control_frequency": 50.0}, feedback=feedback.append,
            )),
            daemon=True,
        )  # fmt: skip
        goal.start()
        assert ros.wait_until(lambda: any(m.step >= 5 for m in feedback), 60), feedback[-1:]
        _change(peer, "deactivate", "inactive")
        goal.join(timeout=30)
    result = eval_box["result"]
    assert not result.ok and "stopped by the runner's lifecycle (deactivated)" in result.message
    (episode,) = result.report["episodes"]  # no episode after the deactivate
    assert episode["stopped_reason"] == "deactivated" and episode["outcome"] == "stopped"
    assert load_trace(episode["trace_path"]).of_kind("episode.end")
    _change(peer, "cleanup", "unconfigured")
    assert ros.wait_until(lambda: json.loads(states[-1].data)["state"] == "unconfigured", 10)
    refused = _run(ros, ns)
    assert not refused.ok and "unconfigured" in refused.message, refused.message
    assert _idle(ros, ns)
    assert str(trace_dir) in report["trace_path"]
    assert proc.poll() is None, processes.log(proc)


def test_autostart_brings_both_up_and_a_failed_load_is_named_by_the_runner(
    processes, ros, sim_runner
) -> None:
    ns = "/lc_auto"
    proc, _ = sim_runner(ns, "server_ready_timeout_s:=2.0")
    server = _server(processes, ns, "autostart:=true")
    wait_active(ros.node, f"{ns}/runner", timeout_s=60)
    wait_active(ros.node, f"{ns}/policy_server", timeout_s=60)
    ran = _run(ros, ns, "remote")
    assert ran.ok, ran.message
    processes.kill(server)
    # A server whose load fails stays up, unconfigured, and says why.
    bad = processes.python(
        "policy_server_bad", SERVER, "--ros-args", "-r", f"__ns:={ns}", "-p", "provider:=scripted",
        "-p", "policy_config_json:='{\"targets\": \"not a list\"}'", "-p", "autostart:=true",
    )  # fmt: skip
    peer = LifecyclePeer(ros.node, f"{ns}/policy_server")
    assert ros.wait_until(lambda: "failed" in processes.log(bad), 60), processes.log(bad)
    assert peer.state(30) == "unconfigured"
    refused = _remote_refusal(ros, ns)
    assert "'unconfigured'" in refused and "targets" in refused, refused  # + the heartbeat's reason
    assert bad.poll() is None and proc.poll() is None


def test_autostart_with_a_refused_configuration_exits_2_naming_the_parameter(processes) -> None:
    proc = processes.python(
        "runner_bad", "robokernel_ros.nodes.runner", "--ros-args", "-r", "__ns:=/lc_bad",
        "-p", "env:=ros", "-p", "autostart:=true",
    )  # fmt: skip
    assert proc.wait(timeout=60) == 2, processes.log(proc)
    log = processes.log(proc)
    assert "joints" in log and "env=ros needs the joint names" in log, log
