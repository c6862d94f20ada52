"""SafetyShield and guards: pass-through, clip vs refuse, non-finite, keys, rate limits, build_guards."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from robokernel_ros.kernel import (
    AccelerationGuard,
    EnvSpec,
    FiniteGuard,
    GuardContext,
    LimitGuard,
    SafetyShield,
    VelocityGuard,
    build_guards,
    run_guards,
)

SPEC = EnvSpec(
    action_keys=("a", "b", "grip"),
    control="absolute",
    control_hz=10.0,
    action_limits={"a": (-1.0, 1.0), "b": (0.0, 2.0), "grip": (0.0, 1.0)},
    gripper_keys=("grip",),
)
HOLD = {"a": 0.0, "b": 1.0, "grip": 0.5}


def test_action_within_limits_passes_unchanged() -> None:
    shield = SafetyShield(SPEC, [])
    result = shield.review({"a": 0.3, "b": 2.0, "grip": 0.0}, hold=HOLD)
    assert result.action == {"a": 0.3, "b": 2.0, "grip": 0.0}
    assert not result.refused and result.interventions == []


def test_slightly_outside_is_clipped_far_outside_is_refused() -> None:
    shield = SafetyShield(SPEC, [], clip_tolerance=0.05)  # a: range 2 -> slack 0.1
    clipped = shield.review({"a": 1.09, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert clipped.action["a"] == 1.0 and not clipped.refused
    (iv,) = clipped.interventions
    assert (iv.guard, iv.key, iv.value, iv.limit, iv.action) == (
        "limits",
        "a",
        1.09,
        [-1.0, 1.0],
        "clipped",
    )

    refused = shield.review({"a": 1.11, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert refused.refused and refused.action == HOLD
    assert refused.interventions[-1].action == "refused" and refused.interventions[-1].key == "a"


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), "0.5", None, True, [0.1], np.array([0.1])]
)
def test_non_finite_or_non_number_is_refused(bad: object) -> None:
    result = SafetyShield(SPEC, []).review({"a": bad, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert result.refused and result.action == HOLD
    assert result.interventions[-1].guard == "finite" and result.interventions[-1].key == "a"


def test_numpy_scalars_become_floats() -> None:
    result = SafetyShield(SPEC, []).review(
        {"a": np.float32(0.5), "b": np.int64(1), "grip": 0.5}, hold=HOLD
    )
    assert not result.refused and type(result.action["a"]) is float and result.action["b"] == 1.0


@pytest.mark.parametrize("garbage", [None, 3.0, "go", [1, 2], object()])
def test_non_mapping_is_refused_not_raised(garbage: object) -> None:
    result = SafetyShield(SPEC, []).review(garbage, hold=HOLD)
    assert result.refused and result.interventions[0].guard == "type"


def test_missing_keys_filled_from_hold_and_unknown_dropped() -> None:
    result = SafetyShield(SPEC, []).review({"a": 0.2, "zzz": 9.0}, hold=HOLD)
    assert result.action == {"a": 0.2, "b": 1.0, "grip": 0.5}
    assert result.missing_keys == ("b", "grip") and result.unknown_keys == ("zzz",)
    no_hold = SafetyShield(SPEC, []).review({"a": 0.2})
    assert no_hold.refused and no_hold.interventions[0].guard == "keys"


def test_max_delta_refuses_a_jump() -> None:
    shield = SafetyShield(SPEC, build_guards({"max_delta": 0.2}))
    shield.review({"a": 0.0, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert not shield.review({"a": 0.2, "b": 1.0, "grip": 0.5}, hold=HOLD).refused
    jump = shield.review({"a": 0.5, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert (
        jump.refused
        and jump.interventions[-1].guard == "max_delta"
        and jump.interventions[-1].limit == 0.2
    )


def test_velocity_guard_clips_toward_last_command() -> None:
    shield = SafetyShield(
        SPEC, build_guards({"max_velocity": {"a": 1.0}})
    )  # dt 0.1 -> 0.1 per step
    shield.review({"a": 0.0, "b": 1.0, "grip": 0.5}, hold=HOLD)
    result = shield.review({"a": 0.5, "b": 2.0, "grip": 0.5}, hold=HOLD)
    assert result.action["a"] == pytest.approx(0.1) and result.action["b"] == 2.0  # b has no bound
    assert [(i.guard, i.key, i.action) for i in result.interventions] == [
        ("max_velocity", "a", "clipped")
    ]
    slow = shield.review({"a": 0.5, "b": 2.0, "grip": 0.5}, hold=HOLD, dt=1.0)
    assert slow.action["a"] == pytest.approx(0.5)


def test_acceleration_guard_limits_change_of_velocity() -> None:
    guard = AccelerationGuard(2.0)
    action = {"a": 1.0}
    out: list = []
    # at rest (last == previous): velocity may grow by amax * dt = 0.2 -> position last + 0.02
    guard.review(action, GuardContext(last={"a": 0.0}, previous={"a": 0.0}, dt=0.1), out)
    assert action["a"] == pytest.approx(0.02) and out[0].action == "clipped"
    # already moving at 1.0/s: may reach 1.2/s
    action = {"a": 1.0}
    guard.review(action, GuardContext(last={"a": 0.1}, previous={"a": 0.0}, dt=0.1), [])
    assert action["a"] == pytest.approx(0.1 + 0.12)


def test_rate_guards_never_leave_the_limits() -> None:
    shield = SafetyShield(SPEC, build_guards({"max_acceleration": 1.0}))
    shield.record_sent({"a": 0.8, "b": 1.0, "grip": 0.5})
    shield.record_sent({"a": 0.95, "b": 1.0, "grip": 0.5})  # moving at 1.5/s toward the 1.0 limit
    result = shield.review({"a": 1.0, "b": 1.0, "grip": 0.5}, hold=HOLD)
    assert result.action["a"] <= 1.0


def test_guards_usable_alone_for_a_controller_command() -> None:
    guards = [FiniteGuard(), LimitGuard({"j1": (-1.0, 1.0)}, 0.0), VelocityGuard(0.5)]
    command = {"j1": 1.0, "j2": 3.0}
    out = run_guards(guards, command, GuardContext(last={"j1": 0.9, "j2": 3.0}, dt=0.1))
    assert command == {"j1": pytest.approx(0.95), "j2": 3.0} and out[0].guard == "max_velocity"
    assert run_guards(guards, {"j1": 1.5}, GuardContext())[-1].action == "refused"


def test_build_guards_refuses_bad_config_by_name() -> None:
    assert build_guards(None) == []
    assert [
        g.name for g in build_guards({"max_delta": 1, "max_velocity": 2, "max_acceleration": 3})
    ] == [
        "max_delta",
        "max_velocity",
        "max_acceleration",
    ]
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['max_jerk'\]"):
        build_guards({"max_jerk": 1.0})
    with pytest.raises(ValueError, match="max_velocity=-1"):
        build_guards({"max_velocity": -1})
    with pytest.raises(ValueError, match="max_delta"):
        build_guards({"max_delta": "false"})
    with pytest.raises(ValueError, match=r"max_acceleration\['a'\]=True"):
        build_guards({"max_acceleration": {"a": True}})
    with pytest.raises(ValueError, match="clip_tolerance"):
        build_guards({"clip_tolerance": float("nan")})
    with pytest.raises(ValueError, match="safety="):
        build_guards([("max_delta", 1)])  # type: ignore[arg-type]


garbage_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.lists(st.floats(), max_size=2),
)
garbage_actions = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b", "grip", "x"]), garbage_values, max_size=4),
    garbage_values,
)


@settings(max_examples=300, deadline=None)
@given(
    actions=st.lists(garbage_actions, min_size=1, max_size=6),
    safety=st.fixed_dictionaries(
        {},
        optional={
            "max_delta": st.floats(0.01, 5.0),
            "max_velocity": st.floats(0.01, 50.0),
            "max_acceleration": st.floats(0.01, 500.0),
            "clip_tolerance": st.floats(0.0, 0.5),
        },
    ),
)
def test_property_every_executed_action_is_finite_and_within_limits(
    actions: list, safety: dict
) -> None:
    shield = SafetyShield(
        SPEC, build_guards(safety), clip_tolerance=safety.get("clip_tolerance", 0.05)
    )
    for action in actions:
        result = shield.review(action, hold=HOLD)
        assert set(result.action) == set(SPEC.action_keys)
        for key, value in result.action.items():
            lo, hi = SPEC.action_limits[key]
            assert type(value) is float and math.isfinite(value) and lo <= value <= hi
        if result.refused:
            assert result.action == HOLD and result.interventions[-1].action == "refused"
        elif (
            isinstance(action, dict)
            and set(action) == set(SPEC.action_keys)
            and not result.interventions
        ):
            assert result.action == action  # untouched when nothing intervened
