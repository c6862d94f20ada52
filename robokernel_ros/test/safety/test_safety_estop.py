"""The e-stop circuit (robokernel_ros.safety.estop) as pure logic: a hypothesis state
machine runs any interleaving of source start / stop (kill) / press / release / silence,
shield restarts (with and without a latch file), service latches and clear_fault, and
checks after every step that no command may pass while the e-stop is pressed, while the
source is unknown (not yet heard twice), or lost (silent for longer than the timeout)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from robokernel_ros.safety.estop import LOST, PRESSED, EstopCircuit

TIMEOUT = 0.5
PERIOD = 0.1  # the source's heartbeat period (estop_panel's default)


class EstopMachine(RuleBasedStateMachine):
    """Ground truth (the source process, the button, the clock) next to the circuit."""

    @initialize(latch_file=st.booleans())
    def start(self, latch_file: bool) -> None:
        self.now = 0.0
        self.running = False  # the source process
        self.pressed = False  # its button (latched by the panel until released)
        self.t_published = None  # when the source last published (ground truth)
        self.fresh = 0  # samples published to the current circuit live (not DDS history)
        self.latch_file = latch_file
        self.heard = False  # the current circuit got a sample of the last source
        self.owed_clear = False  # pressed, service latch or source lost since the last clear
        self.file_latched = False
        self.circuit = EstopCircuit(required=True, timeout_s=TIMEOUT, now=self.now)

    # -- the source ----------------------------------------------------------------------
    def _publish(self) -> None:
        self.t_published = self.now
        self.fresh += 1
        self.heard = True
        self.owed_clear = self.owed_clear or self.pressed
        if self.circuit.sample(self.pressed, self.now) and self.latch_file:
            self.file_latched = True

    @rule(pressed=st.booleans())
    def source_start(self, pressed: bool) -> None:
        # a new source process (if one runs, it is replaced: the old one stops publishing)
        self.running, self.pressed = True, pressed
        self._publish()

    @rule()
    def source_kill(self) -> None:
        if not self.running:
            return
        self.running = False

    @rule(silence=st.floats(TIMEOUT + 0.01, 1.5), pressed=st.booleans())
    def source_replaced_after_silence(self, silence: float, pressed: bool) -> None:
        """The source dies, nothing is heard for longer than the timeout, a new one starts."""
        self.running = False
        self.time_passes(silence, 0.0)
        self.source_start(pressed)

    @rule()
    def source_terminate(self) -> None:
        if not self.running:
            return
        # SIGTERM / SIGINT of the panel: it publishes pressed, then exits
        self.pressed = True
        self._publish()
        self.running = False

    @rule()
    def press(self) -> None:
        if not self.running:
            return
        self.pressed = True
        self._publish()

    @rule()
    def release(self) -> None:
        if not self.running:
            return
        self.pressed = False
        self._publish()

    @rule(
        dt=st.one_of(
            st.sampled_from([0.05, PERIOD, 0.3, TIMEOUT, 0.6, 1.0]), st.floats(0.001, 1.5)
        ),
        jitter=st.one_of(st.just(0.0), st.floats(0.0, 0.3)),
    )
    def time_passes(self, dt: float, jitter: float) -> None:
        """The running source publishes every PERIOD (late by up to `jitter` once); the
        circuit's owner checks the clock on its timer."""
        end = self.now + dt
        while self.running and self.t_published + PERIOD + jitter <= end:
            self.now = self.t_published + PERIOD + jitter
            jitter = 0.0
            self._publish()
        self.now = end
        if self.heard and not self.running and end - self.t_published > TIMEOUT:
            self.owed_clear = True  # lost: only clear_fault with a new live source unlatches
        if self.circuit.tick(self.now) and self.latch_file:
            self.file_latched = True

    # -- the shield ----------------------------------------------------------------------
    @rule()
    def shield_restart(self) -> None:
        by = f"latch_file {self.latch_file}" if self.file_latched else ""
        self.circuit = EstopCircuit(required=True, timeout_s=TIMEOUT, now=self.now, latched_by=by)
        self.fresh = 0
        self.heard = self.running
        self.owed_clear = self.file_latched or (self.running and self.pressed)
        if self.running:  # transient_local: the source's last value arrives at once, as
            self.circuit.sample(self.pressed, self.now)  # history (a hung source's too)

    @rule()
    def service_estop(self) -> None:
        if self.circuit.latch("~/estop service") and self.latch_file:
            self.file_latched = True
        self.owed_clear = True

    @rule()
    def clear_fault(self) -> None:
        ok, message = self.circuit.clear(self.now)
        if ok:
            self.file_latched = self.owed_clear = False
            assert not self.pressed, message
            assert self.now - self.t_published <= TIMEOUT, message
        else:
            assert message.startswith("refused")

    # -- the property --------------------------------------------------------------------
    @invariant()
    def nothing_passes_unless_released_and_live(self) -> None:
        if not self.circuit.may_forward(self.now):
            return
        assert not self.pressed, "forwarding while the e-stop is pressed"
        assert self.fresh >= 1, "forwarding on DDS history alone (source unknown)"
        assert self.now - self.t_published <= TIMEOUT, "forwarding on a lost source"
        assert not self.file_latched, "forwarding while the latch file says latched"
        assert not self.owed_clear, "forwarding after a press or a loss without clear_fault"
        assert self.circuit.reason(self.now) == ""

    @invariant()
    def a_reason_whenever_held(self) -> None:
        if not self.circuit.may_forward(self.now):
            assert self.circuit.reason(self.now)


EstopMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=30, deadline=None)
test_shield_estop_circuit_state_machine = EstopMachine.TestCase


def test_circuit_waits_arms_forwards_and_latches_when_the_source_goes_silent():
    c = EstopCircuit(required=True, timeout_s=TIMEOUT, now=0.0)
    assert not c.may_forward(0.0) and "no sample" in c.reason(0.0)
    c.sample(False, 0.1)
    assert not c.may_forward(0.1) and "one sample" in c.reason(0.1)
    c.sample(False, 0.2)
    assert c.may_forward(0.2) and c.reason(0.2) == ""
    assert c.may_forward(0.2 + TIMEOUT)  # exactly the timeout: still live
    assert not c.may_forward(0.2 + TIMEOUT + 0.01)
    assert c.latched and c.latched_by == LOST
    ok, message = c.clear(1.0)
    assert not ok and "clear once it is live" in message
    c.sample(False, 1.0)
    assert not c.clear(1.0)[0]  # one sample of a new source: not live yet
    c.sample(False, 1.1)
    assert c.clear(1.1) == (True, "e-stop cleared") and c.may_forward(1.1)


def test_circuit_reports_the_silence_it_noticed_and_how_late_its_check_came():
    c = EstopCircuit(required=True, timeout_s=TIMEOUT, now=0.0)
    c.sample(False, 0.1)
    c.sample(False, 0.2)
    assert c.may_forward(0.2 + TIMEOUT - 0.005)  # checked often: the last check found it live
    assert not c.may_forward(0.2 + TIMEOUT + 0.005)
    assert c.lost_after_s == pytest.approx(TIMEOUT + 0.005)
    assert c.lost_check_gap_s == pytest.approx(0.01)  # the silence is the live check's + the gap
    stalled = EstopCircuit(required=True, timeout_s=TIMEOUT, now=0.0)
    stalled.sample(False, 0.1)
    stalled.sample(False, 0.2)
    assert stalled.may_forward(0.25)
    assert not stalled.may_forward(1.5)  # the owner was stalled 1.25 s: noticed late, says so
    assert stalled.lost_after_s == pytest.approx(1.3)
    assert stalled.lost_check_gap_s == pytest.approx(1.25)


def test_circuit_pressed_latches_and_clear_waits_for_release_and_a_quiet_timeout():
    c = EstopCircuit(required=True, timeout_s=TIMEOUT, now=0.0)
    c.sample(False, 0.0)
    c.sample(False, 0.1)
    assert c.sample(True, 0.2) and c.latched_by == PRESSED and not c.may_forward(0.2)
    assert "still pressed" in c.clear(0.25)[1]
    c.sample(False, 0.3)
    ok, message = c.clear(0.35)
    assert not ok and "pressed sample arrived" in message
    c.sample(False, 0.4)
    c.sample(False, 0.5)
    c.sample(False, 0.6)
    c.sample(False, 0.71)
    assert c.clear(0.71)[0] and c.may_forward(0.71)


def test_circuit_not_required_keeps_the_old_behaviour():
    c = EstopCircuit(required=False, timeout_s=TIMEOUT, wait_s=1.0, now=0.0)
    assert not c.may_forward(0.5) and "estop_wait_s" in c.reason(0.5)
    assert c.may_forward(1.0)  # no publisher: after wait_s it forwards
    assert not EstopCircuit(required=False, wait_s=1.0, now=0.0).may_forward(2.0, publishers=1)
    c.sample(False, 1.5)
    assert c.may_forward(100.0) and not c.latched  # silence is not noticed
    c.sample(True, 101.0)
    assert not c.may_forward(101.0) and not c.clear(101.0)[0]
    c.sample(False, 102.0)
    assert c.clear(102.0)[0] and c.may_forward(102.0)


def test_circuit_refuses_a_bad_timeout():
    with pytest.raises(ValueError, match="timeout_s=0"):
        EstopCircuit(required=True, timeout_s=0, now=0.0)


def test_the_circuits_reasons_and_refusals_name_its_real_topic():
    topic = "/robokernel/estop"
    c = EstopCircuit(required=True, timeout_s=TIMEOUT, now=0.0, topic=topic)
    assert (
        c.reason(0.0)
        == f"waiting for the e-stop source: no sample on {topic} yet (no publisher matched)"
    )
    c.sample(False, 0.0)
    c.sample(False, 0.1)
    assert c.sample(True, 0.2) and c.latched_by == f"{topic}: pressed"
    assert f"(last {topic} value true)" in c.clear(0.25)[1]
    lax = EstopCircuit(required=False, wait_s=1.0, now=0.0, topic=topic)
    assert f"the last value of {topic}" in lax.reason(0.5)
    assert "~/estop" not in c.reason(0.3) + lax.reason(0.5) + c.clear(0.3)[1]
