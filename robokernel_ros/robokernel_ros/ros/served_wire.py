"""The served endpoint's wire format beyond the messages ros.wire converts: the JSON
payloads of `served/episode_start` and `served/episode_end` (std_msgs/String) and the
`served.*` Observation.arrays the harness sends with a step.

    data = parse_payload("episode_start", msg.data, ("episode_id",), START_FIELDS)

A payload outside its domain raises `Refused`, whose message names the field, the value
and the domain. Pure JSON and numpy: no rclpy.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

#: Observation.arrays the harness uses for what belongs to the previous action.
SERVED_ARRAYS = ("served.reward", "served.terminated", "served.truncated", "served.sim_time_s")
#: served/episode_start's keys and their types (episode_id is required).
START_FIELDS: dict[str, type] = {"episode_id": str, "instruction": str, "seed": int, "meta": dict}
#: served/episode_end's keys and their types (episode_id is required).
END_FIELDS: dict[str, type] = {
    "episode_id": str,
    "success": bool,
    "outcome": str,
    "reward": float,
    "terminated": bool,
    "truncated": bool,
}


class Refused(ValueError):
    """A served-mode request outside its domain (the message names field, value, domain)."""


def parse_payload(field: str, text: str, required: tuple[str, ...], known: dict[str, Any]) -> dict:
    """`text` as a JSON object whose keys are `known`'s, of their types (None allowed), with
    the `required` ones non-empty strings; Refused otherwise."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise Refused(f"{field}={text!r}: must be a JSON object ({exc})") from exc
    if not isinstance(data, dict):
        raise Refused(f"{field}={text!r}: must be a JSON object")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise Refused(f"{field}: unknown key(s) {unknown}; known: {sorted(known)}")
    for key in required:
        if not isinstance(data.get(key), str) or not data[key]:
            raise Refused(f"{field}[{key!r}]={data.get(key)!r}: must be a non-empty string")
    for key, kind in known.items():
        value = data.get(key)
        if value is None:
            continue
        ok = (
            isinstance(value, bool)
            if kind is bool
            else (
                isinstance(value, int | float) and not isinstance(value, bool)
                if kind is float
                else isinstance(value, kind) and not isinstance(value, bool)
            )
        )
        if not ok:
            raise Refused(f"{field}[{key!r}]={value!r}: must be {kind.__name__} or null")
    return data


def episode_id_of(text: str) -> str:
    """The episode_id of a refused payload, where one can be read ('' otherwise)."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return ""
    value = data.get("episode_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else ""


def scalar(name: str, value: Any) -> float:
    """A served.* array (`name`) as its one finite number; Refused otherwise."""
    flat = np.asarray(value, dtype=float).reshape(-1)
    if flat.size != 1 or not math.isfinite(float(flat[0])):
        raise Refused(f"observation.arrays[{name!r}]={flat.tolist()!r}: must be one finite number")
    return float(flat[0])
