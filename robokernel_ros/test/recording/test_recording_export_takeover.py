"""The takeover in the LeRobot export (docs/operator.md): an episode on the MuJoCo SO-101
corrected by the simulated operator, exported from its bag, has LeRobot's DAgger
`intervention` feature equal to the trace's flags and the human's command as the action of
its correcting steps; --corrections-only exports each correction as one episode; both load
with LeRobot's LeRobotDataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from robokernel_ros.cli.export import main as export_main
from robokernel_ros.envs import MujocoScene
from robokernel_ros.kernel import EpisodeRunner, EventBus, TraceStore, load_trace
from robokernel_ros.policies.base import PolicyAgent
from robokernel_ros.policies.scripted import ScriptedPolicy
from robokernel_ros.recording import EpisodeBagMirror
from robokernel_ros.recording.export import export_lerobot
from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule

pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="lerobot[dataset] not installed")

KEYS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def agent(targets: list[dict[str, float]], env: Any) -> PolicyAgent:
    policy = ScriptedPolicy(targets=targets, tolerance=0.03, max_delta=0.02, max_accel=0.004)
    policy.set_robot_state_keys(env.env_spec.action_keys)
    policy.set_action_limits(env.env_spec.action_limits)
    return PolicyAgent(policy)


@pytest.fixture(scope="module")
def corrected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(bag of a corrected episode, run directory of an uncorrected one, tmp folder)."""
    tmp = tmp_path_factory.mktemp("takeover_export")
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm", control_hz=25)
    store = TraceStore(tmp / "runs")
    bus = EventBus()
    sink = EpisodeBagMirror(store.root)
    sink.attach(bus)
    expert = [{"shoulder_pan": 0.6, "elbow_flex": 0.5}, {"shoulder_pan": -0.3}]
    operator = SimulatedOperator(agent(expert, env), TubeRule(radius=0.15, back_steps=5))
    runner = EpisodeRunner(
        env,
        agent([{"shoulder_pan": -0.6, "elbow_flex": 0.5}], env),
        trace=store,
        bus=bus,
        safety={"max_velocity": 1.5, "max_acceleration": 25.0},
        teleop=operator,
    )
    operator.attach(runner.operator)
    record = runner.run(120, seed=0, instruction="reach")
    assert record.takeover["interventions"] >= 2, operator.decisions
    plain = EpisodeRunner(env, agent(expert, env), trace=TraceStore(tmp / "plain")).run(20)
    return sink.bag_paths[0], plain.trace_path, tmp


def test_the_intervention_column_is_the_traces_flag_and_lerobot_loads_it(corrected) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    bag, _, tmp = corrected
    report = export_lerobot([bag], repo_id="robokernel/dagger", root=tmp / "all")
    assert report.intervention and report.episodes == 1
    ds = LeRobotDataset("robokernel/dagger", root=tmp / "all")
    feature = ds.meta.features["intervention"]
    assert feature["dtype"] == "bool" and tuple(feature["shape"]) == (1,)
    actions = load_trace(bag).of_kind("action")
    assert len(ds) == len(actions) == 120
    column = [bool(ds[i]["intervention"].item()) for i in range(len(ds))]
    assert column == [e.data["intervention"] for e in actions]
    assert any(column) and not all(column)
    for i, e in enumerate(actions):
        source = e.data["human_action"] if e.data.get("mode") == "correcting" else e.data["action"]
        np.testing.assert_allclose(
            ds[i]["action"].numpy(), np.float32([source[k] for k in KEYS]), err_msg=str(i)
        )


def test_corrections_only_exports_each_correction_as_one_episode(corrected, capsys) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    bag, _, tmp = corrected
    root = tmp / "corrections"
    args = [str(bag), "--repo-id", "robokernel/corrections", "--root", str(root)]
    assert export_main([*args, "--corrections-only", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    trace = load_trace(bag)
    spans = [
        (s.data["step"], e.data["step"])
        for s, e in zip(
            trace.of_kind("intervention.start"), trace.of_kind("intervention.end"), strict=False
        )
    ]
    steps = [e for e in trace.of_kind("action") if e.data.get("mode") == "correcting"]
    assert report["corrections_only"] and report["episodes"] == len(spans) >= 2
    assert report["frames"] == len(steps) == sum(end - start for start, end in spans)
    ds = LeRobotDataset("robokernel/corrections", root=root)
    assert ds.num_episodes == len(spans) and len(ds) == len(steps)
    lengths = [end - start for start, end in spans]
    assert [int(n) for n in ds.meta.episodes["length"]] == lengths
    for i, e in enumerate(steps):
        item = ds[i]
        assert bool(item["intervention"].item()) is True
        np.testing.assert_allclose(
            item["action"].numpy(), np.float32([e.data["human_action"][k] for k in KEYS])
        )


def test_corrections_only_without_a_correction_is_refused_and_writes_nothing(
    corrected, capsys
) -> None:
    _, plain, tmp = corrected
    root = tmp / "nothing"
    from robokernel_ros.cli import main as robokernel

    args = [str(plain), "--repo-id", "robokernel/none", "--root", str(root), "--corrections-only"]
    assert robokernel(["export-lerobot", *args]) == 1
    err = capsys.readouterr().err
    assert "--corrections-only: no episode under" in err and "holds a correction" in err
    assert not root.exists()
