"""The hold action: what the robot executes when no action is queued (or the operator
paused), for the driven loop and the served session alike.

An env's own `hold_action(last)` (kernel.spec.HoldActionSource) wins; else absolute
control holds the last target, and delta / velocity control commands zero motion with
the grippers kept. Without a last action, absolute control (and a gripper) holds the
action key's value in the current observation when it has a finite number there, else
the middle of the key's limits, else 0.0: an env for real hardware should implement
hold_action.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .spec import Action, EnvSpec


def hold_action(spec: EnvSpec, last: Action | None, observation: Any = None) -> dict[str, float]:
    """The hold action of an env described by `spec` without a hold of its own (see the
    module docstring); `observation`: the current one (None: unknown)."""
    if spec.control == "absolute":
        if last is not None:
            return dict(last)
        return {key: initial_value(spec, key, observation) for key in spec.action_keys}
    grippers = spec.gripper_keys
    return {
        key: (_gripper_value(spec, key, last, observation) if key in grippers else 0.0)
        for key in spec.action_keys
    }


def _gripper_value(spec: EnvSpec, key: str, last: Action | None, observation: Any) -> float:
    if last is not None and key in last:
        return float(last[key])
    return initial_value(spec, key, observation)


def initial_value(spec: EnvSpec, key: str, observation: Any) -> float:
    """An action key's value with no command yet: the observation's finite number under
    the key, else the middle of its limits, else 0.0."""
    if isinstance(observation, Mapping):
        value = observation.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    limits = spec.action_limits.get(key)
    if limits is not None:
        return (float(limits[0]) + float(limits[1])) / 2.0
    return 0.0
