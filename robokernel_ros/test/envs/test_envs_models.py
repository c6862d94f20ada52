"""Packaged robot models and model-name resolution."""

from __future__ import annotations

from pathlib import Path

import mujoco
import pytest
from robokernel_ros.envs import PACKAGED_MODELS, packaged_models, resolve_model


def test_packaged_models_are_installed_and_found_through_the_import_system() -> None:
    models = packaged_models()
    assert set(models) == {"so101", "panda", "go2"}
    for name, path in models.items():
        assert path.is_file(), name
        assert path.suffix == ".xml"
        assert PACKAGED_MODELS[name].module.replace("_", "") in str(path).replace("_", "").replace(
            "-", ""
        )


@pytest.mark.parametrize(("name", "nu"), [("so101", 6), ("panda", 8), ("go2", 12)])
def test_each_packaged_model_loads_in_this_mujoco(name: str, nu: int) -> None:
    model = mujoco.MjModel.from_xml_path(str(resolve_model(name)))
    assert model.nu == nu


def test_resolve_model_accepts_a_path(tmp_path: Path) -> None:
    xml = tmp_path / "pendulum.xml"
    xml.write_text(
        "<mujoco><worldbody><body><joint type='hinge'/><geom size='.1'/></body></worldbody></mujoco>"
    )
    assert resolve_model(str(xml)) == xml.resolve()
    assert resolve_model(xml) == xml.resolve()


def test_resolve_model_refuses_an_unknown_name_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"model='ur5'.*choices: go2, panda, so101.*no such file"):
        resolve_model("ur5")


def test_resolve_model_refuses_a_missing_file() -> None:
    with pytest.raises(ValueError, match=r"model='/no/such/robot.xml'.*no such file"):
        resolve_model("/no/such/robot.xml")


def test_resolve_model_refuses_a_directory_and_a_non_xml_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is a directory"):
        resolve_model(tmp_path)
    urdf = tmp_path / "robot.urdf"
    urdf.write_text("<robot/>")
    with pytest.raises(ValueError, match=r"must be an MJCF file ending in \.xml"):
        resolve_model(urdf)


@pytest.mark.parametrize("bad", [None, 3, True, "", "  "])
def test_resolve_model_refuses_non_names(bad: object) -> None:
    with pytest.raises(ValueError, match=r"model=.*must be a packaged model name|no such file"):
        resolve_model(bad)  # type: ignore[arg-type]
