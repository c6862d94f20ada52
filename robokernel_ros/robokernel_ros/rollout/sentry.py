"""Sentry mode in the rollout API: one continuous run recorded as an episode every N s.

    run_policy("arm", n_steps=30_000, sentry_rotate_s=60.0)   # 10 min at 50 Hz, 10 episodes

`sentry_rotate_s` (RunRequest, run_policy / start_policy; `robokernel run --sentry-rotate-s`;
the runner node's RunPolicy / StartPolicy field) runs the call's one episode as the
kernel's `EpisodeRunner.run_sentry` (docs/operator.md): one reset, then a new episode (its
own run directory, trace and bag) every `sentry_rotate_s` seconds of robot time, without a
reset and without losing a step. The call's result describes the whole run (its steps,
holds, chunks, interventions and reward are the episodes' sums; its outcome, status and
trace_path are the last episode's) and lists the episodes under `sentry`:

    {"rotate_every_s": 60.0, "episodes": [{"index", "first_step", "steps", "outcome",
     "status", "run_id", "trace_path", "bag_path"}, ...]}

`first_step` is the run's step an episode's step 0 is; the episodes' `steps` add up to
the result's `steps`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from robokernel_ros.kernel.domains import is_number
from robokernel_ros.kernel.recorder import EpisodeRecord, Execution


def rotate_option(name: str, value: Any) -> float | None:
    """`value` as the rotation period in seconds (None: no sentry mode); a ValueError
    naming `name` and the domain otherwise."""
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(
            f"{name}={value!r}: must be positive finite seconds (a new episode every that "
            "many seconds of robot time), or None (one episode)"
        )
    return float(value)


def run_record(records: Sequence[EpisodeRecord]) -> EpisodeRecord:
    """One record for the whole sentry run: the last episode's, with the counts summed."""
    last = records[-1]
    execution = None
    runs = [r.execution for r in records if r.execution is not None]
    if runs:
        execution = Execution(**{
            f.name: sum(getattr(e, f.name) for e in runs) for f in dataclasses.fields(Execution)
        })  # fmt: skip
    return dataclasses.replace(
        last,
        steps=sum(r.steps for r in records),
        holds=sum(r.holds for r in records),
        chunks=sum(r.chunks for r in records),
        safety_interventions=sum(r.safety_interventions for r in records),
        events=sum(r.events for r in records),
        total_reward=sum(r.total_reward for r in records),
        elapsed_s=sum(r.elapsed_s for r in records),
        execution=execution,
    )


def episodes(
    records: Sequence[EpisodeRecord], rotate_every_s: float, trace_dir: Path | None
) -> dict[str, Any]:
    """The result's `sentry` field: the period and one entry per recorded episode."""
    out = []
    first = 0
    for index, record in enumerate(records):
        bag = None
        if trace_dir is not None and record.run_id:
            path = Path(trace_dir) / record.run_id / "bag"
            bag = str(path) if path.is_dir() else None
        out.append({
            "index": index,
            "first_step": first,
            "steps": record.steps,
            "outcome": getattr(record.outcome, "value", str(record.outcome)),
            "status": record.status,
            "run_id": record.run_id or None,
            "trace_path": str(record.trace_path) if record.trace_path else None,
            "bag_path": bag,
        })  # fmt: skip
        first += record.steps
    return {"rotate_every_s": rotate_every_s, "episodes": out}
