"""The wall-clock loop's thread: real-time priority (kernel.scheduling) and command-first
delivery of a step's events (EpisodeRecorder.defer)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import pytest
from robokernel_ros.kernel import EpisodeOutcome, EpisodeRunner, Event, Timing
from robokernel_ros.kernel.scheduling import check_priority, realtime_priority
from robokernel_ros.kernel.timing import Pacer
from robokernel_ros.kernel.toy import PointEnv, ScriptedAgent

FLAGS = getattr(os, "SCHED_RESET_ON_FORK", 0)


def policy_of_this_thread() -> tuple[int, int]:
    """(policy without the reset-on-fork flag, priority) of the calling thread."""
    return os.sched_getscheduler(0) & ~FLAGS, os.sched_getparam(0).sched_priority


def fifo_allowed() -> bool:
    """Whether this process may use SCHED_FIFO (root or CAP_SYS_NICE, or an rtprio limit)."""
    code = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


needs_fifo = pytest.mark.skipif(
    not hasattr(os, "SCHED_FIFO") or not fifo_allowed(),
    reason="this process may not use real-time scheduling",
)


def test_check_priority_names_the_parameter_and_its_domain() -> None:
    assert check_priority("control_priority", 0) == 0
    assert check_priority("control_priority", 99) == 99
    for bad in (-1, 100, 1.5, True, "50", None):
        with pytest.raises(ValueError, match=r"control_priority=.*integer in 0\.\.99"):
            check_priority("control_priority", bad)
    with pytest.raises(ValueError, match=r"priority=100"):
        Pacer(0.02, priority=100)


@needs_fifo
def test_the_block_runs_under_fifo_and_the_thread_gets_its_policy_back() -> None:
    before = policy_of_this_thread()
    with realtime_priority(50) as raised:
        assert raised is True
        assert policy_of_this_thread() == (os.SCHED_FIFO, 50)
        started: list[tuple[int, int]] = []
        thread = threading.Thread(target=lambda: started.append(policy_of_this_thread()))
        thread.start()
        thread.join()
    assert policy_of_this_thread() == before
    # a thread the block starts runs at normal priority (SCHED_RESET_ON_FORK)
    assert started == [(os.SCHED_OTHER, 0)]


def test_priority_zero_leaves_the_thread_as_it_is() -> None:
    before = policy_of_this_thread()
    with realtime_priority(0) as raised:
        assert raised is False
        assert policy_of_this_thread() == before


def test_a_refused_priority_runs_at_normal_priority_and_says_so_once() -> None:
    """Without permission (here a child that gives up root, else this process as it is)
    the block still runs, at normal priority, and one warning names the way out."""
    code = (
        "import logging, os, sys\n"
        "logging.basicConfig(level=logging.WARNING, format='%(message)s')\n"
        "from robokernel_ros.kernel.scheduling import realtime_priority\n"
        "if os.geteuid() == 0:  # imports first: nobody may not read the interpreter's files\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "for _ in range(2):\n"
        "    with realtime_priority(50) as raised:\n"
        "        print('raised', raised, os.sched_getscheduler(0), flush=True)\n"
    )
    if os.geteuid() != 0 and fifo_allowed():
        pytest.skip("this process may use real-time scheduling and cannot give it up")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"raised False {os.SCHED_OTHER}"] * 2
    warnings = [line for line in out.stderr.splitlines() if "normal priority" in line]
    assert len(warnings) == 1, out.stderr
    assert "SCHED_FIFO 50" in warnings[0] and "rtprio" in warnings[0]


class _RecordingEnv(PointEnv):
    """A PointEnv that notes, at each command, its thread's policy and which events of
    that step the bus had delivered already."""

    def __init__(self, delivered: list[Event], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delivered = delivered
        self.seen_at_command: list[list[str]] = []
        self.policies: set[tuple[int, int]] = set()

    def step(self, action: Any) -> Any:
        step = self.steps
        self.seen_at_command.append(
            [e.kind for e in self.delivered if e.step == step and e.kind != "episode.start"]
        )
        self.policies.add(policy_of_this_thread())
        return super().step(action)


class _ThreadNotingAgent(ScriptedAgent):
    def __init__(self) -> None:
        super().__init__(lambda obs, step, i: {"j0": 0.01 * step, "j1": 0.0}, chunk_size=4)
        self.policies: set[tuple[int, int]] = set()

    def act(self, observation: Any, step: int, **kwargs: Any) -> Any:
        self.policies.add(policy_of_this_thread())
        return super().act(observation, step, **kwargs)


def _run(
    timing: Timing, priority: int = 0
) -> tuple[_RecordingEnv, _ThreadNotingAgent, Any, list[Event]]:
    delivered: list[Event] = []
    env = _RecordingEnv(delivered, control_hz=100.0)
    env.pacer = Pacer(0.01, priority=priority)
    agent = _ThreadNotingAgent()
    runner = EpisodeRunner(env, agent, timing=timing)
    runner.bus.subscribe(delivered.append)
    record = runner.run(12)
    return env, agent, record, delivered


def test_on_the_wall_clock_a_steps_events_reach_the_bus_after_its_command() -> None:
    env, _, record, delivered = _run(Timing("realtime", clock="wall"))
    assert record.outcome == EpisodeOutcome.TRUNCATED and record.steps == 12
    # nothing of step s had reached a subscriber when its command went out...
    assert env.seen_at_command == [[] for _ in range(12)]
    # ...and they all came, in order: seq 0, 1, 2, ... with each step's observation first
    assert [e.seq for e in delivered] == list(range(len(delivered)))
    for step in range(12):
        kinds = [e.kind for e in delivered if e.step == step and e.kind != "episode.start"]
        assert kinds[0] == "observation" and kinds[-1] == "action", kinds
    walls = [e.wall for e in delivered]
    assert walls == sorted(walls)  # stamped when they happened, not when delivered


def test_on_the_virtual_clock_events_reach_the_bus_as_they_happen() -> None:
    env, _, _, _ = _run(Timing("realtime", clock="virtual", latency_s=0.0))
    assert all(seen[:1] == ["observation"] for seen in env.seen_at_command)


@needs_fifo
def test_a_wall_clock_episode_runs_under_its_pacers_priority_and_its_act_thread_does_not() -> None:
    before = policy_of_this_thread()
    env, agent, record, _ = _run(Timing("realtime", clock="wall"), priority=50)
    assert record.outcome == EpisodeOutcome.TRUNCATED
    assert env.policies == {(os.SCHED_FIFO, 50)}  # every command, the reset's thread too
    assert agent.policies == {(os.SCHED_OTHER, 0)}  # the policy's inference: normal
    assert policy_of_this_thread() == before  # given back with the episode
