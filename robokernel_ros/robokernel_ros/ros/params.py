"""Node parameters declared with descriptors and validated at start: a value outside its
domain is refused with a `ParameterError` naming the parameter, the value and the domain
(`run_node` turns it into one logged line and exit status 2).

    self.rate = declare(self, "rate_hz", 50.0, "control rate", min_value=0.0, min_exclusive=True)
    self.mode = declare(self, "mode", "position", "command interface", choices=("position", "velocity"))

Booleans are booleans: `"false"` is refused by rclpy's type check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter


class ParameterError(ValueError):
    """A parameter has a value outside its domain. The message names the parameter,
    the value and the domain."""

    def __init__(self, name: str, value: Any, domain: str) -> None:
        super().__init__(f"parameter {name}={value!r}: {domain}")
        self.name = name
        self.value = value
        self.domain = domain


_TYPES: dict[type, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
}


def declare(
    node: Node,
    name: str,
    default: Any,
    description: str,
    *,
    choices: Sequence[str] | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
    read_only: bool = True,
    array_type: type | None = None,
) -> Any:
    """Declare one parameter with a descriptor and return its validated value.

    `default` fixes the type (booleans are booleans: `"false"` is refused by rclpy's
    type check). For an array parameter whose default is empty, give `array_type`
    (str, float, int, bool). Numbers are also checked finite and within
    [min_value, max_value] (min exclusive when `min_exclusive`); strings within
    `choices`. Raises ParameterError naming the parameter, the value and the domain.
    """
    descriptor = ParameterDescriptor(
        name=name,
        description=description,
        read_only=read_only,
    )
    if choices is not None:
        descriptor.additional_constraints = "one of: " + ", ".join(choices)
    elif min_value is not None or max_value is not None:
        lo = "-inf" if min_value is None else repr(min_value)
        hi = "inf" if max_value is None else repr(max_value)
        descriptor.additional_constraints = f"{'(' if min_exclusive else '['}{lo}, {hi}]"
        if isinstance(default, int) and not isinstance(default, bool):
            descriptor.integer_range = [
                IntegerRange(
                    from_value=int(min_value if min_value is not None else -(2**63)),
                    to_value=int(max_value if max_value is not None else 2**63 - 1),
                    step=0,
                )
            ]
        elif isinstance(default, float) and not min_exclusive:
            descriptor.floating_point_range = [
                FloatingPointRange(
                    from_value=float(min_value if min_value is not None else -math.inf),
                    to_value=float(max_value if max_value is not None else math.inf),
                    step=0.0,
                )
            ]
    if isinstance(default, list | tuple) and not default:
        if array_type is None:
            raise TypeError(f"declare({name!r}): an empty array default needs array_type")
        typed_default: Any = {
            str: Parameter.Type.STRING_ARRAY,
            float: Parameter.Type.DOUBLE_ARRAY,
            int: Parameter.Type.INTEGER_ARRAY,
            bool: Parameter.Type.BOOL_ARRAY,
        }[array_type]
    else:
        typed_default = list(default) if isinstance(default, tuple) else default
    try:
        value = node.declare_parameter(name, typed_default, descriptor).value
    except rclpy.exceptions.InvalidParameterTypeException as exc:
        expected = _type_name(default, array_type)
        raise ParameterError(name, _override_value(node, name), f"must be {expected}") from exc
    except rclpy.exceptions.InvalidParameterValueException as exc:
        raise ParameterError(
            name, _override_value(node, name), descriptor.additional_constraints or str(exc)
        ) from exc
    if value is None and isinstance(default, list | tuple):
        value = []  # `name:=[]` on the command line has no element type
    return check(
        name,
        value,
        choices=choices,
        min_value=min_value,
        max_value=max_value,
        min_exclusive=min_exclusive,
    )


def check(
    name: str,
    value: Any,
    *,
    choices: Sequence[str] | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
) -> Any:
    """Validate one value against its domain; raise ParameterError when outside it."""
    if choices is not None and value not in choices:
        raise ParameterError(name, value, "must be one of " + ", ".join(map(repr, choices)))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ParameterError(name, value, "must be a finite number")
        if min_value is not None and (value <= min_value if min_exclusive else value < min_value):
            bound = f"> {min_value}" if min_exclusive else f">= {min_value}"
            raise ParameterError(name, value, f"must be {bound}")
        if max_value is not None and value > max_value:
            raise ParameterError(name, value, f"must be <= {max_value}")
    return value


def _type_name(default: Any, array_type: type | None) -> str:
    if isinstance(default, list | tuple):
        inner = array_type or (type(default[0]) if default else str)
        return f"an array of {inner.__name__}"
    return {
        bool: "a boolean (true/false)",
        int: "an integer",
        float: "a number",
        str: "a string",
    }.get(type(default), type(default).__name__)


def _override_value(node: Node, name: str) -> Any:
    override = getattr(node, "_parameter_overrides", {}).get(name)
    return getattr(override, "value", override)
