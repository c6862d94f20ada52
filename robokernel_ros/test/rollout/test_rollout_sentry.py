"""Sentry mode through the rollout API (run_policy(..., sentry_rotate_s=N)): one continuous
run recorded as an episode every N s of robot time, its episodes' steps adding up to the
run's, each episode's trace and bag loading with its own steps, the commands those of one
plain run; a bad period is refused by name before anything runs; `robokernel run
--sentry-rotate-s` the same from a shell."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"))
    c.add_robot("arm", "so101")
    yield c
    c.close()


def _actions(path: str | Path) -> list[dict]:
    return [e.data["action"] for e in load_trace(path).of_kind("action")]


def test_a_sentry_run_rotates_episodes_without_losing_a_step(cell) -> None:
    plain = envelope_json(cell.run_policy("arm", n_steps=45, seed=4))
    out = cell.run_policy("arm", n_steps=45, seed=4, sentry_rotate_s=0.2)  # 10 steps at 50 Hz
    assert out["status"] == "success", envelope_text(out)
    run = envelope_json(out)
    sentry = run["sentry"]
    assert sentry["rotate_every_s"] == 0.2
    episodes = sentry["episodes"]
    assert [e["steps"] for e in episodes] == [10, 10, 10, 10, 5]
    assert sum(e["steps"] for e in episodes) == run["steps"] == run["steps_advanced"] == 45
    assert [e["first_step"] for e in episodes] == [0, 10, 20, 30, 40]
    assert [e["outcome"] for e in episodes] == ["truncated"] * 5
    assert all("sentry rotation" in e["status"] for e in episodes[:-1]), episodes
    assert len({e["run_id"] for e in episodes}) == 5
    assert run["trace_path"] == episodes[-1]["trace_path"]
    sent = []
    for e in episodes:
        traced, bagged = _actions(e["trace_path"]), _actions(e["bag_path"])
        assert len(traced) == e["steps"] and bagged == traced, e
        meta = load_trace(e["trace_path"]).meta
        assert (
            meta["sentry"]["index"] == e["index"]
            and meta["sentry"]["first_step"] == e["first_step"]
        )
        sent += traced
    # the robot got what one plain run of the same seed sends it
    assert sent == _actions(plain["trace_path"])


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, True, "1"])
def test_a_bad_rotation_period_is_refused_by_name_and_runs_nothing(cell, value) -> None:
    root = Path(cell.trace_dir)
    before = sorted(root.iterdir())
    out = cell.run_policy("arm", n_steps=10, sentry_rotate_s=value)
    assert out["status"] == "error"
    text = envelope_text(out)
    assert text.startswith(f"sentry_rotate_s={value!r}: must be positive finite seconds"), text
    assert sorted(root.iterdir()) == before


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robokernel_ros.cli", "run", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_robokernel_run_sentry_rotate_s_records_an_episode_per_period(tmp_path) -> None:
    runs = tmp_path / "runs"
    done = _cli("--robot", "so101", "--max-steps", "25", "--sentry-rotate-s", "0.2",
                "--trace-dir", str(runs), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    steps = [e["steps"] for e in report["sentry"]["episodes"]]
    assert steps == [10, 10, 5] and report["steps"] == 25
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        e["run_id"] for e in report["sentry"]["episodes"]
    )


def test_robokernel_run_refuses_a_bad_sentry_rotate_s_by_its_flag(tmp_path) -> None:
    runs = tmp_path / "runs"
    done = _cli("--robot", "so101", "--sentry-rotate-s", "-2", "--trace-dir", str(runs))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: --sentry-rotate-s=-2.0: must be positive finite"), (
        done.stderr
    )
    assert not runs.exists()
