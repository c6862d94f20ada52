"""Privileged-state sampling as the rollout API uses the kernel's privileged_every knob:
every step when a criterion is evaluated over it, every 10th (and the last) otherwise;
the criteria and the trace share one privileged_state() call per step."""

from __future__ import annotations

from pathlib import Path

import pytest
from robokernel_ros.envs.env import MujocoEnv
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import PolicyRunner, SimWorkcell, envelope_json
from robokernel_ros.scoring import PredicateScorer


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"), bag=False)
    c.add_robot("arm", "so101")
    yield c
    c.close()


def privileged_steps(report: dict) -> tuple[list[int], list[int]]:
    trace = load_trace(report["trace_path"])
    return [e.step for e in trace.of_kind("privileged")], [
        e.step for e in trace.of_kind("observation")
    ]


def test_plain_rollout_samples_every_10th_step_and_the_last(cell: SimWorkcell) -> None:
    out = cell.run_policy("arm", policy_provider="mock", n_steps=23, seed=0)
    report = envelope_json(out)
    privileged, observations = privileged_steps(report)
    assert observations == list(range(24))
    assert privileged == [0, 10, 20, 23]


def test_a_predicate_records_every_step_and_fetches_the_state_once_per_step(
    cell: SimWorkcell, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    original = MujocoEnv.privileged_state

    def counted(self: MujocoEnv) -> dict:
        calls.append(self.scene.data.time)
        return original(self)

    monkeypatch.setattr(MujocoEnv, "privileged_state", counted)
    out = cell.run_policy(
        "arm",
        policy_provider="mock",
        n_steps=50,
        seed=0,
        stop_when={"predicate": "step_at_least", "n": 7},
    )
    report = envelope_json(out)
    assert report["steps_advanced"] == 7 and report["stopped_reason"] == "predicate"
    privileged, observations = privileged_steps(report)
    assert privileged == observations == list(range(8))
    # one call per step for the predicate and the trace together (not two)
    assert len(calls) == len(set(calls)) == 8
    # the recorded state is what the predicate saw: an offline predicate agrees
    score = PredicateScorer({"predicate": "step_at_least", "n": 7}).score(
        load_trace(report["trace_path"])
    )
    assert score == {"predicate_success": True, "predicate_step": 7}


def test_policy_runner_refuses_a_bad_privileged_every(cell: SimWorkcell) -> None:
    for bad in (0, -3, 2.0, True, "10"):
        with pytest.raises(ValueError, match=rf"privileged_every={bad!r}: must be a whole"):
            PolicyRunner(cell.scene, privileged_every=bad)


def test_policy_runner_privileged_every_1_records_every_step(tmp_path: Path) -> None:
    with SimWorkcell(trace_dir=tmp_path, bag=False) as c:
        c.add_robot("arm", "so101")
        c.runner.privileged_every = 1
        report = envelope_json(c.run_policy("arm", policy_provider="mock", n_steps=5, seed=0))
    privileged, observations = privileged_steps(report)
    assert privileged == observations == list(range(6))
