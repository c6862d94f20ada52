"""The scene's torque-shim calls: which gains a shim on a robot would run, installing and
removing it (the shim itself, and the physics step that runs it, are envs.torque and
MujocoScene.advance)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import mujoco

from .entries import RobotEntry
from .models import packaged_model_at
from .torque import Gains, TorqueShim, check_gains, torque_motors

log = logging.getLogger("robokernel_ros.envs.scene")  # the scene's logger, as before the split


class TorqueShimCalls:
    """MujocoScene's torque-shim calls, on its lock, robots and installed shims."""

    lock: threading.RLock
    data: mujoco.MjData
    generation: int
    _shims: dict[str, TorqueShim]
    robot: Callable[[str], RobotEntry]
    _check: Callable[[str], None]

    def torque_shim_gains(
        self, name: str, gains: Any = None, *, param: str = "gains"
    ) -> dict[str, Gains]:
        """The gains a torque shim on robot `name` would run: `gains` ({joint: {"kp", "kd"}})
        over the packaged model's defaults, one entry per torque-motor joint. ValueError
        (naming `param`) when the robot has no torque motor or a joint is left without gains."""
        entry = self.robot(name)
        motors = torque_motors(self, entry)
        if not motors:
            kinds = sorted(set(entry.info.actuator_kinds.values()))
            have = (
                f"its actuators are {', '.join(kinds)}{' servos' if kinds == ['position'] else ''}"
                if kinds
                else "it has no actuator"
            )
            raise ValueError(
                f"robot {name!r} has no torque motor to shim ({have}): the torque shim turns joint "
                "targets into motor torques; a position servo already tracks its target"
            )
        packaged = packaged_model_at(entry.info.path)
        defaults = dict(packaged.torque_gains) if packaged is not None else {}
        resolved = check_gains(
            "defaults", {j: g for j, g in defaults.items() if j in motors}, motors, name
        )
        resolved.update(check_gains(param, {} if gains is None else gains, motors, name))
        missing = [j for j in motors if j not in resolved]
        if missing:
            source = (
                f"the packaged model {packaged.name!r}"
                if packaged
                else "this model (not a packaged one)"
            )
            raise ValueError(
                f"{param}: robot {name!r} has no gains for joints {missing}: {source} stores no defaults "
                f"for them; give {param}={{joint: {{'kp': ..., 'kd': ...}}}} for each"
            )
        return resolved

    def install_torque_shim(self, name: str, gains: Any = None) -> TorqueShim:
        """Run a PD shim in front of robot `name`'s torque motors at every physics step
        (see envs.torque): its motor action keys become joint targets, held at the current
        pose. `gains` as in torque_shim_gains. Replaces a shim already installed."""
        resolved = self.torque_shim_gains(name, gains)
        with self.lock:
            self._check("install_torque_shim")
            shim = TorqueShim(name, torque_motors(self, self.robot(name)), resolved)
            self.generation += 1  # envs rebind: the shimmed keys' limits become joint ranges
            shim.bind(self)
            shim.hold(self.data)
            shim.apply(self.data)
            self._shims[name] = shim
            log.info("robot %r: torque shim on %s", name, list(shim.joints))
            return shim

    def remove_torque_shim(self, name: str) -> bool:
        """Remove robot `name`'s torque shim (its motors read ctrl as torque again, from a
        zero torque); False when none was installed. Never refused: a rollout's cleanup."""
        with self.lock:
            shim = self._shims.pop(name, None)
            if shim is None:
                return False
            self.data.ctrl[shim._ctrl_sel] = 0.0
            self.generation += 1
            return True

    def torque_shim(self, name: str) -> TorqueShim | None:
        return self._shims.get(name)
