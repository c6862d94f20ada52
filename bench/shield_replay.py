"""The shield's rate guards on the same input, before and after judging over the nominal period.

    python bench/workcell_timing.py --keep DIR      # the demo graph's episodes, traces kept
    python bench/shield_replay.py DIR [DIR ...]     # without a DIR (make bench): skipped

Replays the runner's commands of every kept episode (the trace's `action` events, at their
traced send times) through the shield's review (safety/review.py, the SO-101's limits)
twice: with the rule the safety_shield node had before (each command judged over its
arrival interval, no shorter than the lower median of the last 9: `arrival_dt` below) and
with the schedule clock over the nominal period (`command_rate_hz` = the episode's rate).
Counts clipped commands, and those outside the run of clipped steps that starts at the
episode's first chunk (its first command jumps from the hold into the chunk: a step no
limit allows, whatever the timing). No ROS, no processes: the same commands and times
for both rules.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "robokernel_ros"))

from robokernel_ros.safety.limits import load_limits_file  # noqa: E402
from robokernel_ros.safety.review import CommandReview  # noqa: E402

LIMITS = load_limits_file(REPO / "robokernel_ros" / "config" / "joint_limits_so101.yaml")
MAX_DT = 0.05  # max_step_dt_s


class ArrivalDt:
    """The rule before: the arrival interval, no shorter than the lower median of the
    last 9 (at most max_step_dt_s); the first command after the seed over max_step_dt_s."""

    def __init__(self, now: float) -> None:
        self.t_sent = now - MAX_DT
        self.recent: collections.deque[float] = collections.deque(maxlen=9)

    def advance(self, now: float) -> float:
        interval = now - self.t_sent
        self.recent.append(min(interval, MAX_DT))
        period = sorted(self.recent)[(len(self.recent) - 1) // 2]
        self.t_sent = now
        return min(max(interval, period), MAX_DT)


def replay(trace: Path, rate: float) -> dict[str, list[int]] | None:
    events = [json.loads(line) for line in (trace / "events.jsonl").read_text().splitlines()]
    actions = [e for e in events if e["kind"] == "action"]
    if not actions:
        return None
    keys = list(actions[0]["data"]["action"])
    start = [actions[0]["data"]["action"][k] for k in keys]
    clipped: dict[str, list[int]] = {}
    for rule in ("arrival", "nominal"):
        review = CommandReview(keys, {k: LIMITS[k] for k in keys}, command_rate_hz=rate)
        review.measured[:] = start
        review.seed()
        if rule == "arrival":
            review.clock = ArrivalDt(actions[0]["wall"])  # type: ignore[assignment]
            review.seed = lambda: None  # type: ignore[method-assign]
            review.shield.record_sent(dict(zip(keys, start, strict=True)), MAX_DT)
        steps = []
        for event in actions:
            values = [event["data"]["action"][k] for k in keys]
            if review.review_array(values, event["wall"]).action != "passed":
                steps.append(event["step"])
        clipped[rule] = steps
    merges = [e["step"] for e in events if e["kind"] == "chunk.merge"]
    clipped["first_chunk_step"] = [min(merges)] if merges else []
    clipped["steps"] = [len(actions)]
    return clipped


def after_first_run(steps: list[int], first: int | None) -> int:
    if first is None:
        return len(steps)
    end, n = first + 2, 0
    for step in steps:
        if step <= end:
            end = max(end, step + 2)  # the run goes on while steps are clipped
        else:
            n += 1
    return n


def main() -> int:
    folders = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not folders:  # `make bench` (--quick): nothing kept to replay
        print("shield_replay: give the folders of `workcell_timing.py --keep DIR` runs; skipped")
        print(json.dumps({"bench": "shield_replay", "skipped": True, "verdicts": {}}))
        return 0
    rows = []
    for rate in (50.0, 100.0):
        total = collections.Counter()
        for folder in folders:
            for trace in sorted(Path(folder).glob(f"runs_{rate:g}/*")):
                got = replay(trace, rate)
                if got is None:
                    continue
                first = got["first_chunk_step"][0] if got["first_chunk_step"] else None
                total["steps"] += got["steps"][0]
                for rule in ("arrival", "nominal"):
                    total[rule] += len(got[rule])
                    total[rule + "_after_first_run"] += after_first_run(got[rule], first)
        if total["steps"]:
            row = {"rate_hz": rate, **total}
            rows.append(row)
            n = total["steps"]
            print(
                f"{rate:5g} Hz  {n} steps  before (arrival intervals): clipped {total['arrival']} "
                f"({100 * total['arrival'] / n:.1f} %), after the first-chunk run "
                f"{total['arrival_after_first_run']} ({100 * total['arrival_after_first_run'] / n:.1f} %)"
                f"  |  after (nominal period): clipped {total['nominal']} "
                f"({100 * total['nominal'] / n:.1f} %), after the first-chunk run "
                f"{total['nominal_after_first_run']} ({100 * total['nominal_after_first_run'] / n:.1f} %)"
            )
    # a measurement of two rules on the same input: no target of its own
    print(json.dumps({"bench": "shield_replay", "rows": rows, "verdicts": {}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
