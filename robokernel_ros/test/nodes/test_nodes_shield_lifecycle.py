"""The shield's lifecycle, driven through the lifecycle services of a real process:
configure loads limits, activate starts forwarding (once a joint state is in),
deactivate sends a hold and stops, cleanup and configure again; refused configuration."""

from __future__ import annotations

import sys

from lifecycle_msgs.msg import Transition
from shield_harness import (
    SHIELD,
    SO101_JOINTS,
    is_hold,
    shield_args,
    wait_state,
    wait_until,
)
from std_msgs.msg import Float64MultiArray

MEASURED = [0.1, -0.2, 0.3, 0.0, 0.5, 0.2]


def _cmd(values: list[float]) -> Float64MultiArray:
    msg = Float64MultiArray()
    msg.data = values
    return msg


def test_shield_lifecycle_transitions(processes, peer):
    name = "shield_lc"
    out = peer.record_commands()
    states = peer.record_states(name)
    ivs = peer.record_interventions(name)
    cmd = peer.publisher(Float64MultiArray, f"/{name}/commands")
    processes.python(name, SHIELD, *shield_args(name, "estop_required:=false"))

    # Unconfigured: the always-on surface exists, nothing is forwarded.
    assert peer.lifecycle_state(name) == "unconfigured"
    st = wait_state(states, lambda s: s.state == "inactive", what="inactive state")
    assert not st.have_limits
    cmd.publish(_cmd(MEASURED))

    # Configure: limits loaded, still nothing forwarded until activate.
    assert peer.change_state(name, Transition.TRANSITION_CONFIGURE)
    assert peer.lifecycle_state(name) == "inactive"
    wait_state(states, lambda s: s.have_limits, what="have_limits after configure")
    peer.wait_for_subscribers(cmd)
    cmd.publish(_cmd(MEASURED))

    # Activate without a joint state: waiting, commands refused (no hold possible yet).
    assert peer.change_state(name, Transition.TRANSITION_ACTIVATE)
    # (get_state's label never says it forwards while it waits: issue #36)
    assert peer.lifecycle_state(name).startswith("active (not forwarding: waiting: no joint")
    wait_state(states, lambda s: s.state == "waiting", what="waiting without joint state")
    cmd.publish(_cmd(MEASURED))
    wait_until(lambda: any(m.guard == "waiting" for _, m in ivs), 10, "a 'waiting' refusal")
    # (the shield answered that command with its refusal: it is not forwarded as well)
    assert out == [], "nothing may be forwarded before the shield is active with a joint state"

    # Joint states arrive: active; a command within limits passes unchanged.
    peer.publish_joint_states(SO101_JOINTS, MEASURED)
    wait_state(states, lambda s: s.state == "active" and s.have_joint_state, what="active")
    assert peer.lifecycle_state(name) == "active"  # forwarding now
    target = [m + 0.01 for m in MEASURED]
    cmd.publish(_cmd(target))
    wait_until(lambda: len(out) >= 1, 10, "the forwarded command")
    assert list(out[0][1].data) == target

    # Deactivate: one hold (the measured position), then nothing more is forwarded.
    assert peer.change_state(name, Transition.TRANSITION_DEACTIVATE)
    wait_until(lambda: len(out) >= 2, 10, "the hold on deactivate")
    assert is_hold(out[1][1].data, MEASURED)
    n = len(out)
    refused = states[-1][1].refused
    cmd.publish(_cmd(target))
    # read while inactive, refused and counted (ShieldState.refused): not forwarded
    wait_state(states, lambda s: s.refused > refused, what="the command refused while inactive")
    assert len(out) == n
    wait_state(states, lambda s: s.state == "inactive", what="inactive after deactivate")

    # Cleanup, configure again, activate again: works again.
    assert peer.change_state(name, Transition.TRANSITION_CLEANUP)
    assert peer.lifecycle_state(name) == "unconfigured"
    wait_state(states, lambda s: not s.have_limits, what="limits dropped on cleanup")
    peer.configure_activate(name)
    wait_state(states, lambda s: s.state == "active", what="active again")
    cmd.publish(_cmd(target))
    wait_until(lambda: len(out) > n, 10, "a command forwarded after re-activation")
    assert list(out[-1][1].data) == target
    st = wait_state(states, lambda s: s.passed >= 2, what="passed counted")
    assert st.held >= 1 and st.refused >= 1


def test_shield_configure_refused_names_the_parameter(processes, peer, tmp_path):
    bad = tmp_path / "limits.yaml"
    bad.write_text("joint_limits:\n  shoulder_pan:\n    min_position: -1.0\n")
    name = "shield_bad"
    proc = processes.python(name, SHIELD, *shield_args(name, limits=bad))
    assert not peer.change_state(name, Transition.TRANSITION_CONFIGURE)
    assert peer.lifecycle_state(name) == "unconfigured"
    log = processes.log(proc)
    assert "limits_file" in log and "has_position_limits" in log


def test_shield_autostart_refusal_exits_with_status_2(processes):
    # a boolean given as a string, a joint with no limits, an out-of-domain number
    cases = [
        (["autostart:='true'"], "autostart"),
        (["autostart:=true", "joints:=[shoulder_pan,nope]"], "nope"),
        (["autostart:=true", "command_timeout_s:=0.0"], "command_timeout_s"),
        (["autostart:=true", "controller:=velocity_thing"], "controller"),
        (["autostart:=true", "estop_required:='false'"], "estop_required"),
        (["autostart:=true", "estop_timeout_s:=0.0"], "estop_timeout_s"),
    ]
    procs = []
    for k, (params, word) in enumerate(cases):
        args = shield_args(f"shield_refuse{k}")
        for p in params:
            args += ["-p", p]
        procs.append((processes.start(f"refuse{k}", [sys.executable, "-m", SHIELD, *args]), word))
    for proc, word in procs:
        assert proc.wait(timeout=60) == 2, processes.log(proc)
        log = processes.log(proc)
        assert word in log and "Traceback" not in log, log
