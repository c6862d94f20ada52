"""Small defects of issue #17 (item 11): interval ends, the table's rate column, shadow
replay from a path, the progress bar's postfix, the CLI's plural and --list width."""

from __future__ import annotations

import time

from robokernel_ros.scoring import score_paths
from robokernel_ros.scoring.report import format_table
from robokernel_ros.scoring.shadow import shadow_replay
from robokernel_ros.tasks.statistics import wilson_interval


def test_the_interval_is_exact_at_zero_and_all_successes():
    assert wilson_interval(0, 3) == (0.0, wilson_interval(0, 3)[1])
    assert wilson_interval(0, 3)[0] == 0.0 and wilson_interval(3, 3)[1] == 1.0
    assert 0.0 < wilson_interval(1, 3)[0] < wilson_interval(1, 3)[1] < 1.0


def test_the_table_names_the_wall_rate_as_such_and_shadow_replay_takes_a_path(record_episode):
    run_dir, _ = record_episode(storage=None)
    table = format_table(score_paths([run_dir]))
    assert "wall steps/s" in table and "rate[Hz]" not in table

    def replay(obs):  # any callable observation -> actions
        return [{"shoulder": 0.0, "elbow": 0.0, "gripper": 0.0}] * 4

    from robokernel_ros.kernel.trace import load_trace

    by_path = shadow_replay(run_dir, replay)
    assert by_path.compared > 0 and by_path == shadow_replay(load_trace(run_dir), replay)


def test_the_progress_postfix_never_lags_the_count(capsys):
    from robokernel_ros.rollout.progress import Progress

    bar = Progress(n_episodes=3, robot_name="arm", label="eval", bar=True)
    for episode, success in enumerate((True, False, True)):
        time.sleep(0.12)  # past tqdm's 0.1 s render interval: every update may render
        bar.episode_done(episode, success=success, steps=5, outcome="x")
    bar.close()
    frames = [f for f in capsys.readouterr().err.split("\r") if "success=" in f]
    assert frames
    for frame in frames:  # "k/3 [...] success=s/k": the same k on both sides
        done = frame.split("|")[2].split("/")[0].strip()
        assert frame.rstrip(" ]").endswith(f"/{done}"), frame


def test_cli_says_one_episode_and_lists_benchmarks_in_narrow_columns(capsys):
    from robokernel_ros import cli

    assert cli.main(["eval", "--robot", "so101", "--no-trace", "--max-steps", "3"]) == 0
    assert "so101: 1 episode," in capsys.readouterr().out
    assert cli.main(["benchmark", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "go2_walk_forward" in "\n".join(lines) and max(map(len, lines)) <= 100
