"""Action health: which proposed actions an episode executed, and how well their keys resolved.

`ActionHealth` tallies the executed policy actions of one robot (per-key resolution,
unresolved and missing keys); `HealthCollector` follows the kernel's chunk merges on the
episode's bus and feeds it, counting executed holds and prefetch hits / blocks on the way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from robokernel_ros.kernel.events import Event


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
        shape = tuple(action) if type(action) is dict or isinstance(action, Mapping) else ()
        shapes = self._shapes
        n = shapes.get(shape)
        if n is not None:
            shapes[shape] = n + 1
        elif len(shapes) < self.MAX_SHAPES:
            shapes[shape] = 1
        else:
            self._fold_shape(shape, 1)

    def count_all(self, actions: Iterable[Any]) -> None:
        """count() of each action (the loop inlined: a chunk's actions are counted at once)."""
        shapes = self._shapes
        for action in actions:
            shape = tuple(action) if type(action) is dict or isinstance(action, Mapping) else ()
            n = shapes.get(shape)
            if n is not None:
                shapes[shape] = n + 1
            elif len(shapes) < self.MAX_SHAPES:
                shapes[shape] = 1
            else:
                self._fold_shape(shape, 1)

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


class HealthCollector:
    """Action health, executed holds and prefetch seams, from the chunk merges alone.

    It follows only `chunk.merge` events (one per chunk), not every step: between two
    merges the kernel's queue changes only by pops, so the steps from a merge at step s
    to the next merge at step s' execute min(len(kept), s' - s) of the kept actions and
    hold for the rest. The last segment is closed by finish(record): there the kernel's
    own hold count also accounts for the hold of an operator stop (executed with actions
    still queued), except after an e-stop or an error, where no such hold can have run
    and the kernel may have counted a hold it never executed.
    """

    def __init__(self, chunk_source: Any, health: Mapping[str, ActionHealth],
                 split: Callable[[Mapping[str, Any]], dict[str, dict[str, Any]]] | None,
                 execution_steps: int | None) -> None:  # fmt: skip
        self.chunk_source = chunk_source  # has .chunk(request_id): the chunk act() returned
        self.health = health
        self.only = next(iter(health.values())) if split is None else None
        self.split = split
        self.execution_steps = execution_steps
        self.queue: Sequence[Any] = ()  # the kept actions of the last merge
        self.start = 0  # the step of the last merge (0: the steps before the first merge)
        self.holds = 0
        self.merges = 0
        self.hits = 0
        self.blocks = 0

    def __call__(self, event: Event) -> None:
        data = event.data
        step = event.step
        holds = self._close(step - self.start)
        if self.merges:
            if holds:
                self.blocks += 1
            else:
                self.hits += 1
        rid = int(data.get("request_id", self.merges))
        self.merges += 1
        chunk = self.chunk_source.chunk(rid) or ()  # the agent's list: read, never changed
        limit = self.execution_steps
        if limit is not None and len(chunk) > limit:
            chunk = chunk[:limit]
        dropped = int(data.get("dropped", 0))
        self.queue = chunk[dropped:] if dropped else chunk
        self.start = step

    def _close(self, steps: int, holds: int | None = None) -> int:
        """Count the segment since the last merge: `steps` executed steps, of which `holds`
        holds (None: the queue's actions first, then holds). Returns the holds."""
        steps = max(0, steps)
        if holds is None:
            executed = min(len(self.queue), steps)
        else:
            executed = min(len(self.queue), max(0, steps - holds))
        holds = steps - executed
        self.holds += holds
        if executed:
            queue = self.queue
            actions = queue if executed == len(queue) else queue[:executed]
            if self.only is not None:
                self.only.count_all(actions)
            else:
                for proposed in actions:
                    parts = self.split(proposed if isinstance(proposed, Mapping) else {})
                    for robot, part in parts.items():
                        health = self.health.get(robot)
                        if health is not None:
                            health.count(part)
        self.queue = ()
        return holds

    def finish(self, record: Any) -> None:
        """Close the last segment at the episode's end."""
        outcome = getattr(record.outcome, "value", str(record.outcome))
        steps = int(record.steps) - self.start
        holds = None
        if outcome not in ("estopped", "error"):
            holds = max(0, int(record.holds) - self.holds)
        self._close(steps, holds)
