"""runner node (env=sim): evaluate_benchmark, replay_episode and run_multi_policy as ROS 2
services between real processes (short episodes), with their refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import robokernel_ros.recording  # noqa: E402, F401 - registers the rosbag2 reader with load_trace
from robokernel_ros.kernel import load_trace  # noqa: E402

from robokernel_interfaces.srv import (  # noqa: E402
    EvaluateBenchmark,
    ListPoliciesRunning,
    ReplayEpisode,
    RunMultiPolicy,
    RunPolicy,
)

NS = "/rk_runner_api"
TINY_SPEC = {
    "name": "arm_tiny",
    "robot": {"name": "arm", "model": "so101"},
    "max_steps": 6,
    "failure": [{"predicate": "step_at_least", "n": 1000}],
}


@pytest.fixture(scope="module")
def _runner(shared_sim_runner):
    return shared_sim_runner(NS)


@pytest.fixture
def runner(_runner, runner_at_rest, module_processes):
    """The module's runner (one process for its tests), at rest (conftest.runner_at_rest):
    (process, trace dir shared by the module's runs)."""
    runner_at_rest(module_processes, _runner[0], NS)
    return _runner


def _idle(ros) -> bool:
    listed = ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=10)
    return listed.ok and list(listed.robots) == []


def _assert_run_dir(report: dict, trace_dir: Path, steps: int) -> None:
    run_dir = Path(report["trace_path"])
    assert run_dir.parent == trace_dir, report
    trace = load_trace(run_dir)
    assert len(trace.of_kind("action")) == steps
    bag = load_trace(Path(report["bag_path"]))
    assert [e.kind for e in bag.events] == [e.kind for e in trace.events]


def test_evaluate_benchmark_over_ros(runner, ros, module_processes) -> None:
    proc, trace_dir = runner
    request = EvaluateBenchmark.Request(
        spec_json=json.dumps(TINY_SPEC), policy_provider="mock", n_episodes=2, seed=4
    )
    response = ros.call(EvaluateBenchmark, f"{NS}/evaluate_benchmark", request)
    assert response.ok and response.status == "success", response.message
    report = json.loads(response.report_json)
    assert report["benchmark"] == "arm_tiny" and len(report["episodes"]) == 2
    for episode in report["episodes"]:
        assert episode["steps_advanced"] == 6 and episode["actions_applied"] == 6
        _assert_run_dir(episode, trace_dir, 6)
    assert len({e["trace_path"] for e in report["episodes"]}) == 2

    for fields, needle in (
        ({"name": "nosuch"}, "nosuch"),
        ({"name": "arm_tiny", "spec_json": json.dumps(TINY_SPEC)}, "exactly one"),
        ({}, "exactly one"),
        ({"spec_json": "[1]"}, "spec_json"),
        ({"spec_json": json.dumps({**TINY_SPEC, "colour": "red"})}, "colour"),
        ({"spec_json": json.dumps(TINY_SPEC), "n_episodes": 0}, "n_episodes"),
        ({"spec_json": json.dumps(TINY_SPEC), "extra_json": '{"robot_name": "arm"}'}, "robot"),
    ):
        refused = ros.call(
            EvaluateBenchmark, f"{NS}/evaluate_benchmark", EvaluateBenchmark.Request(**fields)
        )
        assert not refused.ok and refused.status == "error", (fields, refused.message)
        assert needle in refused.message, (fields, refused.message)
    assert _idle(ros)
    assert proc.poll() is None, module_processes.log(proc)


def test_replay_episode_from_run_directory_and_bag_over_ros(runner, ros, module_processes) -> None:
    proc, trace_dir = runner
    run = ros.call(
        RunPolicy,
        f"{NS}/run_policy",
        RunPolicy.Request(
            robot_name="arm",
            policy_provider="mock",
            policy_config_json=json.dumps({"noise": 0.1}),
            n_steps=15,
            seed=2,
        ),
    )
    assert run.ok, run.message
    recorded = json.loads(run.report_json)
    for source in (recorded["trace_path"], recorded["bag_path"]):
        response = ros.call(
            ReplayEpisode, f"{NS}/replay_episode", ReplayEpisode.Request(repo_id=source)
        )
        assert response.ok and response.status == "success", (source, response.message)
        report = json.loads(response.report_json)
        assert report["recorded_steps"] == 15 and report["actions_applied"] == 15, report
        assert report["max_qpos_divergence"] == pytest.approx(0.0, abs=1e-6), report
        assert report["trace_path"] != recorded["trace_path"]
        _assert_run_dir(report, trace_dir, 15)
        replayed = [e.data["action"] for e in load_trace(report["trace_path"]).of_kind("action")]
        original = [e.data["action"] for e in load_trace(recorded["trace_path"]).of_kind("action")]
        for a, b in zip(replayed, original, strict=True):
            assert a == pytest.approx(b)

    for request, needle in (
        (ReplayEpisode.Request(repo_id=""), "repo_id"),
        (ReplayEpisode.Request(repo_id=str(trace_dir / "nope")), "nope"),
        (ReplayEpisode.Request(repo_id=recorded["trace_path"], robot_name="ghost"), "ghost"),
        (ReplayEpisode.Request(repo_id=str(trace_dir), episode=99), "episode=99"),
        (ReplayEpisode.Request(repo_id=recorded["trace_path"], extra_json='{"x": 1}'), "x"),
    ):
        refused = ros.call(ReplayEpisode, f"{NS}/replay_episode", request)
        assert not refused.ok and refused.status == "error", (request, refused.message)
        assert needle in refused.message, (needle, refused.message)
    assert _idle(ros)
    assert proc.poll() is None, module_processes.log(proc)


def test_run_multi_policy_over_ros(runner, ros, module_processes) -> None:
    proc, trace_dir = runner
    request = RunMultiPolicy.Request(
        policies_json=json.dumps(
            {"arm": {"policy_provider": "mock", "policy_config": {"execution_horizon": 4}}}
        ),
        instructions_json=json.dumps({"arm": "wave"}),
        n_steps=10,
    )
    response = ros.call(RunMultiPolicy, f"{NS}/run_multi_policy", request)
    assert response.ok and response.status == "success", response.message
    report = json.loads(response.report_json)
    # The runner node hosts one robot: a one-robot call reports as that robot's run.
    assert report["robot_name"] == "arm" and report["instruction"] == "wave"
    assert report["steps_advanced"] == 10 and report["actions_applied"] == 10
    _assert_run_dir(report, trace_dir, 10)
    assert load_trace(report["trace_path"]).of_kind("episode.start")[0].data["instruction"]

    for fields, needle in (
        ({"policies_json": "{}"}, "policies_json"),
        ({"policies_json": "[]"}, "policies_json"),
        ({"policies_json": '{"ghost": "mock"}', "n_steps": 3}, "ghost"),
        ({"policies_json": '{"arm": "nosuch"}', "n_steps": 3}, "nosuch"),
        ({"policies_json": '{"arm": "mock"}', "n_steps": 0}, "n_steps"),
        ({"policies_json": '{"arm": "mock"}', "instructions_json": "1"}, "instructions_json"),
        ({"policies_json": '{"arm": "mock"}', "extra_json": '{"n_steps": 3}'}, "extra_json"),
        # the posture flags come as JSON booleans in extra_json: a string is refused
        ({"policies_json": '{"arm": "mock"}', "extra_json": '{"wbc_install_torque_control": "false"}'},
         "wbc_install_torque_control='false': must be a boolean"),
        ({"policies_json": '{"arm": "mock"}', "extra_json": '{"wbc_install_torque_control": true}'},
         "robot 'arm' has no torque motor"),
    ):  # fmt: skip
        refused = ros.call(
            RunMultiPolicy, f"{NS}/run_multi_policy", RunMultiPolicy.Request(**fields)
        )
        assert not refused.ok and refused.status == "error", (fields, refused.message)
        assert needle in refused.message, (fields, refused.message)
    assert _idle(ros)
    assert proc.poll() is None, module_processes.log(proc)
