"""What the torque shim costs per control step, next to MuJoCo's own position servos.

The Go2 (12 torque motors, timestep 2 ms, 50 Hz control: 10 physics substeps a step)
holds its 'home' crouch for 5 simulated seconds, measured in the same run two ways:
  servo   the anchor: `actuate_robot(kp, kv, replace_motors=True)` turns the motors into
          MuJoCo position servos (the PD law inside mj_step, one mj_step(m, d, 10) call)
  shim    `install_torque_shim` with the same gains: the motors stay motors and the PD
          law runs in numpy before each of the 10 single mj_step calls
Figures: CPU microseconds per control step of each (process time, best of --repeats:
the machine is shared, and wall time would count the others' turns), the shim's own
apply() in microseconds, and the base height each ends at.

Targets: shim / servo <= 1.5 per control step (the shim makes ten Python calls of
mj_step and of its numpy law where the servo makes one mj_step call); the shimmed Go2
stands (base > 0.2 m).

    python bench/torque_shim.py            # 7 interleaved repeats of 5 simulated seconds
    python bench/torque_shim.py --quick    # 1 repeat

The last line printed is a JSON object of all figures and each target's verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from robokernel_ros.envs import MujocoScene
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

KP, KD = 60.0, 2.0  # the Go2's packaged shim defaults
STEPS = 250  # 5 s at 50 Hz
TARGET_RATIO = 1.5  # ten mj_step calls and ten apply() a step, against one mj_step(m, d, 10)
STANDING_Z = 0.2


def _env(shim: bool):
    scene = MujocoScene()
    scene.add_robot("dog", "go2")
    if shim:
        joints = scene.torque_shim_gains("dog")
        scene.install_torque_shim("dog", {j: {"kp": KP, "kd": KD} for j in joints})
    else:
        scene.actuate_robot("dog", kp=KP, kv=KD, replace_motors=True)
    env = scene.make_env("dog", control_hz=50.0)
    return scene, env


def run(shim: bool) -> tuple[float, float]:
    """(microseconds per control step, final base height) of one 5 s stand."""
    scene, env = _env(shim)
    env.reset()
    hold = env.hold_action()
    start = time.process_time()
    for _ in range(STEPS):
        env.step(dict(hold))
    elapsed = time.process_time() - start
    z = env.privileged_state()["robots"]["dog"]["base_pos"][2]
    return 1e6 * elapsed / STEPS, float(z)


def apply_us(n: int = 20000) -> float:
    scene, _ = _env(True)
    shim, data = scene.torque_shim("dog"), scene.data
    start = time.process_time()
    for _ in range(n):
        shim.apply(data)
    return 1e6 * (time.process_time() - start) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(repeats):  # interleaved, so a busy moment hits both alike
        for shimmed in (False, True):
            runs[shimmed].append(run(shimmed))
    servo, shim = min(runs[False]), min(runs[True])
    apply = apply_us()
    ratio = shim[0] / servo[0]
    print(
        f"servo (anchor, MuJoCo position servos): {servo[0]:8.1f} us/step, base at {servo[1]:.3f} m"
    )
    print(
        f"shim  (torque motors + numpy PD):       {shim[0]:8.1f} us/step, base at {shim[1]:.3f} m"
    )
    print(f"shim / servo: {ratio:.2f} (target <= {TARGET_RATIO}); shim.apply(): {apply:.2f} us")
    figures = {
        "servo_us_per_step": round(servo[0], 1),
        "shim_us_per_step": round(shim[0], 1),
        "shim_over_servo": round(ratio, 3),
        "shim_added_us_per_step": round(shim[0] - servo[0], 1),
        "shim_apply_us": round(apply, 2),
        "servo_base_z_m": round(servo[1], 4),
        "shim_base_z_m": round(shim[1], 4),
        "verdicts": {
            "shim_over_servo_le_1_5": ratio <= TARGET_RATIO,
            "shim_stands": shim[1] > STANDING_Z,
        },
    }
    print(json.dumps(figures))
    return exit_status(figures["verdicts"], "torque_shim")


if __name__ == "__main__":
    sys.exit(main())
