"""MujocoScene composition and mutations (real MuJoCo)."""

from __future__ import annotations

import threading
from pathlib import Path

import mujoco
import numpy as np
import pytest
from robokernel_ros.envs import MujocoScene


def test_an_empty_scene_has_a_floor_a_light_and_the_default_timestep() -> None:
    scene = MujocoScene()
    assert scene.robots() == [] and scene.objects() == [] and scene.cameras() == []
    assert scene.timestep == 0.002
    assert scene.gravity == (0.0, 0.0, -9.81)
    assert mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_GEOM, "floor") >= 0
    assert scene.model.nlight >= 1


def test_robots_are_attached_under_their_name_prefix() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101", pos=(0.5, 0.0, 0.0))
    names = [scene.model.actuator(i).name for i in range(scene.model.nu)]
    assert names == [f"arm/{k}" for k in scene.robot_action_keys("arm")]
    assert scene.data.xpos[scene.model.body("arm/base").id] == pytest.approx([0.5, 0.0, 0.0])
    with pytest.raises(
        ValueError, match=r"name='arm': a robot with this name is already in the scene"
    ):
        scene.add_robot("arm", "so101")
    with pytest.raises(ValueError, match=r"name='a/b': must not contain '/'"):
        scene.add_robot("a/b", "so101")
    with pytest.raises(ValueError, match=r"pos=\(1, 2\): must be a sequence of 3 finite numbers"):
        scene.add_robot("other", "so101", pos=(1, 2))
    with pytest.raises(ValueError, match=r"model='nope'.*choices"):
        scene.add_robot("other", "nope")
    assert scene.robots() == ["arm"]  # refused calls changed nothing
    scene.remove_robot("arm")
    assert scene.robots() == [] and scene.model.nu == 0
    with pytest.raises(ValueError, match=r"name='arm': no such robot"):
        scene.remove_robot("arm")


def test_adding_a_robot_keeps_the_state_of_the_others() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm")
    env.reset()
    for _ in range(25):
        env.step({"shoulder_pan": 0.7})
    before = dict(env.observe()["joint_positions"])
    t = scene.data.time
    scene.add_robot("dog", "go2", pos=(1.0, 0.0, 0.0))
    after = env.observe()["joint_positions"]
    assert after == pytest.approx(before)
    assert scene.data.time == t
    assert env.hold_action(None)["shoulder_pan"] == 0.7
    # the new robot starts at its home keyframe at its scene pose
    assert scene.data.xpos[scene.model.body("dog/base").id] == pytest.approx([1.0, 0.0, 0.27])


def test_objects_add_move_remove() -> None:
    scene = MujocoScene()
    scene.add_object("cube", size=(0.03, 0.03, 0.03), pos=(0.2, 0.0, 0.5), mass=0.2)
    scene.add_object("post", shape="cylinder", size=(0.02, 0.1), pos=(-0.3, 0.0, 0.1), free=False)
    assert scene.objects() == ["cube", "post"]
    body = scene.model.body("cube").id
    assert scene.model.body_mass[body] == pytest.approx(0.2)
    scene.step(250)  # half a second: the free cube falls onto the floor, the post stays
    pos, _ = scene.object_pose("cube")
    assert pos[2] == pytest.approx(0.03, abs=0.005)
    assert scene.object_pose("post")[0] == pytest.approx([-0.3, 0.0, 0.1])
    scene.move_object("cube", (1.0, 1.0, 0.03), quat=(0.0, 0.0, 0.0, 1.0))
    pos, quat = scene.object_pose("cube")
    assert pos == pytest.approx([1.0, 1.0, 0.03]) and abs(quat[3]) == pytest.approx(1.0)
    scene.move_object("post", (0.0, -0.5, 0.1))
    assert scene.object_pose("post")[0] == pytest.approx([0.0, -0.5, 0.1])
    scene.step(10)
    scene.reset()  # objects go back to where they were last moved to
    assert scene.object_pose("cube")[0] == pytest.approx([1.0, 1.0, 0.03])
    scene.remove_object("cube")
    assert scene.objects() == ["post"]
    assert mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_BODY, "cube") == -1


def test_object_refusals_name_parameter_value_and_domain() -> None:
    scene = MujocoScene()
    scene.add_object("cube")
    with pytest.raises(
        ValueError, match=r"name='cube': an object with this name is already in the scene"
    ):
        scene.add_object("cube")
    with pytest.raises(ValueError, match=r"name='floor': already names a body, joint or geom"):
        scene.add_object("floor")
    with pytest.raises(
        ValueError, match=r"shape='cone': must be one of box, sphere, cylinder, capsule, ellipsoid"
    ):
        scene.add_object("c", shape="cone")
    with pytest.raises(
        ValueError, match=r"size=\(0.1,\): must be a sequence of 3 finite positive numbers"
    ):
        scene.add_object("c", size=(0.1,))
    with pytest.raises(ValueError, match=r"size=\(0.1, -1, 0.1\)"):
        scene.add_object("c", size=(0.1, -1, 0.1))
    with pytest.raises(ValueError, match=r"mass=0: must be a positive finite number"):
        scene.add_object("c", mass=0)
    with pytest.raises(ValueError, match=r"rgba=\(2, 0, 0, 1\): must be 4 numbers in \[0, 1\]"):
        scene.add_object("c", rgba=(2, 0, 0, 1))
    with pytest.raises(ValueError, match=r"free='yes': must be a boolean"):
        scene.add_object("c", free="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"quat=\(0, 0, 0, 0\): must be a non-zero quaternion"):
        scene.add_object("c", quat=(0, 0, 0, 0))
    with pytest.raises(ValueError, match=r"name='ghost': no such object \(objects: \['cube'\]\)"):
        scene.move_object("ghost", (0, 0, 0))
    with pytest.raises(ValueError, match=r"name='ghost': no such object"):
        scene.remove_object("ghost")
    assert scene.objects() == ["cube"]


def test_cameras_add_remove_and_robot_cameras_are_listed() -> None:
    scene = MujocoScene()
    scene.add_robot("panda", "panda")
    scene.add_camera("front", pos=(2.0, 0.0, 1.0), lookat=(0.0, 0.0, 0.5))
    scene.add_camera("top", pos=(0.0, 0.0, 3.0), xyaxes=(1, 0, 0, 0, 1, 0), fovy=60)
    assert scene.cameras() == ["front", "top", "panda/handcam_depth", "panda/handcam_rgb"]
    cam = scene.model.camera("front").id
    mujoco.mj_forward(scene.model, scene.data)
    # the camera looks along its -z axis: towards the lookat point
    forward = -scene.data.cam_xmat[cam].reshape(3, 3)[:, 2]
    expected = np.array([-2.0, 0.0, -0.5]) / np.linalg.norm([-2.0, 0.0, -0.5])
    assert forward == pytest.approx(expected, abs=1e-6)
    assert scene.model.cam_fovy[scene.model.camera("top").id] == 60
    with pytest.raises(
        ValueError, match=r"name='front': a camera with this name is already in the scene"
    ):
        scene.add_camera("front", pos=(1, 1, 1))
    with pytest.raises(
        ValueError, match=r"name='panda/handcam_rgb': not a camera added with add_camera"
    ):
        scene.remove_camera("panda/handcam_rgb")
    with pytest.raises(ValueError, match="lookat and xyaxes: give one of them, not both"):
        scene.add_camera("c", pos=(1, 1, 1), lookat=(0, 0, 0), xyaxes=(1, 0, 0, 0, 1, 0))
    with pytest.raises(ValueError, match=r"lookat=.*must differ from pos"):
        scene.add_camera("c", pos=(1, 1, 1), lookat=(1, 1, 1))
    with pytest.raises(ValueError, match=r"fovy=180: must be in \(0, 180\) degrees"):
        scene.add_camera("c", pos=(1, 1, 1), fovy=180)
    scene.remove_camera("front")
    assert scene.cameras() == ["top", "panda/handcam_depth", "panda/handcam_rgb"]


def test_set_gravity_changes_how_objects_fall() -> None:
    scene = MujocoScene()
    scene.add_object("ball", shape="sphere", size=(0.05,), pos=(0.0, 0.0, 2.0))
    scene.set_gravity((0.0, 0.0, -1.0))
    assert scene.gravity == (0.0, 0.0, -1.0)
    scene.step(250)  # 0.5 s at 1 m/s^2: falls 0.125 m
    assert scene.object_pose("ball")[0][2] == pytest.approx(2.0 - 0.5 * 1.0 * 0.5**2, abs=2e-3)
    scene.set_gravity((1.0, 0.0, 0.0))
    scene.reset()
    scene.step(250)
    x, _, z = scene.object_pose("ball")[0]
    assert x == pytest.approx(0.125, abs=2e-3) and z == pytest.approx(2.0)
    with pytest.raises(
        ValueError, match=r"gravity=\(0, 0\): must be a sequence of 3 finite numbers"
    ):
        scene.set_gravity((0, 0))
    # survives a recompile
    scene.add_object("other", pos=(5, 5, 1))
    assert scene.gravity == (1.0, 0.0, 0.0)


def test_set_timestep_changes_the_physics_step_and_env_substeps() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm", control_hz=50.0)
    assert env.substeps == 10
    scene.set_timestep(0.001)
    assert scene.timestep == 0.001 and scene.model.opt.timestep == 0.001
    env.reset()
    result = env.step({})
    assert env.substeps == 20 and env.control_hz == 50.0
    assert result.info["sim_time_s"] == pytest.approx(0.02)
    scene.step(1)
    assert scene.data.time == pytest.approx(0.021)
    scene.add_object("cube", pos=(1, 1, 0.05))  # survives a recompile
    assert scene.timestep == 0.001
    for bad in (0, -0.001, float("nan"), "0.002"):
        with pytest.raises(ValueError, match="timestep="):
            scene.set_timestep(bad)  # type: ignore[arg-type]


def test_reset_goes_back_to_time_zero_and_the_home_pose() -> None:
    scene = MujocoScene()
    scene.add_robot("dog", "go2")
    home = scene.data.qpos.copy()
    scene.step(100)
    assert scene.data.time > 0 and not np.allclose(scene.data.qpos, home)
    scene.reset(seed=3)
    assert scene.data.time == 0.0
    assert scene.data.qpos == pytest.approx(home)
    with pytest.raises(ValueError, match=r"seed='3': must be an integer or None"):
        scene.reset(seed="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"noise=-1: must be a non-negative finite number"):
        scene.reset(noise=-1)


def _pendulum_xml(tmp_path: Path) -> Path:
    xml = tmp_path / "workcell.xml"
    xml.write_text(
        """<mujoco>
  <option timestep="0.005" gravity="0 0 -5"/>
  <worldbody>
    <light pos="0 0 3"/>
    <geom name="ground" type="plane" size="2 2 .1"/>
    <body name="link" pos="0 0 1">
      <joint name="swing" type="hinge" axis="0 1 0" damping="3"/>
      <geom type="capsule" fromto="0 0 0 0 0 -.5" size=".03"/>
    </body>
    <camera name="side" pos="0 -3 1" xyaxes="1 0 0 0 0 1"/>
  </worldbody>
  <actuator><position name="swing_servo" joint="swing" kp="20" ctrlrange="-1 1"/></actuator>
  <keyframe><key name="home" qpos="0.3" ctrl="0.3"/></keyframe>
</mujoco>"""
    )
    return xml


def test_load_scene_replaces_everything_with_the_file(tmp_path: Path) -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    scene.add_object("cube")
    scene.add_camera("front", pos=(1, 1, 1))
    scene.load_scene(_pendulum_xml(tmp_path))
    assert scene.robots() == [] and scene.objects() == []
    assert scene.cameras() == ["side"]
    assert scene.timestep == 0.005 and scene.gravity == (0.0, 0.0, -5.0)
    assert mujoco.mj_name2id(scene.model, mujoco.mjtObj.mjOBJ_GEOM, "floor") == -1
    assert scene.data.qpos[0] == pytest.approx(0.3)  # the file's home keyframe
    # robots and objects can be added on top
    scene.add_robot("arm", "so101", pos=(1.0, 0.0, 0.0))
    assert scene.model.nu == 7
    scene.reset()
    assert scene.data.qpos[scene.model.joint("swing").qposadr[0]] == pytest.approx(0.3)


def test_load_scene_can_expose_the_file_as_a_robot(tmp_path: Path) -> None:
    scene = MujocoScene()
    scene.load_scene(_pendulum_xml(tmp_path), robot="pendulum")
    assert scene.robots() == ["pendulum"]
    assert scene.robot_action_keys("pendulum") == ("swing_servo",)
    assert scene.robot_joint_names("pendulum") == ("swing",)
    env = scene.make_env("pendulum", control_hz=20.0)
    assert env.substeps == 10
    obs = env.reset()
    assert obs["joint_positions"]["swing"] == pytest.approx(0.3)
    assert obs["actuator_targets"]["swing_servo"] == pytest.approx(0.3)
    for _ in range(40):
        obs = env.step({"swing_servo": -0.5}).observation
    assert obs["joint_positions"]["swing"] < -0.3


def test_load_scene_refusals_leave_the_scene_as_it_was(tmp_path: Path) -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><geom type='nonsense'/></worldbody></mujoco>")
    with pytest.raises(ValueError, match=r"path=.*bad.xml.*MuJoCo cannot load it"):
        scene.load_scene(bad)
    with pytest.raises(ValueError, match=r"path='.*missing.xml'.*no such file"):
        scene.load_scene(tmp_path / "missing.xml")
    assert scene.robots() == ["arm"] and scene.model.nu == 6


def test_the_mutation_guard_refuses_mutations_and_resets() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    calls: list[str] = []

    def guard(operation: str) -> None:
        calls.append(operation)
        raise RuntimeError(f"{operation}: refused, a rollout drives robot 'arm'; call stop_policy")

    scene.set_mutation_guard(guard)
    attempts = {
        "add_robot": lambda: scene.add_robot("b", "so101"),
        "remove_robot": lambda: scene.remove_robot("arm"),
        "add_object": lambda: scene.add_object("cube"),
        "remove_object": lambda: scene.remove_object("cube"),
        "move_object": lambda: scene.move_object("cube", (0, 0, 0)),
        "add_camera": lambda: scene.add_camera("c", pos=(1, 1, 1)),
        "remove_camera": lambda: scene.remove_camera("c"),
        "load_scene": lambda: scene.load_scene("so101"),
        "set_gravity": lambda: scene.set_gravity((0, 0, 0)),
        "set_timestep": lambda: scene.set_timestep(0.001),
        "reset": lambda: scene.reset(),
    }
    for name, attempt in attempts.items():
        with pytest.raises(RuntimeError, match=f"{name}: refused.*stop_policy"):
            attempt()
    assert calls == list(attempts)
    assert scene.robots() == ["arm"] and scene.timestep == 0.002
    scene.set_mutation_guard(None)
    scene.add_object("cube")
    with pytest.raises(ValueError, match="guard=3: must be callable or None"):
        scene.set_mutation_guard(3)  # type: ignore[arg-type]


def test_stepping_and_mutating_from_two_threads_is_serialised_by_the_lock() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    env = scene.make_env("arm")
    env.reset()
    errors: list[BaseException] = []
    stop = threading.Event()

    def drive() -> None:
        try:
            while not stop.is_set():
                result = env.step({"shoulder_pan": 0.4})
                assert np.isfinite(list(result.observation["joint_positions"].values())).all()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=drive)
    worker.start()
    try:
        for i in range(4):
            scene.add_object(f"cube{i}", pos=(2.0, 0.1 * i, 0.05))
            scene.move_object(f"cube{i}", (2.5, 0.1 * i, 0.05))
        for i in range(4):
            scene.remove_object(f"cube{i}")
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()
    assert errors == []
    # How far the worker got depends on the machine's load; settle for a fixed time so
    # the check is about a sane, still-controllable model, not about scheduling.
    for _ in range(150):
        env.step({"shoulder_pan": 0.4})
    assert env.observe()["joint_positions"]["shoulder_pan"] == pytest.approx(0.4, abs=0.05)


def test_to_xml_round_trips_through_mujoco() -> None:
    scene = MujocoScene()
    scene.add_robot("arm", "so101")
    scene.add_object("cube")
    xml = scene.to_xml()
    assert 'name="arm/shoulder_pan"' in xml and 'name="cube"' in xml


def test_actuate_robot_replaces_torque_motors_with_position_servos() -> None:
    scene = MujocoScene()
    scene.add_robot("panda", "panda")
    keys = scene.robot_action_keys("panda")
    added = scene.actuate_robot("panda", kp=200.0, kv=20.0, replace_motors=True)
    assert added == [f"actuator{i}" for i in range(1, 8)]
    assert scene.robot_action_keys("panda") == keys  # same keys, same order
    assert set(scene.robot_actuator_kinds("panda").values()) == {"position"}
    a = scene.model.actuator("panda/actuator1").id
    assert scene.model.actuator_forcerange[a] == pytest.approx(
        [-87.0, 87.0]
    )  # the motor's torque limit
    env = scene.make_env("panda")
    env.reset()
    for _ in range(25):  # settle (joint 4's range excludes its reference position 0)
        env.step(env.hold_action(None))
    q0 = np.array(list(env.observe()["joint_positions"].values())[:7])
    for _ in range(50):
        obs = env.step(env.hold_action(None)).observation
    q1 = np.array(list(obs["joint_positions"].values())[:7])
    assert np.max(np.abs(q1 - q0)) < 0.02  # holds under gravity (a motor arm would fall)
    assert scene.actuate_robot("panda", replace_motors=True) == []  # nothing left to replace


def test_actuate_robot_lets_the_go2_stand_at_home() -> None:
    scene = MujocoScene()
    scene.add_robot("dog", "go2")
    scene.actuate_robot("dog", kp=60.0, kv=3.0, replace_motors=True)
    env = scene.make_env("dog")
    obs = env.reset()
    assert obs["actuator_targets"]["FL_thigh"] == pytest.approx(0.9)  # holds the home pose
    for _ in range(50):
        env.step(env.hold_action(None))
    assert env.privileged_state()["robots"]["dog"]["base_pos"][2] > 0.2


def test_actuate_robot_gives_an_unactuated_model_a_servo_per_joint(tmp_path: Path) -> None:
    xml = tmp_path / "bare.xml"
    xml.write_text(
        """<mujoco><compiler angle="radian"/><worldbody><body pos="0 0 1">
        <joint name="hinge" axis="0 1 0" range="-1 1" damping="2"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".02"/>
        <body pos=".3 0 0"><joint name="slide" type="slide" axis="1 0 0" damping="2"/>
        <geom type="box" size=".02 .02 .02"/></body>
        </body></worldbody></mujoco>"""
    )
    scene = MujocoScene()
    scene.add_robot("bare", str(xml))
    assert scene.robot_action_keys("bare") == ()
    assert scene.actuate_robot("bare", kp=50.0, kv=5.0) == ["hinge", "slide"]
    assert scene.robot_action_keys("bare") == ("hinge", "slide")
    env = scene.make_env("bare")
    assert env.env_spec.action_limits == {"hinge": (-1.0, 1.0)}
    env.reset()
    for _ in range(50):
        obs = env.step({"hinge": 0.5}).observation
    assert obs["joint_positions"]["hinge"] == pytest.approx(0.5, abs=0.1)
    with pytest.raises(ValueError, match="kp=0: must be a positive finite number"):
        scene.actuate_robot("bare", kp=0)
    with pytest.raises(ValueError, match="replace_motors='yes': must be a boolean"):
        scene.actuate_robot("bare", replace_motors="yes")  # type: ignore[arg-type]
