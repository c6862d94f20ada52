"""The simulated workcell graph (sim_workcell.launch.py's nodes, from the same config files)
as real processes: the panel's e-stop during a rollout (one press stops the runner and the
shield), the panel killed (both latch), policy_server killed mid-episode, runner SIGKILL."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import robokernel_ros.recording  # noqa: E402, F401 - registers the rosbag2 reader with load_trace
from robokernel_ros.demo import NAMESPACE, workcell_graph  # noqa: E402
from robokernel_ros.kernel import load_trace  # noqa: E402
from robokernel_ros.nodes.runner import EVENTS_QOS  # noqa: E402
from robokernel_ros.ros.lifecycle import wait_active  # noqa: E402
from robokernel_ros.ros.qos import STATUS_QOS  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from robokernel_interfaces.msg import KernelEvent, ShieldState  # noqa: E402
from robokernel_interfaces.srv import ListPoliciesRunning, RunPolicy, StartPolicy  # noqa: E402

NS = NAMESPACE


@pytest.fixture(scope="module")
def _workcell_graph(module_processes, shared_domain, tmp_path_factory):
    """The graph of `workcell`, started once for the module: (its nodes by name, the
    processes by name, kept current as tests replace them, the trace dir)."""
    trace_dir = tmp_path_factory.mktemp("workcell") / "runs"
    # The shipped config: a policy server that replaces a killed one is paired with the
    # runner's get_state client 2.5-4 s after it starts late in a full run, within the
    # runner's server_ready_timeout_s (10 s; with 3 s the restarted-server test was refused).
    nodes = {n.name: n for n in workcell_graph(trace_dir=str(trace_dir))}
    procs = {name: module_processes.start(name, n.argv()) for name, n in nodes.items()}
    return nodes, procs, trace_dir


@pytest.fixture
def workcell(_workcell_graph, module_processes, ros):
    """sim_workcell's graph, one for the module's tests, handed to each at rest: a process
    an earlier test killed is started again (a test that replaces one itself registers
    its replacement in `procs`), both lifecycle nodes active, the panel released, no fault
    latched, both shields active, no policy running. Returns (processes by name, trace
    dir, the runner's events and the arm shield's states as collected from now)."""
    nodes, procs, trace_dir = _workcell_graph
    processes = module_processes
    for name, proc in list(procs.items()):
        if proc.poll() is not None:
            procs[name] = processes.start(f"{name}_again", nodes[name].argv())
    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    shield = ros.collect(ShieldState, f"{NS}/safety_shield/state", STATUS_QOS)
    gripper = ros.collect(ShieldState, f"{NS}/gripper_shield/state", STATUS_QOS)
    assert ros.wait_for(StartPolicy, f"{NS}/start_policy", 60), processes.log(procs["runner"])
    for name in ("policy_server", "runner"):  # the graph is up once both say active
        wait_active(ros.node, f"{NS}/{name}", timeout_s=60)
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    deadline = time.monotonic() + 30  # refused while the panel is not live or just released
    while not ros.call(Trigger, f"{NS}/clear_fault", timeout_s=10).success:
        assert time.monotonic() < deadline, "clear_fault refused for 30 s"
        time.sleep(0.1)
    # both shields forward: a start is refused while a shield of the robot does not
    for name, seen in (("safety_shield", shield), ("gripper_shield", gripper)):
        assert ros.wait_until(
            lambda seen=seen: seen and seen[-1].state == "active" and not seen[-1].estop_latched,
            30,
        ), (seen[-1:], processes.log(procs[name]))
    # Both start services answer this client (a refused request starts nothing).
    for srv, request in ((StartPolicy, StartPolicy.Request(robot_name="no_such_robot")),
                         (RunPolicy, RunPolicy.Request(robot_name="no_such_robot"))):  # fmt: skip
        name = f"{NS}/{'start_policy' if srv is StartPolicy else 'run_policy'}"
        assert not ros.answered(srv, name, request).ok
    assert ros.wait_until(lambda: not _running(ros), 30), "a policy still runs"
    ros.wait_matched(f"{NS}/events")  # the runner's events reach this test's collector
    return procs, trace_dir, events, shield


def _new_runs(trace_dir: Path, earlier: set[Path]) -> list[Path]:
    """The run directories (with a trace) made since `earlier` was listed."""
    return [p for p in trace_dir.iterdir() if p not in earlier and (p / "events.jsonl").is_file()]


def _listed(trace_dir: Path) -> set[Path]:
    return set(trace_dir.iterdir()) if trace_dir.is_dir() else set()


def _start(n_steps: int = 5000) -> StartPolicy.Request:
    return StartPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=n_steps, async_rtc=1
    )


def _ends(events) -> list[dict]:
    return [json.loads(e.data_json) for e in list(events) if e.kind == "episode.end"]


def _stepping(events, shield) -> bool:
    """The episode is past its reset and its commands reach the shield. The reset's ramp
    goes through the shield too, and an e-stop during the reset ends the episode only when
    the reset gives up (reset_timeout_s): the tests below mean an e-stop mid-episode."""
    return any(e.kind == "action" for e in list(events)) and (
        shield[-1].passed + shield[-1].clipped > 10
    )


def _running(ros) -> list[str]:
    return list(ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=5).robots)


def test_estop_ends_the_episode_nothing_passes_and_start_is_refused_until_clear_fault(
    workcell, ros
) -> None:
    procs, trace_dir, events, shield = workcell
    started = ros.call(StartPolicy, f"{NS}/start_policy", _start())
    assert started.ok, started.message
    assert ros.wait_until(lambda: _stepping(events, shield), 15)
    assert ros.call(Trigger, f"{NS}/estop_panel/press", timeout_s=10).success
    assert ros.wait_until(lambda: _ends(events), 10)
    assert _ends(events)[-1]["outcome"] == "estopped"
    assert ros.wait_until(lambda: shield[-1].estop_latched, 5)
    latched = shield[-1]
    forwarded = latched.passed + latched.clipped
    time.sleep(1.5)
    assert shield[-1].passed + shield[-1].clipped == forwarded, (
        "a command passed the latched shield"
    )
    refused = ros.call(StartPolicy, f"{NS}/start_policy", _start(), timeout_s=10)
    assert not refused.ok and "e-stop is latched" in refused.message
    held = ros.call(Trigger, f"{NS}/clear_fault", timeout_s=10)
    assert not held.success and "still pressed" in held.message
    assert ros.answered(Trigger, f"{NS}/estop_panel/release", Trigger.Request(), 30).success
    cleared = _clear_fault(ros)
    assert cleared.success, cleared.message
    assert ros.wait_until(lambda: not shield[-1].estop_latched, 5)
    again = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=40, async_rtc=1), timeout_s=60)  # fmt: skip
    assert again.ok, again.message
    assert json.loads(again.report_json)["actions_applied"] > 0


def _clear_fault(ros) -> Trigger.Response:
    """clear_fault, repeated (bounded) while refused only because the release is less than
    estop_timeout_s old at the runner or the shield."""
    deadline = time.monotonic() + 10
    while True:
        reply = ros.call(Trigger, f"{NS}/clear_fault", timeout_s=10)
        if reply.success or "pressed sample arrived" not in reply.message:
            return reply
        assert time.monotonic() < deadline, reply.message
        time.sleep(0.05)


def test_panel_sigkill_latches_the_runner_and_the_shield(workcell, ros, module_processes) -> None:
    procs, trace_dir, events, shield = workcell
    started = ros.call(StartPolicy, f"{NS}/start_policy", _start())
    assert started.ok, started.message
    assert ros.wait_until(lambda: _stepping(events, shield), 15)
    module_processes.kill(procs["estop_panel"])
    assert ros.wait_until(lambda: _ends(events), 10)
    assert _ends(events)[-1]["outcome"] == "estopped"
    assert ros.wait_until(lambda: shield[-1].estop_latched, 5)
    assert shield[-1].estop_latched_by == "e-stop source lost"
    refused = ros.call(StartPolicy, f"{NS}/start_policy", _start(), timeout_s=10)
    assert not refused.ok and "e-stop is latched" in refused.message
    held = ros.call(Trigger, f"{NS}/clear_fault", timeout_s=10)
    assert not held.success and "e-stop source" in held.message, held.message
    # a new panel: live after two samples, then clear_fault resumes runner and shield
    panel = next(n for n in workcell_graph(trace_dir=str(trace_dir)) if n.name == "estop_panel")
    procs["estop_panel"] = module_processes.start("estop_panel_again", panel.argv())
    deadline = time.monotonic() + 10
    while not (cleared := ros.call(Trigger, f"{NS}/clear_fault", timeout_s=10)).success:
        assert "e-stop source" in cleared.message and time.monotonic() < deadline, cleared.message
        time.sleep(0.05)
    again = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=40, async_rtc=1), timeout_s=60)  # fmt: skip
    assert again.ok, again.message


def test_a_shields_own_estop_ends_the_episode_estopped_and_latches_the_runner(
    workcell, ros
) -> None:
    """The shield's e-stop that the runner does not hear itself (its ~/estop service:
    this shield alone; under chaos, a press or a lost source the runner heard late): the
    cause is the e-stop, so the episode ends estopped, not error, and the runner's e-stop
    latches with it (named by the shield), refusing starts until clear_fault."""
    procs, trace_dir, events, shield = workcell
    started = ros.call(StartPolicy, f"{NS}/start_policy", _start())
    assert started.ok, started.message
    assert ros.wait_until(lambda: _stepping(events, shield), 15)
    assert ros.call(Trigger, f"{NS}/safety_shield/estop", timeout_s=10).success
    assert ros.wait_until(lambda: _ends(events), 10)
    end = _ends(events)[-1]
    assert end["outcome"] == "estopped", end
    refused = ros.call(StartPolicy, f"{NS}/start_policy", _start(), timeout_s=10)
    assert not refused.ok and "e-stop is latched" in refused.message, refused.message
    cleared = _clear_fault(ros)
    assert cleared.success, cleared.message
    assert ros.wait_until(lambda: not shield[-1].estop_latched, 5)


def test_policy_server_killed_mid_episode_ends_in_watchdog_and_the_next_rollout_works(
    workcell, ros, module_processes
) -> None:
    procs, trace_dir, events, shield = workcell
    earlier = _listed(trace_dir)  # the module's earlier runs
    started = ros.call(StartPolicy, f"{NS}/start_policy", _start())
    assert started.ok, started.message
    assert ros.wait_until(lambda: sum(e.kind == "chunk.merge" for e in list(events)) >= 5, 15)
    module_processes.kill(procs["policy_server"])
    assert ros.wait_until(lambda: _ends(events), 20), [e.kind for e in events][-10:]
    end = _ends(events)[-1]
    assert end["outcome"] == "watchdog", end
    assert ros.wait_until(lambda: not _running(ros), 15)
    run_dirs = _new_runs(trace_dir, earlier)
    assert len(run_dirs) == 1
    trace = load_trace(run_dirs[0])
    assert trace.of_kind("episode.end") and trace.meta.get("outcome") == "watchdog"
    bag = load_trace(run_dirs[0] / "bag")
    assert [e.kind for e in bag.events] == [e.kind for e in trace.events]
    # a server back on the same namespace: the next rollout works
    server = next(n for n in workcell_graph(trace_dir=str(trace_dir)) if n.name == "policy_server")
    procs["policy_server"] = module_processes.start("policy_server_again", server.argv())
    wait_active(ros.node, f"{NS}/policy_server", timeout_s=60)
    again = ros.call(RunPolicy, f"{NS}/run_policy", RunPolicy.Request(
        robot_name="arm", policy_provider="remote", n_steps=40, async_rtc=1), timeout_s=60)  # fmt: skip
    assert again.ok, again.message


def test_runner_sigkill_the_shield_watchdog_holds_and_the_trace_loads(
    workcell, ros, module_processes
) -> None:
    procs, trace_dir, events, shield = workcell
    earlier = _listed(trace_dir)  # the module's earlier runs
    started = ros.call(StartPolicy, f"{NS}/start_policy", _start())
    assert started.ok, started.message
    assert ros.wait_until(lambda: sum(e.kind == "action" for e in list(events)) >= 40, 15)
    timeouts = shield[-1].timeouts
    module_processes.kill(procs["runner"])
    assert ros.wait_until(lambda: shield[-1].timeouts > timeouts, 3), (
        "the shield's watchdog did not fire"
    )
    run_dirs = _new_runs(trace_dir, earlier)
    assert len(run_dirs) == 1
    trace = load_trace(run_dirs[0])
    assert trace.of_kind("episode.start") and len(trace.of_kind("action")) >= 1
    assert not trace.of_kind("episode.end")
