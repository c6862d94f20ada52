"""Node parameters declared with descriptors and validated at start: a value outside its
domain is refused with a `ParameterError` naming the parameter, the value and the domain
(`run_node` turns it into one logged line and exit status 2).

A node describes its parameters once, as a frozen dataclass whose fields are `param(...)`
(default, doc, domain); `declare_params` declares each field with its descriptor (range,
choices, read-only) and returns the values read back as an instance of that dataclass:

    @dataclass(frozen=True)
    class PanelParams:
        period_s: float = param(0.05, "heartbeat period", min_value=0.0, min_exclusive=True)
        mode: str = param("position", "command interface", choices=("position", "velocity"))
        joints: tuple[str, ...] = param((), "joint names", array_type=str)

    params = declare_params(node, PanelParams)      # ParameterError when refused
    params.period_s                                 # a float, within its domain

`describe_params(PanelParams)` lists the `Param` descriptions (name, default, doc, domain).
Array parameters are tuples in the dataclass (lists on the wire). One parameter at a time:
`declare(node, name, default, doc, ...)`, for names made at run time (`joint_limits.<j>.*`).
Booleans are booleans: `"false"` is refused by rclpy's type check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
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


_META = "robokernel_param"


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter's description: its name, default (which fixes its type), doc and
    domain (`choices` for a string; [min_value, max_value] for a number, min exclusive
    when `min_exclusive`; `array_type` for an array whose default is empty)."""

    name: str
    default: Any
    doc: str
    choices: tuple[str, ...] | None = None
    min_value: float | None = None
    max_value: float | None = None
    min_exclusive: bool = False
    array_type: type | None = None
    read_only: bool = True

    def declare(self, node: Node) -> Any:
        """Declare it on `node` and return its validated value (ParameterError if not)."""
        value = declare(
            node,
            self.name,
            self.default,
            self.doc,
            choices=self.choices,
            min_value=self.min_value,
            max_value=self.max_value,
            min_exclusive=self.min_exclusive,
            read_only=self.read_only,
            array_type=self.array_type,
        )
        return tuple(value) if isinstance(self.default, tuple) else value


def param(
    default: Any,
    doc: str,
    *,
    choices: Sequence[str] | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    min_exclusive: bool = False,
    array_type: type | None = None,
    read_only: bool = True,
) -> Any:
    """A field of a parameters dataclass: its default, doc and domain (see `Param`).
    An array's default is a tuple (the dataclass is frozen)."""
    if isinstance(default, list):
        raise TypeError("param(): an array default is a tuple")
    description = Param(
        "",
        default,
        doc,
        tuple(choices) if choices is not None else None,
        min_value,
        max_value,
        min_exclusive,
        array_type,
        read_only,
    )
    return dataclasses.field(default=default, metadata={_META: description})


def describe_params(cls: type, prefix: str = "") -> list[Param]:
    """The `Param` descriptions of a parameters dataclass's fields, named `prefix + field`."""
    out = []
    for f in dataclasses.fields(cls):
        description = f.metadata.get(_META)
        if description is None:
            raise TypeError(f"{cls.__name__}.{f.name}: not a param() field")
        out.append(dataclasses.replace(description, name=prefix + f.name))
    return out


def declare_params[T](node: Node, cls: type[T], prefix: str = "") -> T:
    """Declare every field of the parameters dataclass `cls` on `node` (named `prefix +
    field`) and return the values read back as a `cls`; ParameterError naming the first
    parameter outside its domain."""
    values = {
        f.name: description.declare(node)
        for f, description in zip(
            dataclasses.fields(cls), describe_params(cls, prefix), strict=True
        )
    }
    return cls(**values)


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
