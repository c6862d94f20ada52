"""Progress of multi-episode evaluations: a tqdm bar on a terminal, `progress` events on the bus."""

from __future__ import annotations

import sys
import time
from typing import Any

from robokernel_ros.kernel.events import Event, EventBus

PROGRESS = "progress"


class Progress:
    """Reports each finished episode.

    bar: True shows a tqdm bar on stderr, False never, None when stderr is a terminal.
    The bus (the workcell's) gets one `progress` event per episode with
    episode, n_episodes, successes, success_rate, steps, outcome, elapsed_s, robot_name.
    """

    def __init__(
        self,
        *,
        n_episodes: int,
        robot_name: str,
        label: str,
        bus: EventBus | None = None,
        bar: bool | None = None,
    ) -> None:
        self.n_episodes = n_episodes
        self.robot_name = robot_name
        self.bus = bus
        self.t0 = time.monotonic()
        self.successes = 0
        self.done = 0
        self._bar: Any = None
        show = sys.stderr.isatty() if bar is None else bar
        if show and n_episodes > 1:
            try:
                from tqdm import tqdm

                self._bar = tqdm(
                    total=n_episodes, desc=label, unit="ep", file=sys.stderr, leave=False
                )
            except ImportError:  # pragma: no cover - tqdm is a pinned requirement
                self._bar = None

    def episode_done(self, episode: int, *, success: bool, steps: int, outcome: str) -> None:
        self.done += 1
        self.successes += int(bool(success))
        data = {
            "episode": episode,
            "n_episodes": self.n_episodes,
            "episodes_done": self.done,
            "successes": self.successes,
            "success_rate": self.successes / self.done,
            "steps": steps,
            "outcome": outcome,
            "elapsed_s": time.monotonic() - self.t0,
            "robot_name": self.robot_name,
        }
        if self.bus is not None:
            self.bus.publish(
                Event(PROGRESS, steps, data, 0.0, data["elapsed_s"], self.done - 1, "")
            )
        if self._bar is not None:
            # postfix first, then one forced render: no frame shows this episode's count
            # next to the previous one's successes (update alone may skip rendering)
            self._bar.set_postfix(success=f"{self.successes}/{self.done}", refresh=False)
            self._bar.update(1)
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
