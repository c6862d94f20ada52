"""The `robokernel` CLI: eval and benchmark subcommands, tables, JSON, exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import robokernel_ros.recording  # noqa: F401 - registers the rosbag2 reader with load_trace

from robokernel_ros import cli


def test_eval_prints_a_table(capsys, tmp_path):
    code = cli.main(["eval", "--robot", "so101", "--policy", "mock", "--episodes", "2", "--max-steps", "10",
                     "--seed", "3", "--trace-dir", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "mock on so101: 2 episodes" in out and "stopped_reason" in out and out.count("budget") == 2
    )
    assert len(list(tmp_path.iterdir())) == 2  # one run directory per episode


def test_eval_json_async_rtc_and_video(capsys, tmp_path):
    code = cli.main(["eval", "--robot", "so101", "--episodes", "1", "--max-steps", "16", "--async-rtc", "--json",
                     "--policy-config", '{"execution_horizon": 8}', "--no-trace", "--video", str(tmp_path)])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["chunk_prefetch_enabled"] is True and report["n_episodes"] == 1
    (video,) = report["video_paths"]
    assert Path(video).parent == tmp_path and Path(video).is_file()
    assert re.fullmatch(r"eval_\d{8}-\d{6}-[0-9a-f]{6}_ep0\.mp4", Path(video).name), video


def test_videos_of_two_evals_into_one_folder_both_stay_and_a_file_is_a_file(capsys, tmp_path):
    """Issue #17, defect 7."""
    argv = ["eval", "--robot", "so101", "--max-steps", "4", "--no-trace", "--json"]
    videos = []
    for _ in range(2):
        assert cli.main([*argv, "--video", str(tmp_path / "v")]) == 0
        videos += json.loads(capsys.readouterr().out)["video_paths"]
    first, second = videos
    assert first != second and Path(first).is_file() and Path(second).is_file()
    assert cli.main([*argv, "--video", str(tmp_path / "out.mp4")]) == 0
    (video,) = json.loads(capsys.readouterr().out)["video_paths"]
    assert video == str(tmp_path / "out_ep0.mp4") and Path(video).is_file()
    assert not (tmp_path / "out.mp4").is_dir()
    # defect 9: --camera without --video records nothing: a usage error, not silence
    assert cli.main([*argv, "--camera", "nosuch"]) == 2
    assert "--camera='nosuch'" in capsys.readouterr().err


def test_refusals_exit_non_zero_with_the_message(capsys):
    assert cli.main(["eval", "--robot", "so101", "--episodes", "0", "--no-trace"]) == 1
    assert "error: --episodes=0: must be a positive whole number" in capsys.readouterr().err
    assert cli.main(["eval", "--robot", "nope", "--no-trace"]) == 1
    assert "--robot='nope'" in capsys.readouterr().err
    assert cli.main(["eval", "--robot", "so101", "--policy", "ghost", "--no-trace"]) == 1
    err = capsys.readouterr().err  # the choices (other tests may register providers)
    assert "--policy='ghost': must be one of [" in err and "'mock'" in err
    assert cli.main(["benchmark", "no_such_bench", "--no-trace"]) == 1
    assert "no such benchmark" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["eval"])  # usage error: --robot is required
    assert exc.value.code == 2


def test_benchmark_list_and_run(capsys):
    assert cli.main(["benchmark", "--list"]) == 0
    assert "go2_walk_forward" in capsys.readouterr().out
    code = cli.main(["benchmark", "go2_walk_forward", "--episodes", "1", "--policy-config", '{"amplitude": 0.0}',
                     "--no-trace", "--json"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["benchmark"] == "go2_walk_forward" and report["success_rate"] == 0.0
    assert report["episodes"][0]["stop_predicate"] == "base_below_z(z=0.15)"


def test_subcommands_are_a_registry():
    seen = []
    cli.register_subcommand(
        "hello", "say hello", lambda p: p.add_argument("--who"), lambda a: seen.append(a.who) or 0
    )
    try:
        assert cli.main(["hello", "--who", "ros"]) == 0 and seen == ["ros"]
        with pytest.raises(ValueError, match="already registered"):
            cli.register_subcommand("hello", "again", lambda p: None, lambda a: 0)
    finally:
        cli.SUBCOMMANDS.pop("hello", None)


def test_module_entry_point_exit_status():
    proc = subprocess.run([sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101", "--max-steps", "0",
                           "--no-trace"], capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 1 and "--max-steps=0" in proc.stderr


def test_ctrl_c_during_eval_closes_the_episode_and_prints_the_report(processes, tmp_path):
    """SIGINT (Ctrl-C) mid-episode: the episode ends at its next step as "stopped" /
    "interrupted" with its trace and bag complete, the finished ones are reported, exit 130."""
    import os
    import signal
    import time

    from robokernel_ros.kernel.trace import load_trace

    runs = tmp_path / "runs"
    proc = processes.start("eval", [sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101",
                                    "--episodes", "3", "--max-steps", "4000", "--trace-dir", str(runs)])  # fmt: skip
    deadline = time.monotonic() + 120
    while not (runs.is_dir() and len(list(runs.iterdir())) >= 2):  # episode 1 has started
        assert proc.poll() is None, processes.log(proc)
        assert time.monotonic() < deadline, processes.log(proc)
        time.sleep(0.02)
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the process group
    proc.wait(timeout=30)
    stopped_in = time.monotonic() - t0
    log = processes.log(proc)
    assert proc.returncode == 130, log
    assert stopped_in < 5.0, f"took {stopped_in:.2f} s to stop"  # ~0.2 s unloaded
    assert "Traceback" not in log and "mock on so101: 2 episodes" in log, log
    rows = [line.split() for line in log.splitlines() if line[:2] in ("0 ", "1 ")]
    assert [(r[1], r[-1]) for r in rows] == [("truncated", "budget"), ("stopped", "interrupted")]
    (interrupted,) = [p for p in runs.iterdir() if load_trace(p).meta.get("episode") == 1]
    trace = load_trace(interrupted)
    assert trace.meta["outcome"] == "stopped" and "interrupted" in trace.meta["status"]
    assert trace.events[-1].kind == "episode.end" and not trace.truncated
    assert trace.of_kind("operator.stop")[0].data == {"reason": "interrupted"}
    assert (interrupted / "bag" / "metadata.yaml").is_file()  # the bag was closed
    assert load_trace(interrupted / "bag").events[-1].kind == "episode.end"


def test_async_rtc_with_the_mock_works_on_the_first_try(capsys):
    code = cli.main(
        ["eval", "--robot", "so101", "--async-rtc", "--no-trace", "--max-steps", "20", "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["chunk_prefetch_enabled"] is True
    assert report["episodes"][0]["actions_applied"] > 0
    # one-action chunks under --async-rtc are refused in one line that says what to change
    code = cli.main(["eval", "--robot", "so101", "--async-rtc", "--no-trace", "--max-steps", "20",
                     "--policy-config", '{"execution_horizon": 1}'])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "--async-rtc" in err and '"execution_horizon": 8' in err and "Traceback" not in err


def test_errors_name_the_flag_without_a_traceback(capsys, tmp_path):
    """Issue #17, defect 4: an unusable folder or an unknown body is refused by its flag, exit 1."""
    from robokernel_ros.rollout import SimWorkcell, envelope_text

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cannot = str(blocker / "x")  # below a regular file: no folder can be made there
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--trace-dir", cannot]) == 1
    err = capsys.readouterr().err
    assert f"--trace-dir='{cannot}': cannot create or write a folder" in err
    assert "Traceback" not in err
    with SimWorkcell(trace_dir=None) as cell:  # the Python API: the parameter's own name
        cell.add_robot("so101", "so101")
        out = cell.run_policy("so101", n_steps=5, trace_dir=cannot)
        assert out["status"] == "error" and f"trace_dir='{cannot}'" in envelope_text(out)

    runs = tmp_path / "runs"
    assert cli.main(["eval", "--robot", "so101", "--max-steps", "5", "--trace-dir", str(runs)]) == 0
    capsys.readouterr()
    assert cli.main(["export-lerobot", str(runs), "--repo-id", "u/d", "--root", cannot]) == 1
    err = capsys.readouterr().err
    assert f"--root='{cannot}': cannot create the dataset folder" in err and "Traceback" not in err
    clause = '{"body_above_z": {"body": "nosuch", "z": 0.1}}'
    assert cli.main(["score", str(runs), "--success", clause]) == 1
    err = capsys.readouterr().err
    assert "--success:" in err and "'nosuch'" in err and "so101/base" in err  # the valid bodies
    assert "Traceback" not in err

    with pytest.raises(SystemExit) as exc:
        cli.main(["eval", "--help"])
    assert exc.value.code == 0
    assert "1 refused or failed" in capsys.readouterr().out


def test_output_folder_and_resume_after_sigkill(processes, tmp_path):
    """eval --output DIR writes lerobot-eval's eval_info.json; --resume DIR after a SIGKILL
    mid-evaluation keeps the finished episodes, runs the rest, and aggregates them all."""
    import signal
    import time

    out = tmp_path / "eval"
    proc = processes.start("eval", [sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101",
                                    "--episodes", "4", "--max-steps", "1500", "--output", str(out)])  # fmt: skip
    runs = out / "runs"
    deadline = time.monotonic() + 120
    while not (runs.is_dir() and len(list(runs.iterdir())) >= 3):  # episodes 0, 1 done, 2 running
        assert proc.poll() is None, processes.log(proc)
        assert time.monotonic() < deadline, processes.log(proc)
        time.sleep(0.02)
    processes.kill(proc, signal.SIGKILL)
    assert not (out / "eval_info.json").exists()
    finished = {}  # run id -> seed of the episodes that ended before the kill
    for run_dir in runs.iterdir():
        meta = json.loads((run_dir / "meta.json").read_text())
        if "outcome" in meta:
            finished[run_dir.name] = meta["seed"]
    assert len(finished) >= 2

    assert cli.main(["eval", "--resume", str(out), "--json"]) == 0
    info = json.loads((out / "eval_info.json").read_text())
    episodes = info["per_episode"]
    assert [e["episode_ix"] for e in episodes] == [0, 1, 2, 3]
    assert [e["seed"] for e in episodes] == [0, 1, 2, 3]
    kept = {Path(e["run_dir"]).name: e["seed"] for e in episodes}
    assert all(kept.get(run_id) == seed for run_id, seed in finished.items())  # kept as they were
    assert all(Path(e["run_dir"]).parent == runs for e in episodes)
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        Path(e["run_dir"]).name for e in episodes
    )
    agg = info["aggregated"]
    assert agg["n_episodes"] == 4 and agg["pc_success"] == 0.0 and agg["avg_sum_reward"] == 0.0
    assert agg["success_rate_ci95"] == [0.0, pytest.approx(0.4899, abs=1e-4)]
    assert {"sum_reward", "max_reward", "success", "seed", "outcome", "steps"} <= set(episodes[0])
    assert (out / "report" / "index.html").is_file()  # the pictures of all four episodes
    # a finished folder is never overwritten
    assert cli.main(["eval", "--robot", "so101", "--output", str(out)]) == 1


def test_replay_on_the_shell(tmp_path, capsys):
    runs = tmp_path / "runs"
    assert (
        cli.main(["eval", "--robot", "so101", "--max-steps", "12", "--trace-dir", str(runs)]) == 0
    )
    capsys.readouterr()
    (run_dir,) = runs.iterdir()
    # the robot comes from the recording; the replay repeats the trajectory exactly
    assert cli.main(["replay", str(run_dir), "--no-trace", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recorded_steps"] == 12 and report["actions_applied"] == 12
    assert report["max_qpos_divergence"] == 0.0
    assert cli.main(["replay", str(tmp_path / "nothing"), "--robot", "so101", "--no-trace"]) == 1
    err = capsys.readouterr().err
    assert "nothing" in err and "Traceback" not in err


def test_remote_policy_without_a_server_is_one_line_not_a_traceback(tmp_path):
    # this test's ROS_DOMAIN_ID has no policy_server: the readiness wait times out
    config = json.dumps({"ready_timeout_s": 0.5})
    proc = subprocess.run([sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101", "--policy",
                           "remote", "--policy-config", config, "--no-trace", "--max-steps", "3"],
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "is not ready" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2  # the logged failure and the error
