"""Result records of the rollout API at the edge: the envelope, JSON values, the status line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from robokernel_ros.kernel.trace import to_jsonable

from .health import health_note, refusal_note

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


def rtc_aliases(result: dict[str, Any]) -> dict[str, Any]:
    for alias, field_name in RTC_ALIASES.items():
        result[alias] = result.get(field_name)
    return result


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


def result_status(result: Mapping[str, Any], *, aggregate_report: bool = False) -> tuple[str, str]:
    """(status, text) of a run or an eval result: error when no action was applied (a
    refused action is not applied: the text says how many the shield refused and why)."""
    if result.get("stopped_before_first_frame"):
        return "success", f"stopped before the first frame ({result.get('robot_name')})"
    reason = str(result.get("stopped_reason") or "")
    applied = int(result.get("actions_applied") or 0)
    note = health_note(result)
    if aggregate_report:
        head = (
            f"{result.get('policy')} on {result.get('robot_name')}: {result.get('n_episodes')} "
            f"episode{'' if result.get('n_episodes') == 1 else 's'}, "
            f"success_rate={result.get('success_rate', 0.0):.3f}, avg_reward={result.get('avg_reward', 0.0):.3f}, "
            f"{result.get('total_steps')} steps"
        )
        errors = [r for r in result.get("stopped_reasons", []) if str(r).startswith("error")]
        refused = int(result.get("actions_refused") or 0)
        if applied == 0 and result.get("n_episodes"):
            return "error", (
                head
                + "; refused: no action was applied in any episode (actions_applied=0"
                + (f", the shield refused {refused}" if refused else "")
                + "), so success_rate, "
                "avg_reward and pass_hat_k would describe the scene's initial state"
            )
        if errors:
            return "error", head + f"; {len(errors)} episode(s) ended in error: {errors[0]}"
        return "success", head + (f"; {note}" if note else "")
    head = (
        f"{result.get('policy')} on {result.get('robot_name')}: {result.get('steps_advanced')} steps, "
        f"{applied} actions applied, stopped_reason={reason}"
    )
    refusals = refusal_note(result)
    if refusals:
        head += f"; {refusals}"
    if reason.startswith("error"):
        return "error", head
    if applied == 0 and reason not in ("stopped", "estopped"):
        if refusals:
            return "error", head + "; no action reached the robot"
        return "error", head + (
            "; no action commanded the robot (no step resolved any of its action keys): "
            f"action_errors={result.get('action_errors')}"
        )
    return "success", head + (f"; {note}" if note else "")


def episode_table(report: Mapping[str, Any]) -> str:
    """An eval report's episodes as a text table, with the success rate's 95 % interval row."""
    rows = [
        (
            e.get("episode"),
            e.get("outcome"),
            e.get("success"),
            e.get("steps_advanced"),
            e.get("actions_applied"),
            e.get("total_reward"),
            e.get("stopped_reason"),
        )  # fmt: skip
        for e in report.get("episodes", [])
    ]
    header = ("episode", "outcome", "success", "steps", "applied", "reward", "stopped_reason")
    ci = report.get("success_rate_ci95")
    if not ci:
        return summary_table(rows, header)
    # the summary row: the success rate with its 95 % (Wilson) interval
    rows.append(
        (
            "all",
            f"{report.get('successes')}/{report.get('n_episodes')} succeeded",
            float(report.get("success_rate", 0.0)),
            report.get("total_steps"),
            report.get("actions_applied"),
            float(report.get("avg_reward", 0.0)),
            f"95% CI [{ci[0]:.3f}, {ci[1]:.3f}]",
        )
    )
    lines = summary_table(rows, header).splitlines()
    return "\n".join([*lines[:-1], lines[1], lines[-1]])
