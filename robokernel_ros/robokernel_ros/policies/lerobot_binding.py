"""Name binding between a robot's observation/action keys and a LeRobot policy's features.

Pure Python (no torch, no lerobot): the provider in `policies/lerobot.py` uses it, and
it can be unit-tested and used in preflight without the optional extra.

A LeRobot policy sees flat tensors: `observation.state` (S,), one image per camera
`observation.images.<camera>` (3, H, W), and emits `action` (A,) per step. The robot
sees names: joints, cameras, actuators. The binding says which name sits at which
index. Where the names come from, first match wins:

1. `policy_config` of the run: `state_keys` (one robot observation name per state
   index), `action_keys` (one robot action key per action index), `cameras`
   ({policy camera: robot camera}).
2. The checkpoint folder's `feature_names.json`:
   `{"observation.state": [...], "action": [...], "cameras": {policy: robot}}` - the
   names use LeRobot dataset spelling (`shoulder_pan.pos`) or bare joint names; a
   LeRobot dataset's `meta/info.json` feature "names" lists can be copied as they are
   (a `{"motors": [...]}` dict is flattened).
3. The checkpoint's own `config.json` fields that carry names in LeRobot
   (`action_feature_names` of pi0.5 / pi0-FAST, `dataset_feature_names` of MolmoAct2).
4. The training dataset: `train_config.json` (what `lerobot-train` saves next to the
   weights) names it (`dataset.root`, else `$HF_LEROBOT_HOME/<dataset.repo_id>`); when
   that folder is on this machine, its `meta/info.json` feature names and `robot_type`.
5. `policy_config` `feature_names`: `{"observation.state": [...], "action": [...],
   "observation.environment_state": [...]}` (or `{"features": {...}}`), for checkpoints
   that carry no names.
6. Position: the robot's joint order (state) and action-key order (actions), only
   when the sizes agree; `positional_fallback_used` is then reported. Declared names
   that carry no meaning (`state_0`, `motor_3`, `0`) are bound the same way and also
   set `generic_state_keys_used`.

A declared state name the robot does not have is refused (naming it and what the
robot offers) unless `allow_missing_state_keys=True`, which feeds 0.0 and reports
`missing_state_keys_used`. A size mismatch under positional binding is refused naming
both shapes.

Robot observation names a state can bind to (observation layout of the envs):
`<joint>` and `<joint>.pos` (joint_positions), `<joint>.vel` (joint_velocities),
`<actuator>.target` (actuator_targets), and any top-level float entry by its key.
`observation.environment_state` binds the same way, by name only (no positional
fallback). With a robot convention (`conventions.py`: LeRobot's so_follower names and
units) joint positions are converted to the policy's units on the way in and the
action columns back to the robot's on the way out.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.policies.conventions import JointUnit, RobotConvention

STATE_KEY = "observation.state"
ENV_STATE_KEY = "observation.environment_state"
TRAIN_CONFIG_FILE = "train_config.json"
ACTION_KEY = "action"
IMAGE_PREFIX = "observation.images."
FEATURE_NAMES_FILE = "feature_names.json"

_GENERIC_NAME = re.compile(
    r"^(?:observation\.state|state|action|joint|motor|axis|dim|main|j|m)?[_.\-]?\d+$"
)


class BindingError(ValueError):
    """A robot and a policy that cannot be bound; raised before the first step."""


def is_generic_name(name: str) -> bool:
    """True for names that carry no meaning (`state_0`, `motor_3`, `7`)."""
    return bool(_GENERIC_NAME.match(str(name).strip().lower()))


def _strip_suffix(name: str) -> str:
    return name[:-4] if name.endswith(".pos") else name


def flatten_names(raw: Any) -> list[str] | None:
    """Names as LeRobot datasets write them: a list, or a dict of lists ({"motors": [...]})."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, Mapping):
        out: list[str] = []
        for value in raw.values():
            sub = flatten_names(value)
            if sub:
                out.extend(sub)
        return out or None
    if isinstance(raw, Sequence):
        out = []
        for value in raw:
            sub = flatten_names(value)
            if sub:
                out.extend(sub)
        return out or None
    return [str(raw)]


@dataclass
class PolicyFeatures:
    """What the checkpoint's config.json says the policy consumes and emits."""

    policy_type: str
    state_dim: int | None
    action_dim: int
    cameras: dict[str, tuple[int, int, int]]  # policy camera name -> (C, H, W)
    other_inputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    env_state_dim: int | None = None

    @classmethod
    def from_config_json(cls, config: Mapping[str, Any]) -> PolicyFeatures:
        inputs = config.get("input_features") or {}
        outputs = config.get("output_features") or {}
        state_dim = None
        env_state_dim = None
        cameras: dict[str, tuple[int, int, int]] = {}
        other: dict[str, tuple[int, ...]] = {}
        for key, feat in inputs.items():
            shape = tuple(int(x) for x in (feat.get("shape") or ()))
            ftype = str(feat.get("type", ""))
            if key == STATE_KEY:
                state_dim = int(shape[0]) if shape else 0
            elif key == ENV_STATE_KEY:
                env_state_dim = int(shape[0]) if shape else 0
            elif key.startswith(IMAGE_PREFIX) or ftype == "VISUAL":
                name = key[len(IMAGE_PREFIX) :] if key.startswith(IMAGE_PREFIX) else key
                cameras[name] = (int(shape[0]), int(shape[1]), int(shape[2]))
            else:
                other[key] = shape
        if ACTION_KEY not in outputs:
            raise BindingError(
                f"checkpoint config declares no '{ACTION_KEY}' output feature (outputs: {sorted(outputs)})"
            )
        action_shape = outputs[ACTION_KEY].get("shape") or ()
        if len(action_shape) != 1:
            raise BindingError(
                f"checkpoint action feature has shape {tuple(action_shape)}; a flat (A,) vector is required"
            )
        return cls(
            policy_type=str(config.get("type", "")),
            state_dim=state_dim,
            action_dim=int(action_shape[0]),
            cameras=cameras,
            other_inputs=other,
            env_state_dim=env_state_dim,
        )


@dataclass
class DeclaredNames:
    """Names for the policy's vectors and cameras, and where they came from."""

    state_names: list[str] | None = None
    action_names: list[str] | None = None
    camera_map: dict[str, str] = field(default_factory=dict)  # policy camera -> robot camera
    state_source: str = "none"
    action_source: str = "none"
    env_state_names: list[str] | None = None
    env_state_source: str = "none"
    robot_type: str | None = None  # the training data's robot_type, when known
    robot_type_source: str = "none"

    def fill(self, features: Mapping[str, Any], source: str) -> None:
        """Take the names `features` has ({feature: names or {"names": ...}}) for the
        vectors still unnamed; `source` says where they came from."""
        for key, attr in (
            (STATE_KEY, "state"),
            (ACTION_KEY, "action"),
            (ENV_STATE_KEY, "env_state"),
        ):
            if getattr(self, f"{attr}_names") is not None:
                continue
            raw = features.get(key)
            if isinstance(raw, Mapping) and "names" in raw:
                raw = raw["names"]
            found = flatten_names(raw)
            if found is not None:
                setattr(self, f"{attr}_names", found)
                setattr(self, f"{attr}_source", source)


def read_checkpoint_names(path: Path, config: Mapping[str, Any]) -> DeclaredNames:
    """Names declared by the checkpoint itself (feature_names.json, then config.json)."""
    names = DeclaredNames()
    sidecar = path / FEATURE_NAMES_FILE
    if sidecar.is_file():
        try:
            data = json.loads(sidecar.read_text())
        except json.JSONDecodeError as exc:
            raise BindingError(f"{sidecar}: not valid JSON ({exc})") from exc
        if not isinstance(data, Mapping):
            raise BindingError(f"{sidecar}: must hold a JSON object")
        names.fill(data.get("features", data), FEATURE_NAMES_FILE)
        if isinstance(data.get("robot_type"), str) and data["robot_type"]:
            names.robot_type, names.robot_type_source = data["robot_type"], FEATURE_NAMES_FILE
        cams = data.get("cameras") or {}
        if not isinstance(cams, Mapping):
            raise BindingError(
                f"{sidecar}: 'cameras' must map policy camera names to robot camera names"
            )
        names.camera_map = {_camera_name(k): str(v) for k, v in cams.items()}
    if names.action_names is None and config.get("action_feature_names"):
        names.action_names = flatten_names(config["action_feature_names"])
        names.action_source = "config.json:action_feature_names"
    dataset_names = config.get("dataset_feature_names") or {}
    if isinstance(dataset_names, Mapping):
        if names.state_names is None and dataset_names.get(STATE_KEY):
            names.state_names = flatten_names(dataset_names[STATE_KEY])
            names.state_source = "config.json:dataset_feature_names"
        if names.action_names is None and dataset_names.get(ACTION_KEY):
            names.action_names = flatten_names(dataset_names[ACTION_KEY])
            names.action_source = "config.json:dataset_feature_names"
    info_path = training_dataset_info(path)
    if info_path is not None:
        try:
            info = json.loads(info_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BindingError(f"{info_path}: not readable JSON ({exc})") from exc
        features = info.get("features") if isinstance(info, Mapping) else None
        if isinstance(features, Mapping):
            names.fill(features, str(info_path))
        robot_type = info.get("robot_type") if isinstance(info, Mapping) else None
        if names.robot_type is None and isinstance(robot_type, str) and robot_type:
            names.robot_type, names.robot_type_source = robot_type, str(info_path)
    return names


def training_dataset_info(path: Path) -> Path | None:
    """The training dataset's meta/info.json that `train_config.json` names, when it is
    on this machine (`dataset.root`, else `$HF_LEROBOT_HOME/<repo_id>`, as LeRobot looks)."""
    train_config = path / TRAIN_CONFIG_FILE
    if not train_config.is_file():
        return None
    try:
        dataset = json.loads(train_config.read_text()).get("dataset") or {}
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(dataset, Mapping):
        return None
    candidates = []
    if isinstance(dataset.get("root"), str) and dataset["root"]:
        candidates.append(Path(dataset["root"]).expanduser())
    repo_id = dataset.get("repo_id")
    if isinstance(repo_id, str) and repo_id:
        hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
        home = os.environ.get("HF_LEROBOT_HOME", str(Path(hf_home) / "lerobot"))
        candidates.append(Path(home).expanduser() / repo_id)
    for root in candidates:
        info = root / "meta" / "info.json"
        if info.is_file():
            return info
    return None


def _camera_name(name: str) -> str:
    name = str(name)
    return name[len(IMAGE_PREFIX) :] if name.startswith(IMAGE_PREFIX) else name


def merge_explicit(declared: DeclaredNames, config: Mapping[str, Any]) -> DeclaredNames:
    """Explicit names from policy_config win over the checkpoint's."""
    out = DeclaredNames(
        state_names=declared.state_names,
        action_names=declared.action_names,
        camera_map=dict(declared.camera_map),
        state_source=declared.state_source,
        action_source=declared.action_source,
        env_state_names=declared.env_state_names,
        env_state_source=declared.env_state_source,
        robot_type=declared.robot_type,
        robot_type_source=declared.robot_type_source,
    )
    feature_names = config.get("feature_names")
    if isinstance(feature_names, Mapping):
        out.fill(feature_names.get("features", feature_names), "policy_config:feature_names")
    if config.get("state_keys") is not None:
        out.state_names = [str(x) for x in config["state_keys"]]
        out.state_source = "policy_config:state_keys"
    if config.get("action_keys") is not None:
        out.action_names = [str(x) for x in config["action_keys"]]
        out.action_source = "policy_config:action_keys"
    for k, v in (config.get("cameras") or {}).items():
        out.camera_map[_camera_name(k)] = str(v)
    return out


def observation_lookup(observation: Mapping[str, Any]) -> dict[str, float]:
    """Every scalar a state name can bind to, by name (see the module docstring)."""
    table: dict[str, float] = {}
    for key, value in observation.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            table[str(key)] = float(value)
    for key, value in (observation.get("actuator_targets") or {}).items():
        table[f"{key}.target"] = float(value)
    for key, value in (observation.get("joint_velocities") or {}).items():
        table[f"{key}.vel"] = float(value)
    for key, value in (observation.get("joint_positions") or {}).items():
        table[f"{key}.pos"] = float(value)
        table[str(key)] = float(value)
    return table


@dataclass
class StateBinding:
    """How observation.state is assembled: one source name (or None = 0.0) per index."""

    sources: list[str | None]
    positional: bool = False
    generic: bool = False
    missing: list[str] = field(default_factory=list)
    units: list[JointUnit | None] = field(default_factory=list)  # convention, per index
    feature: str = STATE_KEY

    def vector(self, observation: Mapping[str, Any]) -> list[float]:
        """The policy's vector, in the policy's units (the convention's, when bound)."""
        table = observation_lookup(observation)
        out: list[float] = []
        for i, name in enumerate(self.sources):
            if name is None:
                out.append(0.0)
                continue
            try:
                value = table[name]
            except KeyError:
                raise BindingError(
                    f"observation lacks '{name}' (bound to {self.feature}); it has {sorted(table)}"
                ) from None
            unit = self.units[i] if self.units else None
            out.append(value if unit is None else float(unit.to_lerobot(value)))
        return out


@dataclass
class CameraBinding:
    """Policy camera -> robot camera, and the (H, W) the policy expects."""

    robot_camera: dict[str, str]  # policy camera -> robot camera
    sizes: dict[str, tuple[int, int]]
    positional: bool = False


@dataclass
class ActionBinding:
    """Robot action key per policy action index (all indices are bound)."""

    keys: list[str]
    positional: bool = False
    generic: bool = False
    unbound_robot_keys: list[str] = field(default_factory=list)
    units: list[JointUnit | None] = field(default_factory=list)  # convention, per index

    def to_robot(self, array: Any) -> Any:
        """A (steps, A) chunk in the policy's units -> the robot's (in place, returned)."""
        for j, unit in enumerate(self.units):
            if unit is not None:
                array[:, j] = unit.to_robot(array[:, j])
        return array

    def to_policy(self, row: Sequence[float]) -> list[float]:
        """One robot-space action row (in `keys` order) -> the policy's units."""
        units = self.units or [None] * len(row)
        return [v if u is None else float(u.to_lerobot(v)) for v, u in zip(row, units, strict=True)]


def convention_units(
    convention: RobotConvention | None, names: Sequence[str | None]
) -> list[JointUnit | None]:
    """The convention's motor for each bound name (None: passes unchanged)."""
    if convention is None:
        return []
    return [None if n is None else convention.unit(n) for n in names]


def _name_matches(candidate: str, targets: Mapping[str, str]) -> str | None:
    """Robot key for a declared name: exact, then without `.pos`."""
    if candidate in targets:
        return targets[candidate]
    stripped = _strip_suffix(candidate)
    if stripped in targets:
        return targets[stripped]
    return None


def bind_actions(
    features: PolicyFeatures,
    names: DeclaredNames,
    robot_action_keys: Sequence[str],
    *,
    convention: RobotConvention | None = None,
) -> ActionBinding:
    binding = _bind_actions(features, names, robot_action_keys)
    binding.units = convention_units(convention, binding.keys)
    return binding


def _bind_actions(
    features: PolicyFeatures, names: DeclaredNames, robot_action_keys: Sequence[str]
) -> ActionBinding:
    robot_keys = [str(k) for k in robot_action_keys]
    dim = features.action_dim
    declared = names.action_names
    if declared is not None and len(declared) != dim:
        raise BindingError(
            f"{names.action_source} names {len(declared)} actions but the policy's action vector has shape ({dim},)"
        )
    if declared is not None and not all(is_generic_name(n) for n in declared):
        lookup = {k: k for k in robot_keys}
        keys: list[str] = []
        unmatched: list[str] = []
        for name in declared:
            key = _name_matches(name, lookup)
            if key is None:
                unmatched.append(name)
            else:
                keys.append(key)
        if unmatched:
            raise BindingError(
                f"policy action vector has shape ({dim},) named {declared} ({names.action_source}); "
                f"the robot's {len(robot_keys)} action keys {robot_keys} have no match for {unmatched} - "
                "map them with policy_config action_keys=[...]"
            )
        if len(set(keys)) != len(keys):
            raise BindingError(
                f"policy actions {declared} bind two indices to one robot key: {keys}"
            )
        return ActionBinding(keys=keys, unbound_robot_keys=[k for k in robot_keys if k not in keys])
    if len(robot_keys) != dim:
        raise BindingError(
            f"policy action vector has shape ({dim},) but the robot has {len(robot_keys)} action keys "
            f"{robot_keys} (shape ({len(robot_keys)},)); no action names are declared to bind a subset - "
            "pass policy_config action_keys=[...] or add feature_names.json to the checkpoint"
        )
    return ActionBinding(keys=list(robot_keys), positional=True, generic=declared is not None)


def bind_state(
    features: PolicyFeatures,
    names: DeclaredNames,
    observation: Mapping[str, Any],
    *,
    robot_action_keys: Sequence[str] = (),
    allow_missing: bool = False,
    convention: RobotConvention | None = None,
) -> StateBinding | None:
    binding = _bind_state(
        features,
        names,
        observation,
        robot_action_keys=robot_action_keys,
        allow_missing=allow_missing,
    )
    if binding is not None:
        binding.units = convention_units(convention, binding.sources)
    return binding


def bind_env_state(
    features: PolicyFeatures, names: DeclaredNames, observation: Mapping[str, Any]
) -> StateBinding | None:
    """observation.environment_state by name (observation_lookup's names, SI units as
    recorded); no positional fallback: an unnamed environment state is refused."""
    dim = features.env_state_dim
    if dim is None:
        return None
    declared = names.env_state_names
    if declared is None:
        raise BindingError(
            f"the policy needs {ENV_STATE_KEY} of shape ({dim},) and nothing names its entries - add "
            f"them to policy_config feature_names={{'{ENV_STATE_KEY}': [...]}} or the checkpoint's "
            f"{FEATURE_NAMES_FILE}"
        )
    if len(declared) != dim:
        raise BindingError(
            f"{names.env_state_source} names {len(declared)} {ENV_STATE_KEY} entries but it has shape ({dim},)"
        )
    table = observation_lookup(observation)
    missing = [n for n in declared if n not in table]
    if missing:
        raise BindingError(
            f"{ENV_STATE_KEY} is named {declared} ({names.env_state_source}); the robot's observation has no "
            f"{missing} (it has {sorted(table)})"
        )
    return StateBinding(sources=list(declared), feature=ENV_STATE_KEY)


def _bind_state(
    features: PolicyFeatures,
    names: DeclaredNames,
    observation: Mapping[str, Any],
    *,
    robot_action_keys: Sequence[str] = (),
    allow_missing: bool = False,
) -> StateBinding | None:
    dim = features.state_dim
    if dim is None:
        return None
    table = observation_lookup(observation)
    declared = names.state_names
    if declared is not None and len(declared) != dim:
        raise BindingError(
            f"{names.state_source} names {len(declared)} state entries but observation.state has shape ({dim},)"
        )
    if declared is not None and not all(is_generic_name(n) for n in declared):
        sources: list[str | None] = []
        missing: list[str] = []
        for name in declared:
            if name in table:
                sources.append(name)
            elif _strip_suffix(name) in table:
                sources.append(_strip_suffix(name))
            else:
                sources.append(None)
                missing.append(name)
        if missing and not allow_missing:
            joints = list((observation.get("joint_positions") or {}).keys())
            raise BindingError(
                f"observation.state has shape ({dim},) named {declared} ({names.state_source}); the robot's "
                f"observation has no {missing} (joints {joints}, shape ({len(joints)},)) - map them with "
                "policy_config state_keys=[...] or pass allow_missing_state_keys=True to feed 0.0"
            )
        if len(missing) == len(declared):
            raise BindingError(
                f"none of the state names {declared} exist in the robot's observation {sorted(table)}"
            )
        return StateBinding(sources=sources, missing=missing)
    joints = [str(j) for j in (observation.get("joint_positions") or {})]
    if len(joints) == dim:
        return StateBinding(sources=joints, positional=True, generic=declared is not None)
    actuated = [str(k) for k in robot_action_keys if str(k) in table]
    if actuated and len(actuated) == len(list(robot_action_keys)) == dim:
        return StateBinding(sources=actuated, positional=True, generic=declared is not None)
    raise BindingError(
        f"observation.state has shape ({dim},) but the robot reports {len(joints)} joint positions {joints} "
        f"(shape ({len(joints)},)); no state names are declared to bind a subset - pass policy_config "
        "state_keys=[...] or add feature_names.json to the checkpoint"
    )


def bind_cameras(
    features: PolicyFeatures, names: DeclaredNames, observation: Mapping[str, Any]
) -> CameraBinding:
    images = observation.get("images") or {}
    robot_cams = [str(c) for c in images]
    mapping: dict[str, str] = {}
    positional = False
    unbound = [c for c in features.cameras if c not in names.camera_map and c not in images]
    if len(unbound) == 1 and len(features.cameras) == 1 and len(robot_cams) == 1:
        mapping[unbound[0]] = robot_cams[0]
        positional = True
        unbound = []
    if unbound:
        raise BindingError(
            f"policy needs cameras {[IMAGE_PREFIX + c for c in features.cameras]} with shapes "
            f"{list(features.cameras.values())}; the robot observation has cameras {robot_cams} and nothing binds "
            f"{unbound} - request those cameras from the environment or map them with policy_config "
            "cameras={policy_camera: robot_camera}"
        )
    sizes: dict[str, tuple[int, int]] = {}
    for cam, (c, h, w) in features.cameras.items():
        robot_cam = mapping.get(cam) or names.camera_map.get(cam) or cam
        mapping[cam] = robot_cam
        if robot_cam not in images:
            raise BindingError(
                f"policy camera '{cam}' is bound to robot camera '{robot_cam}', which the observation lacks "
                f"(it has {robot_cams})"
            )
        shape = tuple(getattr(images[robot_cam], "shape", ()))
        if shape != (h, w, c):
            raise BindingError(
                f"policy camera '{IMAGE_PREFIX}{cam}' expects images of shape ({c}, {h}, {w}) (HxWxC {h}x{w}x{c}); "
                f"robot camera '{robot_cam}' gives shape {shape} - render it at {w}x{h}"
            )
        sizes[cam] = (h, w)
    return CameraBinding(robot_camera=mapping, sizes=sizes, positional=positional)
