"""The Observation message carries an observation's top-level numbers (a contract's
non-joint state streams, a task's `goal.<joint>`): what a remote policy's server hands
its policy is the observation an in-process policy is given."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("rclpy")

from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from robokernel_ros.ros import wire  # noqa: E402

from robokernel_interfaces.msg import Observation  # noqa: E402

OBS = {
    "joint_positions": {"shoulder_pan": 0.5, "gripper": -0.1},
    "joint_velocities": {"shoulder_pan": 0.0, "gripper": 0.25},
    "ft_wrench.force.x": 1.5,
    "ft_wrench.torque.z": np.float32(-0.25),
    "tcp_pose.position.z": 0.42,
    "goal.shoulder_pan": 0.6,
    "count": 3,
    "actuator_targets": {"m1": 0.25},
    "ee_pos": np.array([1.0, 2.0, 3.0]),
}


def _numbers(observation) -> dict[str, float]:
    return {k: v for k, v in observation.items() if isinstance(v, float)}


def test_top_level_numbers_survive_the_wire_as_floats_by_name() -> None:
    msg = wire.observation_to_msg(OBS, run_id="r", step=4)
    # through DDS's bytes, as the policy server receives it
    received = deserialize_message(serialize_message(msg), Observation)
    assert list(received.value_names) == [
        "ft_wrench.force.x", "ft_wrench.torque.z", "tcp_pose.position.z", "goal.shoulder_pan",
        "count",
    ]  # fmt: skip
    back = wire.msg_to_observation(received)
    assert _numbers(back) == {
        "ft_wrench.force.x": 1.5,
        "ft_wrench.torque.z": pytest.approx(-0.25),
        "tcp_pose.position.z": 0.42,
        "goal.shoulder_pan": 0.6,
        "count": 3.0,
    }
    assert back["joint_positions"] == OBS["joint_positions"]
    assert back["joint_velocities"] == OBS["joint_velocities"]
    assert back["actuator_targets"] == {"m1": 0.25}
    np.testing.assert_array_equal(back["ee_pos"], OBS["ee_pos"])
    assert set(back) == set(OBS)  # nothing lost, nothing added


def test_the_servers_observation_view_reads_the_numbers_as_the_dict_does() -> None:
    msg = deserialize_message(serialize_message(wire.observation_to_msg(OBS, run_id="r", step=0)), Observation)  # fmt: skip
    view = wire.ObservationView(msg)
    assert view["tcp_pose.position.z"] == 0.42  # read alone, before anything else
    assert view.get("goal.shoulder_pan") == 0.6 and "nope" not in view
    whole, plain = dict(wire.ObservationView(msg)), wire.msg_to_observation(msg)
    np.testing.assert_array_equal(whole.pop("ee_pos"), plain.pop("ee_pos"))
    assert whole == plain and _numbers(whole) == _numbers(wire.msg_to_observation(msg))


def test_a_bool_or_a_string_is_not_sent_and_a_refilled_message_drops_old_numbers() -> None:
    msg = wire.observation_to_msg(
        {"joint_positions": {"a": 1.0}, "done": True, "note": "x", "w": 2.0}, run_id="r", step=0
    )
    assert list(msg.value_names) == ["w"] and list(msg.values) == [2.0]
    again = wire.observation_to_msg({"joint_positions": {"a": 1.0}}, run_id="r", step=1, msg=msg)
    assert again is msg and len(msg.value_names) == 0 and len(msg.values) == 0
    assert wire.msg_to_observation(msg) == {"joint_positions": {"a": 1.0}}
