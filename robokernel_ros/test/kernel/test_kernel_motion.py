"""kernel.motion.step_toward: a stream of its steps reaches the goal, never faster than
max_step, never changing speed by more than max_accel, and without overshooting from
rest; the same stream passes the shield's velocity and acceleration guards unclipped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robokernel_ros.kernel.motion import step_toward
from robokernel_ros.kernel.shield import AccelerationGuard, GuardContext, VelocityGuard

EPS = 1e-9


def _stream(start: float, goal: float, max_step: float, max_accel: float) -> list[float]:
    position, velocity, out = start, 0.0, [start]
    for _ in range(20_000):
        position, velocity = step_toward(
            position, velocity, goal, max_step=max_step, max_accel=max_accel
        )
        out.append(position)
        if position == goal and velocity == 0.0:
            return out
    raise AssertionError(f"{start} -> {goal} did not arrive")


@settings(max_examples=300, deadline=None)
@given(
    start=st.floats(-3.0, 3.0),
    goal=st.floats(-3.0, 3.0),
    max_step=st.floats(1e-3, 0.2),
    max_accel=st.floats(1e-4, 0.05),
)
def test_reaches_the_goal_within_both_bounds_without_overshoot(start, goal, max_step, max_accel):
    stream = _stream(start, goal, max_step, max_accel)
    steps = [b - a for a, b in zip(stream, stream[1:], strict=False)]
    assert all(abs(s) <= max_step + EPS for s in steps)
    assert all(abs(b - a) <= max_accel + EPS for a, b in zip([0.0, *steps], steps, strict=False))
    lo, hi = min(start, goal), max(start, goal)
    assert all(lo - EPS <= p <= hi + EPS for p in stream), "overshoot"


def test_brakes_from_speed_when_the_goal_is_none() -> None:
    position, velocity = 0.0, 0.04
    speeds = []
    for _ in range(20):
        position, velocity = step_toward(position, velocity, None, max_step=0.05, max_accel=0.01)
        speeds.append(velocity)
    assert speeds[:4] == pytest.approx([0.03, 0.02, 0.01, 0.0], abs=1e-12)
    assert set(speeds[4:]) == {0.0}


def test_a_stream_passes_the_shields_rate_guards_unclipped() -> None:
    dt, vmax, amax = 0.02, 3.0, 30.0  # the SO-101's limits at 50 Hz
    scale = 0.99  # a bound met exactly is clipped by a float's last bit
    stream = _stream(0.0, 1.0, scale * vmax * dt, scale * amax * dt * dt)
    velocity = VelocityGuard({"j": vmax})
    acceleration = AccelerationGuard({"j": amax})
    for prev2, prev, value in zip(stream, stream[1:], stream[2:], strict=False):
        ctx = GuardContext(last={"j": prev}, previous={"j": prev2}, dt=dt)
        working, found = {"j": value}, []
        velocity.review(working, ctx, found)
        acceleration.review(working, ctx, found)
        assert not found and working == {"j": value}, (found, prev2, prev, value)
