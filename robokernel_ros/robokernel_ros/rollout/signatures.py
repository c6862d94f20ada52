"""The rollout API's call signatures: named keyword parameters, and the one refusal of a
keyword a call does not take.

    @api_call
    def run_policy(self, robot_name: str | None = None, *, seed: int | None = None, ...) -> RunResult:
        ...

    @api_call
    @parameters_of(run_policy)
    def start_policy(self, robot_name: str | None = None, **fields: Any) -> StartResult:
        ...

`api_call` keeps a method's signature (for help(), editors and type checkers) and answers
a keyword it does not take with the method's own result type, refused in one line: the
unknown name, the nearest valid one and every valid parameter (not Python's TypeError:
a caller over ROS or the CLI gets the same refusal as a Python caller). `parameters_of`
gives a method the keyword parameters of another (start_policy takes run_policy's,
evaluate_benchmark eval_policy's), so a parameter list is written once.
`WORKCELL` is the default of trace_dir and bag: the workcell's own.
"""

from __future__ import annotations

import difflib
import enum
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from .results import CallResult


class _Default(enum.Enum):
    WORKCELL = "the workcell's"

    def __repr__(self) -> str:
        return "WORKCELL"


#: a call's settings dict (policy_config, safety, video, ...): JSON-like values by name
Settings = Mapping[str, object]

#: trace_dir / bag not given: the workcell's (SimWorkcell(trace_dir=..., bag=...)).
WORKCELL = _Default.WORKCELL
Workcell = Literal[_Default.WORKCELL]


def unknown_keyword(call: str, given: Mapping[str, Any], valid: Sequence[str]) -> str | None:
    """The refusal of the keywords in `given` that are not in `valid` (None: all valid):
    the unknown name, the nearest valid one, and every valid name."""
    unknown = sorted(k for k in given if k not in valid)
    if not unknown:
        return None
    name = unknown[0]
    near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    more = f" (and {unknown[1:]})" if len(unknown) > 1 else ""
    return f"{call}: unknown field {name!r}{hint}{more}; its fields are: {', '.join(sorted(valid))}"


def api_call[**P, R: CallResult](method: Callable[P, R]) -> Callable[P, R]:
    """`method` with a keyword it does not take answered by its result type's refusal."""
    signature = inspect.signature(method)
    returns = signature.return_annotation
    result_type: type[CallResult] = (
        method.__globals__[returns] if isinstance(returns, str) else returns  # type: ignore[attr-defined]
    )
    valid = [
        name
        for name, p in signature.parameters.items()
        if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]

    @functools.wraps(method)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        refused = unknown_keyword(method.__name__, kwargs, valid)
        if refused is not None:
            return result_type.refused(refused)  # type: ignore[return-value]
        return method(*args, **kwargs)

    checked.__signature__ = signature  # type: ignore[attr-defined]
    return checked


def parameters_of[**P, R: CallResult](
    source: Callable[P, Any], *, first: str | None = None
) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Give the decorated method `source`'s parameters (its own return type kept); with
    `first`, that keyword of `source` becomes the first positional parameter instead."""
    params = list(inspect.signature(source).parameters.values())

    def decorate(method: Callable[..., R]) -> Callable[P, R]:
        ordered = params
        if first is not None:
            lead = next(p for p in params if p.name == first)
            rest = [p for p in params if p.name != first]
            lead = lead.replace(
                kind=inspect.Parameter.POSITIONAL_OR_KEYWORD, default=inspect.Parameter.empty
            )
            ordered = [rest[0], lead, *_keyword_only(rest[1:])]
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.Signature(ordered, return_annotation=returns)  # type: ignore[attr-defined]
        return method  # type: ignore[return-value]

    return decorate


def _keyword_only(params: Sequence[inspect.Parameter]) -> list[inspect.Parameter]:
    return [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
