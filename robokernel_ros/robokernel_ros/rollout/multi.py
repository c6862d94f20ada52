"""Several robots in one kernel loop: one policy per robot, composed into one agent.

The multi-robot env keys actions and joints "robot/name". `MultiAgent` gives each
robot's policy its own observation (prefix stripped) and keeps one action queue per
robot, re-querying a robot's policy when its queue runs empty, so robots with
different action horizons share one loop (the kernel runs it with execution_steps=1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any


def split_observation(observation: Mapping[str, Any], robot: str) -> dict[str, Any]:
    """The part of a multi-robot observation that belongs to `robot`, prefix stripped."""
    prefix = f"{robot}/"
    out: dict[str, Any] = {}
    for key, value in observation.items():
        if isinstance(value, Mapping) and key != "images":
            out[key] = {
                k[len(prefix) :]: v
                for k, v in value.items()
                if isinstance(k, str) and k.startswith(prefix)
            }
        elif isinstance(key, str) and key.startswith(prefix):
            out[key[len(prefix) :]] = value
        elif key == "images":
            out[key] = value
    return out


def split_action(action: Mapping[str, Any], robots: Sequence[str]) -> dict[str, dict[str, Any]]:
    """{robot: its part of a composed action, prefix stripped}; unprefixed keys go to no robot."""
    out: dict[str, dict[str, Any]] = {r: {} for r in robots}
    for key, value in action.items():
        robot, sep, rest = str(key).partition("/")
        if sep and robot in out:
            out[robot][rest] = value
    return out


class MultiAgent:
    """Composes per-robot agents (each a PolicyAgent) into one kernel Agent."""

    supports_rtc = False

    def __init__(
        self, agents: Mapping[str, Any], robots: Sequence[str], instructions: Mapping[str, str]
    ) -> None:
        self.agents = dict(agents)
        self.instructions = dict(instructions)
        self.robots = tuple(robots)
        self.queues: dict[str, deque[Mapping[str, Any]]] = {r: deque() for r in self.robots}

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        for robot, agent in self.agents.items():
            self.queues[robot] = deque()
            agent.reset(instruction=self.instructions.get(robot) or instruction, seed=seed)

    def act(self, observation: Mapping[str, Any], step: int, **_: Any) -> list[dict[str, Any]]:
        action: dict[str, Any] = {}
        for robot in self.robots:
            queue = self.queues[robot]
            if not queue:
                chunk = self.agents[robot].act(split_observation(observation, robot), step)
                queue.extend(chunk)
            if queue:
                for key, value in queue.popleft().items():
                    action[f"{robot}/{key}"] = value
        return [action]
