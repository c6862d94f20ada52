"""The ROS robot env as the runner's episodes step it: every step checked against what the
safety shield(s) did with the command and what the robot did.

    env = CheckedRobotEnv(ros_env, ledger, follow_tolerance=0.3, follow_timeout_s=1.0,
                          estop=operator.latch)

A step raises (the kernel then ends the episode `error`, category env_error, with this
message) when:
  - a shield refused one of the episode's commands, or stopped forwarding them (inactive,
    waiting for its e-stop source): `ShieldLedger.check`, its reason quoted. A shield that
    holds because of an e-stop (latched: pressed, its source lost) raises nothing: it
    latches the runner's e-stop (`estop(by)`, naming the shield and its reason), and the
    episode ends "estopped" at its next step boundary;
  - the robot did not follow: some joint stayed more than `follow_tolerance` (rad, or the
    joint's unit) away from its commanded target for longer than `follow_timeout_s`
    (a robot that lags by less, or catches up sooner, follows; ros2_control's
    joint_trajectory_controller judges a path by a tolerance the same way). 0 disables.
`reset` first connects the env (RosRobotEnv.connect: a joint state, and each shield
confirming that it hears this env's commands), then opens the episode's accounts, then
asks the shields whether they forward (a shield that does not is named
at once, not after the reset's timeout; one that holds for an e-stop latches the
runner's e-stop first, so the reset's refusal ends the episode "estopped"). `before_episode_end` (the kernel's hook, called
before episode.end) settles the ledger: it waits until each shield confirmed the
episode's commands and returns its counts as a `shield.report` event, which the kernel
puts in the trace (and so in the bag) before episode.end. Everything else is the wrapped
env's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from robokernel_ros.ros.shield_ledger import (
    SHIELD_REPORT,
    ShieldLedger,
    ShieldRefusal,
    report_data,
)


class RobotNotFollowing(RuntimeError):
    """The measured joints stayed away from the commanded targets (the message says which)."""


class CheckedRobotEnv:
    """See the module docstring. `env`: a RosRobotEnv (anything with its observe/step)."""

    def __init__(
        self,
        env: Any,
        ledger: ShieldLedger | None,
        *,
        follow_tolerance: float = 0.3,
        follow_timeout_s: float = 1.0,
        estop: Callable[[str], None] | None = None,
    ) -> None:
        if not follow_tolerance >= 0:
            raise ValueError(f"follow_tolerance={follow_tolerance!r}: must be >= 0")
        if not follow_timeout_s > 0:
            raise ValueError(f"follow_timeout_s={follow_timeout_s!r}: must be > 0")
        self._env = env
        self.ledger = ledger
        self.follow_tolerance = float(follow_tolerance)
        self.follow_timeout_s = float(follow_timeout_s)
        self._estop = estop
        self._away_since: float | None = None  # since when a joint is beyond the tolerance

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, seed: int | None = None) -> Any:
        if self.ledger is not None:
            # The first reset's handshake with the shields comes before the episode's
            # accounts open: what it sends before a shield's reader knows this writer is
            # lost by design, and is no episode's command (ShieldLedger).
            connect = getattr(self._env, "connect", None)
            if connect is not None:
                connect()
            self.ledger.begin()  # the reset's commands are the episode's too
            try:
                self.ledger.check_ready(wait_s=0.5)
            except ValueError as exc:  # Refused: said as the episode's error
                cause = self.ledger.estop_cause() if self._estop is not None else ""
                if cause:  # the e-stop: the kernel then ends the episode estopped
                    self._estop(cause)
                raise ShieldRefusal(str(exc).removeprefix("refused: ")) from None
        self._away_since = None
        return self._env.reset(seed=seed)

    def hold_action(self, last: Mapping[str, float] | None) -> dict[str, float]:
        return self._env.hold_action(last)

    def step(self, action: Mapping[str, float]) -> Any:
        result = self._env.step(action)
        if self.ledger is not None:
            self.ledger.check(self._estop)
        if self.follow_tolerance > 0:
            self._check_following(result.observation)
        return result

    def before_episode_end(self, step: int) -> list[tuple[str, dict[str, Any]]]:
        """The kernel's hook before episode.end: the ledger's settled counts (waiting up
        to its confirm_timeout_s for the shields to confirm the last commands) as one
        SHIELD_REPORT event; [] without shields or an episode."""
        if self.ledger is None:
            return []
        counts = self.ledger.settle()
        return [(SHIELD_REPORT, report_data(counts))] if counts else []

    def _check_following(self, observation: Mapping[str, Any]) -> None:
        measured = observation.get("joint_positions") or {}
        targets = observation.get("actuator_targets") or {}
        worst, joint = 0.0, ""
        for name, target in targets.items():
            position = measured.get(name)
            if position is None:
                continue
            error = abs(float(position) - float(target))
            if error > worst:
                worst, joint = error, name
        now = time.monotonic()
        if worst <= self.follow_tolerance:
            self._away_since = None
            return
        if self._away_since is None:
            self._away_since = now
            return
        if now - self._away_since > self.follow_timeout_s:
            raise RobotNotFollowing(
                f"the robot did not follow its commands: {joint} measured at "
                f"{float(measured[joint]):.3f}, commanded {float(targets[joint]):.3f} "
                f"(|error| {worst:.3f} > follow_tolerance {self.follow_tolerance:g} for "
                f"{now - self._away_since:.2f} s > follow_timeout_s {self.follow_timeout_s:g})"
            )
