"""Observation conventions that policies, tasks and the rollout read alike.

    observed_joint_positions(obs)   # {joint: position}, whatever the observation's layout
    goal_in(obs)                    # {joint: target} from the `goal.<joint>` entries

An episode's goal (tasks.goals) is shown to the policy as top-level numbers
`goal.<joint>` of every observation; the scripted expert and the `joint_near_goal`
predicate read them back with `goal_in`. Pure: numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

GOAL_PREFIX = "goal."


def observed_joint_positions(observation: Mapping[str, Any]) -> dict[str, float]:
    """Joint positions by joint name from an observation, whatever its layout.

    Understands the MujocoEnv layout {"joint_positions": {name: value}, ...}, also
    {"joint_pos": ...} / {"qpos": {name: value}} / {"state": {...}} and flat "<joint>.pos" keys.
    """
    for key in ("joint_positions", "joint_pos", "qpos", "positions"):
        value = observation.get(key)
        if isinstance(value, Mapping):
            return {str(k): float(np.asarray(v).reshape(-1)[0]) for k, v in value.items()}
    state = observation.get("state")
    if isinstance(state, Mapping):
        return observed_joint_positions(state)
    out: dict[str, float] = {}
    for key, value in observation.items():
        if isinstance(key, str) and key.endswith(".pos"):
            try:
                out[key[: -len(".pos")]] = float(np.asarray(value).reshape(-1)[0])
            except (TypeError, ValueError, IndexError):
                continue
    return out


def goal_in(observation: Mapping[str, Any]) -> dict[str, float]:
    """The `goal.<joint>` entries of an observation, by joint ({} when it has none)."""
    n = len(GOAL_PREFIX)
    return {
        k[n:]: float(v)
        for k, v in observation.items()
        if isinstance(k, str) and k.startswith(GOAL_PREFIX)
    }
