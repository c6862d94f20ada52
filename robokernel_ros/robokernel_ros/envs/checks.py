"""Argument checks of the scene API: each refusal names the parameter, the value and the domain."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def finite(name: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> float:
    if not is_number(value) or not math.isfinite(float(value)):
        domain = "a positive" if positive else "a non-negative" if nonnegative else "a"
        raise ValueError(f"{name}={value!r}: must be {domain} finite number")
    if positive and not float(value) > 0:
        raise ValueError(f"{name}={value!r}: must be a positive finite number")
    if nonnegative and float(value) < 0:
        raise ValueError(f"{name}={value!r}: must be a non-negative finite number")
    return float(value)


def vector(name: str, value: Any, n: int, *, positive: bool = False) -> tuple[float, ...]:
    domain = f"{n} finite{' positive' if positive else ''} numbers"
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(f"{name}={value!r}: must be a sequence of {domain}")
    items = list(value)
    if len(items) != n or not all(is_number(v) and math.isfinite(float(v)) for v in items):
        raise ValueError(f"{name}={value!r}: must be a sequence of {domain}")
    if positive and not all(float(v) > 0 for v in items):
        raise ValueError(f"{name}={value!r}: must be a sequence of {domain}")
    return tuple(float(v) for v in items)


def quat(name: str, value: Any) -> tuple[float, float, float, float]:
    q = np.asarray(vector(name, value, 4))
    norm = float(np.linalg.norm(q))
    if norm < 1e-9:
        raise ValueError(f"{name}={value!r}: must be a non-zero quaternion (w, x, y, z)")
    return tuple((q / norm).tolist())  # type: ignore[return-value]


def entity_name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(f"{kind}={value!r}: must be a non-empty name without surrounding spaces")
    if "/" in value:
        raise ValueError(f"{kind}={value!r}: must not contain '/' (it separates robot prefixes)")
    return value
