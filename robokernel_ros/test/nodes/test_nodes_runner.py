"""runner node (env=sim): the rollout API as ROS 2 services between real processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from std_srvs.srv import Trigger  # noqa: E402

from robokernel_interfaces.msg import KernelEvent  # noqa: E402
from robokernel_interfaces.srv import (  # noqa: E402
    EvalPolicy,
    ListPoliciesRunning,
    RunPolicy,
    StartPolicy,
    StopPolicy,
    SubmitVerdict,
)

NS = "/rk_runner"


@pytest.fixture(scope="module")
def _runner(shared_sim_runner):
    return shared_sim_runner(NS)


@pytest.fixture
def runner(_runner, runner_at_rest, module_processes):
    """The module's runner (one process for its tests), at rest (conftest.runner_at_rest):
    (process, trace dir shared by the module's runs)."""
    runner_at_rest(module_processes, _runner[0], NS)
    return _runner


def _run(**fields) -> RunPolicy.Request:
    request = RunPolicy.Request(robot_name="arm", policy_provider="mock")
    for key, value in fields.items():
        setattr(request, key, value)
    return request


def test_run_policy_answers_with_the_report_trace_bag_and_live_events(
    runner, ros, module_processes
) -> None:
    proc, trace_dir = runner
    from robokernel_ros.nodes.runner import EVENTS_QOS

    events = ros.collect(KernelEvent, f"{NS}/events", EVENTS_QOS)
    assert ros.wait_for(RunPolicy, f"{NS}/run_policy", 60), module_processes.log(proc)
    ros.wait_matched(f"{NS}/events")  # the runner's events reach the collector
    response = ros.call(RunPolicy, f"{NS}/run_policy", _run(n_steps=25, seed=3, instruction="wave"))
    assert response.ok and response.status == "success", response.message
    report = json.loads(response.report_json)
    assert report["robot_name"] == "arm" and report["n_steps"] == 25
    assert report["actions_applied"] == 25
    assert Path(report["trace_path"]).is_dir()
    assert report["bag_path"] and (Path(report["bag_path"]) / "metadata.yaml").is_file()
    assert str(trace_dir) in report["trace_path"]
    assert ros.wait_until(lambda: any(e.kind == "episode.end" for e in events), 10)
    kinds = [e.kind for e in events]
    assert kinds[0] == "episode.start" and kinds.count("action") == 25
    assert [e.seq for e in events] == list(range(len(events)))
    start = json.loads(events[0].data_json)
    assert start["instruction"] == "wave"


def test_refusals_name_parameter_value_domain_and_leave_the_robot_startable(
    runner, ros, module_processes
) -> None:
    proc, _ = runner
    assert ros.wait_for(RunPolicy, f"{NS}/run_policy", 60), module_processes.log(proc)
    cases = [
        (_run(n_steps=0), "n_steps"),
        (_run(async_rtc=5), "async_rtc"),
        (_run(policy_config_json="[1, 2]"), "policy_config_json"),
        (_run(policy_config_json="{nope"), "policy_config_json"),
        (_run(control_frequency=-50.0), "control_frequency"),
        (_run(rtc_inference_timeout_s=float("nan")), "rtc_inference_timeout_s"),
        (_run(policy_provider="nosuch"), "nosuch"),
        (_run(extra_json='{"n_steps": 3}'), "extra_json"),
        (_run(robot_name="ghost", n_steps=5), "ghost"),
        (_run(policy_provider="remote", n_steps=5), "not ready"),
    ]
    for request, needle in cases:
        response = ros.call(RunPolicy, f"{NS}/run_policy", request)
        assert not response.ok and response.status == "error", (needle, response.message)
        assert needle in response.message, (needle, response.message)
    ok = ros.call(RunPolicy, f"{NS}/run_policy", _run(n_steps=5))
    assert ok.ok, ok.message


def test_start_list_stop_answer_during_a_run(runner, ros, module_processes) -> None:
    proc, _ = runner
    assert ros.wait_for(StartPolicy, f"{NS}/start_policy", 60), module_processes.log(proc)
    request = StartPolicy.Request(robot_name="arm", policy_provider="mock", n_steps=100000)
    request.extra_json = json.dumps({"fast_mode": False})
    started = ros.call(StartPolicy, f"{NS}/start_policy", request)
    assert started.ok, started.message
    listed = ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=5)
    assert listed.ok and list(listed.robots) == ["arm"], listed.report_json
    again = ros.call(StartPolicy, f"{NS}/start_policy", request, timeout_s=5)
    assert not again.ok and "already running" in again.message
    t0 = time.monotonic()
    stopped = ros.call(
        StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name="arm"), timeout_s=5
    )
    assert stopped.ok and time.monotonic() - t0 < 5, stopped.message
    assert ros.wait_until(
        lambda: (
            not ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=5).robots
        ),
        15,
    )
    idle = ros.call(
        StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name="arm"), timeout_s=5
    )
    assert not idle.ok and "not running" in idle.message


def test_eval_policy_over_ros(runner, ros, module_processes) -> None:
    proc, _ = runner
    assert ros.wait_for(EvalPolicy, f"{NS}/eval_policy", 60), module_processes.log(proc)
    request = EvalPolicy.Request(
        robot_name="arm", policy_provider="mock", n_episodes=2, max_steps=10, seed=1
    )
    response = ros.call(EvalPolicy, f"{NS}/eval_policy", request)
    assert response.ok, response.message
    report = json.loads(response.report_json)
    assert len(report["episodes"]) == 2 and report["total_steps"] == 20
    bad = ros.call(
        EvalPolicy, f"{NS}/eval_policy", EvalPolicy.Request(robot_name="arm", n_episodes=0)
    )
    assert not bad.ok and "n_episodes" in bad.message


def test_200_malformed_requests_are_all_refused_and_the_node_still_serves(
    runner, ros, module_processes
) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    proc, _ = runner
    assert ros.wait_for(RunPolicy, f"{NS}/run_policy", 60), module_processes.log(proc)
    bad_float = st.sampled_from([0.0, -1.0, -1e9, float("nan"), float("inf"), float("-inf")])
    not_object = st.one_of(
        st.text(max_size=20).filter(lambda t: not t.strip().startswith("{")),
        st.sampled_from(["[]", "1", "null", '"x"', "{", '{"a":', "true"]),
    )
    breakers = st.one_of(
        st.tuples(st.just("n_steps"), st.integers(-(2**62), 0).filter(lambda v: v != -1)),
        st.tuples(
            st.just("async_rtc"), st.integers(-128, 127).filter(lambda v: v not in (-1, 0, 1))
        ),
        st.tuples(st.just("control_frequency"), bad_float),
        st.tuples(st.just("action_horizon"), st.integers(-(2**62), 0)),
        st.tuples(st.just("seed"), st.integers(-(2**62), -2)),
        st.tuples(st.just("rtc_inference_timeout_s"), bad_float.filter(lambda v: v != 0.0)),
        st.tuples(st.just("policy_config_json"), not_object),
        st.tuples(st.just("extra_json"), not_object),
        st.tuples(
            # (a ROS string ends at its first NUL: "\x00..." arrives as "", the runner's robot)
            st.just("robot_name"),
            st.text(min_size=1, max_size=12).filter(
                lambda t: t.split("\x00")[0] not in ("", "arm")
            ),
        ),
        st.tuples(
            st.just("policy_provider"),
            st.text(max_size=12).filter(
                lambda t: t not in ("mock", "scripted", "lerobot", "remote")
            ),
        ),
    )
    services = st.sampled_from([(RunPolicy, "run_policy"), (StartPolicy, "start_policy")])
    answers: list[tuple[str, object, bool, str]] = []

    @settings(
        max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(service=services, breaker=breakers)
    def check(service, breaker) -> None:
        srv, name = service
        field, value = breaker
        request = srv.Request(robot_name="arm", policy_provider="mock", n_steps=5)
        setattr(request, field, value)
        response = ros.call(srv, f"{NS}/{name}", request, timeout_s=30)
        answers.append((field, value, response.ok, response.message))
        assert not response.ok and response.status == "error", (field, value, response.message)
        assert response.message and json.loads(response.report_json) is not None

    check()
    assert len(answers) == 200
    assert proc.poll() is None, module_processes.log(proc)
    ok = ros.call(RunPolicy, f"{NS}/run_policy", _run(n_steps=5))
    assert ok.ok, ok.message
    listed = ros.call(ListPoliciesRunning, f"{NS}/list_policies_running", timeout_s=5)
    assert listed.ok and list(listed.robots) == []


def test_operator_verdict_and_reset_done_services(runner, ros, module_processes) -> None:
    proc, trace_dir = runner
    assert ros.wait_for(SubmitVerdict, f"{NS}/verdict", 60), module_processes.log(proc)
    bad = ros.call(SubmitVerdict, f"{NS}/verdict", SubmitVerdict.Request(outcome="maybe"))
    assert not bad.ok and "outcome" in bad.message and "maybe" in bad.message
    reset = ros.call(Trigger, f"{NS}/reset_done", Trigger.Request(), timeout_s=10)
    assert reset.message, "reset_done answered without a message"

    earlier = set(trace_dir.glob("*")) if trace_dir.is_dir() else set()  # other tests' runs
    start = StartPolicy.Request(robot_name="arm", policy_provider="mock", n_steps=100000)
    assert ros.call(StartPolicy, f"{NS}/start_policy", start).ok
    # this start's own run (earlier lists run directories: a file path is never in it)
    assert ros.wait_until(
        lambda: {p.parent for p in trace_dir.glob("*/events.jsonl")} - earlier, 30
    )
    verdict = SubmitVerdict.Request(outcome="failure", note="dropped the cube")
    answered = ros.call(SubmitVerdict, f"{NS}/verdict", verdict)
    assert answered.ok, answered.message
    stopped = ros.call(StopPolicy, f"{NS}/stop_policy", StopPolicy.Request(robot_name="arm"))
    assert stopped.ok, stopped.message

    from robokernel_ros.kernel import load_trace

    def ours() -> list[Path]:
        return [p for p in trace_dir.iterdir() if p not in earlier and (p / "meta.json").is_file()]

    def verdict_recorded() -> bool:
        runs = ours()
        meta = load_trace(runs[0]).meta if runs else {}
        return bool(meta.get("verdict")) and meta.get("outcome") is not None

    assert ros.wait_until(verdict_recorded, 30)
    (run,) = ours()
    meta = load_trace(run).meta
    assert meta["verdict"]["outcome"] == "failure", meta["verdict"]
    assert meta["verdict"]["note"] == "dropped the cube"
