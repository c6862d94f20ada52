"""The one JSON encoder: how any value the kernel, the rollout API or a node hands out
becomes strict JSON.

    dumps_line(obj)    one events.jsonl line (bytes, with its newline)
    dumps_text(obj)    the same line as text, without the newline (a message field, a bag's
                       custom data, a service's JSON report)
    dumps_pretty(obj)  indented (meta.json), bytes with the newline
    to_jsonable(obj)   the same values as plain Python (an envelope's "json" payload)
    event_line(event)  the events.jsonl line of an Event, encoded once and cached on it
    line_of(seq, kind, step, t, wall, data)  the same line from the fields alone

Every path encodes a value the same way: numpy arrays and scalars as lists and numbers,
mappings (keys as strings) and sequences recursively, sets sorted, paths as their text,
enums as their value, non-finite numbers as null (strict JSON has no NaN), anything
else as its repr. orjson writes the common values natively (a trace line per event
stays off the step budget); what it refuses (an integer beyond 64 bits, a key JSON
cannot name) goes through the standard library instead.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..events import Event


def to_jsonable(value: Any) -> Any:
    """`value` as plain JSON values (dict, list, str, int, float, bool, None), converted as
    the encoder writes it (see the module docstring): what dumps_line(value) would write,
    as Python objects."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {(k if type(k) is str else str(k)): to_jsonable(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):  # before float: np.float64 is a float
        return to_jsonable(value.tolist())
    if isinstance(value, enum.Enum):  # before str: a StrEnum is a str
        return to_jsonable(value.value)
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return [to_jsonable(v) for v in sorted(value, key=repr)]
    if callable(getattr(value, "tolist", None)):  # array-likes (a torch tensor)
        return to_jsonable(value.tolist())
    return repr(value)


def snapshot(value: Any) -> Any:
    """What an event keeps of a mapping the env handed out: a one-level copy.

    Top-level numpy arrays and scalars become lists and numbers (so a buffer the env
    reuses cannot change a published event); nested containers are shared, not copied
    (the encoder serialises them, numpy included, as they are). Anything else is kept.
    """
    kind = type(value)
    if kind is dict or isinstance(value, Mapping):
        return {
            k: (v.tolist() if type(v) is np.ndarray or isinstance(v, np.generic) else v)
            for k, v in value.items()
        }
    if kind is np.ndarray or isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def _default(value: Any) -> Any:
    """What the encoders call for a value they do not write natively."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "items"):
        return dict(value.items())
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if callable(getattr(value, "tolist", None)):
        return value.tolist()
    return repr(value)


_encode_strict = json.JSONEncoder(allow_nan=False, default=_default, separators=(",", ":")).encode


def _dumps_stdlib(obj: Any) -> bytes:
    try:
        text = _encode_strict(obj)
    except (ValueError, TypeError, RecursionError):
        # A NaN or infinity (or a key JSON cannot name) somewhere: rare, so the slow,
        # converting path is fine.
        text = _encode_strict(to_jsonable(obj))
    return (text + "\n").encode("utf-8")


def _dumps_pretty_stdlib(obj: Any) -> bytes:
    return (json.dumps(to_jsonable(obj), indent=2) + "\n").encode("utf-8")


try:  # orjson is ~6x faster than the standard library: it keeps tracing off the step budget
    import orjson

    # OPT_NON_STR_KEYS makes orjson check every key and costs about 40 % of a trace line:
    # the lines are encoded without it first and again with it when a key is not a string
    # (the same bytes: it changes nothing for string keys).
    _OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE
    _ANY_KEYS = _OPTIONS | orjson.OPT_NON_STR_KEYS
    _orjson_dumps = orjson.dumps

    def dumps_line(obj: Any) -> bytes:
        """One strict-JSON line (with its newline), values encoded as the module says."""
        try:
            return _orjson_dumps(obj, default=_default, option=_OPTIONS)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError: a key?
            try:
                return _orjson_dumps(obj, default=_default, option=_ANY_KEYS)
            except (TypeError, ValueError):
                return _dumps_stdlib(obj)

    def dumps_pretty(obj: Any) -> bytes:
        """Indented strict JSON (meta.json) with its newline, values as dumps_line writes them."""
        try:
            return _orjson_dumps(obj, default=_default, option=_ANY_KEYS | orjson.OPT_INDENT_2)
        except (TypeError, ValueError):
            return _dumps_pretty_stdlib(obj)

    _fast_dumps, _FAST_OPTIONS = _orjson_dumps, _OPTIONS

except ImportError:  # pragma: no cover - orjson is pinned in requirements/base.txt
    dumps_line = _dumps_stdlib
    dumps_pretty = _dumps_pretty_stdlib

    def _fast_dumps(obj: Any, *, default: Any, option: Any) -> bytes:
        return _dumps_stdlib(obj)  # no orjson: the standard library's line

    _FAST_OPTIONS = None


def dumps_text(obj: Any) -> str:
    """dumps_line(obj) as text, without its newline."""
    return dumps_line(obj)[:-1].decode("utf-8")


def event_line(event: Event) -> bytes:
    """The events.jsonl line of `event` (with its newline), encoded once per event.

    The first subscriber that needs it encodes it and caches it on the event
    (`Event.line`), so the trace writer and the rosbag mirror share one encoding.
    Observations carrying image arrays are not encoded here: each writer puts its
    own frame paths in their line (`line_with_data`).
    """
    line = event.line
    if line is None:
        line = event.line = line_of(
            event.seq, event.kind, event.step, event.t, event.wall, event.data
        )
    return line


def line_of(seq: int, kind: str, step: int, t: float, wall: float, data: Any) -> bytes:
    """The events.jsonl line of an event with these fields (event_line's encoding, for a
    writer handed the fields without an Event: RunWriter.write_fields)."""
    obj = {"seq": seq, "kind": kind, "step": step, "t": t, "wall": wall, "data": data}
    try:  # dumps_line's first try, inlined: every event of a traced episode comes here
        return _fast_dumps(obj, default=_default, option=_FAST_OPTIONS)
    except (TypeError, ValueError):
        return dumps_line(obj)


def line_with_data(event: Event, data: dict[str, Any]) -> bytes:
    """The events.jsonl line of `event` with `data` in place of its own (an observation
    whose image arrays each writer replaces by its frame paths); not cached."""
    return line_of(event.seq, event.kind, event.step, event.t, event.wall, data)
