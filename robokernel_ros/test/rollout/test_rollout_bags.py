"""Every rollout API call mirrors each episode to <run_dir>/bag (MCAP by default), and
reports trace_path and bag_path (per episode in an aggregate's `episodes`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import PolicyRunner, SimWorkcell, envelope_json, envelope_text

TINY_SPEC = {
    "name": "arm_tiny",
    "robot": {"name": "arm", "model": "so101"},
    "max_steps": 6,
    "failure": [{"predicate": "step_at_least", "n": 1000}],
}


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"))
    c.add_robot("arm", "so101")
    yield c
    c.close()


def storage_of(bag: str | Path) -> str:
    meta = yaml.safe_load((Path(bag) / "metadata.yaml").read_text())
    return meta["rosbag2_bagfile_information"]["storage_identifier"]


def assert_bag_mirrors_run(episode: dict) -> None:
    """The episode's bag is <run_dir>/bag and reads back to the run directory's events."""
    run_dir, bag = Path(episode["trace_path"]), Path(episode["bag_path"])
    assert bag == run_dir / "bag" and (bag / "metadata.yaml").is_file()
    run, mirrored = load_trace(run_dir), load_trace(bag)
    assert type(mirrored).__name__ == "BagTrace"
    assert len(run.events) > 0 and len(mirrored.events) == len(run.events)
    assert [e.kind for e in mirrored.events] == [e.kind for e in run.events]
    assert sum(e.kind == "action" for e in mirrored.events) == episode["steps_advanced"]


def test_run_policy_writes_an_mcap_bag_by_default(cell):
    out = cell.run_policy("arm", n_steps=8, seed=0)
    assert out["status"] == "success", envelope_text(out)
    j = envelope_json(out)
    assert_bag_mirrors_run(j)
    assert storage_of(j["bag_path"]) == "mcap"


def test_eval_policy_bags_every_episode(cell):
    out = cell.eval_policy("arm", n_episodes=2, max_steps=6, seed=3)
    assert out["status"] == "success", envelope_text(out)
    j = envelope_json(out)
    assert len(j["episodes"]) == 2
    for episode in j["episodes"]:
        assert_bag_mirrors_run(episode)
    assert j["bag_paths"] == [e["bag_path"] for e in j["episodes"]]
    assert len(set(j["bag_paths"])) == 2


def test_sqlite3_on_request_and_none_when_off(cell):
    j = envelope_json(cell.run_policy("arm", n_steps=4, bag="sqlite3"))
    assert_bag_mirrors_run(j)
    assert storage_of(j["bag_path"]) == "sqlite3"
    j = envelope_json(cell.run_policy("arm", n_steps=4, bag=False))
    assert j["bag_path"] is None and j["trace_path"]
    assert not (Path(j["trace_path"]) / "bag").exists()
    j = envelope_json(cell.run_policy("arm", n_steps=4, trace_dir=None))
    assert j["bag_path"] is None and j["trace_path"] is None


@pytest.mark.parametrize(
    ("kwargs", "needles"),
    [
        ({"bag": "zip"}, ["bag='zip'", "'mcap'", "'sqlite3'", "False"]),
        ({"bag": "false"}, ["bag='false'", "False for no bag"]),
        ({"bag": 1}, ["bag=1", "'mcap'"]),
        ({"bag": "mcap", "trace_dir": None}, ["bag='mcap'", "trace_dir=None", "bag=False"]),
    ],
)
def test_bag_refusals_name_the_value_and_the_domain(cell, kwargs, needles):
    for name, horizon in (("run_policy", "n_steps"), ("start_policy", "n_steps"),
                          ("eval_policy", "max_steps")):  # fmt: skip
        out = getattr(cell, name)("arm", **{horizon: 4}, **kwargs)
        text = envelope_text(out)
        assert out["status"] == "error", text
        for needle in needles:
            assert needle in text, text
    assert envelope_json(cell.list_policies_running())["count"] == 0  # nothing was claimed
    with pytest.raises(ValueError, match="bag="):
        SimWorkcell(trace_dir=None, bag="zip")


def test_start_policy_and_replay_report_their_bags(cell):
    started = cell.start_policy("arm", n_steps=5, seed=1)
    assert started["status"] == "success", envelope_text(started)
    done = cell.wait_policy("arm", timeout_s=60)
    assert done["status"] == "success", envelope_text(done)
    recorded = envelope_json(done)
    assert_bag_mirrors_run(recorded)
    replayed = cell.replay_episode(recorded["bag_path"])  # from the bag, to a new trace + bag
    assert replayed["status"] == "success", envelope_text(replayed)
    j = envelope_json(replayed)
    assert j["trace_path"] != recorded["trace_path"]
    assert_bag_mirrors_run(j)


def test_run_multi_policy_and_benchmark_bags(tmp_path):
    cell = SimWorkcell(trace_dir=tmp_path)
    try:
        cell.add_robot("a", "so101")
        cell.add_robot("b", "so101", pos=(0.5, 0, 0))
        out = cell.run_multi_policy({"a": "mock", "b": "mock"}, n_steps=4)
        assert out["status"] == "success", envelope_text(out)
        assert_bag_mirrors_run(envelope_json(out))
        out = cell.evaluate_benchmark(TINY_SPEC, n_episodes=2)
        assert out["status"] == "success", envelope_text(out)
        for episode in envelope_json(out)["episodes"]:
            assert_bag_mirrors_run(episode)
    finally:
        cell.close()


def test_policy_runner_direct_bags_by_default(tmp_path):
    from robokernel_ros.envs import MujocoScene

    scene = MujocoScene()
    try:
        scene.add_robot("arm", "so101")
        runner = PolicyRunner(scene)
        result = runner.run("arm", n_steps=3, trace_dir=tmp_path)
        assert_bag_mirrors_run(result)
        with pytest.raises(ValueError, match="bag='sqlite'"):
            runner.run("arm", n_steps=3, trace_dir=tmp_path, bag="sqlite")
    finally:
        scene.close()
