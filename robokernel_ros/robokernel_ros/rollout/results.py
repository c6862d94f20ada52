"""Result records of the rollout API: per-episode health, the multi-episode aggregate, the envelope."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from robokernel_ros.kernel.trace import to_jsonable
from robokernel_ros.tasks.statistics import pass_hat_k, wilson_interval

# The one-release aliases of the chunk_prefetch_* fields.
RTC_ALIASES: dict[str, str] = {
    "rtc_async_enabled": "chunk_prefetch_enabled",
    "rtc_chunks_acquired": "chunk_prefetch_chunks_acquired",
    "rtc_prefetch_hits": "chunk_prefetch_hits",
    "rtc_prefetch_blocks": "chunk_prefetch_blocks",
    "rtc_avg_inference_ms": "avg_inference_ms",
    "rtc_max_inference_ms": "max_inference_ms",
}

BINDING_FLAGS = ("positional_fallback_used", "generic_state_keys_used", "missing_state_keys_used")


def envelope(status: str, text: str, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """{"status": "success"|"error", "content": [{"text": ...}, {"json": {...}}]}."""
    content: list[dict[str, Any]] = [{"text": text}]
    if payload is not None:
        content.append({"json": to_jsonable(payload)})
    return {"status": status, "content": content}


def error_envelope(message: str, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return envelope("error", message, payload)


def envelope_json(out: Mapping[str, Any]) -> dict[str, Any] | None:
    """The {"json": ...} block of an envelope, or None."""
    for block in out.get("content", []):
        if "json" in block:
            return block["json"]
    return None


def envelope_text(out: Mapping[str, Any]) -> str:
    return "\n".join(b["text"] for b in out.get("content", []) if "text" in b)


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
        for action in actions:
            self.count(action)

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


def rtc_aliases(result: dict[str, Any]) -> dict[str, Any]:
    for alias, field_name in RTC_ALIASES.items():
        result[alias] = result.get(field_name)
    return result


def health_note(result: Mapping[str, Any]) -> str:
    partial = result.get("action_steps_with_unresolved_keys", 0)
    credited = result.get("action_steps_credited", 0)
    if partial:
        keys = ", ".join(sorted(result.get("action_errors") or {}))
        return f"{partial}/{credited} action steps had unresolved keys ({keys})"
    return ""


def aggregate(
    episodes: Sequence[Mapping[str, Any]],
    *,
    base: Mapping[str, Any],
    policy_report: Mapping[str, Any],
) -> dict[str, Any]:
    """The multi-episode report: success_rate, avg_reward, pass_hat_k, total_steps, ..."""
    n = len(episodes)
    successes = [bool(e.get("success")) for e in episodes]
    rewards = [float(e.get("total_reward") or 0.0) for e in episodes]
    inference = [e["avg_inference_ms"] for e in episodes if e.get("avg_inference_ms") is not None]
    max_inf = [e["max_inference_ms"] for e in episodes if e.get("max_inference_ms") is not None]
    errors: Counter[str] = Counter()
    named = resolved = credited = partial = 0
    for e in episodes:
        errors.update(e.get("action_errors") or {})
        named += e.get("_named_keys", 0)
        resolved += e.get("_resolved_keys", 0)
        credited += e.get("action_steps_credited", 0)
        partial += e.get("action_steps_with_unresolved_keys", 0)
    out: dict[str, Any] = {
        **base,
        "n_episodes": n,
        "successes": sum(successes),
        "success_rate": (sum(successes) / n) if n else 0.0,
        "success_rate_ci95": list(wilson_interval(sum(successes), n)) if n else None,
        "avg_reward": (sum(rewards) / n) if n else 0.0,
        "pass_hat_k": pass_hat_k(successes),
        "total_steps": sum(int(e.get("steps_advanced") or 0) for e in episodes),
        "actions_applied": sum(int(e.get("actions_applied") or 0) for e in episodes),
        "steps_advanced": sum(int(e.get("steps_advanced") or 0) for e in episodes),
        "stopped_reasons": [e.get("stopped_reason") for e in episodes],
        "outcomes": [e.get("outcome") for e in episodes],
        "video_paths": [e.get("video_path") for e in episodes if e.get("video_path")],
        "trace_paths": [e.get("trace_path") for e in episodes],
        "bag_paths": [e.get("bag_path") for e in episodes],
        "action_errors": dict(sorted(errors.items())),
        "action_resolution_rate": (resolved / named) if named else 0.0,
        "partial_action_failure_rate": (partial / credited) if credited else 0.0,
        "action_steps_credited": credited,
        "action_steps_with_unresolved_keys": partial,
        "chunk_prefetch_chunks_acquired": sum(
            int(e.get("chunk_prefetch_chunks_acquired") or 0) for e in episodes
        ),
        "chunk_prefetch_hits": sum(int(e.get("chunk_prefetch_hits") or 0) for e in episodes),
        "chunk_prefetch_blocks": sum(int(e.get("chunk_prefetch_blocks") or 0) for e in episodes),
        "avg_inference_ms": (sum(inference) / len(inference)) if inference else None,
        "max_inference_ms": max(max_inf) if max_inf else None,
        "safety_interventions": sum(int(e.get("safety_interventions") or 0) for e in episodes),
        "sim_time_s": sum(float(e.get("sim_time_s") or 0.0) for e in episodes),
        **{k: bool(policy_report.get(k, False)) for k in BINDING_FLAGS},
        "policy_load_time_s": policy_report.get("policy_load_time_s"),
        "policy_load_cache_hit": policy_report.get("policy_load_cache_hit"),
        "policy_resident_rss_mb": policy_report.get("policy_resident_rss_mb"),
        "episodes": [public(e) for e in episodes],
    }
    return rtc_aliases(out)


def public(record: Mapping[str, Any]) -> dict[str, Any]:
    """Drop the private bookkeeping fields (leading underscore)."""
    return {k: v for k, v in record.items() if not k.startswith("_")}


def summary_table(rows: Iterable[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain fixed-width table for the CLI and the envelope text."""
    table = [list(map(_cell, header)), *[list(map(_cell, r)) for r in rows]]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)
