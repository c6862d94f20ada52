"""`robokernel eval --output DIR` / `--resume DIR` tell the truth about what ran (issue #36,
items 4 and 6): a resume refuses flags that change the evaluation by name, numbers its
episodes on from where the run stopped, removes the interrupted episode's partial video,
and adds up eval_s over the invocations; a Ctrl-C after the last episode still writes
eval_info.json and says what --resume would recover."""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from robokernel_ros import cli


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "robokernel_ros.cli", *args]


def _wait(proc, processes, ready, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, processes.log(proc)
        assert time.monotonic() < deadline, f"waited for {what}: {processes.log(proc)}"
        time.sleep(0.01)


def _finished(runs: Path) -> int:
    return sum("outcome" in Path(f).read_text() for f in glob.glob(str(runs / "*" / "meta.json")))


def test_resume_refuses_flags_that_change_the_evaluation_by_name(tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli.main(["eval", "--robot", "so101", "--episodes", "2", "--max-steps", "5",
                     "--output", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    before = sorted(p.name for p in (out / "runs").iterdir())
    code = cli.main(["eval", "--resume", str(out), "--robot", "panda", "--episodes", "5",
                     "--policy", "scripted", "--json"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for said in ("--robot='panda' (it has 'so101')", "--episodes=5 (it has 2)",
                 "--policy='scripted' (it has 'mock')", "--output NEW_DIR", "--json"):  # fmt: skip
        assert said in err, err
    assert sorted(p.name for p in (out / "runs").iterdir()) == before  # nothing ran
    # what it takes as given: --json (and the same values as saved)
    assert cli.main(["eval", "--resume", str(out), "--robot", "so101", "--json"]) == 0
    assert json.loads((out / "eval_info.json").read_text())["aggregated"]["n_episodes"] == 2


def test_a_resumed_evaluation_numbers_on_drops_the_partial_video_and_adds_up_eval_s(
    processes, tmp_path
):
    out = tmp_path / "eval"
    runs, videos = out / "runs", out / "videos"
    proc = processes.start("eval", _cli("eval", "--robot", "so101", "--episodes", "3",
                                        "--max-steps", "600", "--output", str(out), "--video",
                                        "--video-fps", "5"))  # fmt: skip
    _wait(proc, processes, lambda: runs.is_dir() and len(list(runs.iterdir())) >= 2, "episode 1")
    # episode 1 has recorded some frames: its partial video is on disk
    _wait(proc, processes, lambda: len(list(videos.glob("*_ep1.mp4"))) == 1, "episode 1's video")
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    log = processes.log(proc)
    assert proc.returncode == 130, log
    assert f"`robokernel eval --resume {out}` runs the 2 unfinished episode(s)" in log, log
    first = json.loads((out / "eval_info.json").read_text())
    assert [e["episode_ix"] for e in first["per_episode"]] == [0]
    eval_s_1 = first["aggregated"]["eval_s"]
    assert eval_s_1 > 0

    assert cli.main(["eval", "--resume", str(out), "--json"]) == 0
    info = json.loads((out / "eval_info.json").read_text())
    assert [e["episode_ix"] for e in info["per_episode"]] == [0, 1, 2]
    episodes = sorted(json.loads((d / "meta.json").read_text())["episode"] for d in runs.iterdir())
    assert episodes == [0, 1, 2]  # numbered on, not from 0 again
    names = sorted(p.name for p in videos.iterdir())
    assert [n.rsplit("_", 1)[1] for n in names] == ["ep0.mp4", "ep1.mp4", "ep2.mp4"], names
    assert sorted(Path(v).name for v in info["video_paths"]) == names
    this_run = sum(r["elapsed_s"] for r in info["reports"])
    assert info["aggregated"]["eval_s"] == pytest.approx(eval_s_1 + this_run)


def test_ctrl_c_after_the_last_episode_writes_eval_info_and_says_so(processes, tmp_path):
    out = tmp_path / "eval"
    proc = processes.start("eval", _cli("eval", "--robot", "so101", "--episodes", "2",
                                        "--max-steps", "100", "--output", str(out)))  # fmt: skip
    _wait(proc, processes, lambda: _finished(out / "runs") == 2, "the last episode's end")
    os.killpg(proc.pid, signal.SIGINT)  # while it aggregates and draws the report
    proc.wait(timeout=60)
    log = processes.log(proc)
    assert proc.returncode in (0, 130), log
    assert "Traceback" not in log, log
    info = json.loads((out / "eval_info.json").read_text())
    assert info["aggregated"]["n_episodes"] == 2
    assert (out / "report" / "index.html").is_file()
    if proc.returncode == 130:  # the Ctrl-C landed before the process ended
        assert "interrupted after the last episode: the evaluation is complete" in log, log


def test_a_misspelled_field_is_one_line_with_the_valid_fields():
    from robokernel_ros.rollout import SimWorkcell, envelope_text

    with SimWorkcell(trace_dir=None) as cell:
        cell.add_robot("so101", "so101")
        for call, kwargs, near in (
            (cell.eval_policy, {"n_episods": 2}, "n_episodes"),
            (cell.eval_policy, {"foo": 1}, None),
            (cell.run_policy, {"n_step": 3}, "n_steps"),
        ):
            out = call("so101", **kwargs)
            text = envelope_text(out)
            (name,) = kwargs
            assert out["status"] == "error" and len(text.splitlines()) == 1, text
            assert f"unknown field {name!r}" in text and "unexpected keyword" not in text
            assert (f"did you mean {near!r}" in text) == bool(near), text
            assert "max_steps" in text and "seed" in text and "instruction" in text  # the fields
