"""Damaged bags (issue #17, defect 1): a bag.mcap cut short, with or without its
metadata.yaml, is salvaged by bag-recover; score and export refuse an unreadable or empty
one by name with a non-zero exit status instead of a traceback or a silent 0-step episode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from robokernel_ros.cli.export import main as export_main
from robokernel_ros.cli.score import main as score_main
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.recording import recover_bag
from robokernel_ros.recording.recover import main as recover_main
from rosbags.rosbag2 import Reader


def _cut_copy(bag: Path, dest: Path, fraction: float, *, keep_metadata: bool) -> Path:
    shutil.copytree(bag, dest)
    (mcap,) = dest.glob("*.mcap")
    data = mcap.read_bytes()
    mcap.write_bytes(data[: int(len(data) * fraction)])
    if not keep_metadata:
        (dest / "metadata.yaml").unlink()
    return dest


@pytest.mark.parametrize("keep_metadata", [True, False], ids=["metadata-kept", "no-metadata"])
def test_a_cut_bag_is_salvaged_up_to_the_cut(
    tmp_path: Path, capsys, record_episode, keep_metadata: bool
):
    # one episode, one MCAP chunk (it is never flushed before the close): the cut goes
    # through the only chunk, and its complete messages are what there is to salvage
    run_dir, published = record_episode(steps=40, success_at=None)
    whole = recover_bag(run_dir / "bag")
    assert whole.complete and whole.events == len(published)
    cut = _cut_copy(run_dir / "bag", tmp_path / "cut", 0.6, keep_metadata=keep_metadata)

    assert recover_main([str(cut), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["complete"] and not report["episode_ended"]
    # a contiguous prefix of the episode, most of it (60 % of the bytes)
    assert (report["first_seq"], report["last_seq"]) == (0, report["events"] - 1)
    assert 0.3 * len(published) < report["events"] < len(published)
    assert report["read_bytes"] <= report["file_bytes"]
    assert "cut inside an uncompressed chunk" in report["stopped"]
    assert any("metadata.yaml is present" in n for n in report["notes"]) == keep_metadata

    trace = load_trace(cut)  # the trace's events are the recovered ones, flagged
    assert trace.truncated and [e.seq for e in trace.events] == list(range(report["events"]))
    assert trace.events == load_trace(run_dir).events[: report["events"]]

    out = tmp_path / "repaired"
    assert recover_main([str(cut), "--repair", str(out)]) == 0
    capsys.readouterr()
    with Reader(out) as reader:  # rosbags opens the repaired bag
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert counts["/robokernel/events"] == report["events"]

    # score: the steps it holds, flagged as cut (not the outcome "truncated"), exit 0
    assert score_main([str(cut), "--json"]) == 0
    captured = capsys.readouterr()
    (episode,) = json.loads(captured.out)["episodes"]
    assert episode["recording_cut"] is True and 0 < episode["length"] < 40
    assert "cut short" in captured.err


def test_an_empty_or_unreadable_bag_is_refused_by_name(tmp_path: Path, capsys, record_episode):
    run_dir, _ = record_episode(steps=12)
    empty = _cut_copy(run_dir / "bag", tmp_path / "mixed" / "empty", 0.005, keep_metadata=False)
    garbage = tmp_path / "mixed" / "garbage"
    garbage.mkdir()
    (garbage / "bag.mcap").write_bytes(b"not an mcap file at all" * 10)
    good = tmp_path / "mixed" / "good"
    shutil.copytree(run_dir, good)

    assert recover_main([str(empty)]) == 1  # nothing to recover is not a success
    assert "nothing to recover" in capsys.readouterr().out

    # score: the readable episode is scored, the others named on stderr, exit 1
    assert score_main([str(tmp_path / "mixed"), "--json"]) == 1
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["aggregate"]["episodes"] == 1
    assert [Path(e["path"]).name for e in result["episodes"]] == ["good"]
    assert sorted(Path(s["path"]).name for s in result["skipped"]) == ["empty", "garbage"]
    assert f"path='{empty}': empty" in captured.err
    assert "garbage" in captured.err and "Traceback" not in captured.err

    # export: refused before anything is written
    root = tmp_path / "dataset"
    assert export_main([str(good), str(empty), "--repo-id", "u/d", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert f"path='{empty}': empty" in err and "Traceback" not in err
    assert not root.exists()
