"""Where an episode's events go besides the trace: the rosbag2 mirror, the live view, sinks.

Each attach_* subscribes to the episode's own bus and returns a finisher: finisher(record)
runs after the episode and returns the fields it adds to the episode's result
(`bag_path`, `live`). An `EpisodeSink` (PolicyRunner's episode_sinks=) follows the same
contract for any other subscriber.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robokernel_ros.kernel.events import EventBus

from .plan import RolloutPlan


def attach_bag(bus: EventBus, trace_dir: Path, storage: str) -> Callable[[Any], dict[str, Any]]:
    """Mirror the episode on `bus` to <trace_dir>/<run_id>/bag; the finisher reports bag_path.

    The bag is written by a pooled writer process (recording.writer_process): serialising to
    CDR and MCAP in the loop's own process would cost about one MuJoCo step per step."""
    from robokernel_ros.recording.writer_process import ProcessBagMirror

    mirror = ProcessBagMirror(trace_dir, storage=storage)
    unsubscribe = mirror.attach(bus)

    def finish(record: Any) -> dict[str, Any]:
        unsubscribe()
        mirror.close()  # after episode.end it is closed already; a failed episode's is closed here
        path = mirror.last_bag_path
        return {"bag_path": str(path) if path is not None and path.is_dir() else None}

    return finish


def attach_live(bus: EventBus, plan: RolloutPlan, episode: int) -> Callable[[Any], dict[str, Any]]:
    """Feed the call's Foxglove view (started by its first episode) from the episode's bus;
    the finisher reports the episode's live stats (port, messages, dropped, mcap_path); the
    MCAP's counts are filled in when close_live waits for the files (episodes do not)."""
    if plan.live_view is None:
        from robokernel_ros.live import LiveView

        plan.live_view = LiveView(plan.live).start()
        if plan.live.wait_s is not None:  # live={"wait_s": s}: a viewer sees the first step
            plan.live_view.wait_for_viewer(plan.live.wait_s)
    detach = plan.live_view.attach(bus, run_dir=plan.trace_dir, n_steps=plan.n_steps,
                                   n_episodes=plan.n_episodes, episode=episode)  # fmt: skip
    return lambda record: {"live": detach(wait=False)}


def close_live(plan: RolloutPlan) -> None:
    """Stop the call's Foxglove server (frees its port); a no-op without one."""
    if plan.live_view is not None:
        plan.live_view.close()
        plan.live_view = None


@dataclass
class EpisodeSinkContext:
    """What an episode sink (e.g. the rosbag mirror) gets before each episode."""

    bus: EventBus
    trace_dir: Path | None
    robots: tuple[str, ...]
    episode: int
    call: str


EpisodeSink = Callable[[EpisodeSinkContext], Callable[[Any], Mapping[str, Any] | None] | None]
"""sink(context) -> finisher | None. The sink subscribes to context.bus; finisher(record) runs
after the episode and returns fields merged into the episode's result (e.g. {"bag_path": ...})."""
