"""Action health: which proposed actions an episode executed, and how well their keys resolved.

`ActionHealth` tallies the executed policy actions of one robot (per-key resolution,
unresolved and missing keys); `ExecutedHealth` feeds it from what the kernel counted as it
executed them (EpisodeRecord.execution and the runner's count_action hook).
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

    def count_action(self, proposed: Any) -> None:
        """One executed policy action (the kernel's count_action)."""
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
