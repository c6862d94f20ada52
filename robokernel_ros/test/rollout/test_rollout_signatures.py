"""SimWorkcell's calls name their parameters, and answer typed results.

Each call's keyword parameters are exactly its request dataclass's fields, with the same
defaults (trace_dir and bag: the workcell's); a keyword a call does not take is refused
in one line with the call's own result type; a result's JSON envelope is built in one
place and the result reads as it.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import MISSING, fields

import pytest
from robokernel_ros.kernel import EpisodeOutcome
from robokernel_ros.rollout import (
    WORKCELL,
    CallResult,
    EvalRequest,
    EvalResult,
    MultiRequest,
    MultiResult,
    RunRequest,
    RunResult,
    SimWorkcell,
    StartResult,
    Status,
)

CALLS = [
    ("run_policy", RunRequest),
    ("start_policy", RunRequest),
    ("eval_policy", EvalRequest),
    ("evaluate_benchmark", EvalRequest),
    ("run_multi_policy", MultiRequest),
]


def _request_defaults(cls: type) -> dict[str, object]:
    out = {}
    for f in fields(cls):
        if f.name == "call":
            continue
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


@pytest.mark.parametrize(("call", "request_type"), CALLS, ids=[c for c, _ in CALLS])
def test_each_call_takes_exactly_its_request_fields_with_their_defaults(call, request_type):
    params = dict(inspect.signature(getattr(SimWorkcell, call)).parameters)
    params.pop("self")
    expected = _request_defaults(request_type)
    assert sorted(params) == sorted(expected)
    for name, p in params.items():
        if name in ("trace_dir", "bag"):
            assert p.default is WORKCELL, name
        elif p.default is not inspect.Parameter.empty:
            assert p.default == expected[name], name


@pytest.fixture(scope="module")
def cell():
    with SimWorkcell(trace_dir=None) as c:
        c.add_robot("arm", "so101")
        yield c


@pytest.mark.parametrize(
    ("call", "args", "result_type"),
    [
        ("run_policy", ("arm",), RunResult),
        ("start_policy", ("arm",), StartResult),
        ("eval_policy", ("arm",), EvalResult),
        ("evaluate_benchmark", ("pick_cube",), EvalResult),
        ("run_multi_policy", ({"arm": "mock"},), MultiResult),
        ("replay_episode", ("nowhere",), RunResult),
    ],
)
def test_an_unknown_keyword_is_refused_in_one_line_by_the_calls_result(
    cell, call, args, result_type
):
    out = getattr(cell, call)(*args, sede=3)
    assert type(out) is result_type
    assert out.status is Status.ERROR and not out.ok and out.report is None
    assert out.text.startswith(f"{call}: unknown field 'sede' (did you mean 'seed'?)")
    assert len(out.text.splitlines()) == 1 and "seed" in out.text.split("fields are: ")[1]
    assert cell.list_policies_running().count == 0  # nothing started


def test_a_run_answers_a_typed_result_that_reads_as_its_envelope(cell):
    out = cell.run_policy("arm", n_steps=7, seed=0)
    assert type(out) is RunResult and out.ok and out.status is Status.SUCCESS
    assert out.outcome is EpisodeOutcome.TRUNCATED
    assert (out.steps_advanced, out.actions_applied, out.stopped_reason) == (7, 7, "budget")
    envelope = out.envelope()
    assert envelope == {"status": "success", "content": [{"text": out.text}, {"json": out.report}]}
    assert type(envelope["status"]) is str  # the plain string at the edge, not the enum
    assert dict(out) == envelope and out == envelope and out["status"] == "success"
    assert json.loads(json.dumps(envelope, allow_nan=False)) == envelope


def test_an_eval_answers_its_outcomes_typed(cell):
    out = cell.eval_policy("arm", n_episodes=2, max_steps=5, seed=0)
    assert type(out) is EvalResult and out.ok, out.text
    assert out.n_episodes == 2 and out.outcomes == [EpisodeOutcome.TRUNCATED] * 2
    assert len(out.episode_records()) == 2


def test_a_refusal_has_no_json_block_and_a_failed_result_keeps_its_report():
    refused = CallResult.refused("seed=-1: must be a non-negative integer or None")
    assert refused.envelope() == {
        "status": "error",
        "content": [{"text": "seed=-1: must be a non-negative integer or None"}],
    }
    ran = RunResult.of("success", "mock on arm: 3 steps", {"outcome": "estopped"})
    failed = ran.failed("run_policy: not completed")
    assert type(failed) is RunResult and failed.status is Status.ERROR
    assert failed.text == "run_policy: not completed\nmock on arm: 3 steps"
    assert failed.report == ran.report and failed.outcome is EpisodeOutcome.ESTOPPED
    with pytest.raises(ValueError):
        CallResult.of("ok", "not a status")
