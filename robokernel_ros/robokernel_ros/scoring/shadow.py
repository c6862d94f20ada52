"""Shadow replay: another policy against the recorded observations, no robot, no simulator.

For every chunk the recorded episode merged, the shadow policy is asked for a chunk on
the same observation (obs_step's recorded observation, with its recorded frames), and
each executed step is compared with the shadow chunk's action for that step: the row
`dropped + (step - arrival_step)` of the chunk merged last before the step, the row the
executing policy's own chunk supplied. Holds are not compared (no chunk supplied them).

Two differences are reported per step: against the executed action (after the safety
shield) and against the action the executing policy proposed (its recorded chunk row,
before the shield). Steps where the shield intervened are marked `shielded`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from os import PathLike
from typing import Any

from ..kernel.events import ACTION, CHUNK_MERGE, EPISODE_START, OBSERVATION, SAFETY_INTERVENTION
from ..kernel.trace import Trace, load_trace

ShadowFn = Callable[[Mapping[str, Any]], Sequence[Mapping[str, float]]]


@dataclass
class ShadowStep:
    step: int
    obs_step: int
    executed: dict[str, float]
    shadow: dict[str, float]
    diff: dict[str, float]  # shadow - executed, per key
    max_abs_diff: float
    proposed: dict[str, float] | None = None  # the executing policy's chunk row (pre-shield)
    max_abs_diff_vs_proposed: float | None = None
    shielded: bool = False  # the shield intervened at this step


@dataclass
class ShadowReport:
    steps: list[ShadowStep] = field(default_factory=list)
    compared: int = 0
    holds_skipped: int = 0
    uncovered: int = 0  # executed steps the shadow chunk had no row for
    max_abs_diff: float = 0.0  # against the executed actions
    mean_abs_diff: float = 0.0
    per_key_max_abs_diff: dict[str, float] = field(default_factory=dict)
    shielded_steps: int = 0
    max_abs_diff_unshielded: float = 0.0  # against executed actions the shield left alone
    max_abs_diff_vs_proposed: float | None = None  # against the executing policy's chunks

    def to_dict(self, *, steps: bool = True) -> dict[str, Any]:
        out = asdict(self)
        if not steps:
            out.pop("steps")
        return out


def _observation(event: Any, trace: Trace) -> dict[str, Any]:
    obs = event.data.get("obs")
    observation: dict[str, Any] = dict(obs) if isinstance(obs, Mapping) else {"obs": obs}
    images = event.data.get("images") or {}
    if images:
        observation["images"] = {
            cam: trace.image(rel) if isinstance(rel, str) else rel for cam, rel in images.items()
        }
    return observation


def _as_fn(policy: Any, trace: Trace) -> ShadowFn:
    instruction = str(trace.meta.get("instruction") or "")
    if hasattr(policy, "get_actions"):
        env = trace.meta.get("env") or {}
        keys = env.get("action_keys") or []
        if keys and hasattr(policy, "set_robot_state_keys"):
            policy.set_robot_state_keys(keys)
        limits = env.get("action_limits") or {}
        if limits and hasattr(policy, "set_action_limits"):
            policy.set_action_limits({k: tuple(v) for k, v in limits.items()})
        if hasattr(policy, "reset"):
            seed = trace.meta.get("seed")
            policy.reset(instruction=instruction, seed=seed if isinstance(seed, int) else None)
        return lambda obs: policy.get_actions(obs, instruction)
    if callable(policy):
        return policy
    raise ValueError(
        f"policy={policy!r}: must have get_actions(observation, instruction) or be callable"
    )


def shadow_replay(trace: Trace | str | PathLike[str], policy: Any) -> ShadowReport:
    """Compare `policy` (a Policy, an Agent-like object with get_actions, or a callable
    observation -> list of actions) with the actions the recorded episode executed.
    `trace`: a loaded Trace, or the path of a run directory or bag (`load_trace`)."""
    if isinstance(trace, str | PathLike):
        trace = load_trace(trace)
    fn = _as_fn(policy, trace)
    observations: dict[int, Any] = {}
    report = ShadowReport()
    # shadow chunk, arrival step, dropped, obs_step, recorded keys, recorded rows
    current: tuple[list[Mapping[str, float]], int, int, int, list[str], list[Any]] | None = None
    shielded_steps = {e.step for e in trace.events if e.kind == SAFETY_INTERVENTION}
    total_abs = 0.0
    n_values = 0
    for event in trace.events:
        if event.kind == EPISODE_START:
            observations.clear()
            current = None
        elif event.kind == OBSERVATION:
            observations[event.step] = event
        elif event.kind == CHUNK_MERGE:
            d = event.data
            obs_step = int(d.get("obs_step", event.step))
            if obs_step not in observations:
                raise ValueError(
                    f"trace {trace.path}: chunk.merge at step {event.step} refers to obs_step {obs_step}, not recorded"
                )
            chunk = list(fn(_observation(observations[obs_step], trace)))
            current = (
                chunk,
                int(d.get("arrival_step", event.step)),
                int(d.get("dropped", 0) or 0),
                obs_step,
                [str(k) for k in d.get("keys") or []],
                list(d.get("actions") or []),
            )
        elif event.kind == ACTION:
            if event.data.get("hold"):
                report.holds_skipped += 1
                continue
            if current is None:
                report.uncovered += 1
                continue
            chunk, arrival, dropped, obs_step, keys, rows = current
            row = dropped + (event.step - arrival)
            if not 0 <= row < len(chunk):
                report.uncovered += 1
                continue
            executed = {str(k): float(v) for k, v in (event.data.get("action") or {}).items()}
            shadow = {str(k): float(v) for k, v in chunk[row].items()}
            diff = {k: shadow.get(k, math.nan) - v for k, v in executed.items()}
            worst = max(
                (abs(v) if math.isfinite(v) else math.inf for v in diff.values()), default=0.0
            )
            proposed = _row(keys, rows, row)
            vs_proposed = None
            if proposed is not None:
                vs_proposed = max(
                    (
                        abs(shadow.get(k, math.nan) - v)
                        if math.isfinite(shadow.get(k, math.nan) - v)
                        else math.inf
                        for k, v in proposed.items()
                    ),
                    default=0.0,
                )
                prev = report.max_abs_diff_vs_proposed or 0.0
                report.max_abs_diff_vs_proposed = max(prev, vs_proposed)
            shielded = event.step in shielded_steps
            report.steps.append(
                ShadowStep(
                    event.step,
                    obs_step,
                    executed,
                    shadow,
                    diff,
                    worst,
                    proposed,
                    vs_proposed,
                    shielded,
                )
            )
            report.compared += 1
            report.max_abs_diff = max(report.max_abs_diff, worst)
            if shielded:
                report.shielded_steps += 1
            else:
                report.max_abs_diff_unshielded = max(report.max_abs_diff_unshielded, worst)
            for k, v in diff.items():
                a = abs(v) if math.isfinite(v) else math.inf
                report.per_key_max_abs_diff[k] = max(report.per_key_max_abs_diff.get(k, 0.0), a)
                total_abs += a
                n_values += 1
    report.mean_abs_diff = total_abs / n_values if n_values else 0.0
    return report


def _row(keys: list[str], rows: list[Any], index: int) -> dict[str, float] | None:
    if not 0 <= index < len(rows):
        return None
    row = rows[index]
    if isinstance(row, Mapping):
        return {str(k): float(v) for k, v in row.items()}
    if keys and len(row) == len(keys):
        return {k: float(v) for k, v in zip(keys, row, strict=True)}
    return None
