"""The review of one command (safety/review.py), no ROS: a policy within the limits whose
commands arrive with transport jitter passes unclipped; a stream that really is over the
limits, or faster than its nominal rate, is clipped to them; shape and trajectory
refusals answered by the hold."""

from __future__ import annotations

import math

import pytest
from robokernel_ros.safety.limits import JointLimit
from robokernel_ros.safety.review import CommandReview, TrajectoryPoint

LIMITS = {"a": JointLimit(-3.0, 3.0, 3.0, 30.0), "b": JointLimit(-3.0, 3.0, 3.0, 30.0)}
#: late arrivals (s) of a 100 Hz stream, up to 8 ms: under one period
JITTER = [0.0, 0.008, 0.0, 0.003, 0.0, 0.0, 0.007, 0.001, 0.0, 0.006]


def _review(rate: float = 0.0) -> CommandReview:
    review = CommandReview(["a", "b"], LIMITS, command_rate_hz=rate)
    review.measured[:] = [0.0, 0.0]
    review.measured_velocity[:] = [0.0, 0.0]
    review.seed()
    return review


def _motion(steps: int, period: float, accel: float, vmax: float) -> list[float]:
    """Positions of a smooth back-and-forth motion: |acceleration| <= accel, |v| <= vmax."""
    q, v, sign, out = 0.0, 0.0, 1.0, []
    for k in range(steps):
        if k % 60 == 59:
            sign = -sign
        target = sign * vmax
        dv = accel * period
        v = min(target, v + dv) if v < target else max(target, v - dv)
        q += v * period
        out.append(q)
    return out


def _stream(review: CommandReview, positions: list[float], period: float, jitter=JITTER):
    verdicts, sent = [], []
    for k, q in enumerate(positions):
        now = 10.0 + k * period + jitter[k % len(jitter)]
        verdict = review.review_array([q, -q], now)
        verdicts.append(verdict)
        sent.append(q if verdict.action == "passed" else verdict.values[0])
    return verdicts, sent


@pytest.mark.parametrize("rate", [100.0, 0.0])
def test_jittered_arrivals_of_a_stream_within_limits_pass_unclipped(rate):
    """20 rad/s^2 and 2 rad/s at 100 Hz (the demo's scripted policy) against 30 and 3:
    commands up to 8 ms late pass untouched, nominal rate given or learned."""
    review = _review(rate)
    verdicts, _ = _stream(review, _motion(400, 0.01, 20.0, 2.0), 0.01)
    # learned: the first commands, before the window knows the stream, may be judged
    # over their arrival intervals
    judged = verdicts if rate else verdicts[70:]
    assert [v.action for v in judged].count("passed") == len(judged)


def test_a_stream_over_the_acceleration_limit_is_clipped():
    """45 rad/s^2 against 30, with the same jitter: clipped, and what is sent keeps to
    30 rad/s^2 over the nominal period."""
    review = _review(100.0)
    verdicts, sent = _stream(review, _motion(300, 0.01, 45.0, 2.0), 0.01)
    assert sum(v.action == "clipped" for v in verdicts) > 20
    guards = {f.guard for v in verdicts for f in v.findings}
    assert "acceleration" in guards
    q = [0.0, 0.0, *sent]  # the seed: at rest
    for k in range(2, len(q)):
        accel = (q[k] - 2 * q[k - 1] + q[k - 2]) / 0.01**2
        assert abs(accel) <= 30.0 + 1e-6 or k == 2, (k, accel)


def test_a_stream_faster_than_nominal_is_judged_at_its_real_rate():
    """The nominal rate says 50 Hz; the stream comes at 200 Hz with steps of a 50 Hz
    stream at 2.5 rad/s (so 10 rad/s really): clipped to 3 rad/s at the real rate."""
    review = _review(50.0)
    step = 2.5 * 0.02
    positions = [min(2.9, step * (k + 1)) for k in range(60)]
    verdicts, sent = _stream(review, positions, 0.005, jitter=[0.0])
    assert sum(v.action == "clipped" for v in verdicts) > 40
    # after one nominal period's extra credit, each command moves at most vmax * 5 ms
    for k in range(10, len(sent)):
        assert abs(sent[k] - sent[k - 1]) <= 3.0 * 0.005 + 1e-9
    assert sent[-1] <= 3.0 * (0.005 * 60 + 0.02) + 0.15  # no faster than 3 rad/s overall


def test_a_stream_slower_than_nominal_is_judged_over_the_nominal_period():
    """The nominal rate says 100 Hz; the stream comes at 50 Hz with steps sized for 20 ms
    (2 rad/s): judged over 10 ms (4 rad/s) it is clipped, fail closed; with the rate
    learned from the stream it passes."""
    positions = _motion(200, 0.02, 20.0, 2.0)
    verdicts, _ = _stream(_review(100.0), positions, 0.02, jitter=[0.0])
    assert sum(v.action == "clipped" for v in verdicts) > 100
    verdicts, _ = _stream(_review(0.0), positions, 0.02, jitter=[0.0])
    assert [v.action for v in verdicts[5:]].count("passed") == len(verdicts) - 5


def test_a_stalled_sender_within_limits_passes():
    """100 Hz with the runner's stalls: every 50th command 25-45 ms late, the sender's
    schedule restarted after it (as the kernel's pacer does): nothing clipped."""
    review = _review(100.0)
    t, verdicts = 10.0, []
    for k, q in enumerate(_motion(400, 0.01, 20.0, 2.0)):
        t += 0.01 + (0.025 + 0.02 * (k % 3) / 2 if k % 50 == 49 else 0.0)
        verdicts.append(review.review_array([q, -q], t))
    assert [v.action for v in verdicts].count("passed") == len(verdicts)


def test_wrong_shape_is_refused_with_the_hold():
    review = _review(50.0)
    review.measured[:] = [0.2, 5.0]  # b outside its limits: held at the limit
    review.release_hold()
    verdict = review.review_array([0.1], 10.0)
    assert verdict.refused and verdict.values == [0.2, 3.0]
    assert [(f.guard, f.value, f.limit) for f in verdict.findings] == [("shape", 1.0, 2.0)]


def test_nonfinite_is_refused_and_named():
    review = _review(50.0)
    verdict = review.review_array([math.nan, 0.0], 10.0)
    assert verdict.refused
    assert (verdict.findings[0].guard, verdict.findings[0].joint) == ("nonfinite", "a")


def test_trajectory_points_judged_over_their_time_from_start():
    """Each point against the one before it over the difference of their time_from_start:
    0.1 rad in 0.1 s passes; 0.1 rad more in 10 ms is clipped; a
    velocities field over its limit is clipped as guard velocity; time going back refused."""
    review = _review()
    ok = review.review_trajectory(["b", "a"], [TrajectoryPoint(0.1, [0.0, 0.1])])
    assert ok.action == "passed"
    fast = review.review_trajectory(
        ["a", "b"],
        [
            TrajectoryPoint(0.1, [0.1, 0.0], [1.0, 0.0]),
            TrajectoryPoint(0.11, [0.2, 0.0], [3.1, 0.0]),
        ],
    )
    assert fast.action == "clipped"
    assert fast.points[0] is None
    # 10 rad/s: clipped to the acceleration bound, 1 + 30 x 0.01 rad/s over 10 ms
    assert fast.points[1].positions[0] == pytest.approx(0.1 + (1.0 + 30.0 * 0.01) * 0.01)
    assert fast.points[1].velocities == [3.0, 0.0]
    assert {f.guard for f in fast.findings} >= {"velocity"}
    back = review.review_trajectory(
        ["a", "b"], [TrajectoryPoint(0.2, [0.0, 0.0]), TrajectoryPoint(0.1, [0.0, 0.0])]
    )
    assert back.refused and back.findings[0].guard == "time_from_start"
    unknown = review.review_trajectory(["a", "z"], [TrajectoryPoint(0.1, [0.0, 0.0])])
    assert unknown.refused and unknown.findings[0].joint == "z"


def test_command_rate_longer_than_max_step_is_refused():
    with pytest.raises(ValueError, match="command_rate_hz=10: .* exceeds max_step_dt_s=0.05"):
        CommandReview(["a"], LIMITS, command_rate_hz=10.0, max_step_dt_s=0.05)


def _one_point(q: float, period: float = 0.02) -> list[TrajectoryPoint]:
    return [TrajectoryPoint(period, [q, 0.0])]


def test_trajectory_stream_continues_from_the_desired_state_not_the_lagging_robot():
    """A 50 Hz stream of one-point trajectories ramping to 2 rad/s within the limits, late
    by up to 0.5 ms, while the measured state stays at 0 (the robot lags): each
    trajectory is judged from the one it replaces, so none is clipped. Judged from the
    measured state, the lag would have clipped them to a crawl. (A trajectory's times
    count from its arrival, so a late one really moves the controller's schedule: larger
    jitter shows as the acceleration the controller then executes.)"""
    review = _review()
    period, q, v, now = 0.02, 0.0, 0.0, 100.0
    for k in range(40):
        v = min(2.0, v + 15.0 * period)
        q += v * period
        now += period
        late = JITTER[k % 10] / 16
        verdict = review.review_trajectory(["a", "b"], _one_point(q), now + late)
        assert verdict.action == "passed", (k, verdict.findings)
    assert review.measured[0] == 0.0 and q > 1.0
    # the same last command, judged from the measured state (no trajectory executing)
    fresh = _review()
    assert fresh.review_trajectory(["a", "b"], _one_point(q), now).action == "clipped"


def test_trajectory_replaced_mid_way_is_judged_from_its_sample():
    """A 1 s trajectory to 1 rad replaced after 0.5 s: a first point 0.1 rad further in
    0.1 s (1 rad/s, the old speed) passes; 0.5 rad further in 0.1 s is clipped."""
    review = _review()
    assert review.review_trajectory(
        ["a", "b"], [TrajectoryPoint(1.0, [1.0, 0.0])], 10.0
    ).action == ("passed")
    on = review.review_trajectory(["a", "b"], [TrajectoryPoint(0.1, [0.6, 0.0])], 10.5)
    assert on.action == "passed", on.findings
    review = _review()
    review.review_trajectory(["a", "b"], [TrajectoryPoint(1.0, [1.0, 0.0])], 10.0)
    jump = review.review_trajectory(["a", "b"], [TrajectoryPoint(0.1, [1.0, 0.0])], 10.5)
    assert jump.action == "clipped"
    assert jump.points[0].positions[0] < 0.5 + 0.1 * 3.0 + 1e-9  # max_velocity from the sample


def test_trajectory_after_a_pause_or_a_refusal_is_judged_from_the_measured_state():
    """Past the last point by more than a period, or after a refused trajectory
    (the hold), the next trajectory starts from where the robot is measured."""
    for interrupt in ("pause", "refusal"):
        review = _review()
        now, q, v = 10.0, 0.0, 0.0
        for _ in range(20):  # 1 rad/s after the ramp, all within the limits
            v = min(1.0, v + 15.0 * 0.02)
            q += v * 0.02
            now += 0.02
            assert review.review_trajectory(["a", "b"], _one_point(q), now).action == "passed"
        if interrupt == "pause":
            now += 0.02 + review.max_dt + 0.01
        else:
            bad = review.review_trajectory(["a", "b"], [TrajectoryPoint(0.0, [q, 0.0])], now)
            assert bad.refused
            now += 0.02
        # the robot is measured at 0: 0.02 beyond the old command is far beyond the robot
        verdict = review.review_trajectory(["a", "b"], _one_point(q + 0.02), now)
        assert verdict.action == "clipped", interrupt
        assert verdict.points[0].positions[0] < 0.02, interrupt
