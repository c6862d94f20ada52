"""Numeric domains of the refusals every entry point shares (rollout calls, benchmark specs).

    positive_int("max_steps", 3.0)     # 3; 3.5, True and "3" raise ValueError naming the field

Each check raises ValueError with a message naming the parameter, the value and the domain.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any


def is_number(value: Any) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool)


def positive_number(name: str, value: Any) -> float:
    """A positive finite number (bools refused)."""
    if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{name}={value!r}: must be a positive finite number")
    return float(value)


def positive_int(name: str, value: Any) -> int:
    """A positive whole number: 3 and 3.0 are accepted, 3.5, True and "3" are refused."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: must be a positive whole number, got a boolean")
    if isinstance(value, Integral):
        if int(value) <= 0:
            raise ValueError(f"{name}={value!r}: must be a positive whole number")
        return int(value)
    if is_number(value) and math.isfinite(float(value)) and float(value).is_integer() and value > 0:
        return int(value)
    raise ValueError(f"{name}={value!r}: must be a positive whole number")
