"""The handover limiter: the command moves from where the robot is to where the human's
leader is within a velocity and an acceleration bound, so a takeover never jumps.

    limiter = HandoverLimiter(spec.action_keys, spec.control_hz, max_velocity=1.0,
                              max_acceleration=4.0)
    limiter.start(last_sent, previous_sent)      # at the takeover: the robot's command
    command = limiter.step(teleop_action)        # each correcting step (None: hold)

From the takeover on, every command the limiter gives differs from the one before by at
most `max_velocity / control_hz` per key, and that change differs from the previous
change by at most `max_acceleration / control_hz**2`: the robot keeps the velocity it
had (no step in velocity at the seam), brakes, and then follows the leader, braking in
time to stop on it (kernel.motion.step_toward, per key). The bounds are the shield's own
`max_velocity` / `max_acceleration` where the runner's safety config has them (a number
or one per key), so the shield's rate guards have nothing to clip; the limiter uses
`MARGIN` of them, which keeps floating-point rounding from touching the guards.

The limiter applies to absolute (position) control; for delta and velocity control the
runner hands the teleop action to the shield as it is (a zero there already holds).
Handing back to the policy uses the same limiter until the command has caught up with
the policy's (`caught_up`), then the policy's actions pass as they are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .domains import positive_number
from .motion import step_toward

DEFAULT_MAX_VELOCITY = 1.0  # per second, in the action's unit (rad/s for SO-101 joints)
DEFAULT_MAX_ACCELERATION = 4.0  # per second squared
MARGIN = 0.999  # the share of the bounds the limiter uses (rounding never reaches a guard)


def _bounds(name: str, value: Any, keys: Sequence[str], default: float) -> dict[str, float]:
    """One bound per key from a number, a mapping key -> number (keys not named get
    `default`) or None (all `default`)."""
    if value is None:
        return dict.fromkeys(keys, default)
    if isinstance(value, Mapping):
        out = dict.fromkeys(keys, default)
        for key, bound in value.items():
            out[str(key)] = positive_number(f"{name}[{key!r}]", bound)
        return out
    return dict.fromkeys(keys, positive_number(name, value))


class HandoverLimiter:
    """Per-key position command toward a target within velocity/acceleration bounds.

    HandoverLimiter(keys, control_hz, max_velocity=None, max_acceleration=None): bounds
    as a number for every key or a mapping key -> number (None: DEFAULT_MAX_VELOCITY /
    DEFAULT_MAX_ACCELERATION). Not thread-safe: the loop's thread owns it.
    """

    def __init__(
        self,
        keys: Sequence[str],
        control_hz: float,
        max_velocity: Any = None,
        max_acceleration: Any = None,
    ) -> None:
        self.keys = tuple(keys)
        period = 1.0 / positive_number("control_hz", control_hz)
        self.max_velocity = _bounds("max_velocity", max_velocity, self.keys, DEFAULT_MAX_VELOCITY)
        self.max_acceleration = _bounds(
            "max_acceleration", max_acceleration, self.keys, DEFAULT_MAX_ACCELERATION
        )
        # Per step: the largest change, and the largest change of that change.
        self.max_step = {k: v * period * MARGIN for k, v in self.max_velocity.items()}
        self.max_accel = {k: a * period * period * MARGIN for k, a in self.max_acceleration.items()}
        self.position: dict[str, float] = {}
        self.velocity: dict[str, float] = {}  # the last step's change per key
        self.active = False

    def start(
        self, last: Mapping[str, float] | None, previous: Mapping[str, float] | None = None
    ) -> None:
        """Begin from the robot's last command (`last`), moving as it moved from `previous`
        to it (None: at rest). Keys `last` lacks start where the first target puts them."""
        self.position = {}
        self.velocity = {}
        for key in self.keys:
            value = None if last is None else last.get(key)
            if not _finite(value):
                continue
            self.position[key] = float(value)
            before = None if previous is None else previous.get(key)
            self.velocity[key] = float(value) - float(before) if _finite(before) else 0.0
        self.active = True

    def step(self, target: Mapping[str, Any] | None) -> dict[str, float]:
        """The next command toward `target` (None, or a key missing or not finite: brake
        to rest where the command is). A key with no position yet starts at its target
        (the robot's command did not name it: nothing to be continuous with)."""
        out: dict[str, float] = {}
        for key in self.keys:
            goal = None if target is None else target.get(key)
            goal = float(goal) if _finite(goal) else None
            position = self.position.get(key)
            if position is None:
                if goal is None:
                    continue
                self.position[key], self.velocity[key] = goal, 0.0
                out[key] = goal
                continue
            position, velocity = step_toward(
                position,
                self.velocity.get(key, 0.0),
                goal,
                max_step=self.max_step[key],
                max_accel=self.max_accel[key],
            )
            self.position[key], self.velocity[key] = position, velocity
            out[key] = position
        return out

    def caught_up(self, target: Mapping[str, Any] | None) -> bool:
        """Whether the command sits on `target` for every key (so the target's next
        values may pass unlimited: a source that itself moves within the bounds)."""
        if target is None:
            return False
        for key in self.keys:
            goal = target.get(key)
            if not _finite(goal) or self.position.get(key) != float(goal):
                return False
        return True

    def stop(self) -> None:
        self.active = False


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
