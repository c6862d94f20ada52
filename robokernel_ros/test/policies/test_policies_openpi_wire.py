"""openpi's wire format here against openpi-client's own codec, the strict decoder's
refusals, and the key mapping both ways."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")

from robokernel_ros.policies.openpi_wire import (  # noqa: E402
    OpenpiMapping,
    OpenpiWireError,
    packb,
    unpackb,
)

MESSAGE = {
    "state": np.arange(6, dtype=np.float64) / 7,
    "images": {"cam": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)},
    "prompt": "pick",
    "scalar": np.float32(1.25),
    "flag": np.bool_(True),
}


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _same(a[key], b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key])
            assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype


def test_openpi_clients_codec_and_ours_read_each_other() -> None:
    _same(unpackb(msgpack_numpy.packb(MESSAGE)), MESSAGE)
    _same(msgpack_numpy.unpackb(packb(MESSAGE)), MESSAGE)
    assert packb(MESSAGE) == msgpack_numpy.packb(MESSAGE)


def test_the_decoder_refuses_what_is_not_numeric_openpi_msgpack() -> None:
    import msgpack

    def array(fields):
        base = {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "<f8", b"shape": [1]}
        return msgpack.packb({"x": {**base, **fields}})

    for data, reason in (
        (pickle.dumps({"x": 1}), "not an openpi msgpack message"),
        (array({b"dtype": "|O"}), "refused"),
        (array({b"dtype": "|V8"}), "refused"),
        (array({b"dtype": "<c16", b"data": b"\x00" * 16}), "refused"),
        (array({b"shape": [2]}), "has 8 bytes"),
        (array({b"shape": [-1]}), "refused"),
        (b"\xc1", "not an openpi msgpack message"),
    ):
        with pytest.raises(OpenpiWireError, match=reason):
            unpackb(data)
    with pytest.raises(ValueError, match="unsupported dtype"):
        packb({"x": np.array([object()])})


def test_the_default_mapping_is_openpis_state_images_prompt_layout() -> None:
    mapping = OpenpiMapping.from_config({})
    names = ("j0", "j1")
    image = np.zeros((4, 5, 3), dtype=np.uint8)
    obs = {"joint_positions": {"j0": 0.5, "j1": -0.5}, "images": {"front": image}}
    request = mapping.to_openpi(obs, "go", robot_names=names)
    assert set(request) == {"state", "images", "prompt"} and set(request["images"]) == {"front"}
    back, instruction = mapping.from_openpi(unpackb(packb(request)), robot_names=names)
    assert instruction == "go" and back["joint_positions"] == obs["joint_positions"]
    assert back["images"]["front"].shape == (4, 5, 3)


def test_a_chw_flat_mapping_with_a_split_state_reads_what_it_writes() -> None:
    mapping = OpenpiMapping.from_config({
        "state": {"observation/joint_position": ["a", "b"], "observation/gripper_position": ["g"]},
        "images": {"observation/image": "wrist"}, "image_layout": "chw", "flat_keys": True,
        "prompt": "task", "action_names": ["a", "b", "g"],
    })  # fmt: skip
    image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    obs = {"joint_positions": {"a": 1.0, "b": 2.0, "g": 3.0}, "images": {"wrist": image}}
    request = mapping.to_openpi(obs, "stack", robot_names=("a", "b", "g"))
    assert request["observation/image"].shape == (3, 4, 5)
    assert list(request["observation/gripper_position"]) == [3.0]
    back, task = mapping.from_openpi(request, robot_names=())
    assert task == "stack" and back["joint_positions"] == {"a": 1.0, "b": 2.0, "g": 3.0}
    np.testing.assert_array_equal(back["images"]["wrist"], image)
    assert mapping.columns(("x",)) == ("a", "b", "g")


def test_an_observation_the_mapping_cannot_read_is_refused_naming_the_key() -> None:
    mapping = OpenpiMapping.from_config({"state_names": ["a", "b"]})
    with pytest.raises(ValueError, match="no state key 'state'"):
        mapping.from_openpi({"prompt": "x"}, robot_names=())
    with pytest.raises(ValueError, match="has 3 values; the mapping names 2"):
        mapping.from_openpi({"state": np.zeros(3)}, robot_names=())
    with pytest.raises(ValueError, match="not text"):
        mapping.from_openpi({"state": np.zeros(2), "prompt": np.zeros(1)}, robot_names=())
    with pytest.raises(ValueError, match="has no names"):
        OpenpiMapping.from_config({}).from_openpi({"state": np.zeros(2)}, robot_names=())


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"stat": "x"}, "stat"),
        ({"state": 1}, "state"),
        ({"state_names": "ab"}, "state_names"),
        ({"images": ["a"]}, "images"),
        ({"image_layout": "cwh"}, "image_layout"),
        ({"flat_keys": "yes"}, "flat_keys"),
        ({"actions": ""}, "actions"),
        ({"state": {"a": [], "b": []}}, "state"),
    ],
)
def test_a_bad_mapping_is_refused_naming_its_key(config, key) -> None:
    with pytest.raises(ValueError, match=key):
        OpenpiMapping.from_config(config)
