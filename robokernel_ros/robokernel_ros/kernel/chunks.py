"""Action chunks as the loop and the served session handle them: what an agent returned
as a list of proposed actions, and the rows a chunk.merge event records.

    chunk = as_chunk(agent.act(observation, step))      # a list, garbage kept for the shield
    rows = [action_row(action, spec.action_keys) for action in chunk]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def as_chunk(chunk: Any) -> list[Any]:
    """An agent's return value as a list of proposed actions (garbage stays garbage, for
    the shield to refuse): a list as is, a single mapping wrapped, an iterable listed."""
    if type(chunk) is list:  # the common case, checked first: this runs for every chunk
        return chunk
    if isinstance(chunk, Mapping):
        return [chunk]  # a single-step policy that did not wrap its action
    if chunk is None or isinstance(chunk, str | bytes) or not hasattr(chunk, "__iter__"):
        return [chunk]
    try:
        return list(chunk)
    except Exception:
        return [chunk]


def action_row(action: Any, keys: Sequence[str]) -> list[Any]:
    """`action`'s values in `keys` order as floats (None where a key is missing or not a
    number; all None for an action that is not a mapping)."""
    if type(action) is dict:  # the common case: every value a float already
        row = [action.get(key) for key in keys]
        for value in row:
            if type(value) is not float:
                break
        else:
            return row
    if not isinstance(action, Mapping):
        return [None] * len(keys)
    row = []
    for key in keys:
        value = action.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            row.append(float(value))
        else:
            try:
                row.append(float(value))  # numpy scalars
            except (TypeError, ValueError):
                row.append(None)
    return row
