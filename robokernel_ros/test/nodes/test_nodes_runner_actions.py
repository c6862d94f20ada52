"""runner node (env=sim): the long calls as ROS 2 actions, through the Python client and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.ros.client import (  # noqa: E402
    CallInterrupted,
    EvalGoal,
    GoalTask,
    TaskResult,
    WorkcellClient,
)

NS = "/rk_actions"
PACED = {"fast_mode": False, "control_frequency": 50.0}  # wall-clock episodes: time to act


@pytest.fixture(scope="module")
def _runner(shared_sim_runner):
    return shared_sim_runner(NS)


@pytest.fixture
def runner(_runner, runner_at_rest, module_processes):
    """The module's runner (one process for its tests), at rest (conftest.runner_at_rest):
    (process, trace dir shared by the module's runs)."""
    runner_at_rest(module_processes, _runner[0], NS)
    return _runner


@pytest.fixture
def cell(runner, module_processes):
    client = WorkcellClient(NS, server_timeout_s=60.0)
    try:
        # Answered once: discovery of the runner (and its answer path) is complete.
        assert client.list_policies_running().ok, module_processes.log(runner[0])
        yield client
    finally:
        client.close()


def _in_thread(call, *args, **kwargs):
    box: dict = {}

    def target() -> None:
        box["result"] = call(*args, **kwargs)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_eval_action_streams_feedback_while_it_runs(cell) -> None:
    feedback: list = []
    arrived: list[float] = []

    def on_feedback(msg) -> None:
        feedback.append(msg)
        arrived.append(time.monotonic())

    result = cell.eval_policy(
        robot_name="arm",
        policy_provider="mock",
        n_episodes=3,
        max_steps=30,
        feedback=on_feedback,
        extra=PACED,
    )
    done_at = time.monotonic()
    assert result.ok and result.status == "success", result.message
    assert result.report["n_episodes"] == 3
    # Feedback came during the run (not only at its end), with progress that grows.
    during = [m for m, t in zip(feedback, arrived, strict=True) if t < done_at - 0.3]
    assert any(m.step > 0 for m in during), [(m.episode, m.step) for m in feedback]
    assert [m.episodes_done for m in feedback] == sorted(m.episodes_done for m in feedback)
    last = feedback[-1]
    assert last.episodes_done == 3 and last.n_episodes == 3 and last.episode == 3
    assert last.holds == sum(e["holds"] for e in result.report["episodes"])


def test_cancel_mid_eval_holds_and_leaves_a_complete_trace_and_bag(cell) -> None:
    from robokernel_ros.kernel.trace import load_trace
    from robokernel_ros.recording.reader import iter_raw

    feedback: list = []
    thread, box = _in_thread(
        cell.eval_policy,
        robot_name="arm",
        policy_provider="mock",
        n_episodes=5,
        max_steps=200,  # 4 s an episode at 50 Hz
        feedback=feedback.append,
        extra=PACED,
    )
    _wait_until(lambda: any(m.episode == 1 and m.step >= 20 for m in feedback), 60, "step 20")
    t_cancel = time.monotonic()
    assert cell.cancel() == 1
    thread.join(timeout=20)
    assert not thread.is_alive(), "the cancelled goal did not return"
    assert time.monotonic() - t_cancel < 5.0
    result = box["result"]
    assert not result.ok and result.status == "cancelled", result.message
    episodes = result.report["episodes"]
    assert 1 <= len(episodes) < 5, "the eval ran no episode after the cancel"
    last = episodes[-1]
    assert last["outcome"] == "stopped" and last["stopped_reason"] == "cancelled", last
    assert last["steps"] < 200
    trace = load_trace(last["trace_path"])
    end = [e for e in trace.events if e.kind == "episode.end"]
    assert len(end) == 1 and end[0].data["outcome"] == "stopped", end
    assert "cancelled" in end[0].data["status"]
    actions = [e for e in trace.events if e.kind == "action"]
    assert actions[-1].data["hold"], "the robot was not held at the stop"
    assert sum(1 for _ in iter_raw(Path(last["bag_path"]))) > 0, "the bag reads back"
    assert cell.list_policies_running().report["robots"] == []


def test_refused_goal_is_answered_before_anything_starts(cell, runner) -> None:
    _, trace_dir = runner
    earlier = set(trace_dir.iterdir()) if trace_dir.exists() else set()  # other tests' runs
    t0 = time.monotonic()
    result = cell.eval_policy(robot_name="arm", policy_provider="mock", n_episodes=0)
    assert time.monotonic() - t0 < 10.0
    assert not result.ok and result.status == "error"
    assert "n_episodes" in result.message, result.message
    now = set(trace_dir.iterdir()) if trace_dir.exists() else set()
    assert now == earlier, "a refused goal started a run"
    with pytest.raises(ValueError, match="n_episodes"):
        cell.eval_policy(robot_name="arm", n_episodes="three")  # refused by the client


def test_a_sent_goal_is_followed_without_blocking_and_answers_a_typed_result(cell) -> None:
    task = cell.send(EvalGoal(robot_name="arm", n_episodes=2, max_steps=30, seed=0, extra=PACED))
    assert task.status() is TaskResult.UNKNOWN or task.is_complete()
    seen = []
    deadline = time.monotonic() + 60
    while not task.is_complete():  # nav2's isTaskComplete / getFeedback loop
        assert time.monotonic() < deadline, "the goal did not complete"
        if task.feedback() is not None:
            seen.append(task.feedback())
        time.sleep(0.02)
    result = task.result()
    assert result.ok and result.task is TaskResult.SUCCEEDED, result.message
    assert task.status() is TaskResult.SUCCEEDED
    assert result.outcomes == [e["outcome"] for e in result.report["episodes"]]
    assert len(result.outcomes) == 2
    assert any(m.step > 0 for m in seen), "no feedback was seen while it ran"
    assert task.feedback().episodes_done == 2
    assert not task.cancel(), "a finished goal cannot be cancelled"


def test_a_sent_goal_cancelled_ends_canceled_with_what_ran(cell) -> None:
    task = cell.send(EvalGoal(robot_name="arm", n_episodes=5, max_steps=200, extra=PACED))
    _wait_until(lambda: task.feedback() is not None and task.feedback().step >= 10, 60, "step 10")
    assert task.cancel()
    result = task.result(timeout_s=30)
    assert result.task is TaskResult.CANCELED and task.status() is TaskResult.CANCELED
    assert not result.ok and result.status == "cancelled", result.message
    assert result.outcomes[-1] == "stopped"
    assert cell.cancel() == 0  # nothing left in flight


class _CtrlCOnceSent(GoalTask):
    """A Ctrl-C that lands the moment the goal has left, before its acceptance arrives
    (the runner may already be moving the robot)."""

    def _sent(self, request) -> None:
        super()._sent(request)
        raise KeyboardInterrupt


def test_a_ctrl_c_before_the_goal_s_acceptance_arrives_cancels_it(cell, runner) -> None:
    goal = EvalGoal(robot_name="arm", n_episodes=3, max_steps=5000, extra=PACED)
    with pytest.raises(CallInterrupted) as stop:
        cell._blocking(_CtrlCOnceSent(cell, goal.ACTION, None), goal.message())
    result = stop.value.result
    assert result.task is TaskResult.CANCELED and result.status == "cancelled", result.message
    # the cancel reached the runner before its first episode began (a full run saw 0
    # episodes) or stopped that episode: nothing ran on
    assert result.outcomes in ([], ["stopped"]), result.outcomes
    assert cell.cancel() == 0  # nothing left in flight
    # the runner is free again: no goal was left running
    running = cell.list_policies_running()
    assert running.ok and running.report["count"] == 0, running.report


def test_a_refused_goal_ends_failed(cell) -> None:
    result = cell.send(EvalGoal(robot_name="arm", n_episodes=0)).result(timeout_s=30)
    assert result.task is TaskResult.FAILED and not result.ok
    assert "n_episodes" in result.message, result.message
    clash = cell.eval_policy(robot_name="arm", n_episodes=1, max_steps=5, extra={"seed": 3})
    assert clash.task is TaskResult.FAILED and "extra_json names ['seed']" in clash.message


def test_a_second_client_is_refused_while_the_robot_is_busy(cell) -> None:
    thread, box = _in_thread(
        cell.run_policy,
        robot_name="arm",
        policy_provider="mock",
        n_steps=100000,
        control_frequency=PACED["control_frequency"],
        extra={"fast_mode": False},
    )
    _wait_until(lambda: cell.list_policies_running().report["robots"] == ["arm"], 60, "busy")
    with WorkcellClient(NS, server_timeout_s=60.0) as other:
        second = other.run_policy(robot_name="arm", policy_provider="mock", n_steps=10)
    assert not second.ok and second.status == "error"
    assert "run_policy" in second.message, second.message
    # The runner lists the robot busy as the episode starts, which can be before its
    # acceptance of the goal reached this client (cancel() then knows no goal: 0, once on
    # a quiet machine): cancel once the client holds its goal; one goal, never more.
    cancelled: list[int] = []
    _wait_until(lambda: cancelled.append(cell.cancel()) or cancelled[-1] > 0, 30, "the goal")
    assert cancelled[-1] == 1, cancelled
    thread.join(timeout=20)
    assert box["result"].status == "cancelled"
    assert box["result"].report["stopped_reason"] == "cancelled"


def test_robokernel_ros_on_the_shell(cell) -> None:
    env = {**os.environ}

    def shell(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "robokernel_ros.cli", "ros", *args, "--namespace", NS],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )

    listed = shell("list_policies_running")
    assert listed.returncode == 0, listed.stderr
    assert "no policies running" in listed.stdout
    refused = shell("eval_policy", "robot_name=arm", "n_episodes=0")
    assert refused.returncode == 1 and "n_episodes" in refused.stderr, refused.stderr
    ran = shell("run_policy", "robot_name=arm", "n_steps=5", "--json")
    assert ran.returncode == 0, ran.stderr
    assert '"actions_applied": 5' in ran.stdout


def test_wait_until_ready_names_what_is_not_ready(cell) -> None:
    """The runner answers, but this graph has no shield and no policy server: each wait
    ends with a TimeoutError naming the missing part; without them it returns."""
    cell.wait_until_ready(timeout_s=10.0, shield=False, policy_server=False)
    with pytest.raises(TimeoutError, match=rf"safety_shield at {NS}/safety_shield is not active"):
        cell.wait_until_ready(timeout_s=0.5)
    with pytest.raises(TimeoutError, match="policy server"):
        cell.wait_until_ready(timeout_s=0.5, shield=False)
