"""The simulated operator and its takeover rule: the one place the rule lives.

    from robokernel_ros.rollout.takeover import SimulatedOperator, TubeRule
    operator = SimulatedOperator(expert_agent, TubeRule(radius=0.15))
    runner = EpisodeRunner(env, policy_agent, teleop=operator)
    operator.attach(runner.operator)       # it calls correct()/resume() on this channel
    record = runner.run(300, seed=0)

The tube rule (docs/operator.md, "The tube rule"). A scripted expert runs beside the
policy, fed the robot's observation at every step: its command is where a person holding
a leader arm would put it, following the expert's plan from where the robot is (the
scripted expert moves its command toward its current waypoint at its own speed, and
moves on to the next waypoint only once the robot has reached this one). The distance is
the largest absolute difference, over the expert's action keys, between the robot's
observed joint position and the expert's command (in the joints' unit: rad for SO-101).

  - take over (correct) at the first step the distance exceeds `radius`;
  - hand back (resume) once the distance has stayed within `back_radius` (default
    radius / 2) for `back_steps` consecutive steps while correcting;
  - nothing else: no limit on the number of interventions, no takeover while the
    operator channel is paused or already correcting, and no handing back of an
    intervention it did not start (a person's call stands).

While correcting, the expert's command is the teleop action (what the leader arm sends):
the kernel's handover limiter takes the robot from where it is to it, and the shield
reviews every command. Pure: no ROS (the ROS sim operator node wraps this class with
the runner's services as its `operator`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from robokernel_ros.kernel.domains import positive_number
from robokernel_ros.kernel.observation import observed_joint_positions
from robokernel_ros.kernel.operator import AUTONOMOUS, CORRECTING

CORRECT, RESUME = "correct", "resume"


class OperatorCalls(Protocol):
    """What the simulated operator calls: the kernel's OperatorChannel, or any object
    with the same three members (a ROS client of the runner's services)."""

    @property
    def mode(self) -> str: ...

    def correct(self, by: str = "") -> str: ...

    def resume(self, by: str = "") -> str: ...


@dataclass
class TubeRule:
    """Take over when the robot leaves a tube of `radius` around the expert's command;
    hand back after `back_steps` consecutive steps within `back_radius` (see the module
    docstring). Stateful only in its count of steps inside: reset() per episode."""

    radius: float = 0.15
    back_radius: float | None = None
    back_steps: int = 10
    inside: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        positive_number("radius", self.radius)
        if self.back_radius is None:
            self.back_radius = self.radius / 2.0
        positive_number("back_radius", self.back_radius)
        if self.back_radius > self.radius:
            raise ValueError(
                f"back_radius={self.back_radius!r}: must be <= radius={self.radius!r} "
                "(handing back inside a wider tube than the one that took over would oscillate)"
            )
        if isinstance(self.back_steps, bool) or not isinstance(self.back_steps, int):
            raise ValueError(f"back_steps={self.back_steps!r}: must be an integer >= 1")
        if self.back_steps < 1:
            raise ValueError(f"back_steps={self.back_steps!r}: must be an integer >= 1")

    @staticmethod
    def distance(state: Mapping[str, float], reference: Mapping[str, float]) -> float:
        """max |state[k] - reference[k]| over the reference's keys that the state has.
        ValueError when they share no key (nothing to compare: a wrong joint map)."""
        values = [
            abs(float(state[key]) - float(value))
            for key, value in reference.items()
            if key in state
        ]
        if not values:
            raise ValueError(
                f"tube rule: the robot's joints {sorted(state)} name none of the expert's "
                f"action keys {sorted(reference)} (give SimulatedOperator a joint_map)"
            )
        return max(values)

    def reset(self) -> None:
        self.inside = 0

    def update(self, distance: float, intervening: bool) -> str | None:
        """ "correct", "resume" or None for this step's distance; `intervening`: the
        operator channel's mode is not autonomous."""
        if not intervening:
            self.inside = 0
            return CORRECT if not distance <= self.radius else None  # NaN takes over
        self.inside = self.inside + 1 if distance <= self.back_radius else 0
        if self.inside >= self.back_steps:
            self.inside = 0
            return RESUME
        return None


class SimulatedOperator:
    """A TeleopSource (kernel.spec) that plays a scripted expert and takes over by the
    TubeRule. `expert`: a kernel Agent (act(observation, step) -> chunk; its first action
    is the command), e.g. PolicyAgent(ScriptedPolicy(...)) bound to the robot's keys.
    joint_map: {action_key: joint_name} where they differ. attach(operator) before the
    episode (or pass operator=). Records what it decided: `decisions` [(step, verb,
    distance, answer)] of the current episode, `distance` of the last step."""

    def __init__(
        self,
        expert: Any,
        rule: TubeRule | None = None,
        operator: OperatorCalls | None = None,
        *,
        joint_map: Mapping[str, str] | None = None,
        name: str = "simulated_operator",
    ) -> None:
        if not callable(getattr(expert, "act", None)):
            raise ValueError(f"expert={expert!r}: must be an agent with act(observation, step)")
        if rule is not None and not isinstance(rule, TubeRule):
            raise ValueError(f"rule={rule!r}: must be a TubeRule")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name={name!r}: must be a non-empty string")
        self.expert = expert
        self.rule = rule if rule is not None else TubeRule()
        self.operator = operator
        self.joint_map = dict(joint_map or {})
        self.name = name
        self.leader: dict[str, float] | None = None
        self.distance: float | None = None
        self.decisions: list[tuple[int, str, float, str]] = []
        self.owned = False  # the current intervention is one this operator started

    def attach(self, operator: OperatorCalls) -> None:
        self.operator = operator

    # -- TeleopSource ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None) -> None:
        reset = getattr(self.expert, "reset", None)
        if reset is not None:
            reset(seed=seed)
        self.rule.reset()
        self.leader = None
        self.distance = None
        self.decisions = []
        self.owned = False

    def observe(self, step: int, observation: Mapping[str, Any]) -> None:
        """The expert's command for this observation, and the rule's decision on it."""
        chunk = self.expert.act(observation, step)
        first = chunk[0] if len(chunk) else None
        if not isinstance(first, Mapping):
            raise ValueError(f"expert {type(self.expert).__name__}: act() returned no action")
        self.leader = {str(k): float(v) for k, v in first.items()}
        joints = observed_joint_positions(observation)
        state = {
            key: joints[self.joint_map.get(key, key)]
            for key in self.leader
            if self.joint_map.get(key, key) in joints
        }
        self.distance = TubeRule.distance(state, self.leader)
        operator = self.operator
        if operator is None:
            return
        mode = operator.mode
        if mode == AUTONOMOUS:
            self.owned = False
        decision = self.rule.update(self.distance, mode != AUTONOMOUS)
        if decision is None or (decision == RESUME and not (self.owned and mode == CORRECTING)):
            return
        why = (
            f"left the tube: {self.distance:.3f} > {self.rule.radius}"
            if decision == CORRECT
            else f"back in the tube: <= {self.rule.back_radius} for {self.rule.back_steps} steps"
        )
        call = operator.correct if decision == CORRECT else operator.resume
        answer = call(by=f"{self.name}: {why}")
        self.owned = decision == CORRECT and answer == ""
        self.decisions.append((step, decision, self.distance, answer))

    def teleop_action(self, observation: Mapping[str, Any]) -> dict[str, float] | None:
        """The expert's command of this step (observe() computed it)."""
        return None if self.leader is None else dict(self.leader)
