"""The episode loop's takeover steps (docs/operator.md): reading the operator's mode,
opening, changing and closing an intervention, a step the operator decides (paused or
correcting: through the handover limiter and the shield), and the limiter leading the
policy's commands after a handback.

`InterventionSteps` is a part of the loop's per-episode state (kernel.runner's Episode
inherits it); it reads and writes these attributes of it: r (the EpisodeRunner: operator,
shield, handover, hold_action), rec (the EpisodeRecorder), spec, teleop, mode, queue,
pending, shadow, handing_back, interventions, first_intervention_step,
intervention_start, observation (the step's), and calls clock(step), hold(),
publish_operator_notices(step) and teleop_failure(exc, where) (an EpisodeOver to raise).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from . import events as ev
from .operator import AUTONOMOUS, CORRECTING
from .shield import ShieldResult

if TYPE_CHECKING:
    from .handover import HandoverLimiter
    from .operator import OperatorChannel
    from .recorder import EpisodeRecorder
    from .shield import SafetyShield
    from .spec import EnvSpec, TeleopSource


class LoopRunner(Protocol):
    """What the takeover steps use of the EpisodeRunner (typed so, this module does not
    import kernel.runner, which imports it)."""

    operator: OperatorChannel
    shield: SafetyShield
    handover: HandoverLimiter

    def hold_action(
        self, last: Mapping[str, float] | None, observation: Any = None
    ) -> dict[str, float]: ...


class InterventionSteps:
    """The takeover steps of one episode's loop (see the module docstring)."""

    r: LoopRunner
    rec: EpisodeRecorder
    spec: EnvSpec
    teleop: TeleopSource | None
    mode: str
    queue: Any
    pending: Any
    shadow: int
    handing_back: bool
    interventions: int
    first_intervention_step: int | None
    intervention_start: tuple[int, float] | None
    observation: Any

    if TYPE_CHECKING:  # the loop's methods these steps call (kernel.runner's Episode)

        def clock(self, step: int) -> float: ...

        def hold(self) -> Any: ...

        def publish_operator_notices(self, step: int) -> None: ...

        def teleop_failure(self, exc: BaseException, where: str) -> Exception: ...

    @property
    def source(self) -> TeleopSource:
        """The teleop source: the takeover steps run only with one (`teleop` not None)."""
        return cast("TeleopSource", self.teleop)

    def operator_mode(self, step: int, observation: Any) -> str:
        """The mode of this step: the teleop source observes first (a simulated operator
        may take over or hand back here), then the channel's mode is read; a change opens,
        changes or closes the intervention (its events follow the operator's call)."""
        observe = getattr(self.teleop, "observe", None)
        if observe is not None:
            try:
                observe(step, observation)
            except Exception as exc:
                raise self.teleop_failure(exc, "observe") from exc
        op = self.r.operator
        mode = op.mode
        if op.has_notices:
            self.publish_operator_notices(step)
        if mode != self.mode:
            self.switch_mode(step, mode, op.mode_by)
        return self.mode

    def switch_mode(self, step: int, mode: str, by: str) -> None:
        old, self.mode = self.mode, mode
        rec = self.rec
        shield = self.r.shield
        limiter = self.r.handover if self.spec.control == "absolute" else None
        if mode == AUTONOMOUS:  # handing back: the policy starts over from here
            self.close_intervention(step, by)
            self.queue.clear()
            self.pending = None  # a chunk in flight was computed before: dropped
            if limiter is not None:
                limiter.start(shield.last, shield.previous)
                self.handing_back = True
            return
        if old == AUTONOMOUS:
            self.interventions += 1
            if self.first_intervention_step is None:
                self.first_intervention_step = step
            self.intervention_start = (step, self.clock(step))
            self.handing_back = False
            rec.emit(
                ev.INTERVENTION_START,
                step,
                {"step": step, "mode": mode, "by": by, "teleop": self.source.name},
            )
        else:
            rec.emit(ev.INTERVENTION_MODE, step, {"step": step, "mode": mode, "by": by})
        if limiter is not None:
            # From the robot's command as it moves (at step 0: where the robot is).
            last = (
                shield.last
                if shield.last is not None
                else self.r.hold_action(None, self.observation)
            )
            limiter.start(last, shield.previous)

    def close_intervention(self, step: int, by: str) -> None:
        """intervention.end for the open intervention (none open: nothing)."""
        if self.intervention_start is None:
            return
        start_step, start_t = self.intervention_start
        self.intervention_start = None
        self.rec.emit(
            ev.INTERVENTION_END,
            step,
            {
                "step": step,
                "start_step": start_step,
                "steps": step - start_step,
                "duration_s": self.clock(step) - start_t,
                "by": by,
            },
        )

    def operator_step(
        self, mode: str, observation: Any, stopping: bool
    ) -> tuple[ShieldResult, bool, dict[str, Any]]:
        """The shield's result for a step the operator decides: paused (or stopping) holds,
        correcting follows the teleop source; both through the handover limiter (absolute
        control) and then the shield. Returns (result, whether it held, the action event's
        takeover fields)."""
        human = policy = None
        fields: dict[str, Any] = {"mode": mode}
        if mode == CORRECTING and not stopping:
            if self.queue:
                policy = self.queue.popleft()  # the policy's shadow action: not executed
                self.shadow += 1
            try:
                human = self.source.teleop_action(observation)
            except Exception as exc:
                raise self.teleop_failure(exc, "teleop_action") from exc
            if human is not None and not isinstance(human, Mapping):
                raise self.teleop_failure(
                    TypeError(f"returned {type(human).__name__}, not a mapping or None"),
                    "teleop_action",
                )
            fields["human_action"] = None if human is None else dict(human)
            fields["policy_action"] = dict(policy) if isinstance(policy, Mapping) else None
        hold = self.hold()
        limiter = self.r.handover
        if self.spec.control == "absolute" and limiter.active:
            proposed: Any = limiter.step(human)  # None: brake to rest where it is
        else:
            proposed = hold if human is None else human
        return self.r.shield.review(proposed, hold=hold), human is None, fields

    def lead(self, proposed: Any) -> Any:
        """Handing back: the limiter leads the policy's command (None: the hold) until it
        has caught up with it; from then on the policy's actions pass as they are."""
        limiter = self.r.handover
        if proposed is not None and not isinstance(proposed, Mapping):
            return proposed  # garbage: the shield refuses it
        led = limiter.step(proposed)
        if proposed is not None and limiter.caught_up(proposed):
            limiter.stop()
            self.handing_back = False
        return led
