"""The chaos soak (bench/soak.py): its safety audit judges holds the shield's way, and a
2-minute soak of the sim workcell (e-stop presses, stops, cancels, lifecycle flips,
SIGKILLed and restarted nodes) lets no non-hold command through and leaves every
episode with an outcome, a trace and bags that load and score."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _soak_module():
    spec = importlib.util.spec_from_file_location("bench_soak", BENCH / "soak.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


S = 1_000_000_000  # ns


def _audit(grace_s: float = 0.1, released_s: tuple[float, float] | None = (0.0, 6.0)):
    """An audit of joints a (limits -1, 1) and b; `released_s`: the e-stop heard
    released every 0.1 s over that span (seconds; None: no sample)."""
    soak = _soak_module()
    audit = soak.SafetyAudit(
        ("a", "b"), [(-1.0, 1.0), (None, None)], timeout_s=0.5, grace_s=grace_s
    )
    if released_s is not None:
        _heartbeat(audit, *released_s, pressed=False)
    return audit


def _heartbeat(audit, t0: float, t1: float, pressed: bool, period: float = 0.1) -> None:
    for k in range(round((t1 - t0) / period) + 1):
        audit.estop(int((t0 + k * period) * S), pressed)


def test_the_audit_passes_holds_and_flags_a_forward_while_pressed() -> None:
    audit = _audit()
    audit.joint_state(int(0.95 * S), ["b", "a"], [0.2, 0.1])
    audit.command(1 * S, "w1", [0.5, 0.5])  # before the press: not judged
    audit.fault(2 * S, None, "pressed")
    audit.command(int(2.05 * S), "w1", [0.6, 0.6])  # within the grace: lag, not judged
    audit.command(int(2.2 * S), "w1", [0.1, 0.2])  # the measured position: a hold
    audit.command(int(2.4 * S), "w1", [0.1, 0.2])  # the same hold again
    audit.command(int(2.6 * S), "w1", [0.7, 0.2])  # a forward: violation
    audit.fault(2 * S, 3 * S, "pressed")
    audit.command(int(3.1 * S), "w1", [0.8, 0.8])  # released: not judged
    audit.joint_state(4 * S, ["a", "b"], [0.1, 0.2])
    audit.advance(min(5 * S, audit.watermark() + 1))
    assert audit.judged == 3 and audit.holds == 2
    assert [v["cause"] for v in audit.violations] == ["pressed"]
    assert audit.violations[0]["values"] == [0.7, 0.2]
    assert round(audit.lag_ns / 1e6) == 50


def test_the_audit_judges_a_dead_source_and_the_shields_latch_and_clamps_holds() -> None:
    audit = _audit()
    audit.joint_state(int(0.9 * S), ["a", "b"], [1.2, 0.3])  # beyond a's upper limit
    audit.fault(int(1.5 * S), None, "source lost")  # the panel killed at 1.0 s + timeout
    audit.command(int(1.4 * S), "w1", [0.9, 0.9])  # before: not judged
    audit.command(int(1.7 * S), "w1", [1.0, 0.3])  # the hold, clamped into [-1, 1]
    audit.command(int(1.8 * S), "w1", [0.8, 0.3])  # a forward while lost
    audit.fault(int(1.5 * S), 2 * S, "source lost")
    audit.joint_state(int(2.5 * S), ["a", "b"], [1.2, 0.3])  # the robot has not moved
    audit.advance(3 * S)
    assert [v["cause"] for v in audit.violations] == ["source lost"]
    latched = _audit()  # the source is fine, but the shield says latched
    latched.joint_state(int(0.5 * S), ["a", "b"], [0.1, 0.2])
    latched.shield_state(1 * S, True, 40)
    latched.command(int(1.01 * S), "w2", [0.4, 0.4])  # no grace for the shield's own word
    latched.shield_state(int(1.5 * S), True, 40)  # still latched, nothing forwarded since
    latched.command(int(2.1 * S), "w2", [0.5, 0.5])
    latched.shield_state(int(2.5 * S), True, 41)  # one passed: an unlatch was missed here
    latched.shield_state(3 * S, False, 41)
    latched.joint_state(5 * S, ["a", "b"], [0.1, 0.2])
    latched.advance(6 * S)
    assert [(v["cause"], v["values"]) for v in latched.violations] == [
        ("shield latched", [0.4, 0.4])
    ]


def test_a_hold_from_a_sample_the_monitor_missed_is_bracketed_and_an_offset_is_not() -> None:
    audit = _audit()
    audit.joint_state(int(0.90 * S), ["a", "b"], [0.10, 0.20])
    audit.joint_state(int(0.92 * S), ["a", "b"], [0.12, 0.22])  # the shield used 0.11, 0.21
    audit.shield_state(int(0.95 * S), True, 7)
    audit.command(int(1.0 * S), "w1", [0.11, 0.21])  # the hold of a sample missed here
    audit.command(int(1.1 * S), "w2", [0.14, 0.22])  # 0.02 past the robot: a forward
    audit.shield_state(int(1.45 * S), True, 7)
    audit.joint_state(int(1.5 * S), ["a", "b"], [0.12, 0.22])
    audit.advance(2 * S)
    assert audit.holds == 1 and audit.bracketed == 1
    assert [v["values"] for v in audit.violations] == [[0.14, 0.22]]


def test_a_hold_is_judged_by_the_samples_around_its_first_send_not_around_its_repeats() -> None:
    """The 30-minute soak's 58 'violations': a shield latched while the robot moved, held
    at a sample the monitor did not receive, and repeated that frozen hold for a second
    while the robot, overshooting, settled 0.025 rad away. Judged by the samples of the
    0.2 s before each repeat, every repeat was a 'violation'; the hold is the robot's
    position when it was first sent, and a forward past the robot still is one."""
    audit = _audit(released_s=(0.0, 1.0))
    for k, a in enumerate([-0.36, -0.345, -0.326]):  # moving up; the monitor missed 0.84
        audit.joint_state(int((0.70 + 0.07 * k) * S), ["a", "b"], [a, 0.5])
    audit.command(int(0.85 * S), "w1", [-0.3315, 0.5])  # the latch's hold (sample of 0.83)
    audit.fault(1 * S, None, "source lost")  # the panel killed at 0.5 s + timeout
    for k, a in enumerate([-0.309, -0.3065, -0.3067, -0.3069, -0.3072]):
        audit.joint_state(int((1.0 + 0.2 * k) * S), ["a", "b"], [a, 0.5])
    for k in range(1, 10):  # the frozen hold, repeated
        audit.command(int((1.0 + 0.1 * k) * S), "w1", [-0.3315, 0.5])
    audit.command(int(1.75 * S), "w2", [-0.30, 0.5])  # another writer ahead of the robot
    audit.joint_state(int(2.0 * S), ["a", "b"], [-0.3073, 0.5])
    audit.fault(1 * S, int(1.95 * S), "source lost")
    audit.advance(3 * S)
    assert audit.holds == 9 and audit.bracketed >= 1
    assert [v["values"] for v in audit.violations] == [[-0.30, 0.5]]


def test_the_audit_judges_an_unknown_estop_at_once_and_a_pressed_sample_it_heard() -> None:
    audit = _audit(released_s=None)
    audit.joint_state(int(0.05 * S), ["a", "b"], [0.1, 0.2])
    audit.fault(0, None, "unknown")  # no panel yet: nothing is known from the start
    audit.command(int(0.1 * S), "w1", [0.3, 0.3])  # no grace for an unknown e-stop
    audit.command(int(0.2 * S), "w1", [0.1, 0.2])  # the hold
    audit.fault(0, int(0.3 * S), "unknown")  # the panel started
    _heartbeat(audit, 0.3, 1.0, pressed=False)
    audit.command(int(0.5 * S), "w1", [0.3, 0.3])  # released: not judged
    _heartbeat(audit, 1.1, 1.5, pressed=True)  # a press the schedule did not make
    audit.command(int(1.15 * S), "w1", [0.4, 0.4])  # heard 50 ms ago: within the grace
    audit.command(int(1.45 * S), "w1", [0.4, 0.4])  # pressed since 1.1 s: violation
    audit.command(int(2.2 * S), "w1", [0.5, 0.5])  # the last sample 0.7 s old: not judged
    _heartbeat(audit, 2.3, 3.0, pressed=False)
    audit.command(int(2.5 * S), "w1", [0.6, 0.6])  # released again
    audit.joint_state(int(4.0 * S), ["a", "b"], [0.1, 0.2])
    audit.advance(min(5 * S, audit.watermark() + 1))
    assert [(v["cause"], v["values"][0]) for v in audit.violations] == [
        ("unknown", 0.3), ("pressed (heard)", 0.4)
    ]  # fmt: skip
    assert audit.holds == 1 and audit.judged == 3  # the one within the grace is not judged
    assert round(audit.lag_ns / 1e6) == 50


def test_a_command_that_reaches_the_monitor_late_is_judged_by_its_own_time() -> None:
    audit = _audit()
    audit.joint_state(int(0.95 * S), ["a", "b"], [0.1, 0.2])
    audit.fault(1 * S, None, "unknown")
    audit.fault(1 * S, 2 * S, "unknown")
    audit.fault(3 * S, None, "pressed")
    audit.joint_state(int(3.5 * S), ["a", "b"], [0.1, 0.2])
    audit.advance(int(3.6 * S))  # judged up to 3.6 s; then two commands arrive late:
    audit.command(int(1.5 * S), "w1", [0.5, 0.5])  # forwarded while unknown: violation
    audit.command(int(2.5 * S), "w1", [0.6, 0.6])  # between the intervals: not judged
    audit.joint_state(4 * S, ["a", "b"], [0.1, 0.2])
    audit.advance(int(4.1 * S))
    assert audit.late == 2 and audit.commands == 2
    assert [(v["cause"], v["values"][0]) for v in audit.violations] == [("unknown", 0.5)]


def test_the_audit_judges_only_what_its_joint_states_have_reached() -> None:
    audit = _audit()
    audit.joint_state(int(0.95 * S), ["a", "b"], [0.1, 0.2])
    audit.fault(1 * S, None, "pressed")
    audit.command(int(1.8 * S), "w1", [0.5, 0.5])
    audit.advance(min(3 * S, audit.watermark()))  # a monitor behind: judges to 0.95 s
    assert audit.commands == 0
    audit.joint_state(int(1.9 * S), ["a", "b"], [0.1, 0.2])
    audit.advance(min(3 * S, audit.watermark()))
    assert audit.commands == 1 and not audit.violations  # no sample after it judged yet
    audit.joint_state(int(2.0 * S), ["a", "b"], [0.1, 0.2])
    audit.advance(min(3 * S, audit.watermark()))
    assert [v["cause"] for v in audit.violations] == ["pressed"]


@pytest.mark.whole_machine  # a graph of six nodes under chaos: alone under -n (conftest)
def test_a_two_minute_chaos_soak_lets_no_forward_through_and_every_episode_loads(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), "--quick", "--work-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    assert lines, out.stdout[-3000:] + out.stderr[-3000:]
    # shown by pytest when an assertion below fails (the whole JSON: tmp_path/result.json)
    print("\n".join(x for x in out.stdout.splitlines() if not x.startswith("{"))[-8000:])
    result = json.loads(lines[-1])
    verdicts = result["verdicts"]
    assert result["n_violations"] == 0, result["violations"]
    assert verdicts["audit_saw_commands"], result["intervals"]
    # the e-stop unknown (no panel yet, a second source commanding) was judged per shield
    assert all(i.get("unknown") for i in result["intervals"].values()), result["intervals"]
    assert verdicts["every_episode_complete"], result["episode_problems"]
    assert verdicts["anchor_episodes_without_error"], result["outcomes"]
    assert result["episodes_chaos"] > 0 and result["fault_log"], out.stdout[-3000:]
    assert verdicts["graph_recovered_every_fault"], result["failures"]
    assert verdicts["processes_stopped"]
    assert verdicts["no_gross_growth"], result["growing"]
    assert out.returncode == 0, out.stdout[-3000:]
