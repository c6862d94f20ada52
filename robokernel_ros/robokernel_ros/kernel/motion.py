"""One step of a command toward a goal within a speed and an acceleration bound.

    position, velocity = step_toward(position, velocity, goal, max_step=0.05, max_accel=0.008)

Units are per control step: `max_step` is the largest change of the command in one step
(a speed x the period), `max_accel` the largest change of that change from one step to
the next (an acceleration x the period squared). The command brakes in time to stop at
the goal without overshooting it (a discrete braking distance: the continuous v^2 / 2a
overshoots by up to half a step's change), so a stream of these steps passes rate guards
with the same bounds (kernel/shield.py, the safety_shield) unclipped.

Users: the scripted policy's command, and the ROS environment's reset ramp.
"""

from __future__ import annotations

import math


def step_toward(
    position: float,
    velocity: float,
    goal: float | None,
    *,
    max_step: float,
    max_accel: float | None = None,
) -> tuple[float, float]:
    """The next (position, velocity): toward `goal` (None: brake to rest where it is).

    velocity is the last step's change (0.0 from rest); max_accel None bounds only the
    step. Returns the goal itself, at rest, once it is reachable in one allowed step.
    """
    distance = 0.0 if goal is None else goal - position
    step = max(-max_step, min(max_step, distance))
    if max_accel is not None:
        # The fastest step from which braking by max_accel per step still stops within
        # the distance: v + (v - a) + (v - 2a) + ... <= |distance|, which holds for
        # v <= sqrt(2 a |distance|) - a / 2 (v^2 / 2a + v / 2 is exact only for v a
        # multiple of a; a/8 covers the rest). A last step of at most a always stops.
        remaining = abs(distance)
        stop = max(
            math.sqrt(2.0 * max_accel * remaining) - 0.5 * max_accel,
            min(remaining, max_accel),
        )
        step = math.copysign(min(abs(step), stop, remaining), step)
        step = max(velocity - max_accel, min(velocity + max_accel, step))
    return position + step, step
