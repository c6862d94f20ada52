"""Action health: which proposed actions an episode executed, and how well their keys resolved.

`ActionHealth` tallies the executed policy actions of one robot (per-key resolution,
unresolved and missing keys); `ExecutedHealth` feeds it from what the kernel counted as it
executed them (EpisodeRecord.execution and the runner's count_action hook), and
`RefusalTally`, wrapped around the episode's shield, tells it which of those the shield
refused (the hold executed instead): a refused action is counted in `actions_refused`,
never in `actions_applied`, which counts what reached the robot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class ActionHealth:
    """Per-key resolution health of the actions a policy sent to one robot.

    A step's credit is known when the policy's action named at least one key and not
    only driven joint names (a step keyed by joint names is excluded, not scored).

    count() is cheap: it tallies the action's key tuple (a policy names the same keys
    step after step), and the figures are folded from those tallies when read. At most
    MAX_SHAPES distinct key tuples are tallied; an action of any further shape is folded
    at once, so the state stays bounded whatever a policy emits.
    """

    MAX_SHAPES = 64

    def __init__(self, action_keys: frozenset[str], joint_names: frozenset[str] = frozenset()):
        self.action_keys = frozenset(action_keys)
        self.joint_names = frozenset(joint_names)
        self._steps = 0  # policy actions executed (holds excluded)
        self._applied = 0  # those that commanded at least one actuator
        self._refused = 0  # those the shield refused (the hold executed instead)
        self._credited = 0
        self._partial = 0  # credited steps with at least one unresolved key
        self._named = 0
        self._resolved = 0
        self._errors: Counter[str] = Counter()
        self._missing: Counter[str] = Counter()
        self._shapes: dict[tuple[Any, ...], int] = {}  # key tuple -> actions not folded yet

    def count(self, action: Any) -> None:
        """One executed policy action (a non-mapping counts as an action naming no key)."""
        self.count_shape(
            tuple(action) if type(action) is dict or isinstance(action, Mapping) else (), 1
        )

    def count_shape(self, shape: tuple[Any, ...], n: int) -> None:
        """`n` executed policy actions naming the keys `shape`."""
        shapes = self._shapes
        tallied = shapes.get(shape)
        if tallied is not None:
            shapes[shape] = tallied + n
        elif len(shapes) < self.MAX_SHAPES:
            shapes[shape] = n
        else:
            self._fold_shape(shape, n)

    def count_refused(self, n: int = 1) -> None:
        """`n` policy actions the shield refused: executed as the hold, never applied."""
        self._refused += n

    def _fold_shape(self, shape: tuple[Any, ...], n: int) -> None:
        self._steps += n
        named = set(shape)
        resolved = named & self.action_keys
        if resolved:
            self._applied += n
        if not named:
            return
        if not resolved and named <= self.joint_names:
            return  # keyed by driven joint names: credit unknown
        unresolved = named - self.action_keys
        self._credited += n
        self._named += n * len(named)
        self._resolved += n * len(resolved)
        if unresolved:
            self._partial += n
            for key in unresolved:
                self._errors[key] += n
        for key in self.action_keys - named:
            self._missing[key] += n

    def _fold(self) -> None:
        shapes, self._shapes = self._shapes, {}
        for shape, n in shapes.items():
            self._fold_shape(shape, n)

    @property
    def steps(self) -> int:
        self._fold()
        return self._steps

    @property
    def applied(self) -> int:
        self._fold()
        return self._applied

    @property
    def refused(self) -> int:
        return self._refused

    @property
    def credited(self) -> int:
        self._fold()
        return self._credited

    @property
    def partial(self) -> int:
        self._fold()
        return self._partial

    @property
    def named_keys(self) -> int:
        self._fold()
        return self._named

    @property
    def resolved_keys(self) -> int:
        self._fold()
        return self._resolved

    @property
    def errors(self) -> Counter[str]:
        self._fold()
        return self._errors

    @property
    def missing(self) -> Counter[str]:
        self._fold()
        return self._missing

    def to_dict(self) -> dict[str, Any]:
        self._fold()
        return {
            "actions_applied": self._applied,
            "action_errors": dict(sorted(self._errors.items())),
            "action_resolution_rate": (self._resolved / self._named) if self._named else 0.0,
            "partial_action_failure_rate": (self._partial / self._credited)
            if self._credited
            else 0.0,
            "action_steps_credited": self._credited,
            "action_steps_with_unresolved_keys": self._partial,
            "action_missing_keys": dict(sorted(self._missing.items())),
        }


def health_note(result: Mapping[str, Any]) -> str:
    partial = result.get("action_steps_with_unresolved_keys", 0)
    credited = result.get("action_steps_credited", 0)
    if partial:
        keys = ", ".join(sorted(result.get("action_errors") or {}))
        return f"{partial}/{credited} action steps had unresolved keys ({keys})"
    return ""


class ExecutedHealth:
    """The action health of the policy actions an episode executed, per robot, from what
    the kernel counted: its `count_action` hook gets each executed action that the
    shield's fast review did not pass, and `finish(record)` adds the rest, which named
    exactly the env's action keys (record.execution.exact). Nothing runs per step for
    the common, exact action: no subscription to the episode's events.

    split: for a composed (multi-robot) agent, {robot: its part} of an action; None for
    one robot (`health` then holds that robot alone).
    """

    def __init__(self, health: Mapping[str, ActionHealth], split: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None,
                 action_keys: Sequence[str]) -> None:  # fmt: skip
        self.health = health
        self.split = split
        self.only = next(iter(health.values())) if split is None else None
        self.exact_shape = tuple(action_keys)  # the keys of every exact action
        self.tally: RefusalTally | None = None  # set when the shield is wrapped

    def count_action(self, proposed: Any) -> None:
        """One executed policy action (the kernel's count_action); one the shield refused
        (its review just before, RefusalTally.refused_now) counts as refused."""
        if self.tally is not None and self.tally.refused_now:
            for health in self.health.values():
                health.count_refused()
            return
        if self.only is not None:
            self.only.count(proposed)
            return
        parts = self.split(proposed if isinstance(proposed, Mapping) else {})
        for robot, part in parts.items():
            health = self.health.get(robot)
            if health is not None:
                health.count(part)

    def finish(self, record: Any) -> None:
        """Add the exact actions the episode executed (record.execution.exact)."""
        execution = record.execution
        n = execution.exact if execution is not None else 0
        if not n:
            return
        if self.only is not None:
            self.only.count_shape(self.exact_shape, n)
            return
        for robot, part in self.split(dict.fromkeys(self.exact_shape, 0.0)).items():
            health = self.health.get(robot)
            if health is not None:
                health.count_shape(tuple(part), n)


class RefusalTally:
    """The episode's SafetyShield, with a note of whether its last full review refused a
    policy action (a hold's own review is not one) and the first refusal's intervention.

    The kernel's runner calls review_fast (passed through untouched: the common, in-limits
    action costs nothing more), review, and reset; everything else is the shield's."""

    def __init__(self, shield: Any) -> None:
        self._shield = shield
        self.review_fast = shield.review_fast
        self.refused_now = False
        self.first_refusal: dict[str, Any] | None = None

    def review(self, action: Any, *, hold: Any = None, **kwargs: Any) -> Any:
        result = self._shield.review(action, hold=hold, **kwargs)
        self.refused_now = bool(result.refused) and action is not hold
        if self.refused_now and self.first_refusal is None and result.interventions:
            self.first_refusal = result.interventions[-1].to_dict()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shield, name)


def refusal_note(result: Mapping[str, Any]) -> str:
    """'the shield refused N of M actions (first: ...)', or '' when it refused none."""
    refused = int(result.get("actions_refused") or 0)
    if not refused:
        return ""
    total = refused + int(result.get("actions_applied") or 0)
    first = result.get("first_refusal")
    why = ""
    if isinstance(first, Mapping):
        why = (
            f" (first: {first.get('guard')} guard, {first.get('key')}={first.get('value')!r} "
            f"outside {first.get('limit')})"
        )
    return f"the shield refused {refused} of {total} policy actions{why}"
