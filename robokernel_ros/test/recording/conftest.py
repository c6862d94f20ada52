"""Hand-built episodes for the bag and scoring tests (the kernel's Event/EventBus, no env)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from robokernel_ros.kernel.events import Event, EventBus
from robokernel_ros.kernel.trace import TraceStore

KEYS = ("shoulder", "elbow", "gripper")


def publish_episode(
    bus: EventBus,
    run_id: str,
    *,
    steps: int = 12,
    control_hz: float = 10.0,
    chunk: int = 4,
    image_every: int = 3,
    cameras: tuple[str, ...] = ("front", "wrist cam"),
    holds: tuple[int, ...] = (5,),
    interventions: tuple[int, ...] = (7,),
    success_at: int | None = 9,
    t0: float = 100.0,
    action_fn: Any = None,
) -> list[Event]:
    """Publish a realistic event stream: start, chunks, observations, actions, ..., end.

    Returns the events published. Action at step s for key k is s * 0.01 * (k + 1);
    the chunk merged at step s holds exactly the actions executed after it.
    """
    events: list[Event] = []

    def pub(kind: str, step: int, data: dict[str, Any]) -> None:
        t = t0 + step / control_hz
        event = Event(
            kind=kind, step=step, data=data, t=t, wall=step * 0.001, seq=len(events), run_id=run_id
        )
        events.append(event)
        bus.publish(event)

    def action_at(s: int) -> dict[str, float]:
        if action_fn is not None:
            return action_fn(s)
        return {k: s * 0.01 * (i + 1) for i, k in enumerate(KEYS)}

    pub(
        "episode.start",
        0,
        {
            "run_id": run_id,
            "env": {
                "action_keys": list(KEYS),
                "control": "absolute",
                "control_hz": control_hz,
                "action_limits": {k: [-1.0, 1.0] for k in KEYS},
                "gripper_keys": ["gripper"],
            },
            "timing": {"mode": "sync"},
            "instruction": "put the cube in the bowl",
            "seed": 7,
            "agent": "scripted",
            "started_at": "2026-11-30T09:00:00",
        },
    )
    total = 0.0
    outcome = "failure"
    for s in range(steps):
        obs = {
            "joint_positions": {k: s * 0.01 * (i + 1) - 0.005 for i, k in enumerate(KEYS)},
            "joint_velocities": {k: 0.1 for k in KEYS},
            "cube_z": 0.02 + 0.01 * s,
        }
        data: dict[str, Any] = {"obs": obs}
        if s % image_every == 0 and cameras:
            data["images"] = {
                c: np.full((6, 8, 3), (s * 10 + j) % 256, dtype=np.uint8)
                for j, c in enumerate(cameras)
            }
        pub("observation", s, data)
        pub(
            "privileged",
            s,
            {
                "state": {
                    "time": s / control_hz,
                    "bodies": {"cube": {"pos": [0.0, 0.0, 0.02 + 0.01 * s]}},
                }
            },
        )
        if s % chunk == 0:
            pub("chunk.request", s, {"request_id": s // chunk})
            rows = [[v for v in action_at(s + r).values()] for r in range(chunk)]
            pub(
                "chunk.merge",
                s,
                {
                    "obs_step": s,
                    "arrival_step": s,
                    "dropped": 0,
                    "kept": chunk,
                    "inference_s": 0.010 + 0.001 * (s // chunk),
                    "request_id": s // chunk,
                    "keys": list(KEYS),
                    "actions": rows,
                },
            )
        hold = s in holds
        action = action_at(s)
        if s in interventions:
            pub(
                "safety.intervention",
                s,
                {
                    "guard": "position",
                    "key": "elbow",
                    "value": 1.5,
                    "limit": 1.0,
                    "action": "clipped",
                },
            )
        reward = 1.0 if s == success_at else 0.0
        total += reward
        terminated = s == success_at
        pub(
            "action",
            s,
            {
                "action": action,
                "hold": hold,
                "reward": reward,
                "terminated": terminated,
                "truncated": False,
            },
        )
        if terminated:
            outcome = "success"
            break
    last = events[-1].step
    pub("operator.verdict", last, {"outcome": outcome, "note": ""})
    pub(
        "episode.end",
        last + 1,
        {
            "outcome": outcome,
            "status": "terminated" if outcome == "success" else "truncated",
            "steps": last + 1,
            "holds": len([h for h in holds if h <= last]),
            "chunks": math.ceil((last + 1) / chunk),
            "safety_interventions": len([i for i in interventions if i <= last]),
            "total_reward": total,
            "elapsed_s": 0.5,
        },
    )
    return events


@pytest.fixture
def record_episode(tmp_path: Path) -> Callable[..., tuple[Path, list[Event]]]:
    """Record a hand-built episode to a run directory and (optionally) its bag.

    Returns (run_dir, events). Keyword arguments go to publish_episode, except
    storage= (None: no bag; "mcap" or "sqlite3") and root=.
    """
    from robokernel_ros.recording import BagMirror

    def run(
        storage: str | None = "mcap", root: Path | None = None, **kwargs: Any
    ) -> tuple[Path, list[Event]]:
        store = TraceStore(root or tmp_path / "runs")
        writer = store.open_run()
        bus = EventBus()
        bus.subscribe(writer)
        mirror = None
        if storage is not None:
            mirror = BagMirror.for_run_dir(writer.path, storage=storage)
            mirror.attach(bus)
        events = publish_episode(bus, writer.run_id, **kwargs)
        writer.close()
        if mirror is not None:
            assert mirror.closed, "the mirror closes itself after episode.end"
        return writer.path, events

    return run
