"""wbc_install_torque_control on real MuJoCo: the Go2's torque motors behind a PD shim.

Refusals (the shared boolean-flag domain, before anything is built; robots the shim
cannot apply to), standing on the shim versus the same motors without it, the model
and the env as before once the call ends (however it ends), the trace's record of
the shim, and a bit-stable seeded rollout.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from robokernel_ros.kernel.events import EPISODE_START, PRIVILEGED
from robokernel_ros.policies.base import register_provider
from robokernel_ros.policies.mock import MockPolicy
from robokernel_ros.rollout import SimWorkcell, envelope_json, envelope_text
from robokernel_ros.rollout.replay import ReplayPolicy

from robokernel_ros import cli

FLAG = "wbc_install_torque_control"
STAND = {  # the Go2's 'home' crouch as joint targets (as torques it is a collapse)
    f"{leg}_{part}": q
    for leg in ("FL", "FR", "RL", "RR")
    for part, q in (("hip", 0.0), ("thigh", 0.9), ("calf", -1.8))
}
BELOW_STANDING = [
    {"predicate": "base_below_z", "z": 0.2}
]  # home: 0.27 m; the benchmark fails at 0.15
BUILT: list[str] = []


class CountingPolicy(MockPolicy):
    provider = "counting_wbc"

    def __init__(self, **config):
        BUILT.append("built")
        super().__init__(**config)


register_provider("counting_wbc", CountingPolicy, replace=True)


@pytest.fixture(scope="module")
def cell():
    c = SimWorkcell(trace_dir=None)
    assert c.add_robot("dog", "go2")["status"] == "success"
    assert c.add_robot("arm", "so101", pos=(1.5, 0.0, 0.0))["status"] == "success"
    c.register_builtin_benchmarks()
    yield c
    c.close()


def model_arrays(cell):
    m = cell.scene.model
    return [a.copy() for a in (m.actuator_gainprm, m.actuator_biasprm, m.actuator_ctrlrange,
                               m.actuator_forcerange, m.actuator_gear)]  # fmt: skip


def stand(cell, n_steps=250, **kwargs):
    """The constant standing target, stopped once the base drops below a standing height."""
    out = cell.run_policy("dog", policy_object=ReplayPolicy([dict(STAND)] * n_steps), n_steps=n_steps,
                          action_horizon=1, stop_when=BELOW_STANDING, **kwargs)  # fmt: skip
    assert out["status"] == "success", envelope_text(out)
    return envelope_json(out)


@pytest.mark.parametrize("value", ["false", 1, None])
def test_a_non_boolean_flag_is_refused_by_every_call_before_anything_is_built(cell, value):
    BUILT.clear()
    before = model_arrays(cell)
    message = f"{FLAG}={value!r}: must be a boolean (True or False), got {type(value).__name__}"
    calls = [
        lambda: cell.run_policy("dog", policy_provider="counting_wbc", **{FLAG: value}),
        lambda: cell.start_policy("dog", policy_provider="counting_wbc", **{FLAG: value}),
        lambda: cell.eval_policy("dog", policy_provider="counting_wbc", **{FLAG: value}),
        lambda: cell.evaluate_benchmark("go2_walk_forward", policy_provider="counting_wbc", **{FLAG: value}),
        lambda: cell.run_multi_policy({"dog": "counting_wbc"}, **{FLAG: value}),
    ]  # fmt: skip
    for call in calls:
        out = call()
        assert out["status"] == "error" and envelope_text(out) == message
    assert BUILT == [] and envelope_json(cell.list_policies_running())["count"] == 0
    assert all(np.array_equal(a, b) for a, b in zip(before, model_arrays(cell), strict=True))


def test_the_flag_is_refused_where_it_cannot_apply_naming_the_robot_and_why(cell):
    BUILT.clear()
    text = envelope_text(cell.run_policy("arm", policy_provider="counting_wbc", **{FLAG: True}))
    assert text.startswith(f"{FLAG}=True: robot 'arm' has no torque motor to shim")
    assert "position servos" in text
    text = envelope_text(
        cell.run_multi_policy({"dog": "mock", "arm": "counting_wbc"}, **{FLAG: True})
    )
    assert "robot 'arm' has no torque motor" in text
    for gains, expected in [
        ({"FL_hip": {"kp": 1.0, "kd": 1.0}}, "wbc_gains['FL_hip']: not a joint of robot 'dog' driven by a torque motor"),
        ({"FL_hip_joint": {"kp": 0.0, "kd": 1.0}}, "wbc_gains['FL_hip_joint']['kp']=0.0: must be a positive finite number"),
        ({"FL_hip_joint": {"kp": 1.0, "kd": float("nan")}}, "['kd']=nan: must be a positive finite number"),
        ({"FL_hip_joint": {"kp": 1.0}}, "must be {'kp': kp, 'kd': kd}"),
        ("stiff", "wbc_gains='stiff': must be a dict {joint: {'kp': ..., 'kd': ...}}"),
    ]:  # fmt: skip
        text = envelope_text(
            cell.run_policy("dog", policy_provider="counting_wbc", wbc_gains=gains, **{FLAG: True})
        )
        assert expected in text, text
    text = envelope_text(cell.run_policy("dog", wbc_gains={"FL_hip_joint": {"kp": 1.0, "kd": 1.0}}))
    assert "with wbc_install_torque_control=False: the gains are the torque shim's" in text
    text = envelope_text(
        cell.run_multi_policy({"dog": "mock"}, wbc_gains={"cat": {}}, **{FLAG: True})
    )
    assert "wbc_gains: keys ['cat'] name no robot of this call" in text
    assert BUILT == []


def test_a_ros_robot_is_refused_by_name():
    from robokernel_ros.ros.ros_env import RosScene

    cell = SimWorkcell(
        scene=RosScene("ur5", None), trace_dir=None
    )  # refused before its env is used
    try:
        text = envelope_text(cell.run_policy("ur5", **{FLAG: True}))
        assert text.startswith(f"{FLAG}=True: robot 'ur5' is not simulated here (RosScene)")
        assert "ros2_control" in text
    finally:
        cell.close()


def test_the_go2_stands_on_the_shim_and_collapses_on_the_same_motors_without_it(cell, tmp_path):
    before = model_arrays(cell)
    starts = []
    shimmed = stand(cell, **{FLAG: True}, trace_dir=tmp_path, bag=False,
                    observer=lambda e: starts.append(e.data) if e.kind == EPISODE_START else None)  # fmt: skip
    assert shimmed["stopped_reason"] == "budget" and shimmed["steps_advanced"] == 250
    assert shimmed["sim_time_s"] == pytest.approx(5.0)  # 5 s above a standing height
    assert shimmed[FLAG] is True and shimmed["torque_shim_gains"]["dog"]["FL_calf_joint"] == {
        "kp": 60.0,
        "kd": 2.0,
    }
    # the trace records the shim and its gains; the shield reviewed joint targets
    (start,) = starts
    assert start["torque_shim"]["dog"]["joints"]["RR_thigh_joint"] == {
        "actuator": "RR_thigh",
        "kp": 60.0,
        "kd": 2.0,
    }
    assert start["env"]["action_limits"]["FL_calf"] == [-2.7227, -0.83776]  # the joint range
    (run_dir,) = tmp_path.iterdir()
    first = json.loads((run_dir / "events.jsonl").read_text().splitlines()[0])
    assert first["kind"] == EPISODE_START and "torque_shim" in first["data"]
    # the actuators are as before: a following call without the flag drives torques
    assert cell.scene.torque_shim("dog") is None
    assert all(np.array_equal(a, b) for a, b in zip(before, model_arrays(cell), strict=True))
    bare = stand(cell)
    assert bare["stopped_reason"] == "predicate" and bare["steps_advanced"] < 50
    assert bare[FLAG] is False and "torque_shim_gains" not in bare
    env = cell.scene.make_env("dog")
    assert env.env_spec.action_limits["FL_calf"] == (-45.43, 45.43)  # torque again
    assert env.actuator_kinds["FL_calf"] == "motor"


def test_call_gains_override_the_defaults_and_soft_gains_sag(cell):
    soft = {f"{leg}_{part}_joint": {"kp": 20.0, "kd": 0.5} for leg in ("FL", "FR", "RL", "RR")
            for part in ("hip", "thigh", "calf")}  # fmt: skip
    j = stand(cell, n_steps=100, wbc_gains=soft, **{FLAG: True})
    assert j["stopped_reason"] == "predicate"  # legged_gym's kp=20 cannot hold the crouch
    assert j["torque_shim_gains"]["dog"]["FL_hip_joint"] == {"kp": 20.0, "kd": 0.5}


def test_the_shim_is_removed_however_the_call_ends(cell):
    def boom(ctx):
        if ctx["step"] >= 3:
            raise RuntimeError("criterion failed")
        return False

    out = cell.run_policy("dog", n_steps=20, stop_when=boom, **{FLAG: True})
    assert out["status"] == "error" and "criterion failed" in envelope_text(out)
    assert cell.scene.torque_shim("dog") is None
    out = cell.run_policy("dog", n_steps=20, policy_config={"fail_on_call": 2}, **{FLAG: True})
    assert envelope_json(out)["stopped_reason"].startswith("error")
    assert cell.scene.torque_shim("dog") is None
    started = cell.start_policy("dog", n_steps=100000, fast_mode=False, **{FLAG: True})
    assert started["status"] == "success", envelope_text(started)
    deadline = time.monotonic() + 30.0
    while cell.scene.torque_shim("dog") is None:  # stop it while it drives through the shim
        assert time.monotonic() < deadline, "the started rollout never installed its shim"
        time.sleep(0.005)
    assert cell.stop_policy("dog")["status"] == "success"
    assert envelope_json(cell.wait_policy("dog", timeout_s=30))["stopped_reason"] == "stopped"
    assert cell.scene.torque_shim("dog") is None


def test_a_seeded_rollout_with_the_shim_is_bit_stable(cell):
    def rollout():
        states = []
        out = cell.eval_policy("dog", n_episodes=2, max_steps=40, seed=7, policy_config={"amplitude": 0.2},
                               observer=lambda e: states.append(e.data["state"]["qpos"]) if e.kind == PRIVILEGED
                               else None, **{FLAG: True})  # fmt: skip
        assert out["status"] == "success", envelope_text(out)
        return states, envelope_json(out)["avg_reward"]

    first, second = rollout(), rollout()
    assert first == second and len(first[0]) >= 2
    assert first[0][0] != first[0][-1]  # the robot moved


def test_the_benchmark_zero_policy_stands_on_the_shim(cell, tmp_path, capsys):
    spec = cell.builtin_benchmark_specs()["go2_walk_forward"]
    spec["max_steps"] = 100
    path = tmp_path / "go2.json"
    path.write_text(json.dumps(spec))
    args = [
        "benchmark",
        str(path),
        "--episodes",
        "1",
        "--policy-config",
        '{"amplitude": 0.0}',
        "--no-trace",
        "--json",
    ]
    assert cli.main([*args, "--wbc-install-torque-control"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["episodes"][0]["outcome"] == "truncated"  # neither collapsed nor toppled in 2 s
    assert report[FLAG] is True
    assert cli.main([*args, "--wbc-gains", '{"FL_hip_joint": {"kp": 30, "kd": 1}}']) == 1
    assert "the gains are the torque shim's" in capsys.readouterr().err


def test_the_shield_reviews_the_joint_targets_not_the_torques(cell):
    bent = {**STAND, "FL_calf": -0.5}  # past the calf's range end (-0.838 rad); as a torque, tiny
    runs = {}
    for flag in (True, False):
        out = cell.run_policy("dog", policy_object=ReplayPolicy([dict(bent)] * 5), n_steps=5,
                              action_horizon=1, **{FLAG: flag})  # fmt: skip
        runs[flag] = envelope_json(out)["safety_interventions"]
    assert runs[True] >= 5 and runs[False] == 0
