"""The kernel's act thread (one per episode) ends with its episode on every path: a
finished, stopped or failed episode, an act() past act_timeout_s, a sentry's rotations.
No thread is left waiting for calls after run() returns (issue #37)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from robokernel_ros.kernel import EpisodeRunner, Timing
from robokernel_ros.kernel.toy import PointEnv


class _Agent:
    """Chunks of 4 zero actions; act() can sleep, fail, or hang (1 s) after `hang_after` calls."""

    supports_rtc = False

    def __init__(self, keys: Any, *, sleep_s: float = 0.0, fail: bool = False,
                 hang_after: int | None = None) -> None:  # fmt: skip
        self.keys, self.sleep_s, self.fail, self.hang_after = keys, sleep_s, fail, hang_after
        self.calls = 0
        self.threads: set[threading.Thread] = set()

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        pass

    def act(self, observation: Any, step: int, **kwargs: Any) -> list[dict[str, float]]:
        self.threads.add(threading.current_thread())
        self.calls += 1
        if self.hang_after is not None and self.calls > self.hang_after:
            time.sleep(1.0)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail:
            raise RuntimeError("act failed")
        return [dict.fromkeys(self.keys, 0.0) for _ in range(4)]


def _act_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "kernel-act"}


WALL = {"mode": "realtime", "clock": "wall"}
CASES = {
    "sync, act_timeout_s": ({}, {"act_timeout_s": 30.0}, {}, "truncated"),
    "virtual clock, act_timeout_s": (
        {"mode": "realtime", "latency_s": 0.02},
        {"act_timeout_s": 30.0},
        {},
        "truncated",
    ),  # fmt: skip
    "wall clock": (WALL, {}, {}, "truncated"),
    "wall clock, act() fails": (WALL, {}, {"fail": True}, "error"),
    "wall clock, act() past act_timeout_s": (
        WALL,
        {"act_timeout_s": 0.2},
        {"hang_after": 2},
        "error",
    ),  # fmt: skip
    "wall clock, stopped": (WALL, {}, {"sleep_s": 0.02, "stop": True}, "stopped"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_act_thread_ends_with_its_episode(case: str) -> None:
    timing, runner_kwargs, agent_kwargs, outcome = CASES[case]
    before = _act_threads()
    env = PointEnv(control_hz=100.0)
    stop = agent_kwargs.pop("stop", False)
    agent = _Agent(env.keys, **agent_kwargs)
    runner = EpisodeRunner(env, agent, timing=Timing(**timing), **runner_kwargs)
    if stop:  # the operator's stop, once the episode runs (its act thread started)
        bus_steps = threading.Event()
        runner.bus.subscribe(lambda e: bus_steps.set(), "action")
        threading.Thread(
            target=lambda: bus_steps.wait(60) and runner.operator.stop("test"), daemon=True
        ).start()
    record = runner.run(60 if not stop else 100_000)
    assert record.outcome.value == outcome, record.status
    assert {t.name for t in agent.threads} == {"kernel-act"}  # act() ran on the act thread
    for thread in agent.threads:  # told to end: it does once its call (if any) returns
        thread.join(timeout=30)
        assert not thread.is_alive(), f"{case}: the act thread still runs after run() returned"
    assert _act_threads() <= before


def test_a_sentrys_rotations_leave_no_act_thread() -> None:
    before = _act_threads()
    env = PointEnv(control_hz=100.0)
    runner = EpisodeRunner(env, _Agent(env.keys), timing=Timing(**WALL))
    records = runner.run_sentry(60, rotate_every_s=0.15)
    assert len(records) >= 2, [r.status for r in records]
    for thread in _act_threads() - before:
        thread.join(timeout=30)
        assert not thread.is_alive(), "an act thread outlived the sentry's last episode"
