"""Every refusal of the rollout API: named parameter, value and domain; nothing starts."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from robokernel_ros.policies.base import Policy, register_provider
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import PolicyRunner, SimWorkcell, boolean_flag_error, envelope_text
from robokernel_ros.rollout import validation as v

BUILT: list[str] = []


class CountingPolicy(MockPolicy):
    """A mock that records every construction: a refused call must build none."""

    provider = "counting"

    def __init__(self, **config):
        BUILT.append("built")
        super().__init__(**config)


register_provider("counting", CountingPolicy, replace=True)


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=None)
    assert c.add_robot("arm", "so101")["status"] == "success"
    assert c.add_robot("arm2", "so101", pos=(0.5, 0, 0))["status"] == "success"
    yield c
    c.close()


RUN_REFUSALS = [
    ({"n_steps": 0}, ["n_steps=0", "positive whole number"]),
    ({"n_steps": -3}, ["n_steps=-3", "positive whole number"]),
    ({"n_steps": 2.5}, ["n_steps=2.5", "positive whole number"]),
    ({"n_steps": True}, ["n_steps=True", "boolean"]),
    ({"n_steps": "5"}, ["n_steps='5'", "positive whole number"]),
    ({"max_steps": 0}, ["max_steps=0", "positive whole number"]),
    ({"n_steps": 5, "max_steps": 6}, ["max_steps is a legacy alias"]),
    ({"duration": 0}, ["duration=0", "positive finite number"]),
    ({"duration": math.nan}, ["duration=nan", "positive finite number"]),
    ({"duration": math.inf}, ["duration=inf", "positive finite number"]),
    ({"control_frequency": -50}, ["control_frequency=-50", "positive finite number"]),
    ({"action_horizon": 0}, ["action_horizon=0", "positive whole number"]),
    ({"action_horizon": 1.5}, ["action_horizon=1.5", "positive whole number"]),
    (
        {"rtc_inference_timeout_s": 0},
        ["rtc_inference_timeout_s=0", "positive finite seconds, or None"],
    ),
    (
        {"rtc_inference_timeout_s": math.inf},
        ["rtc_inference_timeout_s=inf", "positive finite seconds"],
    ),
    ({"rtc_inference_timeout_s": "1"}, ["rtc_inference_timeout_s='1'", "positive finite seconds"]),
    ({"policy_config": "amplitude=1"}, ["policy_config='amplitude=1'", "must be a dict"]),
    ({"policy_config": [1]}, ["policy_config=[1]", "must be a dict"]),
    ({"policy_kwargs": 3}, ["policy_kwargs=3", "must be a dict"]),
    ({"policy_object": "mock"}, ["policy_object='mock'", "Policy instance", "policy_provider="]),
    ({"policy_object": MockPolicy}, ["policy_object=MockPolicy", "not the class"]),
    ({"policy_object": 3}, ["policy_object=3", "Policy instance"]),
    ({"policy_provider": "nope"}, ["policy_provider='nope'", "must be one of", "mock"]),
    (
        {"policy_config": {"execution_horizon": 0}},
        ["policy_config['execution_horizon']=0", "positive whole number"],
    ),
    ({"policy_config": {"bogus": 1}}, ["unknown keys ['bogus']", "mock"]),
    ({"observer": 3}, ["observer=3", "callable"]),
    ({"on_frame": "print"}, ["on_frame='print'", "callable"]),
    ({"async_rtc": "false"}, ["async_rtc='false'", "boolean", "True, False or None"]),
    ({"async_rtc": 1}, ["async_rtc=1", "boolean"]),
    ({"fast_mode": "false"}, ["fast_mode='false'", "boolean (True or False)"]),
    ({"fast_mode": 0}, ["fast_mode=0", "boolean"]),
    ({"seed": -1}, ["seed=-1", "non-negative integer"]),
    ({"seed": 1.5}, ["seed=1.5", "non-negative integer"]),
    ({"seed": True}, ["seed=True", "non-negative integer"]),
    ({"instruction": 3}, ["instruction=3", "must be a string"]),
    (
        {"stop_when": {"predicate": "nope"}},
        ["stop_when", "unknown predicate 'nope'", "base_beyond_x"],
    ),
    (
        {"stop_when": {"predicate": "base_beyond_x", "bogus": 1}},
        ["stop_when", "does not take", "bogus"],
    ),
    ({"stop_when": 3}, ["stop_when=3", "predicate clause"]),
    ({"video": {"path": "/tmp/x.mp4", "bogus": 1}}, ["video['bogus']", "unknown key"]),
    ({"video": {"path": "/tmp/x.mp4", "width": 0}}, ["video['width']=0", "positive whole number"]),
    (
        {"video": {"path": "/tmp/x.mp4", "height": -2}},
        ["video['height']=-2", "positive whole number"],
    ),
    (
        {"video": {"path": "/tmp/x.mp4", "fps": 30, "frame_rate": 25}},
        ["'fps' given twice", "fps=30", "frame_rate=25"],
    ),
    ({"video": {"fps": 30}}, ["video['path']=None", "required"]),
    ({"video": {"path": "/tmp/x.avi"}}, ["video['path']='/tmp/x.avi'", ".mp4"]),
    ({"video": "out.mp4"}, ["video='out.mp4'", "must be a dict"]),
    (
        {"video": {"path": "/tmp/x.mp4", "camera": "nope"}},
        ["video['camera']='nope'", "no such camera"],
    ),
    ({"trace_dir": 3}, ["trace_dir=3", "non-empty path"]),
    ({"safety": 3}, ["safety=3", "dict"]),
]


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    RUN_REFUSALS,
    ids=[json.dumps(k, default=repr)[:60] for k, _ in RUN_REFUSALS],
)
@pytest.mark.parametrize("call", ["run_policy", "start_policy"])
def test_run_refusals_name_parameter_and_start_nothing(cell, call, kwargs, fragments):
    BUILT.clear()
    kwargs = dict(kwargs)
    provider = kwargs.pop("policy_provider", "counting")
    out = getattr(cell, call)(
        "arm", policy_provider=provider, n_steps=kwargs.pop("n_steps", 5), **kwargs
    )
    assert out["status"] == "error"
    text = envelope_text(out)
    for fragment in fragments:
        assert fragment in text, text
    assert BUILT == []  # no policy was built
    listing = cell.list_policies_running()
    assert listing["content"][1]["json"]["count"] == 0


def test_robot_name_refusals(cell):
    for name, fragment in (
        (None, "robot_name=None: required"),
        ("ghost", "robot_name='ghost': no such robot"),
        (3, "robot_name=3"),
    ):
        out = cell.run_policy(name, n_steps=2)
        assert out["status"] == "error"
        assert fragment in envelope_text(out)
        assert "arm" in envelope_text(out)


def test_refused_call_leaves_robot_startable(cell):
    assert cell.start_policy("arm", async_rtc="false")["status"] == "error"
    out = cell.run_policy("arm", policy_provider="mock", n_steps=3)
    assert out["status"] == "success", envelope_text(out)
    assert out["content"][1]["json"]["steps_advanced"] == 3


EVAL_REFUSALS = [
    ({"n_episodes": 0}, ["n_episodes=0", "positive whole number"]),
    ({"n_episodes": 1.5}, ["n_episodes=1.5", "positive whole number"]),
    ({"max_steps": 0}, ["max_steps=0", "positive whole number"]),
    ({"async_rtc": None}, ["async_rtc=None", "boolean (True or False)"]),
    ({"async_rtc": "false"}, ["async_rtc='false'", "boolean"]),
    ({"reset_between": "no"}, ["reset_between='no'", "boolean"]),
    ({"success_fn": 3}, ["success_fn=3", "callable"]),
    ({"success_fn": MockPolicy}, ["success_fn=", "callable"]),
    ({"progress": "yes"}, ["progress='yes'", "boolean"]),
]


@pytest.mark.parametrize(("kwargs", "fragments"), EVAL_REFUSALS)
def test_eval_refusals(cell, kwargs, fragments):
    BUILT.clear()
    kwargs = dict(kwargs)
    out = cell.eval_policy(
        "arm", policy_provider="counting", max_steps=kwargs.pop("max_steps", 5), **kwargs
    )
    assert out["status"] == "error"
    for fragment in fragments:
        assert fragment in envelope_text(out)
    assert BUILT == []


def test_eval_robot_autoresolve_refused_with_two_robots(cell):
    out = cell.eval_policy(max_steps=5)
    assert out["status"] == "error"
    assert (
        "cannot auto-resolve" in envelope_text(out)
        and "'arm'" in envelope_text(out)
        and "'arm2'" in envelope_text(out)
    )


def test_benchmark_refusals(cell):
    out = cell.evaluate_benchmark("go2_walk_forward")
    assert out["status"] == "error" and "register_builtin_benchmarks()" in envelope_text(out)
    specs = cell.builtin_benchmark_specs()
    out = cell.evaluate_benchmark(specs["go2_walk_forward"], async_rtc=True)
    assert (
        out["status"] == "error"
        and "async_rtc=True" in envelope_text(out)
        and "synchronous" in envelope_text(out)
    )
    out = cell.evaluate_benchmark(specs["go2_walk_forward"], max_steps=10)
    assert (
        out["status"] == "error"
        and "max_steps=10" in envelope_text(out)
        and "takes its horizon off the benchmark" in envelope_text(out)
    )
    out = cell.evaluate_benchmark({"name": "x", "robot": {"model": "so101"}})
    assert out["status"] == "error" and "at least one success or failure clause" in envelope_text(
        out
    )
    out = cell.evaluate_benchmark({**specs["go2_walk_forward"], "success": [{"predicate": "nope"}]})
    assert out["status"] == "error" and "unknown predicate 'nope'" in envelope_text(out)
    out = cell.evaluate_benchmark({**specs["go2_walk_forward"], "colour": "red"})
    assert out["status"] == "error" and "unknown keys ['colour']" in envelope_text(out)


def test_multi_refusals(cell):
    cases = [
        (
            {"policies": {"arm": "mock", "arm2": "mock"}, "action_horizon": {"ghost": 4}},
            ["action_horizon", "'ghost'", "no robot of this call"],
        ),
        (
            {"policies": {"arm": "mock"}, "instructions": {"arm2": "x"}},
            ["instructions", "'arm2'", "no robot of this call"],
        ),
        ({"policies": {"ghost": "mock"}}, ["policies key='ghost'", "no such robot"]),
        ({"policies": {}}, ["policies={}", "non-empty dict"]),
        ({"policies": {"arm": 3}}, ["policies['arm']=3", "Policy instance"]),
        ({"policies": {"arm": "mock"}, "n_steps": 0}, ["n_steps=0"]),
    ]
    for kwargs, fragments in cases:
        out = cell.run_multi_policy(**kwargs)
        assert out["status"] == "error", kwargs
        for fragment in fragments:
            assert fragment in envelope_text(out), envelope_text(out)
    shared = MockPolicy()
    out = cell.run_multi_policy({"arm": shared, "arm2": shared}, n_steps=2)
    assert out["status"] == "error" and "same Policy object" in envelope_text(out)


def test_policy_runner_raises_value_error(cell):
    runner = PolicyRunner(cell.scene)
    with pytest.raises(ValueError, match=r"n_steps=0: must be a positive whole number"):
        runner.run("arm", n_steps=0)
    with pytest.raises(ValueError, match=r"n_episodes=0"):
        runner.evaluate("arm", n_episodes=0)
    with pytest.raises(ValueError, match=r"rtc_inference_timeout_s=-1"):
        runner.evaluate("arm", rtc_inference_timeout_s=-1)
    result = runner.run("arm", n_steps=2, trace_dir=None)
    assert result["steps_advanced"] == 2


@given(
    st.one_of(
        st.text(), st.integers(), st.floats(allow_nan=True), st.none(), st.lists(st.booleans())
    )
)
def test_boolean_flags_refuse_every_non_bool(value):
    error = boolean_flag_error("fast_mode", value)
    assert error is not None and error.startswith(f"fast_mode={value!r}")
    assert (
        boolean_flag_error("fast_mode", True) is None
        and boolean_flag_error("fast_mode", False) is None
    )


@given(
    st.one_of(
        st.integers(max_value=0),
        st.floats(max_value=0.0),
        st.floats(allow_nan=True),
        st.booleans(),
        st.text(),
    )
)
def test_positive_int_refuses_non_positive(value):
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value > 0:
        return
    with pytest.raises(ValueError, match="positive whole number"):
        v.positive_int("n_episodes", value)


@given(st.integers(min_value=1, max_value=10**9))
def test_positive_int_accepts_whole_numbers(value):
    assert v.positive_int("n", value) == value
    assert v.positive_int("n", float(value)) == value


def test_policy_object_is_accepted_only_as_instance():
    assert isinstance(v.policy_object("policy_object", MockPolicy()), Policy)


@pytest.mark.parametrize(
    ("request_type", "kwargs", "named"),
    [
        ("RunRequest", {"policy_provider": "counting", "fast_mode": "false"}, "fast_mode"),
        ("RunRequest", {"policy_provider": "counting", "action_horizon": 0}, "action_horizon"),
        ("EvalRequest", {"policy_provider": "counting", "n_episodes": 0}, "n_episodes"),
        ("EvalRequest", {"policy_provider": "counting", "async_rtc": None}, "async_rtc"),
        ("EvalRequest", {"spec": "reach", "async_rtc": True}, "async_rtc"),
        ("MultiRequest", {"policies": {}}, "policies"),
    ],
)
def test_a_request_refuses_a_bad_field_where_it_is_built_before_any_scene(
    request_type, kwargs, named
):
    import robokernel_ros.rollout as rollout

    BUILT.clear()
    with pytest.raises(ValueError, match=f"^{named}="):
        getattr(rollout, request_type)(**kwargs)
    assert BUILT == []


def test_a_request_names_an_unknown_parameter_and_plans_on_the_scene_robots():
    from robokernel_ros.rollout import EvalRequest, RunRequest

    with pytest.raises(TypeError, match="n_stepz"):
        RunRequest(robot_name="arm", n_stepz=3)
    request = RunRequest(robot_name="arm", n_steps=3)  # checked without a scene
    with pytest.raises(ValueError, match="robot_name='arm': no such robot"):
        request.plan(robots=["other"])
    plan = request.plan(robots=["arm"])
    assert plan.robots == ("arm",) and plan.n_steps == 3 and plan.policies["arm"][0] == "mock"
    plan = EvalRequest(n_episodes=2).plan(robots=["solo"])  # the sole robot, auto-resolved
    assert plan.robot == "solo" and plan.n_episodes == 2 and plan.n_steps == 300


def test_a_checked_request_holds_its_normalised_values_in_its_fields(tmp_path):
    from pathlib import Path

    from robokernel_ros.rollout import EvalRequest, MultiRequest, RunRequest
    from robokernel_ros.tasks.predicates import Criterion

    def seen(*_):
        return None

    run = RunRequest(robot_name="arm", max_steps=4, control_frequency=20, observer=seen,
                     trace_dir=str(tmp_path), stop_when=lambda ctx: False)  # fmt: skip
    assert (run.n_steps, run.max_steps, run.duration, run.control_frequency) == (4, None, 0.2, 20.0)
    assert run.observer == [seen] and isinstance(run.trace_dir, Path) and run.bag == "mcap"
    assert run.policy_config == {} and run.policy_kwargs == {}
    assert [type(c) for c in run.stop_when] == [Criterion]
    plan = run.plan(robots=["arm"])
    assert plan.observers == [seen] and plan.trace_dir == run.trace_dir and plan.n_steps == 4
    ev = EvalRequest(success_fn=seen, ray_address=" auto ", trace_dir=None, max_wait_ms=5)
    assert isinstance(ev.success_fn, Criterion) and ev.ray_address == "auto"
    assert ev.max_wait_ms == 5.0 and isinstance(ev.max_wait_ms, float) and ev.bag is None
    multi = MultiRequest(policies={"a": "mock", "b": "mock"}, instructions={"a": "go"},
                         action_horizon={"b": 3}, trace_dir=None)  # fmt: skip
    assert multi.policies == {"a": ("mock", {}, None), "b": ("mock", {}, None)}
    assert multi.instructions == {"a": "go", "b": ""} and multi.action_horizon == {"a": 8, "b": 3}
    assert multi.plan(robots=["a", "b"]).action_horizons == {"a": 8, "b": 3}
