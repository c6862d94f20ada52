"""Replaying a recorded episode's actions through the kernel (and so through the shield).

`repo_id` names what was recorded: a run directory (or its events.jsonl), a folder of
run directories (a trace root: `episode` picks one, oldest first), a bag folder (the
rosbag mirror's <run_dir>/bag), anything else a loader registered with
`robokernel_ros.kernel.trace.register_trace_loader` reads, or a local LeRobotDataset
root (`meta/info.json`; `episode` is the dataset's episode index). The executed actions
(action events, holds included; a dataset's `action` rows) are replayed one per step
from the recorded seed, so a deterministic scene repeats the trajectory; the result
reports how far the final state drifted from the recording when the recording has it.

A dataset's actions reach the robot by name: the `action` feature's names (LeRobot
spelling `<joint>.pos` or bare names) bind to the robot's action keys; a name that binds
to none is refused before anything starts. Their values reach it in the robot's units: a
dataset in a LeRobot robot family's convention (`export-lerobot --convention lerobot`,
or lerobot-record's: robot_type `so101_follower`, degrees, gripper 0..100) is converted
back to radians (`policies.conventions`; `convention=` names another, or "none"), and
its robot_type names the packaged model to replay on (`RecordedEpisode.model`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.kernel.events import ACTION, PRIVILEGED
from robokernel_ros.kernel.trace import EVENTS_FILE, Trace, load_trace
from robokernel_ros.policies.base import Action, Policy


class ReplayPolicy(Policy):
    """Emits the recorded actions, one per step, in order (then holds the last one)."""

    provider = "replay"

    def __init__(self, actions: Sequence[Mapping[str, float]]) -> None:
        super().__init__()
        self.actions = [dict(a) for a in actions]
        self.index = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.index = 0

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        if self.index < len(self.actions):
            action = self.actions[self.index]
        else:
            action = self.actions[-1]
        self.index += 1
        return [dict(action)]


def resolve_episode(repo_id: Any, episode: Any) -> Trace:
    """The recorded episode `repo_id` names (ValueError naming what was looked for)."""
    if not isinstance(repo_id, str | os.PathLike) or str(repo_id) == "":
        raise ValueError(
            f"repo_id={repo_id!r}: must be a run directory, a trace folder or a recording path"
        )
    if isinstance(episode, bool) or not isinstance(episode, int) or episode < 0:
        raise ValueError(f"episode={episode!r}: must be a non-negative whole number")
    path = Path(repo_id).expanduser()
    if not path.exists():
        raise ValueError(
            f"repo_id={str(repo_id)!r}: no such path (hub datasets cannot be downloaded here: give a local path)"
        )
    if path.is_dir() and not (path / EVENTS_FILE).exists():
        runs = sorted(p for p in path.iterdir() if p.is_dir() and (p / EVENTS_FILE).exists())
        if runs:
            if episode >= len(runs):
                raise ValueError(
                    f"episode={episode}: {str(path)!r} holds {len(runs)} recorded episodes (0..{len(runs) - 1})"
                )
            path = runs[episode]
    import robokernel_ros.recording  # noqa: F401 - registers the rosbag2 reader with load_trace

    try:
        return load_trace(path)
    except ValueError as exc:
        raise ValueError(f"repo_id={str(repo_id)!r}: {exc}") from None


def recorded_actions(trace: Trace) -> list[dict[str, float]]:
    actions = sorted((e for e in trace.events if e.kind == ACTION), key=lambda e: e.step)
    return [dict(e.data.get("action") or {}) for e in actions]


def final_qpos(trace: Trace) -> list[float] | None:
    states = [e for e in trace.events if e.kind == PRIVILEGED]
    if not states:
        return None
    qpos = (states[-1].data.get("state") or {}).get("qpos")
    return list(qpos) if qpos is not None else None


def recorded_robot(trace: Trace) -> str | None:
    robots = trace.meta.get("robots")
    if isinstance(robots, list) and len(robots) == 1 and isinstance(robots[0], str):
        return robots[0]
    return None


def recorded_keys(trace: Trace) -> list[str]:
    env = trace.meta.get("env") or {}
    keys = env.get("action_keys")
    if isinstance(keys, list):
        return [str(k) for k in keys]
    seen: dict[str, None] = {}
    for action in recorded_actions(trace):
        seen.update(dict.fromkeys(action))
    return list(seen)


# --- one recorded episode, from a trace or a LeRobot dataset -------------------------------------

DATASET_INFO = Path("meta") / "info.json"


@dataclass
class RecordedEpisode:
    """What replay needs of a recording, whatever its format."""

    path: Path
    source: str  # "trace" (run directory or bag) | "lerobot_dataset"
    actions: list[dict[str, float]]  # keyed by the recorded names
    keys: list[str]  # the recorded action names, in order
    robot: str | None = None
    control_hz: float | None = None
    instruction: str = ""
    seed: int | None = None
    outcome: Any = None
    final_qpos: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # the packaged model a dataset's robot_type names
    convention: str | None = None  # the convention a dataset's values were converted from


def is_lerobot_dataset(path: Path) -> bool:
    return path.is_dir() and (path / DATASET_INFO).is_file()


CONVENTION_CHOICES = ("auto", "none", "so_follower", "so_follower_range")
# a dataset robot_type -> the packaged model it is replayed on
ROBOT_TYPE_MODELS = {"so101_follower": "so101", "so100_follower": "so101"}


def resolve_recording(repo_id: Any, episode: Any, convention: Any = "auto") -> RecordedEpisode:
    """The episode `repo_id` names, from a trace (run directory, bag) or a LeRobot dataset
    root. convention (datasets only): "auto" (what the dataset's robot_type implies),
    "none" (its values are the robot's units), or a name of policies.conventions."""
    if convention not in CONVENTION_CHOICES:
        raise ValueError(f"convention={convention!r}: must be one of {list(CONVENTION_CHOICES)}")
    if isinstance(repo_id, str | os.PathLike) and str(repo_id) != "":
        path = Path(repo_id).expanduser()
        if is_lerobot_dataset(path):
            if isinstance(episode, bool) or not isinstance(episode, int) or episode < 0:
                raise ValueError(f"episode={episode!r}: must be a non-negative whole number")
            return dataset_episode(path, episode, convention)
    trace = resolve_episode(repo_id, episode)
    return RecordedEpisode(
        path=Path(trace.path),
        source="trace",
        actions=recorded_actions(trace),
        keys=recorded_keys(trace),
        robot=recorded_robot(trace),
        control_hz=(trace.meta.get("env") or {}).get("control_hz"),
        instruction=trace.meta.get("instruction") or "",
        seed=trace.meta.get("seed"),
        outcome=trace.meta.get("outcome"),
        final_qpos=final_qpos(trace),
        meta=dict(trace.meta),
    )


def dataset_episode(root: Path, episode: int, convention: str = "auto") -> RecordedEpisode:
    """Episode `episode` of the LeRobotDataset at `root`, read offline with lerobot (actions
    only), its values in the robot's units (see resolve_recording's `convention`)."""
    where = f"repo_id={str(root)!r}"
    try:
        info = json.loads((root / DATASET_INFO).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: meta/info.json is not readable ({exc})") from None
    total = info.get("total_episodes")
    if isinstance(total, int) and episode >= total:
        raise ValueError(
            f"episode={episode}: the dataset {str(root)!r} holds {total} episodes (0..{total - 1})"
        )
    feature = (info.get("features") or {}).get("action")
    if not isinstance(feature, Mapping):
        raise ValueError(f"{where}: the dataset has no 'action' feature")
    from robokernel_ros.policies.lerobot_binding import flatten_names

    names = flatten_names(feature.get("names"))
    shape = tuple(feature.get("shape") or ())
    width = int(shape[0]) if len(shape) == 1 else None
    if not names or (width is not None and len(names) != width):
        raise ValueError(
            f"{where}: the 'action' feature (shape {list(shape)}) declares names {names!r}; replay binds "
            "actions to the robot's action keys by name, so it needs one name per action entry"
        )
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        raise ValueError(
            f"{where}: reading a LeRobot dataset needs lerobot (pip install 'lerobot[dataset]')"
        ) from None
    try:
        dataset = LeRobotDataset(f"local/{root.name}", root=root, episodes=[episode])
        rows = dataset.hf_dataset.with_format(None)
        columns = rows.select_columns(["episode_index", "frame_index", "action"])
    except Exception as exc:
        raise ValueError(
            f"{where}: lerobot could not load it offline: {type(exc).__name__}: {exc}"
        ) from None
    frames = sorted(
        (int(r["frame_index"]), r["action"]) for r in columns if int(r["episode_index"]) == episode
    )
    if not frames:
        raise ValueError(f"episode={episode}: the dataset {str(root)!r} has no frames for it")
    actions = []
    for _, row in frames:
        values = [float(x) for x in row]
        if len(values) != len(names) or not all(math.isfinite(x) for x in values):
            raise ValueError(
                f"{where}: episode {episode} has an action row {values} that is not {len(names)} finite numbers"
            )
        actions.append(dict(zip(names, values, strict=True)))
    from robokernel_ros.policies.conventions import convention_for_robot_type, get_convention

    robot_type = info.get("robot_type")
    if convention == "auto":
        conv = convention_for_robot_type(robot_type)
    else:
        conv = None if convention == "none" else get_convention(convention)
    if conv is not None:
        actions = [{k: float(conv.to_robot(k, v)) for k, v in a.items()} for a in actions]
    tasks = next(
        (
            r.get("tasks")
            for r in (dataset.meta.episodes or [])
            if r.get("episode_index") == episode
        ),
        None,
    )
    instruction = (
        tasks[0] if isinstance(tasks, list) and tasks and isinstance(tasks[0], str) else ""
    )
    return RecordedEpisode(
        path=root,
        source="lerobot_dataset",
        actions=actions,
        keys=list(names),
        robot=None,
        control_hz=float(info["fps"]) if isinstance(info.get("fps"), int | float) else None,
        instruction=instruction,
        meta={"dataset_episode": episode, "robot_type": robot_type},
        model=ROBOT_TYPE_MODELS.get(robot_type) if isinstance(robot_type, str) else None,
        convention=conv.name if conv is not None else None,
    )


def bind_dataset_names(
    names: Sequence[str], robot_keys: Sequence[str], *, where: str
) -> dict[str, str]:
    """{dataset action name: robot action key}: exact names first, then LeRobot's `<key>.pos`."""
    keys = list(robot_keys)
    mapping: dict[str, str] = {}
    for name in names:
        key = name if name in keys else (name[:-4] if name.endswith(".pos") else None)
        if key is None or key not in keys:
            unbound = [
                n for n in names if n not in keys and not (n.endswith(".pos") and n[:-4] in keys)
            ]
            raise ValueError(
                f"{where}: the dataset's action names {unbound} bind to no action key of the robot ({keys})"
            )
        if key in mapping.values():
            raise ValueError(
                f"{where}: the dataset's action names bind two entries to the robot key {key!r}"
            )
        mapping[name] = key
    return mapping


# --- a replay on the workcell: its robot and actions in, its report out ------------------------


def replay_actions(
    recording: RecordedEpisode,
    robot_name: str | None,
    robots: Sequence[str],
    action_keys: Callable[[str], Sequence[str]],
    repo_id: Any,
) -> tuple[str, list[dict[str, float]]]:
    """(the robot to replay on, the recorded actions keyed by its action keys).

    robot_name None / "": the recorded robot when the scene has it, else the sole robot.
    Refused by name: no robot to pick, no actions, no such robot, a recorded name that is
    no action key of the robot (a dataset's names bind as bind_dataset_names says)."""
    if robot_name is None or robot_name == "":
        recorded = recording.robot
        robot_name = recorded if recorded in robots else (robots[0] if len(robots) == 1 else None)
        if robot_name is None:
            raise ValueError(
                f"robot_name=None: cannot pick the robot: recorded {recorded!r}, the scene has {robots}"
            )
    actions = recording.actions
    if not actions:
        raise ValueError(f"repo_id={str(repo_id)!r}: the recorded episode has no actions")
    if robot_name not in robots:
        raise ValueError(
            f"robot_name={robot_name!r}: no such robot; the scene's robots are {robots}"
        )
    robot_keys = list(action_keys(robot_name))
    if recording.source == "lerobot_dataset":
        names = bind_dataset_names(recording.keys, robot_keys, where=f"repo_id={str(repo_id)!r}")
        actions = [{names[k]: val for k, val in a.items()} for a in actions]
    else:
        foreign = sorted(set(recording.keys) - set(robot_keys))
        if foreign:
            raise ValueError(
                f"repo_id={str(repo_id)!r}: recorded action keys {foreign} are not action keys of robot "
                f"{robot_name!r} ({sorted(robot_keys)})"
            )
    return robot_name, actions


def annotate_replay(
    report: dict[str, Any],
    recording: RecordedEpisode,
    episode: Any,
    n_actions: int,
    replayed_qpos: Sequence[float] | None,
) -> str:
    """Add the replay's fields to a run's report: where it came from, how many of its
    recorded actions were replayed (replayed_steps: the steps that ran, fewer when the
    replay was stopped) and how far the final qpos drifted from the recorded one (None
    when either is unknown or they differ in size); returns the tail of its text."""
    payload = report
    recorded = recording.final_qpos
    payload["replayed_from"] = str(recording.path)
    payload["replayed_source"] = recording.source
    payload["replayed_episode"] = episode
    payload["recorded_steps"] = n_actions
    replayed = min(int(payload.get("steps_advanced") or 0), n_actions)
    payload["replayed_steps"] = replayed
    payload["replayed_convention"] = recording.convention
    payload["recorded_outcome"] = recording.outcome
    divergence = None
    if recorded is not None and replayed_qpos is not None and len(recorded) == len(replayed_qpos):
        divergence = max(
            (abs(float(a) - float(b)) for a, b in zip(recorded, replayed_qpos, strict=True)),
            default=0.0,
        )
    payload["max_qpos_divergence"] = divergence
    of = f"{replayed} of {n_actions}" if replayed < n_actions else f"{n_actions}"
    converted = f" (converted from {recording.convention})" if recording.convention else ""
    return f"; replayed {of} recorded actions{converted} from {recording.path}" + (
        f", final qpos divergence {divergence:.3g}" if divergence is not None else ""
    )
