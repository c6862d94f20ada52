"""Hypothesis property over random commands through a real shield process: garbage, NaN,
huge values, wrong lengths, random joint names and times. Whatever comes in, every
message on the controller topic is finite, of the right shape and within the position
limits, and consecutive forwarded commands respect the velocity limit."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from robokernel_ros.safety.limits import load_limits_file
from shield_harness import (
    SHIELD,
    SO101_JOINTS,
    SO101_LIMITS,
    finite,
    is_hold,
    shield_args,
    wait_state,
)
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

LIMITS = load_limits_file(SO101_LIMITS)
MEASURED = [0.1, -0.2, 0.3, 0.0, 0.5, 0.2]
MAX_STEP_DT = 0.05  # the shield's max_step_dt_s (default)
EPS = 1e-9
PROFILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-3.0, max_value=3.0),
    st.sampled_from([0.0, 1.9, -1.9, 1e308, -1e308, 2.0]),
)
commands = st.lists(st.lists(values, min_size=0, max_size=8), min_size=1, max_size=12)


def _settle(out: list, expected: int, quiet_s: float = 1.0, timeout: float = 20.0) -> None:
    """Wait for `expected` outputs (every command is answered by exactly one message), or,
    on a starved machine where a depth-10 queue may overflow, until nothing new came for
    `quiet_s`. The property is then checked on every message that did arrive."""
    deadline = time.monotonic() + timeout
    seen, since = len(out), time.monotonic()
    while len(out) < expected and time.monotonic() < deadline:
        if len(out) != seen:
            seen, since = len(out), time.monotonic()
        elif time.monotonic() - since > quiet_s:
            break
        time.sleep(0.01)
    assert len(out) > 0


def _within_limits(joints, positions) -> bool:
    for joint, q in zip(joints, positions, strict=True):
        lim = LIMITS[joint]
        if not (lim.min_position - EPS <= q <= lim.max_position + EPS):
            return False
    return True


@pytest.fixture
def array_shield(processes, peer):
    name = "shield_prop_fc"
    out = peer.record_commands("/prop_fc/out")
    states = peer.record_states(name)
    pub = peer.publisher(Float64MultiArray, "/prop_fc/in")
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(
        name,
        SHIELD,
        *shield_args(
            name,
            "autostart:=true",
            "input_topic:=/prop_fc/in",
            "output_topic:=/prop_fc/out",
            "command_timeout_s:=30.0",
            "estop_required:=false",  # not about the e-stop
            "estop_wait_s:=0.0",
        ),
    )
    wait_state(states, lambda s: s.state == "active", what="shield active")
    peer.wait_for_subscribers(pub)
    return pub, out


@PROFILE
@given(batch=commands)
def test_shield_property_forward_command(array_shield, batch):
    pub, out = array_shield
    start = len(out)
    for data in batch:
        msg = Float64MultiArray()
        msg.data = data
        pub.publish(msg)
        time.sleep(0.002)
    _settle(out, start + len(batch))
    previous = None
    for _, msg in out[max(0, start - 1) :]:
        data = list(msg.data)
        assert len(data) == len(SO101_JOINTS) and finite(data), data
        assert _within_limits(SO101_JOINTS, data), data
        if previous is not None and not is_hold(data, MEASURED):
            for joint, a, b in zip(SO101_JOINTS, previous, data, strict=True):
                assert abs(b - a) <= LIMITS[joint].max_velocity * MAX_STEP_DT + EPS, (joint, a, b)
        previous = data


names = st.one_of(
    st.permutations(SO101_JOINTS),
    st.lists(st.sampled_from([*SO101_JOINTS, "nope", ""]), min_size=0, max_size=7),
)
points = st.lists(
    st.tuples(
        st.lists(values, min_size=5, max_size=7),  # positions
        st.one_of(st.floats(min_value=-0.1, max_value=2.0), st.just(0.0)),  # time step
        st.lists(values, min_size=0, max_size=6),  # velocities
    ),
    min_size=0,
    max_size=5,
)


@pytest.fixture
def trajectory_shield(processes, peer):
    name = "shield_prop_jt"
    out = peer.record_trajectories("/prop_jt/out")
    states = peer.record_states(name)
    pub = peer.publisher(JointTrajectory, "/prop_jt/in")
    peer.publish_joint_states(SO101_JOINTS, MEASURED, rate_hz=100)
    processes.python(
        name,
        SHIELD,
        *shield_args(
            name,
            "autostart:=true",
            "controller:=joint_trajectory",
            "input_topic:=/prop_jt/in",
            "output_topic:=/prop_jt/out",
            "command_timeout_s:=30.0",
            "estop_required:=false",  # not about the e-stop
            "estop_wait_s:=0.0",
        ),
    )
    wait_state(states, lambda s: s.state == "active", what="shield active")
    peer.wait_for_subscribers(pub)
    return pub, out


@PROFILE
@given(batch=st.lists(st.tuples(names, points), min_size=1, max_size=4))
# a point with positions only, forwarded as it came (a full run found it: 2026-12-02)
@example(batch=[(list(SO101_JOINTS), [([0.0] * 6, 1.0, [])])])
def test_shield_property_joint_trajectory(trajectory_shield, batch):
    pub, out = trajectory_shield
    start = len(out)
    for joint_names, pts in batch:
        msg = JointTrajectory()
        msg.joint_names = list(joint_names)
        t = 0.0
        for positions, step, velocities in pts:
            t = max(0.0, t + step)
            p = JointTrajectoryPoint()
            p.positions = positions
            p.velocities = velocities
            p.time_from_start.sec = int(t)
            p.time_from_start.nanosec = int((t - int(t)) * 1e9)
            msg.points.append(p)
        pub.publish(msg)
        time.sleep(0.002)
    _settle(out, start + len(batch))
    for _, msg in out[start:]:
        joint_names = list(msg.joint_names)
        assert sorted(joint_names) == sorted(SO101_JOINTS), joint_names
        reference = dict(zip(SO101_JOINTS, MEASURED, strict=True))
        t_prev = 0.0
        for p in msg.points:
            positions = list(p.positions)
            assert len(positions) == len(joint_names) and finite(positions)
            assert _within_limits(joint_names, positions), positions
            t = p.time_from_start.sec + p.time_from_start.nanosec * 1e-9
            assert t > t_prev
            for joint, q in zip(joint_names, positions, strict=True):
                vmax = LIMITS[joint].max_velocity
                assert abs(q - reference[joint]) <= vmax * (t - t_prev) + 1e-6, (joint, q, t)
                reference[joint] = q
            # a point may carry no velocities (positions only, as the input's may)
            velocities = list(p.velocities)
            assert not velocities or len(velocities) == len(joint_names), velocities
            for joint, v in zip(joint_names, velocities, strict=False):
                assert math.isfinite(v) and abs(v) <= LIMITS[joint].max_velocity + EPS
            t_prev = t
