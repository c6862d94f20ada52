"""wbc_install_torque_control: a rollout call's torque shim (the fourth posture flag).

With `wbc_install_torque_control=True` a call installs the MuJoCo scene's torque shim
(`robokernel_ros.envs.torque`) on each of its robots for the call: the torque motors
stay motors, the policy's values for them are joint targets (the kernel's shield
reviews them against the joint ranges), and a PD law turns them into torques within
the motors' limits at every physics substep. Gains: `wbc_gains` ({joint: {"kp", "kd"}};
run_multi_policy: {robot: {joint: ...}}) over the packaged model's defaults. The shims
are removed when the call ends, whatever way it ends. False (the default) leaves the
actuators alone.

The checks run in two places, both before anything is built: `plan_options` (the
flag's boolean domain and the shape of wbc_gains) and `preflight` (against the scene:
a robot without torque motors, a scene that is not simulated, unknown joints, gains
outside their domain, joints left without gains).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

FLAG = "wbc_install_torque_control"
GAINS = "wbc_gains"


def plan_options(
    flag: Any, gains: Any, robots: Sequence[str], *, per_robot: bool = False
) -> dict[str, Any]:
    """The plan's fields from the call's flag (already checked boolean) and wbc_gains.

    per_robot: wbc_gains is {robot: {joint: gains}} (run_multi_policy); otherwise it is
    one robot's {joint: gains}."""
    if gains is None:
        return {"wbc_install_torque_control": flag, "wbc_gains": {}}
    if not flag:
        raise ValueError(
            f"{GAINS}={gains!r} with {FLAG}={flag!r}: the gains are the torque shim's; "
            f"pass {FLAG}=True to install it, or leave {GAINS} out"
        )
    shape = (
        "{robot: {joint: {'kp': ..., 'kd': ...}}}"
        if per_robot
        else "{joint: {'kp': ..., 'kd': ...}}"
    )
    if not isinstance(gains, Mapping) or not all(isinstance(k, str) for k in gains):
        raise ValueError(f"{GAINS}={gains!r}: must be a dict {shape}")
    if not per_robot:
        return {"wbc_install_torque_control": flag, "wbc_gains": {robots[0]: dict(gains)}}
    unknown = [k for k in gains if k not in robots]
    if unknown:
        raise ValueError(
            f"{GAINS}: keys {unknown!r} name no robot of this call (robots: {list(robots)}); "
            f"run_multi_policy takes {shape}"
        )
    return {"wbc_install_torque_control": flag, "wbc_gains": dict(gains)}


def preflight(plan: Any, scene: Any) -> None:
    """Resolve each robot's gains against the scene into plan.torque_gains (raises
    ValueError naming the robot and why the shim cannot apply)."""
    plan.torque_gains = {}
    if not plan.wbc_install_torque_control:
        return
    resolve = getattr(scene, "torque_shim_gains", None)
    for robot in plan.robots:
        if resolve is None:
            raise ValueError(
                f"{FLAG}=True: robot {robot!r} is not simulated here ({type(scene).__name__}): the torque "
                "shim runs inside MuJoCo's physics step; a ROS robot's torque loop belongs to its own "
                "controllers (ros2_control), which take the joint targets as they are"
            )
        param = (
            GAINS
            if len(plan.robots) == 1 and plan.call != "run_multi_policy"
            else f"{GAINS}[{robot!r}]"
        )
        try:
            plan.torque_gains[robot] = resolve(robot, plan.wbc_gains.get(robot), param=param)
        except ValueError as exc:
            raise ValueError(f"{FLAG}=True: {exc}") from None


@contextmanager
def installed(plan: Any, scene: Any) -> Iterator[None]:
    """The plan's shims on the scene for the block; removed on the way out, however it ends."""
    if plan.wbc_install_torque_control and not plan.torque_gains:
        preflight(plan, scene)
    done: list[str] = []
    try:
        for robot, gains in plan.torque_gains.items():
            scene.install_torque_shim(robot, {j: g.to_dict() for j, g in gains.items()})
            done.append(robot)
        yield
    finally:
        for robot in done:
            scene.remove_torque_shim(robot)


def trace_meta(plan: Any, scene: Any) -> dict[str, Any]:
    """The episode.start fields that record the installed shims and their gains."""
    if not plan.wbc_install_torque_control:
        return {}
    shims = {r: scene.torque_shim(r) for r in plan.robots}
    return {"torque_shim": {r: s.describe() for r, s in shims.items() if s is not None}}


def with_torque_control(execute: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Wrap a PolicyRunner.execute_* method: the plan's shims for the call, reported back."""

    @functools.wraps(execute)
    def run(self: Any, plan: Any, control: Any) -> dict[str, Any]:
        scene = plan.scene_override or self.scene
        with installed(plan, scene):
            result = execute(self, plan, control)
        result[FLAG] = bool(plan.wbc_install_torque_control)
        if plan.torque_gains:
            result["torque_shim_gains"] = {
                r: {j: g.to_dict() for j, g in gains.items()}
                for r, gains in plan.torque_gains.items()
            }
        return result

    return run
