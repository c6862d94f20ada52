"""MujocoEnv as a kernel Environment, on the packaged robots (real MuJoCo)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from robokernel_ros.envs import MujocoEnv, MujocoScene, resolve_model
from robokernel_ros.kernel.spec import (
    Environment,
    HoldActionSource,
    PrivilegedStateSource,
    StepResult,
)


@pytest.fixture(scope="module")
def arm_scene() -> MujocoScene:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    return scene


@pytest.mark.parametrize("name", ["so101", "panda", "go2"])
def test_each_packaged_model_loads_and_steps(name: str) -> None:
    scene = MujocoScene()
    scene.add_robot("r", name)
    env = scene.make_env("r", control_hz=50.0)
    raw = mujoco.MjModel.from_xml_path(str(resolve_model(name)))
    actuators = tuple(raw.actuator(i).name for i in range(raw.nu))
    assert env.action_keys == actuators == env.env_spec.action_keys
    assert scene.robot_action_keys("r") == actuators
    # limits come from ctrlrange for every ctrllimited actuator
    for i, key in enumerate(actuators):
        if raw.actuator_ctrllimited[i]:
            assert env.env_spec.action_limits[key] == tuple(raw.actuator_ctrlrange[i])
    obs = env.reset(seed=0)
    assert set(obs) == {"joint_positions", "joint_velocities", "actuator_targets"}
    assert set(obs["actuator_targets"]) == set(actuators)
    assert all(type(v) is float for v in obs["joint_positions"].values())
    before = scene.data.qpos.copy()
    result = env.step({actuators[0]: 0.1})
    assert isinstance(result, StepResult)
    assert result.info["applied_keys"] == [actuators[0]]
    assert math.isclose(result.info["sim_time_s"], 0.02)
    assert not np.array_equal(before, scene.data.qpos)
    assert all(math.isfinite(v) for v in result.observation["joint_positions"].values())


def test_env_satisfies_the_kernel_protocols(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    assert isinstance(env, Environment)
    assert isinstance(env, HoldActionSource)
    assert isinstance(env, PrivilegedStateSource)
    caps = env.env_spec.capabilities
    assert caps.privileged_state and caps.sim_time and not caps.images


def test_so101_spec_classification(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    spec = env.env_spec
    assert spec.control == "absolute"
    assert set(env.actuator_kinds.values()) == {"position"}
    assert spec.gripper_keys == ("gripper",)
    assert (
        env.joint_keys
        == arm_scene.robot_joint_names("arm")
        == (
            "shoulder_pan",
            "shoulder_lift",
            "elbow_flex",
            "wrist_flex",
            "wrist_roll",
            "gripper",
        )
    )


def test_panda_and_go2_are_classified_as_torque_motors() -> None:
    scene = MujocoScene()
    scene.add_robot("panda", "panda")
    scene.add_robot("dog", "go2", pos=(2.0, 0.0, 0.0))
    kinds = scene.robot_actuator_kinds("panda")
    assert [kinds[f"actuator{i}"] for i in range(1, 8)] == ["motor"] * 7
    assert kinds["fingers_actuator"] == "position"
    assert set(scene.robot_actuator_kinds("dog").values()) == {"motor"}
    env = scene.make_env("panda")
    assert env.env_spec.control == "absolute"  # absolute ctrl values (torques / targets)
    assert env.env_spec.gripper_keys == ("fingers_actuator",)
    # the Go2's free joint is not an observation joint; it is the base in privileged state
    assert "root" not in scene.robot_joint_names("dog")
    assert len(scene.robot_joint_names("dog")) == 12


def test_a_position_command_moves_the_joint_toward_its_target(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    obs = env.reset()
    start = obs["joint_positions"]["elbow_flex"]
    target = 0.8
    errors = []
    for _ in range(50):
        obs = env.step({"elbow_flex": target}).observation
        errors.append(abs(obs["joint_positions"]["elbow_flex"] - target))
    assert abs(start - target) == pytest.approx(0.8)
    assert errors[-1] < 0.1 * abs(start - target)
    assert errors[-1] < errors[0]
    assert obs["actuator_targets"]["elbow_flex"] == target


def test_hold_action_keeps_the_robot_still(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    env.reset()
    for _ in range(40):  # move somewhere, then settle
        env.step({"shoulder_lift": 0.5, "wrist_flex": -0.4})
    hold = env.hold_action(None)
    assert hold["shoulder_lift"] == 0.5 and hold["wrist_flex"] == -0.4
    assert set(hold) == set(env.action_keys)
    q0 = np.array(list(env.observe()["joint_positions"].values()))
    for _ in range(50):
        obs = env.step(hold).observation
    q1 = np.array(list(obs["joint_positions"].values()))
    assert np.max(np.abs(q1 - q0)) < 0.01
    assert max(abs(v) for v in obs["joint_velocities"].values()) < 0.05


def test_unspecified_actuators_keep_their_target_and_unknown_keys_are_reported(
    arm_scene: MujocoScene,
) -> None:
    env = arm_scene.make_env("arm")
    env.reset()
    env.step({"shoulder_pan": 0.3, "gripper": 0.5})
    result = env.step({"shoulder_pan": 0.1, "elbow": 1.0, "arm/gripper": 1.0})
    assert result.info["applied_keys"] == ["shoulder_pan"]
    assert result.info["unknown_keys"] == ["elbow", "arm/gripper"]
    targets = result.observation["actuator_targets"]
    assert targets["shoulder_pan"] == 0.1 and targets["gripper"] == 0.5


def test_a_non_finite_action_value_is_refused(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    env.reset()
    before = env.hold_action(None)
    with pytest.raises(ValueError, match=r"action\['elbow_flex'\]=nan: must be a finite number"):
        env.step({"shoulder_pan": 0.2, "elbow_flex": float("nan")})
    with pytest.raises(ValueError, match=r"action\['gripper'\]='open': must be a finite number"):
        env.step({"gripper": "open"})
    with pytest.raises(
        ValueError, match=r"action=\[0.1\]: must be a mapping of action key -> number"
    ):
        env.step([0.1])  # type: ignore[arg-type]
    assert env.hold_action(None) == before  # a refused action changed no target
    assert arm_scene.data.time == 0.0


@pytest.mark.parametrize(("hz", "substeps"), [(50.0, 10), (100, 5), (500.0, 1), (20.0, 25)])
def test_control_rate_substeps_the_timestep(
    arm_scene: MujocoScene, hz: float, substeps: int
) -> None:
    env = arm_scene.make_env("arm", control_hz=hz)
    assert env.substeps == substeps and env.control_hz == hz == env.env_spec.control_hz
    env.reset()
    times = [env.step({}).info["sim_time_s"] for _ in range(5)]
    assert times == pytest.approx([(i + 1) / hz for i in range(5)])


def test_an_inexact_control_rate_reports_the_rate_actually_run(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm", control_hz=30.0)  # 1/(30*0.002) = 16.67 -> 17 substeps
    assert env.substeps == 17
    assert env.control_hz == pytest.approx(1 / (17 * 0.002))
    assert env.env_spec.control_hz == env.control_hz
    assert env.requested_control_hz == 30.0


@pytest.mark.parametrize("hz", [0, -5.0, float("inf"), float("nan"), True, "50", 1000.0])
def test_make_env_refuses_bad_control_rates(arm_scene: MujocoScene, hz: object) -> None:
    with pytest.raises(ValueError, match="control_hz="):
        arm_scene.make_env("arm", control_hz=hz)  # type: ignore[arg-type]


def test_make_env_refusals_name_the_parameter(arm_scene: MujocoScene) -> None:
    with pytest.raises(ValueError, match=r"robot_name='nope'.*robots: \['arm'\]"):
        arm_scene.make_env("nope")
    with pytest.raises(ValueError, match=r"robot=\[\]"):
        arm_scene.make_env([])
    with pytest.raises(ValueError, match=r"camera='top'.*no such camera"):
        arm_scene.make_env("arm", cameras=["top"])
    with pytest.raises(ValueError, match=r"image_size=\(0, 5\)"):
        arm_scene.make_env("arm", image_size=(0, 5))
    with pytest.raises(ValueError, match="reward_fn=3: must be callable"):
        arm_scene.make_env("arm", reward_fn=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reset_noise=-1"):
        arm_scene.make_env("arm", reset_noise=-1)


def test_two_robots_in_one_scene_each_with_their_own_keys() -> None:
    scene = MujocoScene()
    scene.add_robot("left", "so101", pos=(-0.3, 0.0, 0.0))
    scene.add_robot("right", "so101", pos=(0.3, 0.0, 0.0))
    assert scene.robot_action_keys("left") == scene.robot_action_keys("right")
    left, right = scene.make_env("left"), scene.make_env("right")
    assert left.action_keys == right.action_keys == scene.robot_action_keys("left")
    left.reset()
    for _ in range(30):
        left.step({"shoulder_pan": 0.6})
    assert left.observe()["joint_positions"]["shoulder_pan"] > 0.4
    assert abs(right.observe()["joint_positions"]["shoulder_pan"]) < 1e-3
    both = scene.make_env(["left", "right"])
    assert both.action_keys == tuple(f"left/{k}" for k in left.action_keys) + tuple(
        f"right/{k}" for k in right.action_keys
    )
    assert set(both.env_spec.action_limits) == set(both.action_keys)
    assert both.env_spec.gripper_keys == ("left/gripper", "right/gripper")
    both.reset()
    obs = both.observe()
    assert obs["joint_positions"]["left/shoulder_pan"] == 0.0
    for _ in range(30):
        result = both.step({"right/elbow_flex": -0.7, "shoulder_pan": 1.0})
    assert result.info["unknown_keys"] == ["shoulder_pan"]
    assert result.observation["joint_positions"]["right/elbow_flex"] < -0.5
    assert abs(result.observation["joint_positions"]["left/elbow_flex"]) < 0.1  # gravity sag only


def test_privileged_state_of_a_floating_base_robot() -> None:
    scene = MujocoScene()
    scene.add_robot("dog", "go2", pos=(1.0, 0.5, 0.0))
    scene.add_object("box", pos=(3.0, 0.0, 0.1))
    env = scene.make_env("dog")
    env.reset()
    state = env.privileged_state()
    base = state["robots"]["dog"]
    # the 'home' keyframe puts the base 0.27 m up; the robot's scene pose offsets it
    assert base["base_pos"] == pytest.approx([1.0, 0.5, 0.27])
    assert base["base_quat"] == pytest.approx([1.0, 0.0, 0.0, 0.0])
    assert len(state["qpos"]) == scene.model.nq and len(state["qvel"]) == scene.model.nv
    assert state["time"] == 0.0
    assert state["bodies"]["box"]["pos"] == pytest.approx([3.0, 0.0, 0.1])
    assert "dog/base" in state["bodies"]
    for _ in range(25):  # zero torques: the Go2 falls
        result = env.step({k: 0.0 for k in env.action_keys})
    state = env.privileged_state()
    assert state["robots"]["dog"]["base_pos"][2] < 0.2
    assert state["contacts"] and {"geom1", "geom2", "dist"} <= set(state["contacts"][0])
    assert any("floor" in (c["geom1"], c["geom2"]) for c in state["contacts"])
    assert state["time"] == pytest.approx(result.info["sim_time_s"])
    assert len(state["robots"]["dog"]["base_lin_vel"]) == 3


def test_reward_and_terminal_hooks_see_privileged_state() -> None:
    scene = MujocoScene()
    scene.add_robot("dog", "go2")
    seen = []

    def height(state: dict) -> float:
        seen.append(state["time"])
        return state["robots"]["dog"]["base_pos"][2]

    env = scene.make_env(
        "dog", reward_fn=height, terminal_fn=lambda s: s["robots"]["dog"]["base_pos"][2] < 0.2
    )
    env.reset()
    results = [env.step({}) for _ in range(30)]
    assert seen == pytest.approx([r.info["sim_time_s"] for r in results])  # state after each step
    assert 0.2 < results[0].reward < 0.3
    assert results[-1].terminated and not results[0].terminated
    assert len(seen) == 30


def test_reset_restores_the_home_keyframe_and_noise_is_seeded() -> None:
    scene = MujocoScene()
    scene.add_robot("dog", "go2")
    plain = scene.make_env("dog")
    home = plain.reset(seed=None)["joint_positions"]
    env = scene.make_env("dog", reset_noise=0.05)
    assert home["FL_thigh_joint"] == pytest.approx(0.9) and home["FL_calf_joint"] == pytest.approx(
        -1.8
    )
    a = env.reset(seed=1)["joint_positions"]
    b = env.reset(seed=1)["joint_positions"]
    c = env.reset(seed=2)["joint_positions"]
    assert a == b and a != c
    assert max(abs(a[k] - home[k]) for k in a) <= 0.05 + 1e-12
    assert plain.reset(seed=1)["joint_positions"] == plain.reset(seed=2)["joint_positions"]


def test_env_follows_a_recompiled_scene(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    env.reset()
    for _ in range(20):
        env.step({"shoulder_pan": 0.5})
    q = env.observe()["joint_positions"]["shoulder_pan"]
    arm_scene.add_object("cube", pos=(0.3, 0.3, 0.05))
    try:
        assert env.observe()["joint_positions"]["shoulder_pan"] == pytest.approx(q)
        assert env.step({})  # rebinds to the new model without error
    finally:
        arm_scene.remove_object("cube")


def test_env_of_a_removed_robot_fails_clearly() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm")
    scene.remove_robot("arm")
    with pytest.raises((RuntimeError, ValueError), match="arm"):
        env.step({})


def test_make_env_returns_a_mujoco_env(arm_scene: MujocoScene) -> None:
    env = arm_scene.make_env("arm")
    assert isinstance(env, MujocoEnv) and env.scene is arm_scene and env.robot_names == ("arm",)
