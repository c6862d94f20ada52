"""The shield's rate guards in a real process over DDS, with `command_rate_hz`: a smooth
50 Hz stream within the limits whose commands leave the sender up to 14 ms late passes
unclipped (judged over their arrival intervals, the rule before, 63 of its 150 commands
were clipped: bench/shield_replay.py's ArrivalDt on the same times); the same stream at 1.5x the acceleration limit is clipped. (The rule itself,
faster and slower streams, stalls: test/safety/test_safety_command_clock.py and
test_safety_review.py.)"""

from __future__ import annotations

import time

from shield_harness import SHIELD, SO101_JOINTS, shield_args, wait_state, wait_until
from std_msgs.msg import Float64MultiArray

MEASURED = [0.0, 0.0, 0.0, 0.0, 0.0, 0.2]
PERIOD = 0.02  # 50 Hz
LATE = [0.0, 0.012, 0.0, 0.006, 0.0, 0.010, 0.0, 0.004, 0.0, 0.014]  # s, each under a period


def _positions(steps: int, accel: float, vmax: float) -> list[float]:
    """shoulder_pan of a smooth back-and-forth motion: |acceleration| <= accel."""
    q, v, sign, out = 0.0, 0.0, 1.0, []
    for k in range(steps):
        if k % 40 == 39:
            sign = -sign
        target = sign * vmax
        dv = accel * PERIOD
        v = min(target, v + dv) if v < target else max(target, v - dv)
        q += v * PERIOD
        out.append(q)
    return out


def _send(pub, positions: list[float]) -> None:
    """One command per period, each sent LATE[k] after its slot; the next slot is a period
    after the last one sent (relative pacing: a stall of this process delays the rest,
    it never makes a burst)."""
    slot = time.monotonic()
    for k, q in enumerate(positions):
        slot += PERIOD
        target = slot + LATE[k % len(LATE)]
        time.sleep(max(0.0, target - time.monotonic()))
        slot = max(slot, time.monotonic() - LATE[k % len(LATE)])
        pub.publish(Float64MultiArray(data=[q, *MEASURED[1:]]))


def _start(processes, peer, name: str):
    states = peer.record_states(name)
    pub = peer.publisher(Float64MultiArray, f"/{name}/commands")
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(
        name,
        SHIELD,
        *shield_args(
            name,
            "autostart:=true",
            "command_rate_hz:=50.0",
            "command_timeout_s:=5.0",
            "estop_required:=false",  # not about the e-stop
            "estop_wait_s:=0.0",
        ),
    )
    wait_state(states, lambda s: s.state == "active", what="shield active")
    peer.wait_for_subscribers(pub)
    return states, pub


def test_shield_jittered_stream_within_limits_passes_unclipped(processes, peer):
    """20 rad/s^2 and 2 rad/s (limits 30 and 3): judged over the arrival intervals, a
    12 ms late command followed by one on time reads as 50 rad/s^2 and more."""
    name = "shield_rate_ok"
    states, pub = _start(processes, peer, name)
    out = peer.record_commands()
    positions = _positions(150, 20.0, 2.0)
    _send(pub, positions)
    wait_until(lambda: len(out) >= len(positions), 20, "every command forwarded")
    st = wait_state(states, lambda s: s.passed + s.clipped >= len(positions), what="counted")
    assert (st.clipped, st.refused) == (0, 0), (st.clipped, st.refused)
    sent = [m.data[0] for _, m in out]
    assert sent == positions  # forwarded untouched


def test_shield_stream_over_the_acceleration_limit_is_clipped(processes, peer):
    """The same stream at 45 rad/s^2: clipped, what reaches the controller within 3 rad/s."""
    name = "shield_rate_over"
    states, pub = _start(processes, peer, name)
    out = peer.record_commands()
    positions = _positions(150, 45.0, 2.0)
    _send(pub, positions)
    wait_until(lambda: len(out) >= len(positions), 20, "every command answered")
    st = wait_state(states, lambda s: s.passed + s.clipped >= len(positions), what="counted")
    assert st.clipped >= 10 and st.refused == 0
    sent = [m.data[0] for _, m in out]
    assert all(abs(b - a) <= 3.0 * PERIOD + 1e-9 for a, b in zip(sent, sent[1:], strict=False))
