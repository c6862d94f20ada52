"""Replaying a recorded episode's actions through the kernel (and so through the shield).

`repo_id` names what was recorded: a run directory (or its events.jsonl), a folder of
run directories (a trace root: `episode` picks one, oldest first), or anything else a
loader registered with `robokernel_ros.kernel.trace.register_trace_loader` reads (the
rosbag mirror, a dataset). The executed actions (action events, holds included) are
replayed one per step from the recorded seed, so a deterministic scene repeats the
trajectory; the result reports how far the final state drifted from the recording.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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
