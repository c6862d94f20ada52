"""What the kernel needs to know about an environment and an agent.

An environment is two methods and one step type (in the spirit of dm_env): `reset`
and `step`, described by an `EnvSpec`. An agent turns observations into action
chunks. Both are structural protocols: nothing has to inherit from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Control = Literal["absolute", "delta", "velocity"]
Action = Mapping[str, float]
Observation = Mapping[str, Any]


def is_int(value: Any) -> bool:
    """An integer that is not a bool (the parameter checks' one spelling)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Capabilities:
    """Optional things an environment offers."""

    privileged_state: bool = False  # full simulator state for scorers and predicates
    images: bool = False  # observations can carry camera images
    requires_reset_confirmation: bool = False  # a real workcell: a person confirms the reset
    sim_time: bool = False  # the env reports its own clock (info["sim_time_s"])


@dataclass(frozen=True)
class EnvSpec:
    """The action interface of an environment."""

    action_keys: tuple[str, ...]
    control: Control
    control_hz: float
    action_limits: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    gripper_keys: tuple[str, ...] = ()
    capabilities: Capabilities = field(default_factory=Capabilities)

    def __post_init__(self) -> None:
        if self.control not in ("absolute", "delta", "velocity"):
            raise ValueError(f"control={self.control!r}: must be 'absolute', 'delta' or 'velocity'")
        if not (isinstance(self.control_hz, int | float) and self.control_hz > 0):
            raise ValueError(f"control_hz={self.control_hz!r}: must be a positive number")
        object.__setattr__(self, "action_keys", tuple(self.action_keys))
        object.__setattr__(self, "gripper_keys", tuple(self.gripper_keys))
        unknown = set(self.action_limits) - set(self.action_keys)
        if unknown:
            raise ValueError(
                f"action_limits names keys that are not action keys: {sorted(unknown)}"
            )
        for key, (lo, hi) in self.action_limits.items():
            if not lo <= hi:
                raise ValueError(f"action_limits[{key!r}]=({lo}, {hi}): lower must be <= upper")


@dataclass(slots=True)
class StepResult:
    observation: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    env_spec: EnvSpec

    def reset(self, seed: int | None = None) -> Observation: ...

    def step(self, action: Action) -> StepResult: ...


@runtime_checkable
class HoldActionSource(Protocol):
    def hold_action(self, last: Action | None) -> Action: ...


@runtime_checkable
class PrivilegedStateSource(Protocol):
    def privileged_state(self) -> Mapping[str, Any]: ...


@runtime_checkable
class Agent(Protocol):
    """Turns an observation into one action chunk (a single-step policy returns one action).

    Optional members the kernel uses when present:
      on_step(step, observation, action, reward), on_episode_end(record),
      supports_rtc (bool): act() then also receives `queued_actions` (the actions
      still queued, oldest first) and `delay_steps` (steps expected to pass before the
      chunk is merged), so the new chunk can blend with the executing one.
    """

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None: ...

    def act(self, observation: Observation, step: int) -> Sequence[Action]: ...


@runtime_checkable
class RTCAgent(Agent, Protocol):
    """An Agent whose `supports_rtc` is True: act() also takes `queued_actions` (the
    actions still queued, oldest first) and `delay_steps` (steps expected to pass before
    the chunk is merged), so the new chunk can blend with the executing one."""

    supports_rtc: bool

    def act(
        self,
        observation: Observation,
        step: int,
        *,
        queued_actions: Sequence[Action] = (),
        delay_steps: int = 0,
    ) -> Sequence[Action]: ...


@runtime_checkable
class TeleopSource(Protocol):
    """A human's (or a simulated operator's) command stream: what drives the robot while
    the operator channel's mode is "correcting" (docs/operator.md).

    name: names the source in refusals and events (e.g. "leader_arm", "simulated_operator").
    teleop_action(observation): the latest command, a mapping action key -> value in the
        env's control space (absolute: joint targets), or None when there is no fresh
        command (the loop then holds where the robot is). Called once per correcting step,
        on the loop's thread: return at once (a ROS source returns its latest sample).

    Optional members the kernel uses when present:
      reset(*, seed=None): called once per episode, after env.reset().
      observe(step, observation): called at every step, in every mode, before the loop
        reads the mode (a simulated operator decides here whether to take over; it may
        call the operator channel's pause/correct/resume).
    """

    name: str

    def teleop_action(self, observation: Observation) -> Action | None: ...
