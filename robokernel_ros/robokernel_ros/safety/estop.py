"""The e-stop input as a normally-closed circuit: what may pass is decided here, no ROS.

    circuit = EstopCircuit(required=True, timeout_s=0.5, now=time.monotonic())
    circuit.sample(pressed=False, now=t)        # every std_msgs/Bool on the e-stop topic
    circuit.may_forward(now=t)                  # before every command: False -> hold only
    circuit.clear(now=t)                        # (ok, message) of ~/clear_fault

The node that owns the circuit (safety_shield, runner) feeds it the samples of its
e-stop topic, its own latches (a service, a latch file) and the clock; the circuit
says whether a command may pass, why not, and when it latched.

**Required** (`required=True`, how hardware e-stop loops and PLC safety inputs work):
nothing passes until the source has proven itself live *and* released. The source
(the `estop_panel` node, or a bridge to a hardware e-stop) republishes its state at a
fixed period (a released heartbeat); the circuit is

  - *waiting* until two samples have arrived (the first one may be the DDS
    transient_local history of a source whose process hangs: DDS threads serve it
    even when the application is stuck; a second sample is new, so it proves the
    application is alive);
  - *live* while the last sample is at most `timeout_s` old;
  - *latched* by a pressed sample (`true`), by a latch of the owner (service, file), or
    when a source that has sent anything goes silent for longer than `timeout_s`
    ("e-stop source lost"). A latch holds until `clear()`, which is refused unless the
    source is live, its last sample is released, and no pressed sample arrived within
    the last `timeout_s` (a second source that is still pressed keeps saying so at
    its period; the clear waits for one timeout of silence from it).

Liveness is a heartbeat judged on this side's clock, not DDS liveliness QoS with a
lease: a lease with AUTOMATIC liveliness is asserted by the DDS participant's own
threads, which keep a hung Python panel "alive"; MANUAL_BY_TOPIC liveliness would be
equivalent to the heartbeat, but every e-stop publisher would then need a matching
liveliness offer (`ros2 topic pub` and a hardware bridge written against
std_msgs/Bool with the workcell's reliable + transient_local QoS would be silently
unmatched), and rclpy's liveliness event only counts writers, as this does with
time. A heartbeat works with any RMW, any publisher that repeats its value, and is
visible with `ros2 topic hz`. A sample's time is when it reached the consumer's process
(the middleware's reception stamp, `ros.transport.received_at`), and the owners take
every waiting sample before they judge the silence: a consumer whose executor stalled
does not mistake its own stall for a silent source.

**Not required** (`required=False`, benches and graphs without an operator): the
behaviour before the circuit existed. A pressed sample or an owner latch latches, the
clear is refused while the last sample is pressed, and after start nothing passes for
`wait_s` (time for a latched value to arrive by DDS), up to 5x that while a publisher
is matched but its value has not arrived. A source that goes silent is not noticed:
what this mode gives up.
"""

from __future__ import annotations

import math

from robokernel_ros.kernel.operator import Latch

#: latch causes, as they appear in ~/state and the interventions
LOST = "e-stop source lost"
#: the name the texts give the e-stop topic when the owner does not say which it is
TOPIC = "the e-stop topic"
PRESSED = f"{TOPIC}: pressed"


class EstopCircuit:
    """The e-stop decision of one consumer (see the module docstring). Not thread-safe:
    the owner serialises calls (one executor callback group, or a lock). The latch is the
    kernel's `Latch` (`estop_latch`: who latched it, why and when); `latched` and
    `latched_by` read it. `topic` is the e-stop topic's resolved name, as the reasons and
    the refusals name it (the owner's real input, e.g. `/robokernel/estop`)."""

    def __init__(
        self,
        *,
        required: bool,
        timeout_s: float = 0.5,
        wait_s: float = 1.0,
        now: float,
        latched_by: str = "",
        topic: str = TOPIC,
    ) -> None:
        self.topic = str(topic) or TOPIC
        if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
            raise ValueError(f"timeout_s={timeout_s!r}: must be a finite number > 0")
        self.required = bool(required)
        self.timeout_s = float(timeout_s)
        self.wait_s = float(wait_s)
        self._t_start = now
        self._latch = Latch()
        if latched_by:
            self._latch.latch(latched_by)
        #: the last sample's value (True = pressed), None before the first one
        self.input: bool | None = None
        self._samples = 0  # since the source (re)appeared
        self._t_sample = -math.inf
        self._t_pressed = -math.inf
        #: how long the source had been silent when the circuit noticed its loss
        self.lost_after_s = math.nan
        #: and how long before that the circuit had last been checked: the owner's own
        #: delay (its timer's period, or a stall of its process), which the silence
        #: noticed includes (the check before found the silence within the timeout)
        self.lost_check_gap_s = math.nan
        self._t_checked = now

    @property
    def estop_latch(self) -> Latch:
        """The circuit's Latch (read it: latch() and clear() are the ways to change it)."""
        return self._latch

    @property
    def latched(self) -> bool:
        return self._latch.latched

    @property
    def latched_by(self) -> str:
        return self._latch.by

    # -- inputs ------------------------------------------------------------------------------

    def sample(self, pressed: bool, now: float, by: str = "") -> bool:
        """One value from the e-stop topic (a pressed one latches, reported as `by`;
        '' says "<topic>: pressed"). True when it latched the circuit now."""
        by = by or f"{self.topic}: pressed"
        latched = self.tick(now)  # a gap before this sample is a loss, whatever comes now
        self._samples += 1
        self._t_sample = now
        self.input = bool(pressed)
        if pressed:
            self._t_pressed = now
            latched = self.latch(by) or latched
        return latched

    def latch(self, by: str) -> bool:
        """Latch (a pressed sample, a service, a latch file, a lost source). True when it
        was not latched before."""
        return self._latch.latch(by)

    def tick(self, now: float) -> bool:
        """Check the source's liveness at `now`. True when it latched now (source lost)."""
        previous = self._t_checked
        if now > previous:  # a sample's reception time may be older than the last check
            self._t_checked = now
        if self._samples and now - self._t_sample > self.timeout_s:
            self._samples = 0  # the next sample starts a new source: waiting again
            self.lost_after_s = now - self._t_sample
            self.lost_check_gap_s = max(0.0, now - previous)
            if self.required:
                return self.latch(LOST)
        return False

    def lost_detail(self) -> str:
        """How the last loss was noticed, for the latch's log or intervention: the check
        that noticed it and how long after the check before (a stalled process checks
        late; a check on time that finds the source silent means its samples stopped
        arriving)."""
        return f"checked {1000 * self.lost_check_gap_s:.1f} ms after the last check"

    def clear(self, now: float) -> tuple[bool, str]:
        """~/clear_fault: (cleared, message). Refused (False) while the input is pressed,
        and in required mode until the source is live and released."""
        self.tick(now)
        if self.input:
            return False, (
                f"refused: the e-stop input is still pressed (last {self.topic} value true); "
                "release it, then clear"
            )
        if self.required:
            if not self.live(now):
                return False, f"refused: {self._source_text(now)}; clear once it is live"
            since = now - self._t_pressed
            if since <= self.timeout_s:
                return False, (
                    f"refused: a pressed sample arrived {since:.2f} s ago (within "
                    f"estop_timeout_s={self.timeout_s:g}; a pressed source may still be "
                    "live); try again"
                )
        if not self._latch.clear():
            return True, "no fault latched"
        return True, "e-stop cleared"

    # -- decisions ---------------------------------------------------------------------------

    def live(self, now: float) -> bool:
        """The source has proven itself (two samples) and its last sample is fresh."""
        return self._samples >= 2 and now - self._t_sample <= self.timeout_s

    def may_forward(self, now: float, publishers: int = 0) -> bool:
        """Whether a command may pass at `now` (checks liveness first: may latch)."""
        self.tick(now)
        if self.latched:
            return False
        if self.required:
            return self.input is False and self.live(now)
        return not self._awaiting(now, publishers)

    def reason(self, now: float, publishers: int = 0) -> str:
        """Why nothing passes ('' when the circuit lets commands pass)."""
        if self.latched:
            return f"e-stop latched by {self.latched_by}"
        if self.required:
            if self.input is False and self.live(now):
                return ""
            return self._source_text(now, publishers)
        if self._awaiting(now, publishers):
            return (
                f"waiting up to estop_wait_s for the last value of {self.topic} (a latched e-stop)"
            )
        return ""

    def source_state(self, now: float) -> str:
        """none (no sample yet) | arming (one sample) | live | silent (older than the timeout)."""
        if self._samples == 0:
            return "none" if self.input is None else "silent"
        if now - self._t_sample > self.timeout_s:
            return "silent"
        return "live" if self._samples >= 2 else "arming"

    def _source_text(self, now: float, publishers: int = 0) -> str:
        state = self.source_state(now)
        if state == "arming":
            return "waiting for the e-stop source: one sample so far, a second proves it live"
        if state == "silent":
            return (
                f"waiting for the e-stop source: silent for {now - self._t_sample:.2f} s "
                f"(estop_timeout_s={self.timeout_s:g})"
            )
        matched = f"{publishers} publisher(s) matched" if publishers else "no publisher matched"
        return f"waiting for the e-stop source: no sample on {self.topic} yet ({matched})"

    def _awaiting(self, now: float, publishers: int) -> bool:
        if self.input is not None:
            return False
        waited = now - self._t_start
        return waited < self.wait_s or (waited < 5 * self.wait_s and publishers > 0)
