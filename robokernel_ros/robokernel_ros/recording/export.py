"""Recorded episodes (bags or run directories) -> a LeRobotDataset, with lerobot's own writer.

    robokernel export-lerobot BAG_OR_RUNS... --repo-id NAME --root DIR

One dataset episode per recorded episode, one dataset frame per executed step:
- observation.state: the observed joint positions at that step (obs "joint_positions",
  in the recorded order; episodes without it use the observation's scalar numbers),
- action: the executed action (holds included: it is what the robot did), in the env's
  action_keys order,
- observation.images.<camera>: the camera frame, stored as video; on steps between
  recorded frames (image_every > 1) the latest recorded frame is repeated,
- task: the episode's instruction; fps: the control rate.
That is `convention="default"`: the robot's own names and SI units (radians),
`robot_type` null unless given - for policies trained and served here.

`convention="lerobot"` (`--convention lerobot`) writes what LeRobot's lerobot-record
writes for the robot family the joints belong to (`policies/conventions.py`; the SO-101:
`shoulder_pan.pos` ... `gripper.pos`, body joints in degrees, gripper 0..100,
robot_type `so101_follower`), so the dataset merges with recordings of a real robot and
a checkpoint trained on either drives both; `"lerobot-range"` writes the body joints in
LeRobot's -100..100 range mode instead. It also
- resamples to `fps` (default 30, lerobot-record's): frame k holds the latest step at or
  before time k / fps (steps are skipped or repeated, nothing is interpolated);
- writes `observation.environment_state` (the observation's top-level numbers, where a
  task puts its goal, or the observation names given as `env_state`: the entries ACT
  and Diffusion need when there is no camera), in the recorded (SI) units;
- names the task after the episode's benchmark when it has no instruction.
`fps` and `env_state` may be given under the default convention too.

Takeover (docs/operator.md). Episodes run with a teleop source add the feature
`intervention` (bool, shape (1,), as LeRobot's DAgger rollout strategy writes it): the
trace's per-step flag, True where the operator decided the command (paused or
correcting). On a correcting step with a teleop command, `action` is that command (the
human's, as LeRobot's DAgger records the teleop action; the robot executed it through
the handover limiter and the shield), elsewhere the executed action.
`corrections_only=True` (`--corrections-only`) exports only the correcting steps, each
unbroken run of them (one correction) as one dataset episode, every frame
intervention=True: the data DAgger adds to its dataset.
The dataset is written in lerobot's current format (whatever `LeRobotDataset.create`
writes: v3.0 for lerobot 0.6). lerobot is imported only when exporting.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..kernel.events import ACTION, OBSERVATION
from ..kernel.trace import Trace, load_trace
from ..policies.conventions import DEGREES, RANGE_M100_100, RobotConvention, convention_for_joints
from ..policies.lerobot_binding import ENV_STATE_KEY, observation_lookup

_log = logging.getLogger(__name__)


@dataclass
class ExportReport:
    repo_id: str
    root: str
    episodes: int
    frames: int
    fps: int
    state_names: list[str]
    action_names: list[str]
    cameras: list[str]
    sources: list[str]
    codebase_version: str
    convention: str = "default"
    corrections_only: bool = False
    intervention: bool = False  # the dataset has the `intervention` feature
    robot_type: str | None = None
    env_state_names: list[str] | None = None


def _state_names(obs: Any) -> tuple[str, list[str]]:
    if (
        isinstance(obs, dict)
        and isinstance(obs.get("joint_positions"), dict)
        and obs["joint_positions"]
    ):
        return "joint_positions", [str(k) for k in obs["joint_positions"]]
    if isinstance(obs, dict):
        return "", [
            str(k) for k, v in obs.items() if isinstance(v, int | float) and not isinstance(v, bool)
        ]
    return "", []


def _state_vector(obs: Any, source: str, names: list[str]) -> np.ndarray:
    values = obs.get(source) if source else obs
    return np.asarray([float(values.get(n, math.nan)) for n in names], dtype=np.float32)


def _camera_frames(trace: Trace, camera: str) -> Iterator[tuple[int, np.ndarray]]:
    frames = getattr(trace, "iter_frames", None)
    if frames is not None:
        yield from frames(camera)
        return
    for e in trace.events:
        if e.kind == OBSERVATION and camera in (e.data.get("images") or {}):
            yield e.step, trace.image(e.data["images"][camera])


def _episode_shape(trace: Trace) -> dict[str, Any]:
    env = trace.meta.get("env") or {}
    hz = env.get("control_hz")
    observations = {e.step: e for e in trace.events if e.kind == OBSERVATION}
    first_obs = next(iter(observations.values()), None)
    source, state_names = _state_names(first_obs.data.get("obs") if first_obs else None)
    action_names = [str(k) for k in env.get("action_keys") or []]
    if not action_names:
        first_action = next((e for e in trace.events if e.kind == ACTION), None)
        action_names = (
            [str(k) for k in (first_action.data.get("action") or {})] if first_action else []
        )
    cameras: dict[str, tuple[int, ...]] = {}
    for e in trace.events:
        if e.kind == OBSERVATION and e.data.get("images"):
            for cam in e.data["images"]:
                if cam not in cameras:
                    cameras[cam] = ()
    first = first_obs.data.get("obs") if first_obs else None
    scalars = [
        str(k)
        for k, v in (first.items() if isinstance(first, dict) else ())
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return {
        "hz": hz,
        "scalars": scalars if source else [],
        "source": source,
        "state": state_names,
        "action": action_names,
        "cameras": list(cameras),
    }


EXPORT_CONVENTIONS = ("default", "lerobot", "lerobot-range")
LEROBOT_RECORD_FPS = 30


def export_lerobot(
    paths: Sequence[str | Path],
    *,
    repo_id: str,
    root: str | Path,
    use_videos: bool = True,
    robot_type: str | None = None,
    convention: str = "default",
    fps: int | None = None,
    env_state: Sequence[str] | None = None,
    corrections_only: bool = False,
) -> ExportReport:
    """Write the episodes under `paths` (bags, run directories, folders of them) to a new
    LeRobotDataset at `root`. All episodes must share keys, cameras and control rate.
    `convention`, `fps`, `env_state` and `corrections_only`: see the module docstring."""
    from .discovery import expand_paths, load_episode

    if convention not in EXPORT_CONVENTIONS:
        raise ValueError(f"convention={convention!r}: must be one of {list(EXPORT_CONVENTIONS)}")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int) or fps <= 0):
        raise ValueError(f"fps={fps!r}: must be a whole number of frames per second > 0")
    if env_state is not None and (
        isinstance(env_state, str) or not all(isinstance(n, str) and n for n in env_state)
    ):
        raise ValueError(f"env_state={env_state!r}: must be a list of observation names")
    if not isinstance(corrections_only, bool):
        raise ValueError(f"corrections_only={corrections_only!r}: must be a bool")

    if not isinstance(repo_id, str) or not repo_id or repo_id.count("/") > 1:
        raise ValueError(f"repo_id={repo_id!r}: must be a non-empty name like 'user/dataset'")
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise ValueError(
            f"root={str(root)!r}: already exists and is not empty (a dataset is never overwritten)"
        )
    ignored: list[str] = []
    found = expand_paths(paths, ignored)
    for folder in ignored:  # among several paths (runs/*): runs/report/, a demo's logs/
        _log.warning("%s: holds no recorded episode; left out", folder)
    if not found:
        raise ValueError(f"paths={list(map(str, paths))!r}: no episodes found")
    # First pass: the shape every episode must share (events only, no frames). An episode
    # that executed no step (stopped before its first) has no frame to give: skipped.
    shape: dict[str, Any] | None = None
    frame_shapes: dict[str, tuple[int, ...]] = {}
    sources: list[Path] = []
    flagged = False  # an episode was run with a teleop source: the intervention feature
    for src in found:
        trace = load_episode(src)  # an unreadable or empty recording refuses the export
        flagged = flagged or any("intervention" in e.data for e in trace.of_kind(ACTION))
        if corrections_only and not _segments(trace, True):
            _log.info("%s: no correction in the episode; left out", src)
            continue
        if not any(e.kind == ACTION for e in trace.events):
            if len(found) == 1:
                raise ValueError(
                    f"path={str(src)!r}: the episode has no executed step: nothing to export"
                )
            _log.warning("%s: the episode has no executed step; skipped", src)
            continue
        sources.append(src)
        if trace.truncated:
            _log.warning("%s: the recording is cut short; exporting the steps it holds", src)
        this = _episode_shape(trace)
        if shape is None:
            shape = this
            for cam in this["cameras"]:
                _, frame = next(_camera_frames(trace, cam))
                frame_shapes[cam] = tuple(np.asarray(frame).shape)
        elif (this["state"], this["action"], this["cameras"], this["hz"]) != (
            shape["state"],
            shape["action"],
            shape["cameras"],
            shape["hz"],
        ):
            raise ValueError(
                f"path={str(src)!r}: its state keys, action keys, cameras or control rate differ from {str(sources[0])!r}"
            )
    if shape is None:
        if corrections_only:
            raise ValueError(
                f"corrections_only=True: no episode under paths={list(map(str, paths))!r} "
                "holds a correction (a step whose mode is 'correcting'): nothing to export"
            )
        raise ValueError(
            f"paths={list(map(str, paths))!r}: no episode has an executed step: nothing to export"
        )
    hz = shape["hz"]
    if fps is None and convention != "default":
        fps = LEROBOT_RECORD_FPS
    if not isinstance(hz, int | float) or hz <= 0:
        raise ValueError(f"control_hz={hz!r}: the recorded control rate is unknown")
    if fps is None and abs(hz - round(hz)) > 1e-9:
        raise ValueError(
            f"control_hz={hz!r}: LeRobot datasets need a whole number of frames per second "
            "(pass fps= / --fps to resample)"
        )
    fps = int(round(hz)) if fps is None else fps
    if not shape["action"]:
        raise ValueError(f"path={str(sources[0])!r}: no action keys recorded")
    conv: RobotConvention | None = None
    if convention != "default":
        if shape["source"] != "joint_positions":
            raise ValueError(
                f"convention={convention!r}: path={str(sources[0])!r} records no joint_positions"
            )
        conv = convention_for_joints(
            shape["state"], body_mode=DEGREES if convention == "lerobot" else RANGE_M100_100
        )
        robot_type = robot_type or conv.robot_type
    shape["convention"] = conv
    shape["step_ratio"] = float(hz) / fps
    if env_state is None and conv is not None:
        env_state = shape["scalars"]
    shape["env_state"] = list(env_state) if env_state else []
    state_names = [conv.feature_name(n) for n in shape["state"]] if conv else shape["state"]
    action_names = [conv.feature_name(n) for n in shape["action"]] if conv else shape["action"]
    features: dict[str, dict[str, Any]] = {
        "observation.state": {
            "dtype": "float32",
            "shape": (len(state_names),),
            "names": state_names,
        },
        "action": {"dtype": "float32", "shape": (len(action_names),), "names": action_names},
    }
    if shape["env_state"]:
        features[ENV_STATE_KEY] = {
            "dtype": "float32",
            "shape": (len(shape["env_state"]),),
            "names": shape["env_state"],
        }
    shape["intervention"] = flagged or corrections_only
    shape["corrections_only"] = corrections_only
    if shape["intervention"]:  # LeRobot's DAgger strategy's feature (lerobot/rollout/context.py)
        features[INTERVENTION_FEATURE] = {"dtype": "bool", "shape": (1,), "names": None}
    for cam in shape["cameras"]:
        fs = frame_shapes[cam]
        if len(fs) != 3 or fs[2] != 3:
            raise ValueError(f"camera={cam!r}: frames of shape {fs} are not HxWx3")
        features[f"observation.images.{_feature_name(cam)}"] = {
            "dtype": "video" if use_videos else "image",
            "shape": fs,
            "names": ["height", "width", "channels"],
        }

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        dataset = LeRobotDataset.create(
            repo_id=repo_id,
            fps=fps,
            features=features,
            root=root,
            robot_type=robot_type,
            use_videos=use_videos,
        )
    except OSError as exc:
        raise ValueError(
            f"root={str(root)!r}: cannot create the dataset folder ({exc.strerror or exc})"
        ) from None
    frames_total = 0
    written = 0
    with _scheduling_kept():
        try:
            for src in sources:
                trace = load_trace(src)
                for segment in _segments(trace, corrections_only):
                    frames = _add_episode(dataset, trace, shape, segment)
                    frames_total += frames
                    written += 1 if frames else 0
        finally:
            dataset.finalize()
    from lerobot.datasets.dataset_metadata import CODEBASE_VERSION

    return ExportReport(
        repo_id=repo_id,
        root=str(root),
        episodes=written,
        frames=frames_total,
        fps=fps,
        state_names=state_names,
        action_names=action_names,
        cameras=shape["cameras"],
        sources=[str(s) for s in sources],
        codebase_version=str(CODEBASE_VERSION),
        convention=convention,
        robot_type=robot_type,
        env_state_names=shape["env_state"] or None,
        corrections_only=corrections_only,
        intervention=shape["intervention"],
    )


def _feature_name(camera: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in camera)


INTERVENTION_FEATURE = "intervention"
CORRECTING = "correcting"


def _segments(trace: Trace, corrections_only: bool) -> list[list[Any]]:
    """The action events of each dataset episode the trace gives: all of them (one
    episode), or each unbroken run of correcting steps (one episode per correction)."""
    actions = trace.of_kind(ACTION)
    if not corrections_only:
        return [actions]
    segments: list[list[Any]] = []
    previous = None
    for e in actions:
        if e.data.get("mode") != CORRECTING:
            continue
        if previous is None or e.step != previous + 1 or not segments:
            segments.append([])
        segments[-1].append(e)
        previous = e.step
    return segments


def _add_episode(dataset: Any, trace: Trace, shape: dict[str, Any], actions: list[Any]) -> int:
    conv: RobotConvention | None = shape["convention"]
    task = str(trace.meta.get("instruction") or "")
    if not task and conv is not None:
        task = _benchmark_name(trace.meta)
    state_units = [conv.unit(n) for n in shape["state"]] if conv else []
    action_units = [conv.unit(n) for n in shape["action"]] if conv else []
    ratio = shape["step_ratio"]
    k = 0  # the next dataset frame: it holds the episode's step floor(k * ratio)
    executed = -1
    observations = {e.step: e for e in trace.events if e.kind == OBSERVATION}
    cams = shape["cameras"]
    frame_iters = {cam: _camera_frames(trace, cam) for cam in cams}
    pending: dict[str, tuple[int, np.ndarray] | None] = {
        cam: next(frame_iters[cam], None) for cam in cams
    }
    current: dict[str, np.ndarray] = {}
    leading: list[int] = []  # the first steps, before every camera had a frame
    first_waiting: list[str] = []
    n = 0
    flags = shape["intervention"]
    for e in actions:
        obs_event = observations.get(e.step)
        if obs_event is None:
            raise ValueError(f"trace {trace.path}: action at step {e.step} has no observation")
        for cam in cams:
            # advance to the latest recorded frame at or before this step
            while pending[cam] is not None and pending[cam][0] <= e.step:
                current[cam] = pending[cam][1]
                pending[cam] = next(frame_iters[cam], None)
        waiting = [cam for cam in cams if cam not in current]
        if waiting:
            # A live workcell's cameras may deliver their first frame a few steps into the
            # episode: the dataset episode starts once every camera has one (no made-up
            # frames). Once a camera has a frame it always has one, so only leading steps.
            leading.append(e.step)
            first_waiting = first_waiting or waiting
            continue
        executed += 1  # steps of the dataset episode, the resampling's clock
        copies = 0  # dataset frames that hold this step: 0 (skipped), 1, or more
        while math.floor((k + copies) * ratio + 1e-9) == executed:
            copies += 1
        if not copies:
            continue
        action = e.data.get("action") or {}
        human = e.data.get("human_action")
        if e.data.get("mode") == CORRECTING and isinstance(human, dict):
            action = {**action, **human}  # the human's command (keys it left out: executed)
        obs = obs_event.data.get("obs") or {}
        state = _state_vector(obs, shape["source"], shape["state"])
        action_vector = np.asarray(
            [float(action.get(key, math.nan)) for key in shape["action"]], dtype=np.float32
        )
        for units, vector in ((state_units, state), (action_units, action_vector)):
            for i, unit in enumerate(units):
                if unit is not None:
                    vector[i] = unit.to_lerobot(float(vector[i]))
        frame: dict[str, Any] = {
            "observation.state": state,
            "action": action_vector,
            "task": task,
        }
        if shape["env_state"]:
            frame[ENV_STATE_KEY] = _env_state_vector(trace, obs, shape["env_state"])
        if flags:
            frame[INTERVENTION_FEATURE] = np.array([e.data.get("intervention") is True], dtype=bool)
        for cam in cams:
            frame[f"observation.images.{_feature_name(cam)}"] = current[cam]
        for _ in range(copies):
            dataset.add_frame(dict(frame))
        n += copies
        k += copies
    if leading and n:
        _log.warning(
            "%s: steps %d..%d skipped: camera(s) %s had no frame yet; the dataset episode "
            "starts at step %d",
            trace.path, leading[0], leading[-1], first_waiting, leading[-1] + 1,
        )  # fmt: skip
    elif leading:
        raise ValueError(
            f"trace {trace.path}: camera(s) {first_waiting} have no frame in the episode"
        )
    if n == 0:
        _log.warning("%s: no executed steps; episode skipped", trace.path)
        return 0
    dataset.save_episode()
    return n


def _env_state_vector(trace: Trace, obs: Any, names: list[str]) -> np.ndarray:
    table = observation_lookup(obs)
    missing = [n for n in names if n not in table]
    if missing:
        raise ValueError(
            f"env_state={names!r}: trace {trace.path} has no {missing} in its observation "
            f"(it has {sorted(table)})"
        )
    return np.asarray([table[n] for n in names], dtype=np.float32)


def _benchmark_name(meta: Any) -> str:
    """The episode's benchmark (or spec) name from its meta, '' when it has none."""
    for key in ("benchmark", "spec"):
        value = meta.get(key) if isinstance(meta, dict) else None
        if isinstance(value, dict):
            value = value.get("name")
        if isinstance(value, str) and value:
            return value
    return ""


@contextlib.contextmanager
def _scheduling_kept() -> Iterator[None]:
    """Restore this thread's CPU scheduling policy after LeRobot's video encoding.

    LeRobot's default encoder (SVT-AV1), run as root, switches the calling thread to
    SCHED_FIFO; every process started from it afterwards (a node, a test's graph)
    would inherit real-time priority and could starve the whole machine."""
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy = os.sched_getscheduler(0)
    param = os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)
