"""`robokernel ros` before anything is sent: a call's --help lists its fields with their
domains (from the installed interface file), a misspelled field is refused naming the
closest ones, an operator's verb with a bad argument names its domain (exit 2 each)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("rclpy")


def _ros(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robokernel_ros.cli", "ros", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_calls_help_lists_its_fields_with_their_domains() -> None:
    out = _ros("eval_policy", "--help")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    i = next(k for k, line in enumerate(lines) if line.split()[:1] == ["n_episodes"])
    assert "(default 1)" in lines[i] and lines[i + 1].strip() == "positive", lines[i : i + 2]
    assert "extra_json" in out.stdout and "stop_when" in out.stdout


def test_a_misspelled_field_is_refused_naming_the_closest_before_anything_is_sent() -> None:
    out = _ros("eval_policy", "n_episods=2", "--server-timeout", "0.1")
    assert out.returncode == 2, out
    (line,) = out.stderr.strip().splitlines()
    assert "n_episods" in line and "did you mean n_episodes" in line, line


@pytest.mark.parametrize(
    "args",
    [("estop", "push"), ("lifecycle", "safety_shield"), ("lifecycle", "runner", "start"),
     ("clear-fault", "now")],
)  # fmt: skip
def test_an_operators_call_with_a_bad_argument_names_its_domain(args) -> None:
    out = _ros(*args)
    assert out.returncode == 2, out
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"robokernel ros: error: {args[0]}"), line


def test_the_report_says_per_episode_what_each_shield_did() -> None:
    from robokernel_ros.cli.ros import shield_lines

    counts = {"commands_sent": 12, "read": 12, "passed": 9, "clipped": 1, "refused": 2,
              "held": 2, "confirmed": True, "last_refusal": "position gripper=-0.3"}  # fmt: skip
    report = {"episodes": [{"episode": 0, "shield": {"shields": {"/rk/arm": counts}}},
                           {"episode": 1}]}  # fmt: skip
    assert shield_lines(report) == [
        "episode 0 shield /rk/arm: passed 9, clipped 1, refused 2, held 2 of 12 commands "
        "sent; last refusal: position gripper=-0.3"
    ]
    single = {"episode": 3, "shield": {"shields": {"/rk/arm": {**counts, "confirmed": False}}}}
    (line,) = shield_lines(single)
    assert line.startswith("episode 3 shield /rk/arm:") and "(confirmed 12 read)" in line
