"""Result records of the rollout API: per-episode health, the multi-episode aggregate, the envelope."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .benchmarks import pass_hat_k

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
        content.append({"json": jsonable(payload)})
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


def jsonable(value: Any) -> Any:
    """Plain JSON types only (numpy scalars/arrays, paths, tuples converted; NaN -> None)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if hasattr(value, "value") and isinstance(getattr(value, "value", None), str):  # enums
        return value.value
    return repr(value)


@dataclass
class ActionHealth:
    """Per-key resolution health of the actions a policy sent to one robot.

    A step's credit is known when the policy's action named at least one key and not
    only driven joint names (a step keyed by joint names is excluded, not scored).
    """

    action_keys: frozenset[str]
    joint_names: frozenset[str] = frozenset()
    steps: int = 0  # policy actions executed (holds excluded)
    applied: int = 0  # those that commanded at least one actuator
    credited: int = 0
    partial: int = 0  # credited steps with at least one unresolved key
    named_keys: int = 0
    resolved_keys: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    missing: Counter[str] = field(default_factory=Counter)

    def count(self, action: Mapping[str, Any]) -> None:
        self.steps += 1
        named = set(action)
        resolved = named & self.action_keys
        if resolved:
            self.applied += 1
        if not named:
            return
        if not resolved and named <= self.joint_names:
            return  # keyed by driven joint names: credit unknown
        unresolved = named - self.action_keys
        self.credited += 1
        self.named_keys += len(named)
        self.resolved_keys += len(resolved)
        if unresolved:
            self.partial += 1
            self.errors.update(unresolved)
        self.missing.update(self.action_keys - named)

    def to_dict(self) -> dict[str, Any]:
        return {
            "actions_applied": self.applied,
            "action_errors": dict(sorted(self.errors.items())),
            "action_resolution_rate": (self.resolved_keys / self.named_keys)
            if self.named_keys
            else 0.0,
            "partial_action_failure_rate": (self.partial / self.credited) if self.credited else 0.0,
            "action_steps_credited": self.credited,
            "action_steps_with_unresolved_keys": self.partial,
            "action_missing_keys": dict(sorted(self.missing.items())),
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
