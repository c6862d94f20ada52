"""The torque shim on a real MuJoCo scene: the PD law, the motors' limits, install/remove."""

from __future__ import annotations

import math

import numpy as np
import pytest
from robokernel_ros.envs import MujocoScene


@pytest.fixture(scope="module")
def scene():
    s = MujocoScene()
    s.add_robot("dog", "go2")
    s.add_robot("panda", "panda", pos=(1.5, 0.0, 0.0))
    return s


def test_the_torque_is_the_pd_law_clamped_to_the_motor_limits(scene):
    shim = scene.install_torque_shim("dog", {"FL_calf_joint": {"kp": 500.0, "kd": 1.0}})
    try:
        env = scene.make_env("dog")
        env.reset()
        model, data = scene.model, scene.data
        calf = scene.index.actuators["dog/FL_calf"]
        hip = scene.index.actuators["dog/FL_hip"]
        lo, hi = model.actuator_ctrlrange[calf]
        far = {"FL_calf": -0.83776}  # the range's end: about 1 rad from home, 500 Nm/rad asked
        seen = []
        for _ in range(5):
            env.step(far)
            seen.append(float(data.ctrl[calf]))
            assert lo <= data.ctrl[calf] <= hi
        assert max(seen) == pytest.approx(hi)  # saturated at the motor's torque limit
        # unsaturated, ctrl is exactly kp (q* - q) - kd qdot on the state it was computed on
        i = shim.actuators.index("FL_hip")
        _, _, qadr, vadr = scene.index.joints["dog/FL_hip_joint"]
        shim.apply(data)
        expected = 60.0 * (shim.target[i] - data.qpos[qadr]) - 2.0 * data.qvel[vadr]
        assert abs(expected) < 23.7 and data.ctrl[hip] == pytest.approx(expected, rel=1e-12)
        # a refused action changes no target
        before = env.hold_action()
        with pytest.raises(ValueError, match="must be a finite number"):
            env.step({"FL_hip": math.nan, "FL_calf": -1.0})
        assert env.hold_action() == before
        assert env.observe()["actuator_targets"]["FL_calf"] == pytest.approx(-0.83776)
    finally:
        assert scene.remove_torque_shim("dog") is True
    assert scene.remove_torque_shim("dog") is False
    assert scene.make_env("dog").env_spec.action_limits["FL_calf"] == (lo, hi)


def test_a_model_without_stored_gains_needs_them_from_the_call(scene):
    with pytest.raises(
        ValueError, match=r"gains: robot 'panda' has no gains for joints \['joint1'"
    ):
        scene.install_torque_shim("panda")
    arm = {f"joint{i}": {"kp": 1000.0, "kd": 50.0} for i in range(1, 8)}
    shim = scene.install_torque_shim("panda", arm)
    try:
        assert shim.joints == tuple(arm) and "fingers_actuator" not in shim.actuators
        env = scene.make_env("panda")
        assert env.actuator_kinds["actuator1"] == "position"  # a joint target now
        assert env.env_spec.action_limits["actuator1"] == pytest.approx((-2.8973, 2.8973))
        assert env.env_spec.action_limits["fingers_actuator"] == (0.0, 255.0)  # left alone
        env.reset()  # at q = 0, joint4 (range [-3.07, -0.07]) starts outside its limit
        for _ in range(10):
            obs = env.step(env.hold_action()).observation
        q0 = np.array(list(obs["joint_positions"].values())[:7])
        for _ in range(50):
            obs = env.step(env.hold_action()).observation
        q1 = np.array(list(obs["joint_positions"].values())[:7])
        assert np.max(np.abs(q1 - q0)) < 0.01  # holds under gravity on its torque motors
    finally:
        scene.remove_torque_shim("panda")
