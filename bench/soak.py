"""Chaos soak: the simulated workcell under evals while a seeded schedule breaks it.

    python bench/soak.py [--minutes 30] [--seed 0] [--quick]

The graph of `make demo` (robokernel_ros.demo.workcell_graph: sim_robot, safety_shield,
estop_panel, policy_server, runner) plus a bag_recorder, as real processes on a private
ROS_DOMAIN_ID. A driver calls the runner's eval_policy action (WorkcellClient) back to
back. After a quiet anchor phase (no faults: the same graph's episodes, holds and
memory), a schedule drawn from `--seed` presses and releases the e-stop, stops and
cancels the rollout, deactivates and activates each shield, the policy server and the
runner, and SIGKILLs then restarts the policy server, the panel, each shield and the sim
robot (every 2-6 s, 1.5-4 s with --quick; each fault once, in the seed's order, before
any repeats; a kill every other fault); after each fault it releases, clears the fault
and waits until every shield forwards again. While the e-stop is pressed or the panel is
dead, the monitor also publishes to each shield's input (a second command source).

Checked all the time from outside, by a monitor node of this process that subscribes
to the controller topic (the shield's output), the shield's ~/state, the panel's
e-stop topic and /joint_states (SafetyAudit below):

* No non-hold command reaches the controller while the e-stop is pressed or its
  source dead (the schedule's own intervals: press to release; the panel's SIGKILL +
  estop_timeout_s to its restart; the monitor's keep-last-1 e-stop reader loses samples
  when this process falls behind, so its gaps are no evidence), nor while the shield
  says it is latched (two consecutive ~/state samples saying so, with no command
  forwarded in between: ~/state keeps one sample, a missed unlatch must not count).
  "Hold" is the shield's own (nodes/safety_shield.py, safety/review.py `hold_values`):
  the measured joint position of its last /joint_states sample, clamped into the
  position limits, frozen (the same values repeated) until a command passes. So a
  command in such an interval is a hold when its values equal, joint by joint, a
  /joint_states sample published before it (or that sample clamped to a limit), or
  equal the hold this shield process (its DDS writer) already sent in the interval;
  when the monitor missed that sample (a loaded monitor), when every joint lies within
  the range of the samples around the moment this writer first sent these values
  (from the last one HOLD_STALE_NS before it to the first one after it; counted apart,
  "bracketed"). Any other command is a violation. A command is judged once the
  monitor's joint states have passed its source time, and a hold not matched exactly
  once the sample after its first send has arrived; the shield hears a press one
  delivery later, so commands within `--grace-s` of the start are not judged, and the
  longest forward seen there is printed (latch lag).
* Every episode ends with an outcome, and its trace, its bag (runner's) and the
  recorder's bag load (kernel.load_trace) and score (scoring.score_trace).
* Each node's RSS, threads and open file descriptors from /proc every 2 s; growth per
  hour is a least-squares slope per process (a restarted node is a new process; its
  first 15 s and the first tenth of its samples are start-up, not fitted), judged on
  processes that lived 5 minutes or more against its own noise (3 standard errors)
  and a floor; `--quick` judges only gross growth (a 2-minute slope is mostly
  start-up).

Targets: zero violations, every episode complete, no growth beyond noise. Prints the
chaos phase next to the anchor phase and ends with one JSON line (figures, verdicts);
exits 1 when a verdict fails, 2 on a bad flag.

    python bench/soak.py --quick            # 2 minutes (anchor 20 s)
    python bench/soak.py --minutes 30       # the target soak
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import heapq
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.demo import (
    NAMESPACE,
    NodeProcess,
    config_dir,
    use_dds_profile,
    workcell_graph,
)
from robokernel_ros.process import die_with_parent, stop_process_groups

NS = NAMESPACE
KILLABLE = ("policy_server", "estop_panel", "sim_robot")  # and every shield
LIFECYCLE = ("policy_server", "runner")  # and every shield
SAMPLE_PERIOD_S = 2.0
STARTUP_S = 15.0  # a process's first seconds are not fitted
# Growth floors (whole run) below which a slope is not called growth, whatever its noise.
FLOORS = {"rss_mib": 8.0, "threads": 2.0, "fds": 4.0}
GROSS = {"rss_mib": 100.0, "threads": 20.0, "fds": 50.0}  # --quick: gross growth only
# Intervals judged from their first instant: the shield's own confirmed latch, and an
# e-stop not yet known (the shield needs the source's second sample before it forwards).
NO_GRACE = ("shield latched", "unknown")
#: How old the joint state a shield holds at may be when it takes the hold (its executor
#: takes the e-stop's tick and the joint states in turn; a loaded shield lags): the
#: samples the audit brackets a hold by reach this far back from its first send.
HOLD_STALE_NS = 1_000_000_000


@dataclass
class ShieldSpec:
    """A safety_shield node of the graph, as its parameter files configure it."""

    name: str
    joints: tuple[str, ...]
    output_topic: str
    estop_timeout_s: float
    limits_file: str

    @classmethod
    def of(cls, node: NodeProcess) -> ShieldSpec:
        import yaml

        params: dict[str, Any] = {}
        for file_name in node.params_files:
            data = yaml.safe_load((config_dir() / file_name).read_text()) or {}
            for section in data.values():
                params.update((section or {}).get("ros__parameters", {}))
        params.update(node.params)
        topic = str(params.get("output_topic", "/forward_position_controller/commands"))
        if not topic.startswith("/"):
            topic = f"{NS}/{topic}"
        return cls(node.name, tuple(params["joints"]), topic,
                   float(params.get("estop_timeout_s", 0.5)), str(params.get("limits_file", "")))  # fmt: skip


def shield_specs(nodes: list[NodeProcess]) -> list[ShieldSpec]:
    return [ShieldSpec.of(n) for n in nodes if n.executable == "safety_shield"]


# --- the audit (pure: no ROS) -------------------------------------------------------------


@dataclass
class Interval:
    """A time span (ns, source clocks) in which only holds may reach the controller."""

    start: int
    cause: str
    holds: dict[str, tuple[float, ...]] = field(default_factory=dict)  # writer -> its hold


class SafetyAudit:
    """Judges the controller topic against the e-stop and the shield's state (module
    docstring). Feed samples with their source timestamps (ns, one host clock) in any
    order; `advance(until)` judges everything published before `until` in time order.
    `bounds`: per joint (lo, hi) position limits, in `joints` order."""

    def __init__(
        self,
        joints: tuple[str, ...],
        bounds: list[tuple[float | None, float | None]],
        timeout_s: float,
        grace_s: float,
    ) -> None:
        self.joints = joints
        self.bounds = bounds
        self.timeout = int(timeout_s * 1e9)
        self.grace = int(grace_s * 1e9)
        self._queue: list[tuple[int, int, str, Any]] = []
        self._latest = {"js": 0}  # the latest source time received per stream
        self._seq = 0
        self._lock = threading.Lock()
        # the e-stop pressed or its source dead, as the schedule made it (`fault`)
        self._source: Interval | None = None
        self.estop_samples = 0
        # The e-stop as the monitor heard it (a reliable reader that keeps 64 samples, by
        # their source times): pressed from the first pressed sample of a run of them,
        # while the last sample is fresh. Its silences are no evidence (a monitor on a
        # loaded machine, or that discovers a restarted panel later than the shields
        # do, misses samples): a dead or not yet started panel is the schedule's.
        self._heard: Interval | None = None
        self._heard_last: tuple[int, bool] | None = None  # (t, pressed) of the last sample
        self._pressed_since = 0
        # The shield's own word, confirmed: ~/state keeps only its last sample, so a monitor
        # that falls behind can miss an unlatch; commands between two received states
        # that both say latched, with no command forwarded in between (its counters),
        # are judged when the second arrives, the others not.
        self._shield: Interval | None = None  # the current confirmed latch
        self._state_prev: tuple[int, bool, int] | None = None
        self._pending: list[tuple[int, str, tuple[float, ...]]] = []
        self._measured: collections.deque[tuple[int, tuple[float, ...]]] = collections.deque()
        self._measured_set: collections.Counter[tuple[float, ...]] = collections.Counter()
        # (writer, values) -> when first sent, and that order (pruned after 60 s)
        self._first_sent: dict[tuple[str, tuple[float, ...]], int] = {}
        self._first_order: collections.deque[tuple[int, tuple[str, tuple[float, ...]]]] = (
            collections.deque()
        )
        # commands whose hold is judged once a joint state after its first send arrives
        self._unsure: list[tuple[Interval, int, str, tuple[float, ...]]] = []
        self._final = False  # finish(): no joint state will come
        self.commands = 0
        self.judged = 0
        self.holds = 0
        self.bracketed = 0  # holds matched by the range of the samples around them
        self.violations: list[dict[str, Any]] = []
        self.lag_ns = 0  # longest non-hold after an interval started (within the grace)
        self.intervals: collections.Counter[str] = collections.Counter()
        self._clock = 0  # the latest time judged
        self._history: list[tuple[int, int, str]] = []  # the schedule's closed intervals
        self.late = 0  # commands that arrived after the audit had judged past their time

    def _push(self, t: int, kind: str, value: Any) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._queue, (t, self._seq, kind, value))

    def watermark(self) -> int:
        """How far the audit may judge: the latest source time received on the
        joint-state stream. A monitor that falls behind (a loaded machine) has not yet
        received the samples before a command it already has; while the sim robot is
        dead the audit waits for it (or the end of the run)."""
        return min(self._latest.values())

    def estop(self, t: int, pressed: bool) -> None:
        """An e-stop sample heard at source time `t`: a pressed one is judged too (from
        it to the next released one, while fresh), beside the schedule's intervals."""
        self.estop_samples += 1
        self._push(t, "estop", bool(pressed))

    def fault(self, start: int, end: int | None, cause: str) -> None:
        """The e-stop pressed, its source dead or not known, from `start` (ns,
        time.time_ns()) to `end` (None: not yet; call again with the same start when it
        ends). Commands from start (+ grace, but for NO_GRACE causes) to end are judged."""
        if end is None:
            self._push(start, "open", cause)
        else:
            self._push(end, "close", cause)

    def shield_state(self, t: int, latched: bool, forwarded: int = 0) -> None:
        """The shield's ~/state: latched, and its passed + clipped count."""
        self._push(t, "shield", (latched, forwarded))

    def joint_state(self, t: int, names: list[str], positions: list[float]) -> None:
        index = {n: i for i, n in enumerate(names)}
        if all(j in index for j in self.joints):
            self._latest["js"] = max(self._latest["js"], t)
            self._push(t, "js", tuple(float(positions[index[j]]) for j in self.joints))

    def command(self, t: int, writer: str, values: list[float]) -> None:
        self._push(t, "cmd", (writer, tuple(float(v) for v in values)))

    def advance(self, until: int) -> None:
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] >= until:
                    return
                t, _, kind, value = heapq.heappop(self._queue)
            if kind == "cmd" and t < self._clock:
                self._on_late(t, value)
                continue
            self._clock = max(self._clock, t)
            getattr(self, f"_on_{kind}")(t, value)

    def _on_late(self, t: int, value: tuple[str, tuple[float, ...]]) -> None:
        """A command that reached the monitor after the audit had judged past its time
        (a monitor that matched a restarted shield's writer late gets its history then):
        judged against the schedule's interval that held at its own time, if any."""
        writer, values = value
        self.commands += 1
        self.late += 1
        for start, end, cause in self._history:
            if start <= t < end:
                self._judge(Interval(start, cause), t, writer, values)
                return
        if self._source is not None and self._source.start <= t:
            self._judge(Interval(self._source.start, self._source.cause), t, writer, values)

    def _on_estop(self, t: int, pressed: bool) -> None:
        last = self._heard_last
        if pressed and (last is None or not last[1] or t - last[0] > self.timeout):
            self._pressed_since = t  # the first pressed sample of a run of them
        self._heard_last = (t, pressed)

    def _heard_state(self, t: int) -> tuple[str, int]:
        """The e-stop as heard at `t`: ('pressed (heard)', since) while the last sample
        is pressed and at most `timeout_s` old (judged after the grace: the shield
        hears it one delivery later), else ('', 0)."""
        last = self._heard_last
        if last is not None and last[1] and t - last[0] <= self.timeout:
            return "pressed (heard)", self._pressed_since
        return "", 0

    def _on_open(self, t: int, cause: str) -> None:
        self._open("source", Interval(t, cause))

    def _on_close(self, t: int, cause: str) -> None:
        if self._source is not None:
            self._history.append((self._source.start, t, self._source.cause))
        self._source = None

    def _open(self, which: str, interval: Interval) -> None:
        setattr(self, f"_{which}", interval)
        self.intervals[interval.cause] += 1

    def _on_shield(self, t: int, state: tuple[bool, int]) -> None:
        latched, forwarded = state
        prev = self._state_prev
        if prev is not None and prev[1] and latched and forwarded == prev[2]:
            if self._shield is None:
                self._open("shield", Interval(prev[0], "shield latched"))
            for tc, writer, values in self._pending:
                self._judge(self._shield, tc, writer, values)
        else:
            self._shield = None
        self._pending = []
        self._state_prev = (t, latched, forwarded)

    def _on_js(self, t: int, q: tuple[float, ...]) -> None:
        self._measured.append((t, q))
        self._measured_set[q] += 1
        while self._measured and t - self._measured[0][0] > 60_000_000_000:
            _, old = self._measured.popleft()
            self._measured_set[old] -= 1
            if not self._measured_set[old]:
                del self._measured_set[old]
        unsure, self._unsure = self._unsure, []
        for interval, tc, writer, values in unsure:  # now with a sample after their hold
            self._judge(interval, tc, writer, values)

    def _sent_first(self, t: int, writer: str, values: tuple[float, ...]) -> int:
        """When `writer` first sent `values` (a hold is frozen: the same values repeated
        from the moment the shield took it), remembered for 60 s."""
        key = (writer, values)
        first = self._first_sent.setdefault(key, t)
        if first == t:
            self._first_order.append((t, key))
        while self._first_order and t - self._first_order[0][0] > 60_000_000_000:
            old_t, old = self._first_order.popleft()
            if self._first_sent.get(old) == old_t:
                del self._first_sent[old]
        return min(first, t)

    def _is_measured(self, values: tuple[float, ...], t_ref: int) -> bool | None:
        """Whether `values`, first sent at `t_ref`, is the shield's hold: the measured
        position of a /joint_states sample it had then, clamped into the limits
        (nodes/safety_shield.py, safety/review.py `hold_values`). True when it equals a
        sample (or a sample clamped into the limits); else, the monitor having missed
        that sample (a loaded monitor), when every joint lies within the range of the
        samples the shield could have held at then: from the last one published
        `HOLD_STALE_NS` before `t_ref` (the shield's executor may lag its joint states)
        to the first one published after `t_ref` (the missed sample lies between two
        received ones): counted in `bracketed`. None while that first sample after
        `t_ref` has not arrived (judged again when it has)."""
        if values in self._measured_set:
            return True
        window: list[tuple[float, ...]] = []
        after = False
        for tq, q in reversed(self._measured):
            if tq > t_ref:
                window = [q]  # the earliest sample after t_ref seen so far
                after = True
                continue
            window.append(q)
            if tq < t_ref - HOLD_STALE_NS:
                break
        for q in window:
            if all(
                v == m or (v != m and v in (lo, hi))
                for v, m, (lo, hi) in zip(values, q, self.bounds, strict=True)
            ):
                return True  # a sample clamped into the limits
        if not after and not self._final:
            return None
        if not window:
            return False
        for i, v in enumerate(values):
            column = [q[i] for q in window]
            lo, hi = self.bounds[i]
            if not (min(column) - 1e-9 <= v <= max(column) + 1e-9 or v in (lo, hi)):
                return False
        self.bracketed += 1
        return True

    def _on_cmd(self, t: int, value: tuple[str, tuple[float, ...]]) -> None:
        writer, values = value
        self.commands += 1
        self._sent_first(t, writer, values)
        cause, since = self._heard_state(t)
        if not cause:
            self._heard = None
        elif self._heard is None or self._heard.cause != cause or self._heard.start != since:
            keep = self._heard.holds if self._heard is not None else {}
            self._open("heard", Interval(since, cause, dict(keep)))
        if self._source is not None:
            self._judge(self._source, t, writer, values)
        elif self._heard is not None:
            self._judge(self._heard, t, writer, values)
        elif self._state_prev is not None and self._state_prev[1]:
            self._pending.append((t, writer, values))  # judged if the next state confirms

    def _judge(self, interval: Interval, t: int, writer: str, values: tuple[float, ...]) -> None:
        """One command sent at `t` inside `interval`: a hold, or a violation; judged once
        the monitor has the joint state after the moment its value was first sent."""
        known = interval.holds.get(writer)
        is_hold = known == values or self._is_measured(values, self._sent_first(t, writer, values))
        if is_hold is None:
            self._unsure.append((interval, t, writer, values))
            return
        if is_hold:
            interval.holds[writer] = values
        if interval.cause not in NO_GRACE and t - interval.start < self.grace:
            if not is_hold:
                self.lag_ns = max(self.lag_ns, t - interval.start)
            return
        self.judged += 1
        if is_hold:
            self.holds += 1
            return
        t_ref = self._first_sent.get((writer, values), t)
        self.violations.append({
            "t_ns": t, "writer": writer[:16], "values": list(values), "cause": interval.cause,
            "after_ms": round((t - interval.start) / 1e6, 1), "hold": list(known or ()),
            "first_sent_ms": round((t_ref - t) / 1e6, 1),
            "measured_around_first": [[round((tq - t_ref) / 1e6, 1), list(q)] for tq, q in self._measured
                                      if t_ref - HOLD_STALE_NS - 200_000_000 <= tq <= t_ref + 300_000_000][-12:],
        })  # fmt: skip

    def finish(self) -> None:
        """The end of the run: commands still waiting for a joint state after their hold
        are judged on the samples there are."""
        self._final = True
        unsure, self._unsure = self._unsure, []
        for interval, t, writer, values in unsure:
            self._judge(interval, t, writer, values)


# --- resource samples and slopes ----------------------------------------------------------


def proc_sample(pid: int) -> dict[str, float] | None:
    """RSS (MiB), threads and open file descriptors of a process, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields_ = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if "VmRSS" not in fields_:  # a process exiting, or not yet exec'd
        return None
    return {
        "rss_mib": int(fields_["VmRSS"].split()[0]) / 1024.0,
        "threads": float(fields_["Threads"].strip()),
        "fds": float(fds),
    }


def slope(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope (per second) and its standard error."""
    n = len(points)
    if n < 3:
        return 0.0, math.inf
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return 0.0, math.inf
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    resid = sum((y - my - b * (x - mx)) ** 2 for x, y in points)
    return b, math.sqrt(resid / (n - 2) / sxx)


# --- the graph ----------------------------------------------------------------------------

#: --tracemalloc: a node run under tracemalloc dumps a snapshot every TRACE_PERIOD_S
TRACE_FRAMES = 6
TRACE_PERIOD_S = 60.0
TRACED_MAIN = f"""
import os, runpy, sys, threading, time, tracemalloc
out = os.environ["RK_TRACEMALLOC_DIR"]
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
def dump():
    k = 0
    while True:
        time.sleep({TRACE_PERIOD_S})
        k += 1
        tracemalloc.take_snapshot().dump(f"{{out}}/{{os.getpid()}}-{{k:04d}}.snap")
threading.Thread(target=dump, name="tracemalloc_dump", daemon=True).start()
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def tracemalloc_diff(folder: Path, skip_s: float = 120.0, top: int = 12) -> dict[str, Any]:
    """The Python heap of a traced node: its traced total per snapshot and the sites
    that grew most between the first snapshot after `skip_s` (start-up) and the last
    (each with its stack, the allocating line first)."""
    import tracemalloc

    snaps = sorted(folder.glob("*.snap"))
    if not snaps:
        return {}
    first_k = max(1, int(skip_s / TRACE_PERIOD_S))
    totals = []
    for path in snaps:
        snap = tracemalloc.Snapshot.load(str(path))
        k = int(path.stem.split("-")[1])
        totals.append(
            (k * TRACE_PERIOD_S, sum(st.size for st in snap.statistics("filename")) / 2**20)
        )
    base = [p for p in snaps if int(p.stem.split("-")[1]) == first_k] or snaps[:1]
    a = tracemalloc.Snapshot.load(str(base[0]))
    b = tracemalloc.Snapshot.load(str(snaps[-1]))
    diff = b.compare_to(a, "traceback")
    pts = [(t, m) for t, m in totals if t >= skip_s]
    b_slope, _ = slope(pts)
    return {
        "snapshots": len(snaps),
        "traced_mib": [(round(t), round(m, 2)) for t, m in totals],
        "traced_per_h_mib": round(b_slope * 3600, 2),
        "from_s": first_k * TRACE_PERIOD_S,
        "to_s": int(snaps[-1].stem.split("-")[1]) * TRACE_PERIOD_S,
        "growth_mib": round(sum(d.size_diff for d in diff) / 2**20, 3),
        "top": [{"kib": round(d.size_diff / 1024, 1), "count": d.count_diff,
                 "where": [f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(d.traceback)]}
                for d in diff[:top]],
    }  # fmt: skip


class Graph:
    """The workcell's processes by node name; a killed node is restarted under its name."""

    def __init__(
        self,
        nodes: list[NodeProcess],
        log_dir: Path,
        env: dict[str, str],
        traced: dict[str, Path] | None = None,
        later: tuple[str, ...] = (),
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.log_dir = log_dir
        self.env = env
        self.traced = traced or {}  # node name -> where its tracemalloc snapshots go
        # Every node starts from this one thread: die_with_parent's SIGKILL follows the
        # thread that started a child, and the schedule's thread (which restarts killed
        # nodes) ends before the soak does: its children died with it, 8 s before the end.
        from concurrent.futures import ThreadPoolExecutor

        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spawner")
        self.current: dict[str, subprocess.Popen] = {}
        self.all: list[subprocess.Popen] = []
        self.started: dict[int, tuple[str, float]] = {}  # pid -> (name, monotonic start)
        log_dir.mkdir(parents=True, exist_ok=True)
        for name in self.nodes:  # `later`: started by the caller
            if name not in later:
                self.start(name)

    def start(self, name: str) -> subprocess.Popen:
        return self._spawner.submit(self._start, name).result()

    def _start(self, name: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        argv, env = self.nodes[name].argv(), {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if name in self.traced:  # python -X tracemalloc -c TRACED_MAIN <module> <args>
            assert argv[1:3] == ["-m", self.nodes[name].module], argv
            argv = [argv[0], "-X", f"tracemalloc={TRACE_FRAMES}", "-c", TRACED_MAIN, *argv[2:]]
            env["RK_TRACEMALLOC_DIR"] = str(self.traced[name])
            self.traced[name].mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent, env=env,
        )  # fmt: skip
        log.close()
        self.current[name] = proc
        self.all.append(proc)
        self.started[proc.pid] = (name, time.monotonic())
        return proc

    def kill(self, name: str) -> None:
        proc = self.current[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def dead(self) -> list[str]:
        return [name for name, p in self.current.items() if p.poll() is not None]

    def stop(self) -> tuple[list[int], list[int]]:
        killed = stop_process_groups([p for p in self.all if p.poll() is None])
        self._spawner.shutdown(wait=True)
        return killed, [p.pid for p in self.all if p.poll() is None]


# --- the monitor and operator node (its own rclpy context) --------------------------------


class Monitor:
    """One node of this process: the audit's subscriptions, the operator's service
    clients (panel, clear_fault, lifecycle) and the shield's latest state."""

    def __init__(self, audits: dict[str, SafetyAudit], specs: list[ShieldSpec]) -> None:
        import rclpy
        from rclpy.executors import MultiThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from robokernel_ros.ros.qos import COMMAND_QOS, ESTOP_READER_QOS, STATUS_READER_QOS
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float64MultiArray

        from robokernel_interfaces.msg import ShieldState

        self.audits = audits
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("soak_monitor", context=self.context)
        deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.states: dict[str, ShieldState | None] = {spec.name: None for spec in specs}
        n = self.node
        for spec in specs:
            audit = audits[spec.name]
            n.create_subscription(Float64MultiArray, spec.output_topic,
                                  lambda msg, info, a=audit: self._on_cmd(a, msg, info), deep)  # fmt: skip
            n.create_subscription(ShieldState, f"{NS}/{spec.name}/state",
                                  lambda msg, name=spec.name: self._on_state(name, msg), STATUS_READER_QOS)  # fmt: skip
        n.create_subscription(JointState, "/joint_states", self._on_js, deep)
        n.create_subscription(Bool, f"{NS}/estop", self._on_estop, ESTOP_READER_QOS)
        # A second command source (teleop, another node) for the e-stop phases: every
        # command it sends then must be refused, and the audit judges what comes out.
        self.specs = specs
        self.measured: dict[str, float] = {}
        self.last_js_ns = 0  # the latest /joint_states source time received
        self._rogue_pubs = {
            spec.name: n.create_publisher(
                Float64MultiArray, f"{NS}/{spec.name}/commands", COMMAND_QOS
            )
            for spec in specs
        }
        self.rogue_sent = 0
        self._clients: dict[str, Any] = {}
        self.executor = MultiThreadedExecutor(num_threads=2, context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self.spin_error: BaseException | None = None
        self._thread = threading.Thread(target=self._spin, name="soak_monitor", daemon=True)
        self._thread.start()

    @staticmethod
    def _t(info: Any) -> int:
        return int(info.get("source_timestamp") or time.time_ns())

    def _on_cmd(self, audit: SafetyAudit, msg: Any, info: Any) -> None:
        from robokernel_ros.ros.transport import sender_of

        audit.command(self._t(info), sender_of(info), list(msg.data))

    def _on_js(self, msg: Any, info: Any) -> None:
        self.measured.update(zip(msg.name, msg.position, strict=False))
        self.last_js_ns = max(self.last_js_ns, self._t(info))
        for audit in self.audits.values():
            audit.joint_state(self._t(info), list(msg.name), list(msg.position))

    def _on_estop(self, msg: Any, info: Any) -> None:
        for audit in self.audits.values():
            audit.estop(self._t(info), bool(msg.data))

    def _on_state(self, name: str, msg: Any) -> None:
        t = msg.stamp.sec * 1_000_000_000 + msg.stamp.nanosec
        self.audits[name].shield_state(t, bool(msg.estop_latched), int(msg.passed + msg.clipped))
        self.states[name] = msg

    def _spin(self) -> None:
        try:
            while not self._stop.is_set():
                self.executor.spin_once(timeout_sec=0.05)
        except BaseException as exc:  # noqa: BLE001 - surfaced by close() as a failure
            self.spin_error = exc

    def rogue(self, until: threading.Event, period_s: float = 0.02) -> None:
        """Publish to every shield's input, 0.02 rad off the measured position, every
        period until `until` is set (the caller's thread)."""
        from std_msgs.msg import Float64MultiArray

        while not until.wait(period_s):
            for spec in self.specs:
                if all(j in self.measured for j in spec.joints):
                    values = [float(self.measured[j]) + 0.02 for j in spec.joints]
                    self._rogue_pubs[spec.name].publish(Float64MultiArray(data=values))
                    self.rogue_sent += 1

    def call(self, srv_type: Any, name: str, request: Any = None, timeout_s: float = 10.0) -> Any:
        """The service's answer, or None when it is not there or did not answer."""
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = self.node.create_client(srv_type, name)
        if not client.wait_for_service(timeout_sec=min(timeout_s, 5.0)):
            return None
        done = threading.Event()
        future = client.call_async(request if request is not None else srv_type.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            future.cancel()
            return None
        return future.result()

    def trigger(self, name: str, timeout_s: float = 10.0) -> tuple[bool, str]:
        from std_srvs.srv import Trigger

        reply = self.call(Trigger, name, timeout_s=timeout_s)
        return (False, "no answer") if reply is None else (bool(reply.success), reply.message)

    def transition(self, node: str, label: str) -> bool:
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        ids = {
            "deactivate": Transition.TRANSITION_DEACTIVATE,
            "activate": Transition.TRANSITION_ACTIVATE,
        }
        reply = self.call(ChangeState, f"{NS}/{node}/change_state",
                          ChangeState.Request(transition=Transition(id=ids[label])))  # fmt: skip
        return bool(reply and reply.success)

    def close(self) -> None:
        import rclpy

        self._stop.set()
        self._thread.join(timeout=10)
        alive = self._thread.is_alive()
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self.context.destroy()
        if alive:
            raise RuntimeError("the monitor's spin thread did not stop within 10 s")
        if self.spin_error is not None:
            raise RuntimeError(f"the monitor's spin thread died: {self.spin_error!r}")


# --- the soak -----------------------------------------------------------------------------


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        from robokernel_ros.safety.limits import load_limits_file

        self.args = args
        self.work = work
        self.trace_dir = work / "runs"
        self.recorded_dir = work / "recorded"
        self.nodes = workcell_graph(trace_dir=str(self.trace_dir))
        self.nodes.append(NodeProcess("bag_recorder", "bag_recorder", ["bag_recorder_so101.yaml"],
                                      {"trace_dir": str(self.recorded_dir), "namespace": NS}))  # fmt: skip
        self.specs = shield_specs(self.nodes)
        self.audits: dict[str, SafetyAudit] = {}
        for spec in self.specs:
            limits = load_limits_file(spec.limits_file or config_dir() / "joint_limits_so101.yaml")
            bounds = [(limits[j].min_position, limits[j].max_position) if j in limits else (None, None)
                      for j in spec.joints]  # fmt: skip
            self.audits[spec.name] = SafetyAudit(
                spec.joints, bounds, spec.estop_timeout_s, args.grace_s
            )
        shields = tuple(spec.name for spec in self.specs)
        self.killable = (*KILLABLE, *shields)
        self.lifecycle = (*LIFECYCLE, *shields)
        self.rng = random.Random(args.seed)
        self.stop = threading.Event()
        self.chaos = threading.Event()  # set: the schedule runs
        self.results: list[dict[str, Any]] = []  # one per eval call
        self.actions: list[dict[str, Any]] = []
        self.failures: list[str] = []  # recoveries that did not come back
        self.samples: dict[int, list[tuple[float, dict[str, float]]]] = collections.defaultdict(
            list
        )
        self.phase_marks: dict[str, float] = {}
        self.thread_errors: list[str] = []
        self.fault_lock = threading.Lock()  # a fault and its recovery, or an operator's clear
        self.unprovoked: list[dict[str, Any]] = []  # latches nobody pressed, cleared
        self.recover_detail = ""  # the last failed recovery's view of the graph
        self._open_faults: list[tuple[int, str]] = []  # (start, cause) until a clear_fault
        self._rogue: tuple[threading.Event, threading.Thread] | None = None
        # A restarted sim robot's start (ns): the recovery waits for a joint state it
        # published. The shields keep their last joint state and say active while it
        # starts (10-25 s under load), so without this the schedule went on and the
        # episodes meanwhile ended "no joint state ... (the stream stopped)", charged to
        # the next faults.
        self._robot_restarted = 0
        self.fresh_clients: dict[str, int] = {}  # get_state clients replaced (_wait_active)
        self.cut_off: list[str] = []  # recoveries the end of the run cut short (> 10 s in)
        self.unanswered: set[str] = set()  # nodes whose get_state had no answer in a recovery
        self.respawned: list[str] = []  # alive nodes that answered nobody, restarted

    # ---- threads

    def _guard(self, target: Any) -> Any:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # noqa: BLE001 - reported as a failed verdict
                self.thread_errors.append(f"{target.__name__}: {exc!r}")
                self.stop.set()

        return threading.Thread(target=run, name=target.__name__, daemon=True)

    def drive(self) -> None:
        """eval_policy back to back; a refused call (latched, a node down) waits a little.
        A call that does not return within its episodes' time + 60 s (a runner that died
        under its goal: the action client waits for ever) fails the soak."""
        k = 0
        while not self.stop.is_set():
            k += 1
            t0 = time.monotonic()
            chaos_at_start = self.chaos.is_set()
            box: dict[str, Any] = {}

            def call(seed: int = k, box: dict[str, Any] = box) -> None:
                try:
                    box["result"] = self.client.eval_policy(
                        robot_name="arm", policy_provider="remote", n_episodes=2,
                        max_steps=self.args.max_steps, seed=seed, async_rtc=True,
                    )  # fmt: skip
                except Exception as exc:  # noqa: BLE001 - recorded below
                    box["error"] = exc

            th = threading.Thread(target=call, name="eval_call", daemon=True)
            th.start()
            th.join(2 * self.args.max_steps / 50.0 + 60.0)
            if th.is_alive():
                self.failures.append(f"eval_policy call {k} did not return within "
                                     f"{2 * self.args.max_steps / 50.0 + 60.0:.0f} s")  # fmt: skip
                self.stop.set()
                return
            # an anchor call started and ended before the first fault
            chaos = chaos_at_start or self.chaos.is_set()
            if "error" in box:
                self.results.append({"t": t0, "chaos": chaos, "ok": False,
                                     "message": repr(box["error"]), "episodes": []})  # fmt: skip
                self.stop.wait(1.0)
                continue
            result = box["result"]
            self.results.append({
                "t": t0, "chaos": chaos, "ok": result.ok,
                "message": result.message.splitlines()[0] if result.message else "",
                "episodes": result.report.get("episodes", []), "dt": time.monotonic() - t0,
            })  # fmt: skip
            if not result.report.get("episodes"):
                self._unprovoked(result.message or "", chaos)
                self.stop.wait(0.5)

    def _unprovoked(self, message: str, chaos: bool) -> None:
        """A call refused on a latched e-stop while no fault of the schedule is under
        way: a latch nobody pressed (the runner or a shield heard its source silent
        for estop_timeout_s: a loaded machine). The operator clears it, as a person
        would, and it is counted (fail-closed, not a violation)."""
        if "latched" not in message and "estopped" not in message:
            return
        if self.stop.is_set() or not self.fault_lock.acquire(blocking=False):
            return  # a fault and its recovery are under way (the schedule clears), or the end
        try:
            if self.stop.is_set():
                return
            self.unprovoked.append({"t": round(time.monotonic() - self.phase_marks["start"], 2),
                                    "chaos": chaos, "message": message[:160], "wall": round(time.time(), 3)})  # fmt: skip
            if not self._recover(timeout_s=30.0):
                self.failures.append(f"a latch nobody pressed was not cleared: {message[:160]}: "
                                     f"{self.recover_detail}")  # fmt: skip
                self.stop.set()
        finally:
            self.fault_lock.release()

    def audit_loop(self) -> None:
        while not self.stop.wait(0.5):
            for audit in self.audits.values():  # what was sent before both watermarks is in
                audit.advance(min(time.time_ns() - 1_000_000_000, audit.watermark()))

    def sample_loop(self) -> None:
        while not self.stop.wait(SAMPLE_PERIOD_S):
            now = time.monotonic()
            for proc in list(self.graph.current.values()):
                s = proc_sample(proc.pid)
                if s is not None and proc.poll() is None:
                    self.samples[proc.pid].append((now, s))

    def faults(self) -> list[tuple[str, str]]:
        """Every fault once, in the seed's order: the e-stop, stop and cancel, each
        lifecycle flip and each kill, kills first (the source lost, a shield restarted)
        so that a short soak has them too."""
        kills = [("kill", n) for n in self.killable]
        rest = [("estop", ""), ("stop", ""), ("cancel", "")] + [
            ("deactivate", n) for n in self.lifecycle
        ]
        self.rng.shuffle(kills)
        self.rng.shuffle(rest)
        deck = []
        while kills or rest:  # interleaved: a kill, then another fault
            deck += [kills.pop()] if kills else []
            deck += [rest.pop()] if rest else []
        return deck

    def schedule(self) -> None:
        self.chaos.wait()
        end = self.phase_marks["end"]
        deck: list[tuple[str, str]] = []
        gap = (1.5, 4.0) if self.args.quick else (2.0, 6.0)
        while not self.stop.is_set() and time.monotonic() < end - 8:
            self.stop.wait(self.rng.uniform(*gap))
            if self.stop.is_set() or time.monotonic() >= end - 8:
                return
            deck = deck or self.faults()
            kind, target = deck.pop(0)
            with self.fault_lock:
                t0, wall = time.monotonic(), time.time()
                detail = getattr(self, f"_do_{kind}")(target)
                recovered = self._recover()
            self.actions.append({"kind": kind, "target": target, "t": round(t0 - self.phase_marks["chaos"], 2),
                                 "detail": detail, "recovery_s": round(time.monotonic() - t0, 2),
                                 "recovered": recovered, "wall": round(wall, 3),
                                 "wall_end": round(time.time(), 3)})  # fmt: skip
            if self.stop.is_set() and time.monotonic() - t0 > 10.0:
                # the end of the run cut this recovery short: not a failure (its 90 s had
                # not passed), but said, with what the graph said then
                self.cut_off.append(f"{kind} {target}: recovering for {time.monotonic() - t0:.0f} s "
                                    f"when the run ended: {self.recover_detail}")  # fmt: skip
            if not recovered:
                self.failures.append(f"{kind} {target}: the graph did not come back ({detail}): "
                                     f"{self.recover_detail}")  # fmt: skip
                self.stop.set()
                return

    # ---- faults

    def _unknown_start(self, timeout_s: float = 120.0, rogue_s: float = 2.0) -> None:
        """The graph's start without its panel: once every shield has heard the robot
        (it can hold), a second source commands them for `rogue_s` while the e-stop is
        unknown (judged with no grace); then the panel starts."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if all(s is not None and s.have_joint_state for s in self.monitor.states.values()):
                break
            self.stop.wait(0.2)
        else:
            self.failures.append(
                f"no shield state with joint states within {timeout_s:g} s of the start"
            )
        self._rogue_start()
        self.stop.wait(rogue_s)
        self._faults_end(time.time_ns())
        self.graph.start("estop_panel")

    def _rogue_start(self) -> None:
        """A second command source sends until `_faults_end` (a thread of its own)."""
        if self._rogue is None:
            done = threading.Event()
            th = threading.Thread(target=self.monitor.rogue, args=(done,), name="rogue", daemon=True)  # fmt: skip
            th.start()
            self._rogue = (done, th)

    def _fault(self, start: int, end: int | None, cause: str) -> None:
        for audit in self.audits.values():
            audit.fault(start, end, cause)
        if end is None:
            self._open_faults.append((start, cause))
        else:
            self._open_faults.remove((start, cause))

    def _faults_end(self, t: int) -> None:
        """The operator asks to clear (`clear_fault`) at `t`: until then a latched
        e-stop lets nothing pass, whatever the panel says (the intervals end here), and
        the second command source stops."""
        for start, cause in list(self._open_faults):
            self._fault(start, t, cause)
        if self._rogue is not None:
            done, th = self._rogue
            done.set()
            th.join(timeout=5)
            self._rogue = None

    def _do_estop(self, _: str) -> str:
        t0 = time.time_ns()
        ok, msg = self.monitor.trigger(f"{NS}/estop_panel/press")
        if ok:  # pressed until the operator's clear_fault (_recover), the release included
            self._fault(t0, None, "pressed")
        self._rogue_start()
        self.stop.wait(self.rng.uniform(0.5, 3.0))
        ok2, msg2 = self.monitor.trigger(f"{NS}/estop_panel/release")
        return f"press {ok}, release {ok2}"

    def _do_stop(self, _: str) -> str:
        r = self.client.stop_policy("arm")
        return f"stop_policy ok={r.ok}"

    def _do_cancel(self, _: str) -> str:
        return f"cancelled {self.client.cancel()} goal(s)"

    def _do_deactivate(self, node: str) -> str:
        off = self.monitor.transition(node, "deactivate")
        self.stop.wait(self.rng.uniform(0.5, 2.0))
        on = self.monitor.transition(node, "activate")
        return f"deactivate {off}, activate {on}"

    def _do_kill(self, node: str) -> str:
        self.graph.kill(node)
        if node in self.monitor.states:  # its last state is no word on the new process
            self.monitor.states[node] = None
        t0 = time.time_ns()
        pause = self.rng.uniform(1.0, 3.0)
        if node == "estop_panel":  # the source lost: nothing may pass after its timeout
            lost = t0 + int(self.specs[0].estop_timeout_s * 1e9)
            self._fault(lost, None, "source lost")
            self._rogue_start()
            self.stop.wait(pause)
            restart = time.time_ns()
            self._fault(lost, restart, "source lost")
            # a new panel: not known until it proved itself and the operator cleared
            self._fault(restart, None, "unknown")
        else:
            self.stop.wait(pause)
        self.graph.start(node)
        if node == "sim_robot":  # back once its joint states reach the monitor again
            self._robot_restarted = time.time_ns()
        return "SIGKILL, restarted"

    def _wait_active(self, name: str, deadline: float, ask_s: float = 30.0) -> None:
        """Until `name` says it is active (its get_state; RuntimeError at the deadline).
        A get_state client that has had no answer for `ask_s` is replaced by a new one
        (new DDS endpoints, matched anew), and counted: twice in 15 quick soaks the
        runner, active 6 s after its start by its log, never answered the monitor's
        first client in 180 s (the other services of the graph did)."""
        from robokernel_ros.ros.lifecycle import ACTIVE, LifecyclePeer, wait_active

        target = f"{NS}/{name}"
        try:
            wait_active(
                self.monitor.node,
                target,
                timeout_s=min(ask_s, max(1.0, deadline - time.monotonic())),
            )
            return
        except RuntimeError as exc:
            if "no answer" not in str(exc) or time.monotonic() >= deadline:
                raise
        respawned = False
        while True:  # a client that got no answer: ask with a new one (never destroyed:
            # destroying a client while the monitor's executor spins races its wait set)
            self.fresh_clients[name] = self.fresh_clients.get(name, 0) + 1
            peer = LifecyclePeer(self.monitor.node, target)
            try:
                peer.wait_for(
                    ACTIVE, min(ask_s, max(1.0, deadline - time.monotonic())), patient=True
                )
                return
            except RuntimeError as exc:
                if (
                    "no answer" not in str(exc)
                    or time.monotonic() >= deadline
                    or self.stop.is_set()
                ):
                    raise
            if not respawned:  # two clients, no answer: the operator's (launch's) respawn
                respawned = True
                self._respawn_unanswering(name, 2 * ask_s)

    def _respawn_unanswering(self, name: str, silent_s: float) -> None:
        """What a supervisor (launch's respawn, systemd) does with a node that is alive but
        answers nobody: SIGABRT (PYTHONFAULTHANDLER writes every thread's stack to its log,
        kept as logs/<name>.<pid>.abort.log), then start it again. Counted and listed in
        the result (`respawned`): twice in 20 two-minute soaks at load 4-30 a node (the
        runner at the graph's start, a restarted policy server) answered no get_state for
        180 s; the cause is not known, so each respawn is reported, not hidden."""
        proc = self.graph.current.get(name)
        if proc is None or proc.poll() is not None:
            return
        log = self.work / "logs" / f"{name}.log"
        try:
            os.killpg(proc.pid, signal.SIGABRT)
            proc.wait(timeout=10.0)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            self.graph.kill(name)
        kept = self.work / "logs" / f"{name}.{proc.pid}.abort.log"
        if log.exists():
            kept.write_text(log.read_text(errors="replace")[-20000:])
        if name in self.monitor.states:
            self.monitor.states[name] = None
        self.graph.start(name)
        self.respawned.append(
            f"{name} (pid {proc.pid}) answered no get_state for {silent_s:.0f} s: "
            f"SIGABRT (stacks in logs/{kept.name}), started again"
        )

    def _recover(self, timeout_s: float = 90.0) -> bool:
        """Released, the fault cleared and the shield forwarding again, the policy server
        and the runner active; False after timeout_s."""
        deadline = time.monotonic() + timeout_s
        cleared = "not called"
        self.unanswered = set()  # this recovery's
        for name in self.graph.dead() if not self.stop.is_set() else []:
            code = self.graph.current[name].returncode
            self.graph.start(name)  # a node that died by itself (its log says why)
            self.failures.append(f"{name} exited by itself (status {code}; logs/{name}.log)")
        not_active = []
        for name in ("policy_server", "runner"):
            try:
                self._wait_active(name, deadline)
            except RuntimeError as exc:
                not_active.append(str(exc)[:200])
                if "no answer" in str(exc):
                    self.unanswered.add(name)
                self.monitor.transition(name, "activate")
        while time.monotonic() < deadline and not self.stop.is_set():
            states = dict(self.monitor.states)
            if self.monitor.last_js_ns <= self._robot_restarted:
                pass  # the restarted sim robot has not published yet
            elif all(
                s is not None and s.state == "active" and not s.estop_latched
                for s in states.values()
            ):
                # the runner's own latch (not in any state it publishes): its clear_fault
                # answers ok when the runner and every shield it commands are clear
                self._faults_end(time.time_ns())
                ok, cleared = self.monitor.trigger(f"{NS}/clear_fault", timeout_s=5.0)
                if ok:
                    return True
            elif any(s is not None and s.estop_latched for s in states.values()):
                self._faults_end(time.time_ns())
                ok, cleared = self.monitor.trigger(f"{NS}/clear_fault", timeout_s=5.0)
            for name, s in states.items():
                if s is not None and s.state == "inactive":
                    self.monitor.transition(name, "activate")
            self.stop.wait(0.2)
        # what the graph said last (for the failure's line)
        self.recover_detail = "; ".join(
            f"{n}: {'no state since its start' if s is None else f'{s.state} {s.reason}'[:160]}"
            for n, s in self.monitor.states.items()
        ) + f"; clear_fault: {cleared[:160]}" + "".join(f"; {x}" for x in not_active)  # fmt: skip
        if self.monitor.last_js_ns <= self._robot_restarted:
            self.recover_detail += "; no joint state from the restarted sim robot"
        shm = _shm_errors(self.work / "logs")  # Fast DDS's own word on a port it could not open
        if shm:
            self.recover_detail += "; Fast DDS SHM errors: " + " | ".join(shm[-3:])
        return self.stop.is_set() and not self.failures  # cut short by the end (schedule)

    def _dump_unanswered(self) -> None:
        """Before the graph stops: a node that answered no get_state in a recovery that
        failed or that the end cut short gets SIGABRT, so that its log ends with where
        each of its threads was (PYTHONFAULTHANDLER=1 is in every node's environment)."""
        if not (self.failures or self.cut_off):
            return
        for name in sorted(self.unanswered):
            proc = self.graph.current.get(name)
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGABRT)
                try:
                    proc.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    pass
                self.cut_off.append(
                    f"{name} answered no get_state: SIGABRT, its stacks in logs/{name}.log"
                )

    # ---- run

    def run(self) -> int:
        from robokernel_ros.ros.client import WorkcellClient

        args = self.args
        # What the report reads, imported now: a tree edited during a 30-minute soak (a
        # shared checkout) once broke the report's import at the end, and the run was lost.
        import robokernel_ros.kernel  # noqa: F401
        import robokernel_ros.scoring  # noqa: F401

        self.monitor = Monitor(self.audits, self.specs)
        traced = {name: self.work / "tracemalloc" / name for name in args.tracemalloc}
        # The e-stop unknown first: no panel yet, while a second source commands the shields
        t_unknown = time.time_ns()
        self._fault(t_unknown, None, "unknown")
        self.graph = Graph(self.nodes, self.work / "logs", {"PYTHONFAULTHANDLER": "1"}, traced,
                           later=("estop_panel",))  # fmt: skip
        self.client = WorkcellClient(NS, server_timeout_s=60.0)
        threads: list[threading.Thread] = []
        try:
            self._unknown_start()
            self.client.wait_until_ready(120.0)
            # The graph ready before the anchor: every shield forwards, the runner's and the
            # shields' e-stops are clear (a loaded start can latch one on a silent source)
            if not self._recover(timeout_s=180.0):
                self.failures.append(
                    f"the graph was not ready within 180 s of its start: {self.recover_detail}"
                )
                self.stop.set()
            t = time.monotonic()
            self.phase_marks.update(start=t)
            threads = [
                self._guard(f)
                for f in (self.drive, self.audit_loop, self.sample_loop, self.schedule)
            ]
            for th in threads:
                th.start()
            print(f"soak: graph up; anchor {args.anchor_s:g} s, then chaos until {args.minutes:g} min "
                  f"(seed {args.seed}); work dir {self.work}", flush=True)  # fmt: skip
            # The anchor lasts anchor_s and until one call with episodes has returned
            # (its first call may take long on a loaded machine), at most 90 s more.
            self.stop.wait(args.anchor_s)
            while not self.stop.is_set() and time.monotonic() < t + args.anchor_s + 90.0:
                if any(r["episodes"] and not r["chaos"] for r in list(self.results)):
                    break
                self.stop.wait(0.2)
            now = time.monotonic()
            self.phase_marks.update(chaos=now, end=now + args.minutes * 60 - args.anchor_s)
            self.chaos.set()
            self.stop.wait(max(0.0, self.phase_marks["end"] - time.monotonic()))
        finally:
            self.stop.set()
            self._faults_end(time.time_ns())
            now = time.monotonic()
            for mark in ("start", "chaos", "end"):
                self.phase_marks.setdefault(mark, now)
            self.chaos.set()
            try:
                self.client.cancel()
            except Exception as exc:  # noqa: BLE001 - the client may be mid-failure
                self.thread_errors.append(f"final cancel: {exc!r}")
            for th in threads:
                th.join(timeout=120)
                if th.is_alive():
                    self.thread_errors.append(f"thread {th.name} did not stop within 120 s")
            self.client.close()
            time.sleep(3.5)  # the last samples' 3 s of audit lag
            for audit in self.audits.values():
                audit.advance(time.time_ns())
                audit.finish()
            self._dump_unanswered()
            killed, left = self.graph.stop()
            try:
                self.monitor.close()
            except RuntimeError as exc:
                self.thread_errors.append(str(exc))
        return self.report(killed, left)

    # ---- report

    def check_episodes(self) -> dict[str, Any]:
        """Every run directory: an outcome, a trace, the runner's bag and the recorder's
        bag load and score, with the same events."""
        from robokernel_ros.kernel import load_trace
        from robokernel_ros.scoring import score_trace

        outcomes: collections.Counter[str] = collections.Counter()
        problems: list[str] = []
        runs = sorted(p for p in self.trace_dir.iterdir() if (p / "events.jsonl").is_file()) \
            if self.trace_dir.is_dir() else []  # fmt: skip
        recorded = 0
        bag_gaps: collections.Counter[str] = collections.Counter()
        holds: dict[bool, list[int]] = {False: [], True: []}
        errors: list[dict[str, Any]] = []
        in_chaos = {Path(str(ep.get("trace_path", ""))).name: bool(r.get("chaos"))
                    for r in self.results for ep in r["episodes"]}  # fmt: skip
        for run in runs:
            try:
                trace = load_trace(run)
                outcome = trace.meta.get("outcome")
                if not trace.of_kind("episode.end") or not outcome:
                    problems.append(f"{run.name}: no episode.end / outcome")
                    continue
                outcomes[str(outcome)] += 1
                if outcome in ("error", "env_error"):
                    errors.append(self._error_cause(run.name, trace))
                bag = load_trace(run / "bag")
                if bag.meta.get("outcome") != outcome or not bag.of_kind("episode.end"):
                    problems.append(f"{run.name}: the runner's bag says {bag.meta.get('outcome')}")
                missing = collections.Counter(e.kind for e in trace.events) - collections.Counter(
                    e.kind for e in bag.events
                )
                if missing:  # reported: kinds the bag mirror does not carry
                    bag_gaps.update(missing)
                shields = (trace.meta.get("shield") or {}).get("shields") or {}
                negative = {f"{n}.{k}": v for n, c in shields.items() for k, v in c.items()
                            if isinstance(v, int) and not isinstance(v, bool) and v < 0}  # fmt: skip
                if negative:  # a shield restarted in the episode counts from 0 again
                    problems.append(f"{run.name}: negative shield counts {negative}")
                score = score_trace(trace)
                if "success" not in score:
                    problems.append(f"{run.name}: the scorers gave no success ({sorted(score)})")
                holds[in_chaos.get(run.name, True)].append(
                    sum(1 for e in trace.of_kind("action") if e.data.get("hold"))
                )
                rec = self.recorded_dir / run.name / "bag"
                if rec.is_dir():
                    rec_trace = load_trace(rec)
                    score_trace(rec_trace)
                    recorded += 1
                    if rec_trace.meta.get("outcome") != outcome:
                        problems.append(
                            f"{run.name}: the recorder's bag says {rec_trace.meta.get('outcome')}"
                        )
            except Exception as exc:  # noqa: BLE001 - an unreadable episode is the finding
                problems.append(f"{run.name}: {exc!r}"[:300])
        return {"runs": len(runs), "outcomes": dict(outcomes), "recorder_bags": recorded,
                "trace_kinds_not_in_bag": dict(bag_gaps),
                "problems": problems, "holds": holds, "errors": errors}  # fmt: skip

    def _error_cause(self, run: str, trace: Any) -> dict[str, Any]:
        """An episode that ended in an error: its status and the faults under way while it
        ran (by wall clock: from a fault's start to the end of its recovery, 1 s either
        side), the latches nobody pressed included."""
        import datetime

        end = trace.of_kind("episode.end")[-1].data
        status = str(end.get("status") or trace.meta.get("status") or "")
        try:
            start = datetime.datetime.fromisoformat(str(trace.meta.get("started_at"))).timestamp()
        except ValueError:
            start = math.nan
        stop = start + float(end.get("elapsed_s") or 0.0)
        under_way = [
            f"{a['kind']}{':' + a['target'] if a['target'] else ''} {a['wall'] - start:+.1f} s"
            for a in self.actions
            if "wall" in a and a["wall"] - 1.0 <= stop and start <= a["wall_end"] + 1.0
        ] + [
            f"latch nobody pressed {u['wall'] - start:+.1f} s"
            for u in self.unprovoked
            if start - 1.0 <= u.get("wall", -math.inf) <= stop + 1.0
        ]
        return {"run": run, "status": status[:200], "faults": under_way,
                "start_wall": round(start, 3), "elapsed_s": round(stop - start, 2)}  # fmt: skip

    def growth(self) -> dict[str, Any]:
        """Per node: the longest-lived process's slope per hour of each resource."""
        chaos_t, end = self.phase_marks.get("start", 0.0), self.phase_marks.get("end", 0.0)
        span = max(1.0, end - chaos_t)
        out: dict[str, Any] = {}
        for pid, all_samples in self.samples.items():
            name, born = self.graph.started[pid]
            # start-up (imports, the first episode's allocations): the first 15 s of a
            # process and the first tenth of its samples are not fitted
            series = [x for x in all_samples if x[0] - born >= STARTUP_S]
            if len(series) < 5:
                continue
            t_first, t_last = series[0][0], series[-1][0]
            best = out.get(name)
            if best is not None and best["span_s"] >= t_last - t_first:
                continue
            skip = max(1, len(series) // 10)
            fig: dict[str, Any] = {
                "pid": pid,
                "span_s": round(t_last - t_first, 1),
                "samples": len(series),
            }
            for key in FLOORS:
                pts = [(t - t_first, s[key]) for t, s in series[skip:]]
                b, se = slope(pts)
                dur = pts[-1][0] - pts[0][0] if len(pts) > 1 else 0.0
                fig[key] = {"start": round(series[0][1][key], 1), "end": round(series[-1][1][key], 1),
                            "per_h": round(b * 3600, 2), "se_per_h": round(se * 3600, 2) if math.isfinite(se) else None,
                            "fitted": round(b * dur, 2)}  # fmt: skip
                if self.args.quick:
                    fig[key]["grows"] = b * dur > GROSS[key]
                else:  # judged on processes that lived 5 minutes or more
                    fig[key]["grows"] = dur >= 300 and b * dur > max(FLOORS[key], 3 * se * dur)
            fig["whole_run"] = fig["span_s"] >= 0.6 * span
            out[name] = fig
        return out

    def report(self, killed: list[int], left: list[int]) -> int:
        args = self.args
        audits = self.audits
        commands = sum(a.commands for a in audits.values())
        judged = sum(a.judged for a in audits.values())
        holds_judged = sum(a.holds for a in audits.values())
        bracketed = sum(a.bracketed for a in audits.values())
        violations = [{"shield": n, **v} for n, a in audits.items() for v in a.violations]
        lag_ms = max((a.lag_ns / 1e6 for a in audits.values()), default=0.0)
        intervals = {n: dict(a.intervals) for n, a in audits.items()}
        episodes = self.check_episodes()
        growth = self.growth()
        anchor = [r for r in self.results if not r.get("chaos")]
        chaos = [r for r in self.results if r.get("chaos")]
        n_anchor = sum(len(r["episodes"]) for r in anchor)
        anchor_errors = [ep.get("outcome") for r in anchor for ep in r["episodes"]
                         if ep.get("outcome") in ("error", "env_error")]  # fmt: skip
        n_chaos = sum(len(r["episodes"]) for r in chaos)
        chaos_min = max(1e-9, (self.phase_marks["end"] - self.phase_marks["chaos"]) / 60)
        anchor_min = max(1e-9, (self.phase_marks["chaos"] - self.phase_marks["start"]) / 60)
        kinds = collections.Counter(
            f"{x['kind']}{':' + x['target'] if x['target'] else ''}" for x in self.actions
        )
        hold_a, hold_c = episodes["holds"][False], episodes["holds"][True]
        print(f"\nsoak: {args.minutes:g} min, seed {args.seed}, {len(self.actions)} faults: "
              + ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())))  # fmt: skip
        print(f"{'':28}{'anchor (no faults)':>20}{'chaos':>14}")
        print(f"{'episodes / min':28}{n_anchor / anchor_min:>20.1f}{n_chaos / chaos_min:>14.1f}")
        print(f"{'holds / episode (mean)':28}{_mean(hold_a):>20.1f}{_mean(hold_c):>14.1f}")
        for n, a in audits.items():
            print(f"{n}: controller commands {a.commands}; judged in e-stop/latched intervals "
                  f"{a.judged} ({a.holds} holds); intervals {dict(a.intervals)}; violations "
                  f"{len(a.violations)}; latch lag max {a.lag_ns / 1e6:.1f} ms")  # fmt: skip
        print(f"holds matched by the range of the joint states around them (a sample the "
              f"monitor missed): {bracketed}")  # fmt: skip
        late = sum(a.late for a in audits.values())
        print(f"commands that reached the monitor after the audit had judged past their time "
              f"(judged by the schedule's interval at their time): {late}")  # fmt: skip
        print(f"grace {args.grace_s * 1e3:.0f} ms; a second command source sent "
              f"{self.monitor.rogue_sent} commands during e-stop phases")  # fmt: skip
        for g in _groups(violations, _logged_holds(self.work / "logs")):
            print(f"  VIOLATIONS x{g['n']} {g['shield']} {g['cause']} {g['after_ms']} ms in: "
                  f"{g['values']}; first sent {g['first_sent_ms']} ms before; "
                  f"{g['shield_logged_hold'] or 'not a hold the shield logged'}")  # fmt: skip
        print(f"episodes on disk {episodes['runs']} {episodes['outcomes']}; recorder bags "
              f"{episodes['recorder_bags']}; problems {len(episodes['problems'])}")  # fmt: skip
        if episodes["trace_kinds_not_in_bag"]:
            print(
                f"  event kinds of the traces not in the runner's bags: {episodes['trace_kinds_not_in_bag']}"
            )
        for p in episodes["problems"][:10]:
            print(f"  PROBLEM {p}")
        by_cause = _error_table(episodes["errors"])
        print(f"error outcomes by cause and the fault under way ({len(episodes['errors'])}):")
        for row in by_cause:
            print(f"  x{row['n']:<3} {row['cause']}  <-  {row['fault']}")
        print(
            f"{'node':16}{'span s':>8}  {'RSS MiB start->end (per h)':>30}  {'threads':>16}  {'fds':>16}"
        )
        for name, g in sorted(growth.items()):
            r, th, fd = g["rss_mib"], g["threads"], g["fds"]
            print(f"{name:16}{g['span_s']:>8.0f}  {r['start']:>8.1f} -> {r['end']:>6.1f} ({r['per_h']:+8.1f})"
                  f"  {th['start']:>4.0f}->{th['end']:<3.0f}({th['per_h']:+6.1f})"
                  f"  {fd['start']:>4.0f}->{fd['end']:<3.0f}({fd['per_h']:+6.1f})"
                  + ("  GROWS" if any(g[k]["grows"] for k in FLOORS) else ""))  # fmt: skip
        calls = collections.Counter(r["message"][:120] for r in self.results if not r["episodes"])
        print(
            f"eval calls {len(self.results)}, with episodes {sum(1 for r in self.results if r['episodes'])}"
        )
        for message, n in calls.most_common(5):
            print(f"  no episodes x{n}: {message}")
        latches = collections.Counter(
            ("chaos" if u["chaos"] else "anchor", u["message"][:100]) for u in self.unprovoked
        )
        print(f"latches nobody pressed (a source heard silent under load; cleared by the "
              f"operator): {len(self.unprovoked)}")  # fmt: skip
        for (phase, message), n in latches.most_common(5):
            print(f"  {phase} x{n}: {message}")
        if self.fresh_clients:
            print(
                f"get_state clients replaced after {30:g} s without an answer: {self.fresh_clients}"
            )
        for r in self.respawned:
            print(f"  RESPAWNED {r}")
        for f in self.failures + self.thread_errors:
            print(f"  FAILURE {f}")
        for c in self.cut_off:
            print(f"  CUT OFF {c}")
        if (
            self.failures or self.thread_errors or self.cut_off
        ):  # the nodes' last words (a test's dir goes)
            for log in sorted((self.work / "logs").glob("*.log")):
                lines = log.read_text(errors="replace").splitlines()[
                    -(40 if log.stem in self.unanswered else 4) :
                ]
                print(f"  --- {log.name}: " + "\n      ".join(x[:220] for x in lines))
        grows = sorted(n for n, g in growth.items() if any(g[k]["grows"] for k in FLOORS))
        heaps = {n: tracemalloc_diff(self.work / "tracemalloc" / n) for n in args.tracemalloc}
        for name, h in heaps.items():
            if not h:
                print(f"{name}: no tracemalloc snapshot")
                continue
            print(f"{name} Python heap (tracemalloc, {h['snapshots']} snapshots): "
                  f"{h['traced_mib'][0][1]} -> {h['traced_mib'][-1][1]} MiB, {h['traced_per_h_mib']:+.2f} MiB/h; "
                  f"{h['from_s']:.0f} s -> {h['to_s']:.0f} s grew {h['growth_mib']:+.3f} MiB, most at:")  # fmt: skip
            for d in h["top"][:8]:
                print(
                    f"  {d['kib']:+9.1f} KiB {d['count']:+6d} blocks  {' <- '.join(d['where'][:3])}"
                )
        verdicts = {
            "zero_violations": not violations,
            "audit_saw_commands": all(a.commands > 0 and a.judged > 0 for a in audits.values()),
            "every_episode_complete": episodes["runs"] > 0 and not episodes["problems"],
            # the graph works before the faults: no anchor episode ends in an error
            "anchor_episodes_without_error": n_anchor > 0 and not anchor_errors,
            "episodes_under_chaos": n_chaos > 0,
            "graph_recovered_every_fault": not self.failures and not self.thread_errors,
            "no_growth_beyond_noise" if not args.quick else "no_gross_growth": not grows,
            "processes_stopped": not left,
        }
        result = {
            "bench": "soak", "minutes": args.minutes, "seed": args.seed, "quick": args.quick,
            "faults": dict(kinds), "fault_log": self.actions, "commands": commands, "judged": judged,
            "holds_judged": holds_judged, "holds_bracketed": bracketed, "late_commands": late, "rogue_commands_sent": self.monitor.rogue_sent, "intervals": intervals, "violations": violations[:20],
            "violation_groups": _groups(violations, _logged_holds(self.work / "logs")),
            "n_violations": len(violations), "latch_lag_max_ms": round(lag_ms, 1),
            "grace_ms": args.grace_s * 1e3, "episodes_anchor": n_anchor, "episodes_chaos": n_chaos,
            "episodes_per_min": {"anchor": round(n_anchor / anchor_min, 2), "chaos": round(n_chaos / chaos_min, 2)},
            "holds_per_episode": {"anchor": _mean(hold_a), "chaos": _mean(hold_c)},
            "episodes_on_disk": episodes["runs"], "outcomes": episodes["outcomes"],
            "recorder_bags": episodes["recorder_bags"], "trace_kinds_not_in_bag": episodes["trace_kinds_not_in_bag"], "episode_problems": episodes["problems"][:20],
            "errors_by_cause": by_cause, "errors": episodes["errors"][:200],
            "shm_errors": _shm_errors(self.work / "logs")[:50], "fresh_get_state_clients": self.fresh_clients, "respawned": self.respawned, "recoveries_cut_off": self.cut_off,
            "eval_calls": len(self.results), "calls_without_episodes": dict(calls.most_common(5)),
            "unprovoked_latches": len(self.unprovoked), "unprovoked_log": self.unprovoked[:50],
            "anchor_s": round(self.phase_marks["chaos"] - self.phase_marks["start"], 1),
            "growth": growth, "growing": grows, "tracemalloc": heaps, "failures": self.failures + self.thread_errors,
            "sigkilled_at_stop": len(killed), "work_dir": str(self.work), "verdicts": verdicts,
        }  # fmt: skip
        print(json.dumps(result))
        (self.work / "result.json").write_text(json.dumps(result, indent=1))
        return 0 if all(verdicts.values()) else 1


def _logged_holds(logs: Path) -> dict[tuple[str, tuple[float, ...]], str]:
    """(shield, values) -> its log line, for every hold a shield logged at a latch
    ("e-stop latched by ...; holding at [...] (the joint state stamped ...)", values in
    repr: exact)."""
    import ast

    found: dict[tuple[str, tuple[float, ...]], str] = {}
    for log in logs.glob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            at = line.find("; holding at [")
            if at < 0:
                continue
            end = line.find("]", at)
            try:
                values = tuple(float(x) for x in ast.literal_eval(line[at + 13 : end + 1]))
            except (ValueError, SyntaxError):
                continue
            found[(log.stem, values)] = line[:240]
    return found


def _groups(
    violations: list[dict[str, Any]],
    logged: dict[tuple[str, tuple[float, ...]], str] | None = None,
) -> list[dict[str, Any]]:
    """Every violation, grouped by shield, cause and values (one frozen value repeated
    reads as one group). `logged`: the holds the shields logged at their latches; a group
    whose values are exactly one of them carries that line (`shield_logged_hold`): the
    shield's own word that it sent its hold; still counted as a violation (the monitor
    could not show it was a measured position)."""
    groups: dict[tuple, dict[str, Any]] = {}
    logged = logged or {}
    for v in violations:
        key = (v["shield"], v["cause"], tuple(round(x, 6) for x in v["values"]))
        g = groups.setdefault(key, {"shield": v["shield"], "cause": v["cause"], "values": v["values"],
                                    "n": 0, "first_t_ns": v["t_ns"], "after_ms": [v["after_ms"], v["after_ms"]],
                                    "shield_logged_hold": logged.get((v["shield"], tuple(v["values"])), ""),
                                    "first_sent_ms": v.get("first_sent_ms"),
                                    "measured_around_first": v.get("measured_around_first")})  # fmt: skip
        g["n"] += 1
        g["after_ms"] = [min(g["after_ms"][0], v["after_ms"]), max(g["after_ms"][1], v["after_ms"])]
    return list(groups.values())


def _shm_errors(logs: Path) -> list[str]:
    """Fast DDS's shared-memory transport errors in the nodes' logs ('<node>: <line>'),
    e.g. "Failed init_port fastdds_port<N>: open_and_lock_file failed" (another live
    process holds that port; Fast DDS then tries the next one: evidence, not a fault)."""
    found = []
    for log in sorted(logs.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if "RTPS_TRANSPORT_SHM" in line:
                found.append(f"{log.stem}: {line.strip()[:200]}")
    return found


def _error_table(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Error outcomes counted by cause (the status's exception and its first words) and
    the kind of the first fault under way ('none' when none was)."""
    import re

    rows: collections.Counter[tuple[str, str]] = collections.Counter()
    for e in errors:
        status = re.sub(r"\d+(\.\d+)?", "N", e["status"].split("error: ", 1)[-1])[:90]
        fault = e["faults"][0].rsplit(" ", 2)[0] if e["faults"] else "none"
        rows[(status, fault)] += 1
    return [{"cause": c, "fault": f, "n": n} for (c, f), n in rows.most_common()]


def _mean(xs: list[int]) -> float:
    return round(sum(xs) / len(xs), 2) if xs else 0.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="whole soak, anchor included (> 0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the fault schedule's seed (>= 0)")
    parser.add_argument(
        "--quick", action="store_true", help="2 minutes, anchor 20 s, gross growth only"
    )
    parser.add_argument(
        "--anchor-s", type=float, default=None, help="quiet phase first (default 120, quick 20)"
    )
    parser.add_argument(
        "--max-steps", type=int, default=150, help="steps per episode at 50 Hz (>= 10)"
    )
    parser.add_argument("--grace-s", type=float, default=0.25,
                        help="delivery time of an e-stop sample not judged, in [0, 2]")  # fmt: skip
    parser.add_argument(
        "--work-dir", default="", help="traces, bags, logs (default: a new temp dir)"
    )
    parser.add_argument("--tracemalloc", default="", metavar="NODES",
                        help="comma-separated nodes (not killed ones: runner, bag_recorder) "
                             "run under tracemalloc; their heap growth's sites are reported")  # fmt: skip
    args = parser.parse_args(argv)
    args.tracemalloc = [n for n in args.tracemalloc.split(",") if n]
    if args.quick and "--minutes" not in (argv if argv is not None else sys.argv[1:]):
        args.minutes = 2.0
    if args.anchor_s is None:
        args.anchor_s = 20.0 if args.quick else 120.0
    checks = [
        ("--minutes", args.minutes, args.minutes > 0, "> 0"),
        ("--seed", args.seed, args.seed >= 0, ">= 0"),
        ("--max-steps", args.max_steps, args.max_steps >= 10, ">= 10"),
        ("--grace-s", args.grace_s, 0 <= args.grace_s <= 2, "in [0, 2]"),
        ("--anchor-s", args.anchor_s, 0 < args.anchor_s < args.minutes * 60 - 20,
         "in (0, minutes * 60 - 20)"),
        ("--tracemalloc", ",".join(args.tracemalloc),
         all(n in ("runner", "bag_recorder") for n in args.tracemalloc),
         "a comma-separated subset of runner,bag_recorder"),
    ]  # fmt: skip
    for flag, value, ok, domain in checks:
        if not ok:
            parser.exit(2, f"soak.py: {flag}={value}: must be {domain}\n")
    return args


def free_domain(rng: random.Random) -> int:
    """A ROS_DOMAIN_ID on which no node is seen for 1.5 s, from 102..232: the test runs,
    demos and benches of this machine take theirs from 1..101 (1 + pid % 100), and a
    graph that joined this soak's domain mid-run answered its calls and latched its
    shields (its panel killed by its own test)."""
    import rclpy

    for _ in range(20):
        domain = rng.randint(102, 232)
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain)
        node = rclpy.create_node("soak_probe", context=context)
        try:
            time.sleep(1.5)
            others = [n for n, _ in node.get_node_names_and_namespaces() if n != "soak_probe"]
        finally:
            node.destroy_node()
            rclpy.try_shutdown(context=context)
            context.destroy()
        if not others:
            return domain
    raise RuntimeError("no free ROS_DOMAIN_ID in 102..232 after 20 tries")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: every thread's stack
    os.environ["ROS_DOMAIN_ID"] = str(free_domain(random.Random()))
    use_dds_profile()
    work = (
        Path(args.work_dir).resolve()
        if args.work_dir
        else Path(tempfile.mkdtemp(prefix="rk_soak_"))
    )
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"soak: ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']} (free), pid {os.getpid()}", flush=True
    )
    return Soak(args, work).run()


if __name__ == "__main__":
    sys.exit(main())
