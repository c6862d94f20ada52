"""The interval a command stream is judged over (safety/command_clock.py): arrival jitter
is not speed, a stream that really is faster is judged at its real rate, and the time
credited never runs more than one period ahead of the real clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robokernel_ros.safety.command_clock import MIN_DT_S, WINDOW, CommandClock

MAX_DT = 0.05  # max_step_dt_s (the node's default)


def test_rate_guards_judge_an_early_command_over_the_streams_period():
    """Arrival jitter is not speed: a 50 Hz stream's early (and late) command gets the
    stream's period; a stream that really is faster (1 kHz) is judged at its own rate."""
    clock = CommandClock(MAX_DT, period=0.02)
    t = 100.0
    assert clock.advance(t) == pytest.approx(0.02)  # the first: one period after the seed
    dts = []
    for interval in (0.020, 0.021, 0.019, 0.020, 0.003, 0.037, 0.020, 0.019):
        t += interval
        dts.append(clock.advance(t))
    assert min(dts) >= 0.019  # the 3 ms arrival is judged over ~20 ms
    assert dts[5] == pytest.approx(0.02)  # the late one too: the sender's schedule
    for _ in range(5):
        t += 0.001
        dt = clock.advance(t)
    assert dt == pytest.approx(0.001)  # a real 1 kHz stream: its own rate within 5
    t += 1.0
    dt = clock.advance(t)  # after a pause: one period, less than it took (stricter)
    assert dt == pytest.approx(0.02) and dt <= MAX_DT  # at most max_step_dt_s


def test_jittered_stream_is_credited_its_nominal_period():
    """100 Hz, each command up to 8 ms late (under one period): every one is credited
    10 ms, with the period given and with the period learned from the stream."""
    jitter = [0.0, 0.008, 0.0, 0.003, 0.0, 0.0, 0.007, 0.001, 0.0, 0.008] * 10
    for period in (0.01, None):
        clock = CommandClock(MAX_DT, period=period)
        dts = [clock.advance(1.0 + 0.01 * k + j) for k, j in enumerate(jitter)]
        steady = dts[WINDOW + 1 :] if period is None else dts[1:]
        assert max(abs(dt - 0.01) for dt in steady) < 0.0015, (period, steady)
        if period is not None:
            assert steady == pytest.approx([0.01] * len(steady))


def test_faster_stream_is_judged_at_its_real_rate():
    """Nominal 50 Hz, the stream at 200 Hz: after one period's worth of extra credit every
    command is credited its real 5 ms; learned, the period follows the stream."""
    for period in (0.02, None):
        clock = CommandClock(MAX_DT, period=period)
        dts = [clock.advance(5.0 + 0.005 * k) for k in range(40)]
        assert dts[WINDOW + 1 :] == pytest.approx([0.005] * (40 - WINDOW - 1))
        assert sum(dts[1:]) <= 0.005 * 39 + 0.02 + 1e-9
    assert clock.current_period() == pytest.approx(0.005)


def test_every_command_twice_is_credited_the_real_time():
    """A sender that publishes each command twice, 0.1 ms apart, at a nominal 50 Hz: the
    two of a pair share one period (the second gets almost nothing), not one each."""
    clock = CommandClock(MAX_DT, period=0.02)
    clock.advance(0.0)
    credits = []
    for k in range(1, 41):
        first = clock.advance(0.02 * k)
        second = clock.advance(0.02 * k + 1e-4)
        credits.append(first + second)
    assert sum(credits[5:]) <= 0.02 * len(credits[5:]) + 0.02 + 1e-9


def test_slower_stream_is_judged_over_the_nominal_period():
    """Nominal 50 Hz, the stream at 25 Hz: each command is credited 20 ms, less than it
    took (stricter); learned, its real 40 ms. A stall of the sender (a command 45 ms late,
    then its schedule restarted) is judged as one period, not as a change of speed."""
    clock = CommandClock(MAX_DT, period=0.02)
    dts = [clock.advance(0.04 * k) for k in range(40)]
    assert dts == pytest.approx([0.02] * 40)
    learned = CommandClock(MAX_DT)
    dts = [learned.advance(0.04 * k) for k in range(80)]
    assert dts[WINDOW:] == pytest.approx([0.04] * (80 - WINDOW))
    assert max(dts) <= MAX_DT
    stalled = CommandClock(MAX_DT, period=0.01)
    times = [0.01 * k for k in range(10)] + [0.09 + 0.055 + 0.01 * k for k in range(10)]
    assert [stalled.advance(t) for t in times] == pytest.approx([0.01] * 20)


def test_clock_refuses_a_period_it_could_never_credit():
    with pytest.raises(ValueError, match="period=0.1"):
        CommandClock(MAX_DT, period=0.1)
    with pytest.raises(ValueError, match="max_dt=0"):
        CommandClock(0)


@settings(max_examples=300, deadline=None)
@given(
    period=st.one_of(st.none(), st.floats(0.001, MAX_DT)),
    gaps=st.lists(st.floats(0.0, 0.2), min_size=2, max_size=80),
)
def test_credited_time_never_runs_ahead_of_the_real_clock(period, gaps):
    """Whatever the arrivals: each credit in [MIN_DT_S, max_dt]; the time credited since
    the stream's first command is at most its real span plus one period (the longest
    judged with, for a learned one), and to any run of commands at most its span plus
    two (a schedule that lags after late commands is owed at most one period). MIN_DT_S
    more for each command that arrived at once."""
    clock = CommandClock(MAX_DT, period=period)
    times, t = [], 0.0
    for gap in gaps:
        t += gap
        times.append(t)
    dts, used = [], []
    for now in times:
        dts.append(clock.advance(now))
        used.append(clock.current_period())  # the T this command was judged with
    assert all(MIN_DT_S - 1e-12 <= dt <= MAX_DT + 1e-12 for dt in dts)
    for j in range(1, len(times)):
        since_start = sum(dts[1 : j + 1])
        lead = max(used[: j + 1])  # the largest period judged with so far
        assert since_start <= times[j] - times[0] + lead + MIN_DT_S * j + 1e-9, j
    for i in range(2, len(times)):
        for j in range(i, len(times)):
            credited = sum(dts[i : j + 1])
            span = times[j] - times[i - 1]
            slack = 2 * max(used[: j + 1]) + MIN_DT_S * (j - i + 1)
            assert credited <= span + slack + 1e-9, (i, j, credited, span)
