"""`import-bag`: bags this project did not write (rosbags' own Writer, the shape `ros2 bag
record -a` leaves after a teleoperated SO-101 session) become run directories whose
frames hold what was written, at the contract's frame clock; score, replay and
export-lerobot read them; LeRobot's own LeRobotDataset loads the export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from robokernel_ros.cli import main
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.recording.importer import import_bags
from teleop_bags import (
    FOLLOWER,
    FRONT,
    LEADER,
    SO101,
    T0_NS,
    WRIST,
    follower_value,
    front_colour,
    held,
    leader_value,
    wrist_colour,
    write_teleop_bag,
)

CONTRACT = {
    "fps": 30,
    "align": "header",
    "robot": "so101",
    "state": {"topic": FOLLOWER, "field": "position", "names": list(SO101)},
    "action": {"topic": LEADER, "field": "position", "names": list(SO101)},
    "images": {"front": {"topic": FRONT}, "wrist": {"topic": WRIST}},
}


def contract_file(tmp_path: Path, name: str = "contract.yaml", **changes: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**CONTRACT, **changes}))
    return path


@pytest.fixture(scope="module")
def teleop(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("teleop")
    return write_teleop_bag(root / "session_1")


def _observations(trace):  # noqa: ANN001, ANN202
    return [e for e in trace.events if e.kind == "observation"]


@pytest.mark.parametrize("align", ["header", "receive"])
def test_every_frame_holds_the_latest_message_at_or_before_its_time(
    teleop, tmp_path: Path, align: str
) -> None:
    results = import_bags([teleop.path], contract_file(tmp_path, align=align), tmp_path / "runs")
    assert len(results) == 1
    r = results[0]
    receive = align == "receive"
    # the grid starts at the first message's stamp; frames run to the newest stamp
    firsts = [
        m[1] if receive else m[0]
        for t in (FOLLOWER, LEADER, FRONT, WRIST)
        for m in teleop.messages[t]
    ]
    start, newest = (
        min(m[1] if receive else m[0] for t in (FOLLOWER, LEADER) for m in teleop.messages[t][:1]),
        max(firsts),
    )
    grid = [start + round(k * 1e9 / 30) for k in range(10_000)]
    grid = [t for t in grid if t <= newest]
    every_started = [
        t
        for t in grid
        if all(held(teleop, s, t, receive=receive) for s in (FOLLOWER, LEADER, FRONT, WRIST))
    ]
    assert r.frames == len(every_started) and r.dropped_leading == len(grid) - len(every_started)
    assert r.dropped_leading > 0  # the wrist camera starts 0.35 s in
    assert "/tf" not in r.messages and "/rosout" not in r.messages  # left alone
    trace = load_trace(r.run_dir)
    obs = _observations(trace)
    actions = [e for e in trace.events if e.kind == "action"]
    assert len(obs) == len(actions) == r.frames
    assert trace.meta["env"]["control_hz"] == 30.0 and trace.meta["robots"] == ["so101"]
    assert trace.meta["env"]["action_keys"] == list(SO101)
    for k, (o, a, t) in enumerate(zip(obs, actions, every_started, strict=True)):
        assert o.step == a.step == k and o.data["stamp_ns"] == t
        f = held(teleop, FOLLOWER, t, receive=receive)
        lead = held(teleop, LEADER, t, receive=receive)
        positions = o.data["obs"]["joint_positions"]
        assert list(positions) == list(SO101)  # the model's order, not the bag's
        for j in SO101:
            assert positions[j] == pytest.approx(follower_value(j, (f[0] - T0_NS) / 1e9), abs=1e-12)
            assert a.data["action"][j] == pytest.approx(
                leader_value(j, (lead[0] - T0_NS) / 1e9), abs=1e-12
            )
        assert (
            o.data["images"]["front"] == f"bag/front/{held(teleop, FRONT, t, receive=receive)[1]}"
        )
        assert (
            o.data["images"]["wrist"] == f"bag/wrist/{held(teleop, WRIST, t, receive=receive)[1]}"
        )
    # the frames themselves come back from the bag, decoded, in step order
    fronts = list(trace.iter_frames("front"))
    wrists = list(trace.iter_frames("wrist"))
    assert [s for s, _ in fronts] == list(range(r.frames)) == [s for s, _ in wrists]
    for (step, frame), t in zip(fronts, every_started, strict=True):
        assert frame.shape == (48, 64, 3)
        expected = front_colour(held(teleop, FRONT, t, receive=receive)[2])
        assert abs(int(np.median(frame)) - expected) <= 2, step
    for (_, frame), t in zip(wrists, every_started, strict=True):
        assert frame.shape == (24, 32, 3)
        assert (
            int(frame.min())
            == int(frame.max())
            == wrist_colour(held(teleop, WRIST, t, receive=receive)[2])
        )
    one = trace.image(obs[3].data["images"]["wrist"])
    assert np.array_equal(one, wrists[3][1])
    kept = yaml.safe_load((Path(r.run_dir) / "contract.yaml").read_text())
    assert kept["state"][0]["type"] == "sensor_msgs/msg/JointState" and kept["align"] == align


def test_score_and_export_read_the_import_and_lerobot_loads_the_export(
    teleop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    contract = contract_file(tmp_path)
    out = tmp_path / "runs"
    assert (
        main(["import-bag", str(teleop.path), "--contract", str(contract), "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "dropped before every stream had started" in printed
    run = out / teleop.path.name
    assert main(["score", str(run), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    episode = scored["episodes"][0]
    assert episode["length"] == len(_observations(load_trace(run)))
    assert episode["outcome"] == "unknown" and episode["effective_control_hz"] == pytest.approx(
        30.0
    )
    trace = load_trace(run)
    root = tmp_path / "dataset"
    code = main(["export-lerobot", str(teleop.path), "--contract", str(contract),
                 "--repo-id", "lab/teleop", "--root", str(root)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("lab/teleop", root=root)
    obs = _observations(trace)
    assert len(dataset) == len(obs)
    for k in (0, len(obs) // 2, len(obs) - 1):
        item = dataset[k]
        expected = [obs[k].data["obs"]["joint_positions"][j] for j in SO101]
        assert np.allclose(item["observation.state"].numpy(), expected, atol=1e-6)
        assert tuple(item["observation.images.wrist"].shape) == (3, 24, 32)
    assert dataset.meta.features["observation.state"]["names"] == list(SO101)


def test_replay_runs_the_imported_actions_on_the_robot_the_contract_names(
    teleop, tmp_path: Path
) -> None:
    from robokernel_ros.rollout import SimWorkcell

    import_bags([teleop.path], contract_file(tmp_path), tmp_path / "runs")
    run = tmp_path / "runs" / teleop.path.name
    trace = load_trace(run)
    with SimWorkcell(trace_dir=None) as cell:
        assert cell.add_robot("so101", "so101")["status"] == "success"
        replayed = cell.replay_episode(str(run), "so101", trace_dir=None)
    assert replayed["status"] == "success", replayed
    result = next(c["json"] for c in replayed["content"] if "json" in c)
    frames = len(_observations(trace))
    assert result["steps"] == result["actions_applied"] == frames, result
    assert result["actions_refused"] == 0


def test_a_long_bag_is_split_at_gaps_and_at_markers(tmp_path: Path) -> None:
    gappy = write_teleop_bag(tmp_path / "gappy", segments=((0.0, 2.0), (5.0, 7.0)))
    results = import_bags(
        [gappy.path],
        contract_file(tmp_path, "gap.yaml", episodes={"split": "gap", "gap_s": 1.0}),
        tmp_path / "runs",
    )
    assert [Path(r.run_dir).name for r in results] == ["gappy-ep000", "gappy-ep001"]
    for r, (start, end) in zip(results, ((0.0, 2.0), (5.0, 7.0)), strict=True):
        trace = load_trace(r.run_dir)
        stamps = [e.data["stamp_ns"] for e in _observations(trace)]
        assert T0_NS + start * 1e9 + 0.35e9 <= stamps[0] < T0_NS + start * 1e9 + 0.4e9
        assert stamps[-1] <= T0_NS + end * 1e9 and r.frames >= 45
    marked = write_teleop_bag(tmp_path / "marked", segments=((0.0, 4.0),), markers=(0.5, 2.0))
    results = import_bags(
        [marked.path],
        contract_file(
            tmp_path, "marker.yaml", episodes={"split": "marker", "topic": "/episode_start"}
        ),  # fmt: skip
        tmp_path / "runs2",
    )
    assert len(results) == 2
    first = [e.data["stamp_ns"] for e in _observations(load_trace(results[0].run_dir))]
    second = [e.data["stamp_ns"] for e in _observations(load_trace(results[1].run_dir))]
    # a String marker has no header: it counts at its log time
    m1, m2 = (log for _, log, _ in marked.messages["/episode_start"])
    assert m1 <= first[0] < m1 + 0.1e9 and first[-1] < m2 <= second[0] < m2 + 0.1e9
    assert second[-1] <= T0_NS + 4.0e9
    assert results[0].frames + results[0].dropped_leading == len(range(m1, m2, round(1e9 / 30)))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"state": {"topic": "/follower/joint_state", "names": list(SO101)}},
            "state.topic: /follower/joint_state is not there",
        ),
        (
            {"images": {"front": {"topic": FRONT, "type": "sensor_msgs/msg/Image"}}},
            "images.front.type: the contract says sensor_msgs/msg/Image, topic /front_camera/image_raw/compressed carries sensor_msgs/msg/CompressedImage",
        ),
        (
            {"robot": None, "action": {"topic": LEADER, "names": ["shoulder_pan", "elbow"]}},
            "joint 'elbow' is not in the message",
        ),
        ({"fps": -1}, "fps: -1 must be a number of frames per second > 0"),
        (
            {"episodes": {"split": "marker", "topic": "/nobody"}},
            "episodes.topic: /nobody is not there",
        ),
    ],
)
def test_each_contract_mistake_is_refused_by_name_and_nothing_is_written(
    teleop, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict, expected: str
) -> None:
    contract = contract_file(tmp_path, **changes)
    out = tmp_path / "runs"
    assert (
        main(["import-bag", str(teleop.path), "--contract", str(contract), "--out", str(out)]) == 1
    )
    err = capsys.readouterr().err
    assert expected in err, err
    assert not out.exists()


def test_an_existing_run_directory_is_never_overwritten(teleop, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "runs"
    (out / teleop.path.name).mkdir(parents=True)
    args = [
        "import-bag",
        str(teleop.path),
        "--contract",
        str(contract_file(tmp_path)),
        "--out",
        str(out),
    ]
    assert main(args) == 1
    assert "--out=" in capsys.readouterr().err and list((out / teleop.path.name).iterdir()) == []


def test_contract_check_prints_the_streams_and_names_a_missing_topic(
    teleop, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["contract", "check", str(contract_file(tmp_path)), str(teleop.path)]) == 0
    out = capsys.readouterr().out
    assert "sensor_msgs/msg/CompressedImage" in out and "301 messages, 100.0 Hz" in out
    assert "40 messages, 15.0 Hz" in out and "85 messages, 30.0 Hz" in out
    bad = contract_file(tmp_path, "bad.yaml", state={"topic": "/follower/js", "names": list(SO101)})
    assert main(["contract", "check", str(bad), str(teleop.path)]) == 2
    assert "state.topic: /follower/js is not there" in capsys.readouterr().err


def test_shadow_replay_compares_a_policy_with_the_operator_at_every_frame(
    teleop, tmp_path: Path
) -> None:
    from robokernel_ros.scoring.shadow import shadow_replay

    [r] = import_bags([teleop.path], contract_file(tmp_path), tmp_path / "runs")
    trace = load_trace(r.run_dir)
    seen: list[tuple[int, ...]] = []

    def follower_as_policy(observation):  # noqa: ANN001, ANN202 - the follower's own positions
        seen.append(tuple(observation["images"]["front"].shape))
        return [dict(observation["joint_positions"])]

    report = shadow_replay(trace, follower_as_policy)
    assert report.compared == r.frames and report.uncovered == 0
    assert set(seen) == {(48, 64, 3)} and len(seen) == r.frames
    obs = _observations(trace)
    for step in (0, r.frames // 2, r.frames - 1):
        row = report.steps[step]
        t = obs[step].data["stamp_ns"]
        f, lead = held(teleop, FOLLOWER, t), held(teleop, LEADER, t)
        expected = follower_value("elbow_flex", (f[0] - T0_NS) / 1e9) - leader_value(
            "elbow_flex", (lead[0] - T0_NS) / 1e9
        )
        assert row.diff["elbow_flex"] == pytest.approx(expected, abs=1e-12)
