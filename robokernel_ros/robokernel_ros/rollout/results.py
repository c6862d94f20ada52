"""The rollout API's results: typed answers, the one place their JSON envelope is built,
and the text of a run or an eval.

    out = cell.run_policy("arm", n_steps=20)      # a RunResult
    out.ok, out.status, out.text                 # True, Status.SUCCESS, "mock on arm: ..."
    out.outcome, out.steps_advanced               # EpisodeOutcome.TRUNCATED, 20
    out.envelope()                                # the seed's JSON envelope (below)

Every SimWorkcell call answers a `CallResult` (or the subclass of its call: RunResult,
EvalResult, MultiResult, StartResult, StopResult, ListResult): a `Status`, the text
and the report (JSON values, None for a refusal without one). `CallResult.envelope()`
is the seed's envelope {"status": "success" | "error", "content": [{"text": text},
{"json": report}]} (no json block without a report), built there and nowhere else; the
ROS and CLI edges send it. A result also reads as that envelope (result["status"],
result["content"], dict(result)): code written against the seed's dict API keeps
working. The typed accessors read the report's fields; a field the report lacks (a
refusal's) reads None.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any, Self

from robokernel_ros.kernel.recorder import EpisodeOutcome
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


class Status(StrEnum):
    """Whether a call did what was asked: the envelope's "status"."""

    SUCCESS = "success"
    ERROR = "error"


@dataclass(frozen=True, eq=False)
class CallResult(Mapping[str, Any]):
    """One call's answer: status, text (one or more lines) and report (JSON values or None).

    Build one with `CallResult.of` (the report made JSON values once) or `refused`;
    `envelope()` is its JSON envelope; as a Mapping it reads as that envelope, and two
    results (or a result and a dict) are equal when their envelopes are.
    """

    status: Status
    text: str
    report: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, status: str, text: str, report: Mapping[str, Any] | None = None) -> Self:
        """A result with status `status` ("success" / "error": ValueError otherwise)."""
        return cls(Status(status), text, None if report is None else to_jsonable(report))

    @classmethod
    def refused(cls, text: str, report: Mapping[str, Any] | None = None) -> Self:
        """A refusal (or a failure): status error, the text naming the parameter."""
        return cls.of(Status.ERROR, text, report)

    @property
    def ok(self) -> bool:
        """The call did what was asked (status success)."""
        return self.status is Status.SUCCESS

    def envelope(self) -> dict[str, Any]:
        """{"status": "success" | "error", "content": [{"text": ...}, {"json": {...}}]}."""
        content: list[dict[str, Any]] = [{"text": self.text}]
        if self.report is not None:
            content.append({"json": self.report})
        return {"status": self.status.value, "content": content}

    def failed(self, line: str) -> Self:
        """This result as an error whose text starts with `line` (its report kept): a call
        that ran but did not do what was asked (cut short, e-stopped)."""
        return replace(self, status=Status.ERROR, text=f"{line}\n{self.text}")

    def field(self, name: str) -> Any:
        """The report's field `name`, or None (no report, or no such field)."""
        return None if self.report is None else self.report.get(name)

    def episode_records(self) -> list[Mapping[str, Any]]:
        """The report's per-episode records: an eval's `episodes`, else the report itself
        (one episode); [] without a report."""
        if self.report is None:
            return []
        episodes = self.report.get("episodes")
        if isinstance(episodes, list):
            return [e for e in episodes if isinstance(e, Mapping)]
        return [self.report]

    # The seed's dict API: the result reads as its envelope.
    @cached_property
    def _envelope(self) -> dict[str, Any]:
        return self.envelope()

    def __getitem__(self, key: str) -> Any:
        return self._envelope[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._envelope)

    def __len__(self) -> int:
        return len(self._envelope)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status.value!r}, text={self.text!r})"


def _outcome(value: Any) -> EpisodeOutcome | None:
    try:
        return EpisodeOutcome(value)
    except ValueError:
        return None


@dataclass(frozen=True, eq=False)
class RunResult(CallResult):
    """run_policy / replay_episode: one episode on one robot."""

    @property
    def outcome(self) -> EpisodeOutcome | None:
        """How the episode ended (None: it did not run)."""
        return _outcome(self.field("outcome"))

    @property
    def steps_advanced(self) -> int | None:
        return self.field("steps_advanced")

    @property
    def actions_applied(self) -> int | None:
        return self.field("actions_applied")

    @property
    def stopped_reason(self) -> str | None:
        return self.field("stopped_reason")

    @property
    def trace_path(self) -> str | None:
        """The episode's run directory (None: no trace)."""
        return self.field("trace_path")

    @property
    def bag_path(self) -> str | None:
        return self.field("bag_path")


@dataclass(frozen=True, eq=False)
class MultiResult(RunResult):
    """run_multi_policy: one episode of several robots at once."""

    @property
    def actions_applied_per_robot(self) -> dict[str, int]:
        return dict(self.field("actions_applied_per_robot") or {})


@dataclass(frozen=True, eq=False)
class EvalResult(CallResult):
    """eval_policy / evaluate_benchmark: n episodes and their aggregate."""

    @property
    def n_episodes(self) -> int | None:
        return self.field("n_episodes")

    @property
    def successes(self) -> int | None:
        return self.field("successes")

    @property
    def success_rate(self) -> float | None:
        return self.field("success_rate")

    @property
    def outcomes(self) -> list[EpisodeOutcome | None]:
        """Each episode's outcome, in order."""
        return [_outcome(o) for o in self.field("outcomes") or []]

    @property
    def trace_paths(self) -> list[str]:
        return list(self.field("trace_paths") or [])


@dataclass(frozen=True, eq=False)
class StartResult(CallResult):
    """start_policy: the rollout started in the background (wait_policy returns its result)."""

    @property
    def rollout_id(self) -> int | None:
        return self.field("rollout_id")

    @property
    def n_steps(self) -> int | None:
        return self.field("n_steps")


@dataclass(frozen=True, eq=False)
class StopResult(CallResult):
    """stop_policy: the robots whose rollouts were asked to stop."""

    @property
    def stopped(self) -> list[str]:
        return list(self.field("stopped") or [])


@dataclass(frozen=True, eq=False)
class ListResult(CallResult):
    """list_policies_running: the robots being driven now."""

    @property
    def robots(self) -> list[str]:
        return list(self.field("robots") or [])

    @property
    def count(self) -> int:
        return int(self.field("count") or 0)

    @property
    def running(self) -> list[dict[str, Any]]:
        """Each rollout in flight (RolloutControl.describe())."""
        return list(self.field("running") or [])


def envelope(status: str, text: str, payload: Mapping[str, Any] | None = None) -> CallResult:
    """A CallResult (its envelope: {"status", "content": [{"text"}, {"json"}]})."""
    return CallResult.of(status, text, payload)


def error_envelope(message: str, payload: Mapping[str, Any] | None = None) -> CallResult:
    return CallResult.refused(message, payload)


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
