"""The wall clock's Pacer on a fake monotonic clock: absolute deadlines (no drift), the
restart after a tick more than a period late, and guard() after wait() not sleeping again."""

from __future__ import annotations

import pytest
from robokernel_ros.kernel import timing
from robokernel_ros.kernel.timing import Pacer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    """kernel.timing's own `time` name points at the fake (monotonic, sleep: all it reads);
    the process's time module is untouched, so no other thread's clock is faked."""
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", fake)
    return fake


def test_deadlines_are_absolute_so_jittery_work_does_not_drift(clock) -> None:
    pacer = Pacer(0.02)
    pacer.wait()  # starts the schedule at 100.0; tick 1 at 100.02
    start = 100.0
    for k in range(2, 52):
        clock.now += 0.003 + 0.012 * (k % 3 == 0)  # work of 3 or 15 ms
        pacer.wait()
        assert clock.now == pytest.approx(start + k * 0.02)  # on the deadline, not after it
    assert pacer.restarts == 0


def test_a_late_tick_is_not_slept_and_the_next_keeps_the_schedule(clock) -> None:
    pacer = Pacer(0.02)
    pacer.wait()
    clock.now += 0.03  # tick 2 at 100.04 is missed by 10 ms (less than a period)
    assert pacer.wait() == pytest.approx(0.01)
    assert clock.sleeps[-1] == pytest.approx(0.02)  # the first wait only
    pacer.wait()
    assert clock.now == pytest.approx(100.06)  # back on t0 + 3 periods: no drift


def test_more_than_a_period_late_restarts_the_schedule_a_period_from_now(clock) -> None:
    pacer = Pacer(0.02)
    pacer.wait()
    clock.now += 0.1  # 80 ms past tick 2
    pacer.wait()
    assert pacer.restarts == 1 and clock.sleeps[-1] == pytest.approx(0.02)
    restarted = clock.now
    pacer.wait()
    assert clock.now == pytest.approx(restarted + 0.02)  # no burst of catch-up ticks


def test_guard_paces_an_unpaced_caller_and_does_not_sleep_after_a_wait(clock) -> None:
    pacer = Pacer(0.01)
    pacer.guard()  # the first command starts the schedule
    assert clock.sleeps == []
    pacer.guard()  # nobody waited: held to the schedule
    assert clock.now == pytest.approx(100.01)
    pacer.wait()
    slept = len(clock.sleeps)
    pacer.guard()  # the loop waited already: no second sleep
    assert len(clock.sleeps) == slept
    pacer.restart()
    pacer.guard()
    assert pacer.deadline() == pytest.approx(clock.now)


def test_a_restarted_schedule_starts_no_sooner_than_a_period_after_the_last_tick(clock) -> None:
    """A reset's last command, then the episode's first (restart(), then guard()): the two
    are a period apart, not a few milliseconds (a position controller would apply a
    period's motion in that time). After a long pause the new schedule starts at once."""
    pacer = Pacer(0.02)
    pacer.wait()
    pacer.wait()  # a tick at 100.04
    clock.now += 0.004  # the reset's last command, its check, the first observation
    pacer.restart()
    pacer.guard()  # the episode's first command
    assert clock.now == pytest.approx(100.06)
    assert pacer.deadline() == pytest.approx(100.06)
    pacer.wait()
    assert clock.now == pytest.approx(100.08)  # the new schedule from there
    clock.now += 1.0
    pacer.restart()
    before = len(clock.sleeps)
    pacer.guard()
    assert len(clock.sleeps) == before  # long after the last tick: no wait


def test_settle_waits_for_the_floor_so_the_first_command_does_not(clock) -> None:
    """A reset settles after its last command: it returns a period after that tick (the
    episode's first observation and request are taken then), and the first command of
    the restarted schedule goes out at once."""
    pacer = Pacer(0.02)
    pacer.wait()  # the reset's last tick at 100.02
    clock.now += 0.003
    pacer.settle()
    assert clock.now == pytest.approx(100.04)
    pacer.restart()
    before = len(clock.sleeps)
    pacer.guard()
    assert len(clock.sleeps) == before and pacer.deadline() == pytest.approx(100.04)
    pacer.settle()  # no tick since the last one started the schedule: a period after it
    assert clock.now == pytest.approx(100.06)


@pytest.mark.parametrize("bad", [0, -0.01, float("inf"), float("nan"), True, "0.02"])
def test_period_outside_its_domain_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="period_s="):
        Pacer(bad)
