"""Scorers: plugins that read one trace and return named figures.

A scorer is any object with

    name: str
    score(trace) -> dict[str, Any]          # this episode's figures
    aggregate(episodes: list[dict]) -> dict[str, Any]   # optional; default: means

Register one with `register_scorer(scorer)`; `score_trace` runs every registered scorer
(or the ones named). Scorers read only the trace (events and meta): never the agent or
the environment. Figures whose name starts with "_" are samples kept for aggregation
and left out of reports.

Definitions (the built-in scorers):
- success: meta "outcome" == "success" (an operator verdict, when one was given, wins).
- return: the sum of the action events' rewards. length: executed steps (action events).
- time_to_success_s: episode clock from episode.start to the terminating step of a
  successful episode (None otherwise).
- holds, hold_ratio: executed hold actions (empty queue), and per step.
- stale_action_ratio: executed steps whose action was a hold or came from a chunk that
  arrived after the step of the observation it was computed from (arrival_step >
  obs_step: the policy acted on an outdated observation). mean_action_age_steps:
  mean of step - obs_step over executed chunk actions.
- effective_control_hz: executed steps per second of wall-clock time (first to last
  action); nominal_control_hz: the env's control rate.
- chunk_latency_p50_ms / p99_ms: the chunks' inference time.
- shield_interventions: safety.intervention events (the kernel's in-process shield) plus
  the commands a safety_shield node clipped or refused (`shield` in the trace's meta, which
  a runner over ROS writes, or a `shield.report` event); shield_passed / shield_clipped /
  shield_refused / shield_held: that node's counts (None without a report).
- action_jerk_rms: root mean square of the third time derivative of the executed
  actions (finite differences at the control period), over all action keys.
- takeover (only for episodes run with a teleop source, docs/operator.md; an episode
  without one gets none of these figures): intervention_share: executed steps flagged
  `intervention` (the operator, not the policy, decided the command: paused or
  correcting) per executed step; interventions: intervention.start events (a pause and
  the correction that follows it are one); intervention_steps; time_to_first_intervention_s:
  episode clock from episode.start to the first intervention.start (None: none).
  Aggregates over those episodes: mean_intervention_share, total_interventions,
  mean_interventions (per episode), intervened_episode_share, and
  mean_time_to_first_intervention_s (over the episodes with one; None when none had).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..kernel.events import (
    ACTION,
    CHUNK_MERGE,
    EPISODE_START,
    INTERVENTION_START,
    OPERATOR_VERDICT,
    SAFETY_INTERVENTION,
)
from ..kernel.trace import Trace
from ..tasks.context import SUCCESS, judge, trace_contexts
from ..tasks.predicates import compile_criteria
from ..tasks.statistics import wilson_interval


@runtime_checkable
class Scorer(Protocol):
    name: str

    def score(self, trace: Trace) -> dict[str, Any]: ...


_SCORERS: dict[str, Scorer] = {}


def register_scorer(scorer: Scorer, *, replace: bool = False) -> Scorer:
    """Add a scorer plugin (an object with `name` and `score(trace)`)."""
    name = getattr(scorer, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"scorer={scorer!r}: needs a non-empty string `name`")
    if not callable(getattr(scorer, "score", None)):
        raise ValueError(f"scorer {name!r}: needs a `score(trace)` method")
    if name in _SCORERS and not replace:
        raise ValueError(f"scorer {name!r} is already registered (pass replace=True)")
    _SCORERS[name] = scorer
    return scorer


def scorer_names() -> list[str]:
    return list(_SCORERS)


def get_scorers(names: Iterable[str] | None = None) -> list[Scorer]:
    if names is None:
        return list(_SCORERS.values())
    chosen = []
    for name in names:
        if name not in _SCORERS:
            raise ValueError(f"scorer={name!r}: must be one of {', '.join(_SCORERS)}")
        chosen.append(_SCORERS[name])
    return chosen


def score_trace(trace: Trace, scorers: Sequence[Scorer] | None = None) -> dict[str, Any]:
    """Every scorer's figures for one episode, merged into one dict (plus run_id, path)."""
    out: dict[str, Any] = {"run_id": trace.meta.get("run_id", ""), "path": str(trace.path)}
    if trace.truncated:
        out["recording_cut"] = True  # the file was cut short (not the outcome "truncated")
    produced: dict[str, list[str]] = {}
    for scorer in scorers if scorers is not None else get_scorers():
        figures = scorer.score(trace)
        produced[scorer.name] = list(figures)
        out.update(figures)
    out["_scorers"] = produced
    return out


def aggregate(
    episodes: list[dict[str, Any]], scorers: Sequence[Scorer] | None = None
) -> dict[str, Any]:
    """Figures over many episodes: each scorer's `aggregate`, or the mean of its numbers."""
    out: dict[str, Any] = {"episodes": len(episodes)}
    for scorer in scorers if scorers is not None else get_scorers():
        agg = getattr(scorer, "aggregate", None)
        if agg is not None:
            out.update(agg(episodes))
        else:
            keys = {k for e in episodes for k in e.get("_scorers", {}).get(scorer.name, ())}
            out.update(_means(episodes, sorted(k for k in keys if not k.startswith("_"))))
    return out


def _means(episodes: list[dict[str, Any]], keys: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in keys:
        values = [
            e[key]
            for e in episodes
            if isinstance(e.get(key), int | float) and not isinstance(e.get(key), bool)
        ]
        out[f"mean_{key}"] = float(np.mean(values)) if values else None
    return out


# --- trace helpers -------------------------------------------------------------------------


def actions_of(trace: Trace) -> list[Any]:
    return [e for e in trace.events if e.kind == ACTION]


def action_matrix(trace: Trace) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(keys, steps, values[steps x keys]) of the executed actions (NaN where a key is missing)."""
    acts = actions_of(trace)
    keys: list[str] = list((trace.meta.get("env") or {}).get("action_keys") or [])
    for e in acts:
        for k in e.data.get("action") or {}:
            if k not in keys:
                keys.append(k)
    values = np.full((len(acts), len(keys)), np.nan)
    for i, e in enumerate(acts):
        action = e.data.get("action") or {}
        for j, k in enumerate(keys):
            v = action.get(k)
            if isinstance(v, int | float):
                values[i, j] = float(v)
    return keys, np.asarray([e.step for e in acts], dtype=np.int64), values


def control_hz(trace: Trace) -> float | None:
    hz = (trace.meta.get("env") or {}).get("control_hz")
    return float(hz) if isinstance(hz, int | float) and hz > 0 else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


# --- built-in scorers ----------------------------------------------------------------------


class OutcomeScorer:
    """success, return, length, time_to_success_s."""

    name = "outcome"

    def score(self, trace: Trace) -> dict[str, Any]:
        acts = actions_of(trace)
        outcome = trace.meta.get("outcome")
        verdicts = [e for e in trace.events if e.kind == OPERATOR_VERDICT]
        if verdicts and verdicts[-1].data.get("outcome") in ("success", "failure"):
            outcome = verdicts[-1].data["outcome"]
        success = outcome == "success"
        rewards = [e.data.get("reward") for e in acts]
        ret = float(sum(r for r in rewards if isinstance(r, int | float) and math.isfinite(r)))
        start = next(
            (e.t for e in trace.events if e.kind == EPISODE_START), acts[0].t if acts else 0.0
        )
        time_to_success = None
        if success and acts:
            end = next((e for e in acts if e.data.get("terminated")), acts[-1])
            time_to_success = float(end.t - start)
        return {
            "success": success,
            "outcome": outcome or "unknown",
            "return": ret,
            "length": len(acts),
            "time_to_success_s": time_to_success,
        }

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(episodes)
        k = sum(1 for e in episodes if e.get("success"))
        lo, hi = wilson_interval(k, n)
        tts = [e["time_to_success_s"] for e in episodes if e.get("time_to_success_s") is not None]
        returns = [e["return"] for e in episodes]
        lengths = [e["length"] for e in episodes]
        return {
            "successes": k,
            "success_rate": k / n if n else None,
            "success_rate_ci95": [lo, hi],
            "mean_return": float(np.mean(returns)) if returns else None,
            "std_return": float(np.std(returns)) if returns else None,
            "mean_length": float(np.mean(lengths)) if lengths else None,
            "mean_time_to_success_s": float(np.mean(tts)) if tts else None,
        }


class TimingScorer:
    """holds, stale actions, merges that dropped actions, effective control rate, the
    commands' wall-clock span, chunk latency."""

    name = "timing"

    def score(self, trace: Trace) -> dict[str, Any]:
        acts = actions_of(trace)
        merges = [e for e in trace.events if e.kind == CHUNK_MERGE]
        holds = sum(1 for e in acts if e.data.get("hold"))
        # The chunk each executed step drew from: the latest merge at or before it.
        stale = 0
        ages: list[int] = []
        mi = -1
        for e in acts:
            while mi + 1 < len(merges) and merges[mi + 1].seq < e.seq:
                mi += 1
            if e.data.get("hold"):
                stale += 1
                continue
            if mi >= 0:
                m = merges[mi].data
                obs_step = int(m.get("obs_step", merges[mi].step))
                arrival = int(m.get("arrival_step", merges[mi].step))
                ages.append(e.step - obs_step)
                if arrival > obs_step:
                    stale += 1
        latencies = [
            float(m.data["inference_s"])
            for m in merges
            if isinstance(m.data.get("inference_s"), int | float)
        ]
        # A chunk that came after its observation's step lost the actions the robot
        # executed meanwhile (the aligned merge's `dropped`; none while it held).
        dropped = [int(m.data.get("dropped") or 0) for m in merges]
        walls = [e.wall for e in acts]
        span = (max(walls) - min(walls)) if len(walls) > 1 else 0.0
        n = len(acts)
        return {
            "holds": holds,
            "hold_ratio": holds / n if n else 0.0,
            "stale_action_ratio": stale / n if n else 0.0,
            "mean_action_age_steps": float(np.mean(ages)) if ages else None,
            "chunks": len(merges),
            "dropped_merges": sum(1 for d in dropped if d > 0),
            "dropped_actions": sum(dropped),
            "wall_span_s": span,
            "effective_control_hz": (n - 1) / span if span > 0 else None,
            "nominal_control_hz": control_hz(trace),
            "chunk_latency_p50_ms": None if not latencies else 1e3 * _percentile(latencies, 50),
            "chunk_latency_p99_ms": None if not latencies else 1e3 * _percentile(latencies, 99),
            "_chunk_latencies_s": latencies,
        }

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        pooled = [x for e in episodes for x in e.get("_chunk_latencies_s", [])]
        out = _means(
            episodes,
            ("holds", "hold_ratio", "stale_action_ratio", "dropped_merges", "dropped_actions",
             "wall_span_s", "effective_control_hz"),
        )  # fmt: skip
        out["total_holds"] = int(sum(e.get("holds", 0) for e in episodes))
        out["chunk_latency_p50_ms"] = None if not pooled else 1e3 * _percentile(pooled, 50)
        out["chunk_latency_p99_ms"] = None if not pooled else 1e3 * _percentile(pooled, 99)
        return out


#: A safety_shield node's per-episode counts as an event (ros.shield_ledger.SHIELD_REPORT).
SHIELD_REPORT = "shield.report"
_NODE_COUNTS = {
    "shield_passed": "passed",
    "shield_clipped": "clipped",
    "shield_refused": "refused",
    "shield_held": "held",
}


class SafetyScorer:
    """shield_interventions (and per guard)."""

    name = "safety"

    def score(self, trace: Trace) -> dict[str, Any]:
        events = [e for e in trace.events if e.kind == SAFETY_INTERVENTION]
        by_guard: dict[str, int] = {}
        for e in events:
            guard = str(e.data.get("guard", "unknown"))
            by_guard[guard] = by_guard.get(guard, 0) + 1
        out: dict[str, Any] = {key: None for key in _NODE_COUNTS}
        node = [e.data for e in trace.events if e.kind == SHIELD_REPORT]
        meta_shield = (trace.meta or {}).get("shield")
        if isinstance(meta_shield, dict):
            node.append(meta_shield)
        total = len(events)
        if node:
            data = node[-1]
            for key, name in _NODE_COUNTS.items():
                out[key] = int(data.get(name) or 0)
            total += out["shield_clipped"] + out["shield_refused"]
        return {"shield_interventions": total, "shield_interventions_by_guard": by_guard, **out}

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        total = sum(e.get("shield_interventions", 0) for e in episodes)
        return {
            "total_shield_interventions": int(total),
            "mean_shield_interventions": total / len(episodes) if episodes else None,
        }


class JerkScorer:
    """action_jerk_rms: smoothness of the executed actions."""

    name = "jerk"

    def score(self, trace: Trace) -> dict[str, Any]:
        _, steps, values = action_matrix(trace)
        hz = control_hz(trace) or 1.0
        if len(values) < 4:
            return {"action_jerk_rms": None}
        jerk = np.diff(values, n=3, axis=0) * hz**3
        finite = jerk[np.isfinite(jerk)]
        return {"action_jerk_rms": float(np.sqrt(np.mean(finite**2))) if finite.size else None}

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        return _means(episodes, ("action_jerk_rms",))


class PredicateScorer:
    """A benchmark's clauses evaluated offline over the recorded privileged state, on the
    same contexts and in the same order as the rollout evaluated them online
    (`tasks.context`): at each step failure first, then success.

    criteria: the success clause(s), what `tasks.compile_criteria` accepts (a clause, a
    list of clauses, or a callable context -> bool). failure: the failure clause(s), or
    None. Figures: <name>_success (None without recorded privileged state) and
    <name>_step (the step it first held); with failure clauses also <name>_failure_step.
    """

    def __init__(self, criteria: Any, name: str = "predicate", *, failure: Any = None) -> None:
        self.name = name
        self._success = compile_criteria(name, criteria)
        self._failure = compile_criteria(f"{name} failure", failure)
        self._judges_failure = failure is not None

    @classmethod
    def for_benchmark(cls, spec: Mapping[str, Any]) -> PredicateScorer:
        """The scorer of a benchmark spec's success and failure clauses, named after it."""
        return cls(spec.get("success") or [], name=spec["name"], failure=spec.get("failure") or [])

    def score(self, trace: Trace) -> dict[str, Any]:
        success: bool | None = None
        step = failure_step = None
        for ctx in trace_contexts(trace):
            success = False
            verdict = judge(self._failure, self._success, ctx, episode=ctx["episode"] or 0)
            if verdict is not None:
                success = verdict[0] == SUCCESS
                step, failure_step = (ctx["step"], None) if success else (None, ctx["step"])
                break
        out = {f"{self.name}_success": success, f"{self.name}_step": step}
        if self._judges_failure:
            out[f"{self.name}_failure_step"] = failure_step
        return out

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        values = [e.get(f"{self.name}_success") for e in episodes]
        known = [v for v in values if v is not None]
        k = sum(1 for v in known if v)
        return {
            f"{self.name}_success_rate": (k / len(known)) if known else None,
            f"{self.name}_success_rate_ci95": list(wilson_interval(k, len(known)))
            if known
            else None,
        }


class TakeoverScorer:
    """intervention_share, interventions, intervention_steps, time_to_first_intervention_s
    for an episode run with a teleop source (nothing for one without: see the module
    docstring)."""

    name = "takeover"

    def score(self, trace: Trace) -> dict[str, Any]:
        actions = actions_of(trace)
        starts = [e for e in trace.events if e.kind == INTERVENTION_START]
        flagged = [e for e in actions if "intervention" in e.data]
        if not flagged and not starts and "takeover" not in (trace.meta or {}):
            return {}
        steps = sum(1 for e in actions if e.data.get("intervention") is True)
        begin = next((e for e in trace.events if e.kind == EPISODE_START), None)
        first = None
        if starts:
            first = float(starts[0].t) - (float(begin.t) if begin is not None else 0.0)
        return {
            "intervention_share": steps / len(actions) if actions else None,
            "interventions": len(starts),
            "intervention_steps": steps,
            "time_to_first_intervention_s": first,
        }

    def aggregate(self, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        seen = [e for e in episodes if "interventions" in e]
        if not seen:
            return {}
        shares = [e["intervention_share"] for e in seen if e.get("intervention_share") is not None]
        firsts = [
            e["time_to_first_intervention_s"]
            for e in seen
            if e.get("time_to_first_intervention_s") is not None
        ]
        total = sum(int(e["interventions"]) for e in seen)
        return {
            "mean_intervention_share": float(np.mean(shares)) if shares else None,
            "total_interventions": total,
            "mean_interventions": total / len(seen),
            "intervened_episode_share": sum(1 for e in seen if e["interventions"]) / len(seen),
            "mean_time_to_first_intervention_s": float(np.mean(firsts)) if firsts else None,
        }


def callable_scorer(name: str, fn: Callable[[Trace], Mapping[str, Any]]) -> Scorer:
    """Wrap a function trace -> figures as a scorer plugin."""

    class _Fn:
        def __init__(self) -> None:
            self.name = name

        def score(self, trace: Trace) -> dict[str, Any]:
            return dict(fn(trace))

    return _Fn()


for _builtin in (OutcomeScorer(), TimingScorer(), SafetyScorer(), JerkScorer(), TakeoverScorer()):
    register_scorer(_builtin, replace=True)
