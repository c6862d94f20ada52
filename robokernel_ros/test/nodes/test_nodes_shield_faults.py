"""Faults, all in real processes over DDS: an e-stop latched under a 1 kHz command flood,
a command source killed mid-stream (watchdog), a shield killed and restarted while the
e-stop is latched (transient_local topic, under CPU load on every core, and the latch
file). The e-stop source is a released heartbeat from the test's node (EstopSource)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from shield_harness import (
    SHIELD,
    SO101_JOINTS,
    Peer,
    clear_fault,
    is_hold,
    shield_args,
    wait_state,
    wait_until,
)
from std_msgs.msg import Float64MultiArray

FLOOD = str(Path(__file__).with_name("shield_flood.py"))
MEASURED = [0.1, -0.2, 0.3, 0.0, 0.5, 0.2]
TARGET = [m + 0.02 for m in MEASURED]  # within limits, a few steps away (rate-limited)


def _flood(processes, name: str, topic: str, rate: float, values=TARGET, seconds: float = 60):
    csv = ",".join(repr(v) for v in values)
    return processes.start(name, [sys.executable, FLOOD, topic, str(rate), csv, str(seconds)])


def _non_holds(out, start: int = 0) -> list:
    return [m for _, m in out[start:] if not is_hold(m.data, MEASURED)]


def _first_hold(out, start: int = 0) -> int:
    """Index of the first hold at or after `start` (waits for it to arrive)."""
    wait_until(lambda: any(is_hold(m.data, MEASURED) for _, m in out[start:]), 10, "a hold")
    return next(i for i, (_, m) in enumerate(out) if i >= start and is_hold(m.data, MEASURED))


def test_shield_estop_latched_under_1khz_flood(processes, peer):
    name = "shield_estop"
    out = peer.record_commands()
    states = peer.record_states(name)
    source = peer.estop_source(name)
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(name, SHIELD, *shield_args(name, "autostart:=true"))
    wait_state(states, lambda s: s.state == "active", what="shield active")
    _flood(processes, "flood", f"/{name}/commands", 1000.0)
    wait_until(lambda: len(_non_holds(out)) >= 50, 20, "commands flowing through the shield")

    # Press the e-stop (latched topic): from the first hold on, only holds.
    source.press()
    wait_state(states, lambda s: s.state == "estopped" and s.estop_input, what="estopped")
    first_hold = _first_hold(out)
    # The flood goes on (1 kHz): each refused command is answered by a hold. Waiting for
    # the holds, not for a time, keeps this independent of the machine's load.
    wait_until(lambda: len(out) - first_hold > 100, 10, "100 holds answering the flood")
    assert _non_holds(out, first_hold) == []

    # clear_fault while the e-stop input is still pressed: refused, still only holds.
    reply = peer.trigger(f"/{name}/clear_fault")
    assert not reply.success and "pressed" in reply.message
    n = len(out)  # the flood's next 100 commands after the refusal: holds too
    wait_until(lambda: len(out) - n > 100, 10, "100 more holds after the refused clear_fault")
    assert _non_holds(out, first_hold) == []
    st = wait_state(states, lambda s: s.refused > 300, what="refusals counted")
    assert st.estop_latched and st.held >= st.refused - 1

    # Release the input: still latched until clear_fault.
    source.release()
    wait_state(states, lambda s: not s.estop_input, what="input released")
    n = len(out)  # the flood's next 100 commands after the release: holds too
    wait_until(lambda: len(out) - n > 100, 10, "100 more holds after the release")
    assert _non_holds(out, first_hold) == []
    clear_fault(peer, name)
    n_cleared = len(out)
    wait_until(lambda: _non_holds(out, n_cleared), 10, "commands pass again after clear_fault")
    wait_state(states, lambda s: s.state == "active", what="active after clear")


def test_shield_estop_service_latches(processes, peer):
    name = "shield_estop_srv"
    out = peer.record_commands()
    states = peer.record_states(name)
    peer.estop_source(name)
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(name, SHIELD, *shield_args(name, "autostart:=true"))
    wait_state(states, lambda s: s.state == "active", what="shield active")
    _flood(processes, "flood", f"/{name}/commands", 200.0)
    wait_until(lambda: _non_holds(out), 20, "commands flowing")
    assert peer.trigger(f"/{name}/estop").success
    wait_state(states, lambda s: s.estop_latched and not s.estop_input, what="latched by service")
    first_hold = _first_hold(out)
    n = len(out)  # the flood's (200 Hz) next 40 commands after the latch: holds too
    wait_until(lambda: len(out) - n > 40, 10, "40 more holds after the latch")
    assert _non_holds(out, first_hold) == []
    assert peer.trigger(f"/{name}/clear_fault").success  # the input was never pressed
    n = len(out)
    wait_until(lambda: _non_holds(out, n), 10, "commands pass after clear_fault")


def test_shield_watchdog_holds_when_source_killed(processes, peer):
    name = "shield_wd"
    timeout, rate = 0.2, 50.0
    # when the shield sent each command: a datagram repaired on its way here arrives late,
    # and by arrival times a hold once seemed 0.183 s after a forward the shield sent >0.2 s
    # before it
    out = peer.record(Float64MultiArray, "/forward_position_controller/commands", sent_times=True)
    states = peer.record_states(name)
    ivs = peer.record_interventions(name)
    peer.estop_source(name)
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(
        name,
        SHIELD,
        # the e-stop source is not under test: estop_timeout_s 2.0, not 0.5 s, so that this
        # process starved of the CPU (a loaded machine) does not latch 'e-stop source lost'
        # and hold before the command source is killed (a full random-order run did)
        *shield_args(
            name, "autostart:=true", f"command_timeout_s:={timeout}", "estop_timeout_s:=2.0"
        ),
    )
    wait_state(states, lambda s: s.state == "active", what="shield active")
    source = _flood(processes, "source", f"/{name}/commands", rate)
    wait_until(lambda: len(_non_holds(out)) >= 20, 20, "commands flowing")
    processes.kill(source, signal.SIGKILL)
    wait_until(lambda: out and is_hold(out[-1][1].data, MEASURED), 5, "the watchdog's hold")
    hold_index = len(out) - 1
    t_hold = out[hold_index][0]
    t_last = out[hold_index - 1][0]
    assert not is_hold(out[hold_index - 1][1].data, MEASURED)
    # Never before the timeout, by the shield's own clock (the silence it measured), and
    # not between the two commands' sending either (10 ms for the shield's own handling);
    # not long after it: within 0.5 s, a margin a loaded machine keeps (the shield checks
    # every timeout / 10; 1 / rate was too tight for a busy CI).
    wait_until(lambda: any(m.guard == "watchdog" for _, m in ivs), 5, "the watchdog's report")
    watchdog = next(m for _, m in ivs if m.guard == "watchdog")
    assert watchdog.action == "held" and watchdog.limit == pytest.approx(timeout)
    assert timeout < watchdog.value < timeout + 0.5, f"silent {watchdog.value:.4f} s"
    gap = t_hold - t_last
    assert timeout - 0.01 <= gap <= timeout + 0.5, f"hold {gap:.4f} s after the last command"
    # One hold per timeout: not re-armed, no second hold in three more timeouts (a window
    # of the behaviour itself, not a wait for a condition).
    time.sleep(3 * timeout)
    assert len(out) == hold_index + 1, "exactly one hold per timeout"
    st = wait_state(states, lambda s: s.timeouts == 1, what="one timeout reported")
    assert st.state == "active"


def _busy_loops(processes, seconds: float = 30.0) -> list:
    """One busy-loop process per core (CPU load while the shield restarts)."""
    loop = f"import time\nt = time.monotonic() + {seconds}\nwhile time.monotonic() < t: pass"
    return [
        processes.start(f"busy{k}", [sys.executable, "-c", loop]) for k in range(os.cpu_count())
    ]


def restart_stays_latched_from_topic(processes, peer, name: str, load: bool) -> int:
    """A shield killed while the e-stop is pressed and restarted (under CPU load on every
    core when `load`) forwards nothing but holds until released and cleared. Returns the
    number of commands answered while latched."""
    states = peer.record_states(name)
    peer_source = peer.estop_source(name)
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    first = processes.python(name, SHIELD, *shield_args(name, "autostart:=true"))
    wait_state(states, lambda s: s.state == "active", what="shield active")
    peer_source.press()
    wait_state(states, lambda s: s.estop_latched, what="latched")
    processes.kill(first, signal.SIGKILL)

    # The restarted shield meets a participant of its own age: a participant that had
    # matched the killed process pairs with its replacement seconds later (2.5-3.7 s
    # against 0.4-0.9 s for a new one, measured outside the suite; not understood, and
    # with a busy loop per core it once took over 60 s). What is under test here is the
    # restarted shield's latch, so the pressed source and the recorders move to a new
    # peer, the old source going quiet once the new one publishes.
    fresh = Peer()
    try:
        out = fresh.record_commands()
        states = fresh.record_states(name)
        source = fresh.estop_source(name, pressed=True)
        peer_source.stop()
        fresh.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
        busy = _busy_loops(processes) if load else []
        processes.python(name + "_2", SHIELD, *shield_args(name, "autostart:=true"))
        flood = _flood(processes, "flood", f"/{name}/commands", 200.0)
        st = wait_state(
            states,
            lambda s: s.estop_latched and s.state == "estopped",
            timeout=60,
            what="restarted latched",
        )
        assert "pressed" in st.estop_latched_by, st.estop_latched_by
        wait_until(lambda: len(out) >= 20, 60, "holds answering the flood")
        for proc in busy:
            processes.kill(proc)
        assert _non_holds(out) == [], "a restarted shield must honour the latched e-stop"
        answered = len(out)
        assert not fresh.trigger(f"/{name}/clear_fault").success
        source.release()
        wait_state(states, lambda s: not s.estop_input, what="released")
        clear_fault(fresh, name)
        m = len(out)
        wait_until(lambda: _non_holds(out, m), 10, "commands pass after clear_fault")
        processes.kill(flood)
        return answered
    finally:
        fresh.close()


def test_shield_restart_stays_latched_from_topic(processes, peer):
    restart_stays_latched_from_topic(processes, peer, "shield_restart", load=True)


def test_shield_restart_stays_latched_from_latch_file(processes, peer, tmp_path):
    name = "shield_latchfile"
    latch = tmp_path / "estop.latch"
    out = peer.record_commands()
    states = peer.record_states(name)
    peer.estop_source(name)
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    params = ("autostart:=true", f"latch_file:={latch}")
    first = processes.python(name, SHIELD, *shield_args(name, *params))
    wait_state(states, lambda s: s.state == "active", what="shield active")
    assert peer.trigger(f"/{name}/estop").success  # latched by the service: no input held
    wait_until(latch.exists, 5, "latch file written")
    processes.kill(first, signal.SIGKILL)

    n = len(out)
    states.clear()
    processes.python(name + "_2", SHIELD, *shield_args(name, *params))
    _flood(processes, "flood", f"/{name}/commands", 200.0)
    st = wait_state(states, lambda s: s.state == "estopped", what="restarted latched")
    assert not st.estop_input
    wait_until(lambda: len(out) >= n + 20, 20, "holds answering the flood")
    assert _non_holds(out, n) == []
    clear_fault(peer, name)  # the restarted shield first hears the source live
    assert not latch.exists()
    m = len(out)
    wait_until(lambda: _non_holds(out, m), 10, "commands pass after clear_fault")
