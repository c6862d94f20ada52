"""safety_shield: the last node between every command source and the robot's controllers.

    command source --input_topic--> safety_shield --output_topic--> ros2_control controller
                                          ^  /joint_states (measured positions)
                                          |  estop_topic (std_msgs/Bool, latched): the panel's
                                          |  <ns>/estop by default; operator

It speaks the controllers' own message types (`ros.commands`): `std_msgs/Float64MultiArray`
for a forward_command_controller (`<ctrl>/commands`, values in `joints` order) or
`trajectory_msgs/JointTrajectory` for a joint_trajectory_controller
(`<ctrl>/joint_trajectory`), selected by the `controller` parameter. Its parameters and how
the limits are loaded: `ros.shield_config`.

Every command is reviewed by `robokernel_ros.safety.review.CommandReview` (ROS-free:
the kernel's guards built from the joint limits, the same rules the in-process shield of
the episode loop uses): finite, of the right shape, every joint known; within the
position limits (a small excess clipped, more refused); velocity and acceleration
rate-limited relative to the last command sent. A forward_command stream is judged over
its nominal period (`command_rate_hz`, the sender's control rate; 0: learned from the
stream's arrivals), not over its messages' arrival jitter (`safety.command_clock`: a
stream that really is faster is judged at its real rate, a late command as one period);
a trajectory point by point over its time_from_start. A refused command is dropped, a
hold command is sent (the measured position, clamped into the limits, frozen until the
next command passes; zeros for a velocity interface; for a trajectory controller a
one-point trajectory to it), and the intervention is published.

Watchdog: no valid command for `command_timeout_s` -> one hold command and a reported
timeout (interventions guard "watchdog", counter `timeouts`); the next valid command
resumes.

E-stop, a normally-closed circuit (`safety.estop.EstopCircuit`; its input on the graph:
`ros.shield_estop`): the `estop_topic` topic (default `estop`, i.e. `<ns>/estop`: the one
nodes/estop_panel.py and the runner use in the same namespace, so a shield started with no
config and no remap hears the panel; `~/estop` makes it a source of this shield alone);
std_msgs/Bool, true = pressed; reliable + transient_local depth 1, so a shield that starts
or restarts receives the last value at once. With `estop_required:=true` (the default)
nothing passes until a live source has said released: the source (nodes/estop_panel.py,
or a hardware bridge) republishes its state every period; two samples make it live, the
last one must be at most `estop_timeout_s` old. A source that goes silent latches the
e-stop ("e-stop source lost"), checked on a timer and before every command, so a source
killed mid-stream is answered by a hold within estop_timeout_s + one command period; a
sample counts from when it reached the process (a stall of this node's executor is not a
silent source). A pressed sample, the `~/estop` service (std_srvs/Trigger,
`<ns>/<shield>/estop`: this shield alone) or a lost source latch it; while latched
nothing but hold passes. `~/clear_fault` (std_srvs/Trigger) unlatches it, and is refused
while the input is pressed and, when required, until the source is live and released (no
pressed sample within estop_timeout_s). With `estop_required:=false` the shield forwards
unless the e-stop is latched, after `estop_wait_s` with no publisher (a silent source is
not noticed). An e-stop publisher whose QoS this subscription cannot match (best effort,
volatile) is never heard: it is reported in `~/state` and the log. With `latch_file` set,
the latch is also kept in that file, so a shield that is restarted after the e-stop input
was released still comes up latched.

`~/state` (ShieldState, on change and every `state_period_s`, transient_local) says why
nothing is forwarded (`reason`: every cause that holds, joined by "; ": no joint state
yet, waiting for the e-stop source, latched and by what, source silent, incompatible
QoS). `command_sender` is the publisher (DDS GID) of the last command read, published
when it changes: a sender that finds itself there knows that its commands arrive
(RosRobotEnv's first reset waits for it; its publisher's own match says only that it
found this reader). `sender_read/passed/clipped/refused` count what became of that
sender's commands (`safety.shield_counts`; in every lifecycle and e-stop state: a command
read while inactive or waiting is refused, and counted), `sender_last_seq` is the
publication sequence number of the last of them counted (a sender that published N
learns when every one that will arrive is counted, and how many never did),
`last_refusal` says why the last one was refused; `~/state` is also published when these counts change (at most every
50 ms), so a sender learns within a moment what the shield did with its commands.
`~/interventions` (ShieldIntervention) carries every one.

Honesty: `~/state`'s `state` is `active` only while commands are forwarded; the
lifecycle's `~/get_state` answers the primary state ACTIVE with the label
`active (not forwarding: <reason>)` while the node waits (the e-stop source, a joint
state) or is latched, and the log says "forwarding commands" only when it does.

Lifecycle (rclpy.lifecycle): configure validates the parameters and loads the limits (the
log lists each limit's source); it makes the command publisher, the command and joint
state subscriptions and the watchdog, which cleanup destroys. Activate starts forwarding
(nothing is forwarded until the node also has a joint state for every joint); deactivate
sends a hold and stops. The e-stop input, the services, `~/state` and `~/interventions`
exist in every lifecycle state (the e-stop is heard, and its latch kept, whatever the
state). With `autostart:=true` the node configures and activates itself (for launch files
and demos without a lifecycle manager); a configuration it refuses then ends the process
with status 2.

Run: python -m robokernel_ros.nodes.safety_shield --ros-args -p joints:="[a,b]" \
        -p limits_file:=config/joint_limits_so101.yaml -p autostart:=true
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import rclpy
from lifecycle_msgs.srv import GetState
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from robokernel_interfaces.msg import ShieldIntervention, ShieldState
from robokernel_ros.ros.commands import clipped_trajectory, command_type, hold_message
from robokernel_ros.ros.lifecycle import release_state_machine
from robokernel_ros.ros.node import exit_main, run_node
from robokernel_ros.ros.params import ParameterError, declare_params
from robokernel_ros.ros.qos import (
    COMMAND_QOS,
    COMMAND_READER_QOS,
    EVENT_QOS,
    SENSOR_QOS,
    STATUS_QOS,
)
from robokernel_ros.ros.shield_config import (
    ShieldConfig,
    ShieldParams,
    declare_joint_limits,
    resolve_shield_config,
)
from robokernel_ros.ros.shield_estop import EstopInput, LatchFile
from robokernel_ros.ros.transport import DirectReader
from robokernel_ros.safety.estop import LOST, EstopCircuit
from robokernel_ros.safety.limits import describe_limit
from robokernel_ros.safety.review import CommandReview, Finding, TrajectoryPoint, Verdict
from robokernel_ros.safety.shield_counts import ShieldCounts

#: The joint states' reader, taken by the shield (a DirectReader): the subscription's
#: sensor QoS (best effort: any publisher matches) with a history that keeps what arrives
#: between two takes.
JOINT_STATE_READER_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=64,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
#: How long a command wake-up waits for the command reader's copy of the sample (the two
#: readers of one topic in this process are delivered one after the other).
COMMAND_WAKE_WAIT_S = 0.002


class SafetyShieldNode(LifecycleNode):
    """See the module docstring."""

    def __init__(self, node_name: str = "safety_shield", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._params = declare_params(self, ShieldParams)
        declare_joint_limits(self, self._params.joints)
        self._logger = self.get_logger()
        self._counts = ShieldCounts()  # node-level: they survive lifecycle transitions
        self._active = False
        self._configured = False
        self._configure_error: ParameterError | None = None
        self._have_js = False
        self._js_stamp = JointState().header.stamp
        # Lifecycle-managed entities (made in on_configure, destroyed in on_cleanup).
        self._config: ShieldConfig | None = None
        self._review: CommandReview | None = None
        self._pub_cmd = None
        self._sub_cmd = None
        self._cmd_reader: DirectReader | None = None  # the command stream, with stamps and senders
        self._sub_js = None
        self._js_reader: DirectReader | None = None  # joint states, taken before every hold
        self._watchdog = None
        self._reset_motion()

        params = self._params
        self._estop = self._make_circuit(params)  # node-level, every lifecycle state
        self._published_estop = (False, "")  # (input, source state) last sent on ~/state
        self._published_counts: tuple[int, ...] = ()
        self._forwarding_logged: bool | None = None  # the last "forwarding" state logged
        # ~/get_state says whether the active node forwards (module docstring)
        self._service_get_state.callback = self._on_get_state

        # Always present, whatever the lifecycle state.
        self._pub_state = self.create_publisher(ShieldState, "~/state", STATUS_QOS)
        self._pub_iv = self.create_publisher(ShieldIntervention, "~/interventions", EVENT_QOS)
        # A node of this context that no executor spins: the e-stop samples and the
        # commands are taken from DirectReaders on it, with their reception times,
        # source timestamps and senders (ros.shield_estop, `_take_commands`).
        self._rx_node = rclpy.create_node(
            f"{self.get_name()}_rx",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        self._estop_input = EstopInput(
            self,
            self._rx_node,
            params.estop_topic or "estop",
            on_wake=self._take_estop,
            on_incompatible=self._publish_state,
        )
        self._estop.topic = self._estop_input.topic  # the reasons name it
        self.create_service(Trigger, "~/estop", self._on_estop_service)
        self.create_service(Trigger, "~/clear_fault", self._on_clear_fault)
        self.create_timer(params.state_period_s, self._publish_state)
        # liveness of the e-stop source, checked besides every command
        self.create_timer(max(0.005, min(0.05, self._estop.timeout_s / 10)), self._on_estop_tick)
        self._publish_state()

    def _make_circuit(self, params: ShieldParams) -> EstopCircuit:
        """The e-stop decision (safety.estop), latched at start when the latch file exists."""
        self._latch_file = LatchFile(params.latch_file)
        latched_by = self._latch_file.latched_at_start()
        if latched_by:
            self._logger.warning(
                f"e-stop latched at start: {self._latch_file.path} exists (an earlier e-stop "
                "was never cleared); call ~/clear_fault to release"
            )
        return EstopCircuit(
            required=params.estop_required,
            timeout_s=params.estop_timeout_s,
            wait_s=params.estop_wait_s,
            now=time.monotonic(),
            latched_by=latched_by,
        )

    def _read_configuration(self) -> ShieldConfig:
        """Validate the parameters and load the limits; ParameterError when refused."""
        return resolve_shield_config(self, self._params)

    # -- lifecycle ---------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            config = self._read_configuration()
        except ParameterError as exc:
            self._configure_error = exc
            self._logger.error(f"configure refused: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._configure_error = None
        self._config = config
        self._index = {j: i for i, j in enumerate(config.joints)}
        self._review = config.review
        self._seen = [False] * len(config.joints)
        self._have_js = False
        self._reset_motion()
        msg_type = command_type(config.controller)
        self._pub_cmd = self.create_publisher(msg_type, config.output_topic, COMMAND_QOS)
        # The executor's subscription only wakes the node: the commands are taken from a
        # DirectReader of the same topic with their source timestamps (`sent_at`: the
        # sender's schedule that the rate guards judge, safety.command_clock) and senders.
        self._cmd_reader = DirectReader(
            self._rx_node,
            msg_type,
            self.resolve_topic_name(config.input_topic),
            COMMAND_READER_QOS,
        )
        self._sub_cmd = self.create_subscription(
            msg_type,
            config.input_topic,
            lambda _msg: self._take_commands(COMMAND_WAKE_WAIT_S),
            COMMAND_QOS,
        )
        # The same for the joint states: a hold is taken where the robot is now, after
        # every sample that has reached the process (a latch noticed by the e-stop timer
        # must not hold at a sample older than those waiting behind it in the executor).
        self._js_reader = DirectReader(
            self._rx_node,
            JointState,
            self.resolve_topic_name(config.joint_states_topic),
            JOINT_STATE_READER_QOS,
        )
        self._sub_js = self.create_subscription(
            JointState,
            config.joint_states_topic,
            lambda _msg: self._take_joint_states(),
            SENSOR_QOS,
        )
        period = max(0.001, min(0.005, config.command_timeout_s / 10))  # watchdog resolution
        self._watchdog = self.create_timer(period, self._on_watchdog)
        self._configured = True
        ignored = list(config.not_enforced)
        self._logger.info(
            f"configured: {len(config.joints)} joints, {config.controller} "
            f"({config.command_interface}) {config.input_topic} -> {config.output_topic}"
            + (f"; not enforced: {ignored}" if ignored else "")
            + "; limits (source):\n  "
            + "\n  ".join(describe_limit(j, s) for j, s in config.limit_sources.items())
        )
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        self._reset_motion()
        self._forwarding_logged = None
        self._logger.info("activated (lifecycle)")
        self._publish_state()  # logs whether it forwards, and why not
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._can_hold():
            self._send_hold(time.monotonic())
            self._intervene("deactivate", "held", "node deactivated")
        self._active = False
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._teardown()
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active and self._can_hold():
            self._send_hold(time.monotonic())
        self._active = False
        self._teardown()
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def _teardown(self) -> None:
        """Destroy what configure made."""
        for reader in (self._cmd_reader, self._js_reader):
            if reader is not None:
                reader.close()
        self._cmd_reader = self._js_reader = None
        for entity, destroy in (
            (self._sub_cmd, self.destroy_subscription),
            (self._sub_js, self.destroy_subscription),
            (self._pub_cmd, self.destroy_publisher),
            (self._watchdog, self.destroy_timer),
        ):
            if entity is not None:
                destroy(entity)
        self._sub_cmd = self._sub_js = self._pub_cmd = self._watchdog = None
        self._config = self._review = None
        self._configured = False
        self._have_js = False

    def autostart(self) -> None:
        """Configure and activate (the `autostart` parameter); ParameterError when refused."""
        self.trigger_configure()
        if not self._configured:
            raise self._configure_error or RuntimeError("configure failed")
        self.trigger_activate()

    # -- motion reference ------------------------------------------------------------------

    def _reset_motion(self) -> None:
        """Forget the last command: the next one is rate-limited from the measured state."""
        if self._review is not None:
            self._review.reset()
        self._armed = False
        self._t_valid = time.monotonic()

    def _can_hold(self) -> bool:
        """A hold can be computed: a joint state for a position interface."""
        config = self._config
        return self._have_js or (config is not None and config.command_interface == "velocity")

    # -- inputs ------------------------------------------------------------------------------

    def _take_joint_states(self) -> None:
        """Apply every joint state waiting in the joint-state reader, in order."""
        reader = self._js_reader
        if reader is not None:
            for msg in reader.take(0.0):
                self._on_joint_state(msg)

    def _on_joint_state(self, msg: JointState) -> None:
        review = self._review
        if review is None:  # a sample taken before cleanup destroyed the subscription
            return
        self._js_stamp = msg.header.stamp  # the latch's log names the sample it holds at
        index = self._index
        measured = review.measured
        measured_velocity = review.measured_velocity
        velocities = msg.velocity
        has_velocity = len(velocities) == len(msg.name)
        for k, (name, position) in enumerate(zip(msg.name, msg.position, strict=False)):
            i = index.get(name)
            if i is not None and math.isfinite(position):
                measured[i] = position
                self._seen[i] = True
                if has_velocity and math.isfinite(velocities[k]):
                    measured_velocity[i] = velocities[k]
        if not self._have_js and all(self._seen):
            self._have_js = True
            self._logger.info("joint state received for every joint")
            self._publish_state()

    def _gate(self, now: float) -> bool:
        """True when a command may be reviewed; else it is refused here."""
        self._take_estop()
        estop = self._estop
        latched = estop.latched
        legacy_wait = not estop.required and estop.input is None
        forward = estop.may_forward(now, self._estop_input.publisher_count() if legacy_wait else 0)
        if estop.latched and not latched:  # the source was lost just now
            self._latched_now()
        if estop.latched:
            detail = f"e-stop latched ({estop.latched_by})"
            self._counts.count_refused(f"estop: {detail}")
            self._intervene("estop", "refused", detail)
            self._send_hold(now)
            return False
        if not self._have_js:
            detail = "no joint state yet for every joint; nothing is forwarded"
        elif not forward:
            detail = estop.reason(now, self._estop_input.publisher_count())
        else:
            if not self._review.seeded:
                self._take_joint_states()  # seeded where the robot is now
                self._review.seed()
            return True
        self._counts.count_refused(f"waiting: {detail}")
        self._intervene("waiting", "refused", detail)
        return False

    def _take_commands(self, wait_s: float = 0.0) -> None:
        """Review every command waiting in the command reader, in order.
        `wait_s`: how long to wait for one when none is there yet (the executor's copy of
        a sample can be delivered before the reader's; the watchdog tick takes any that
        a wake-up missed)."""
        reader = self._cmd_reader
        if reader is None:
            return
        forward = self._config.controller == "forward_command"
        for msg, sent, sender, seq in reader.take_sent_by(wait_s):
            if self._counts.heard_from(sender, seq):
                self._publish_state()  # a new sender learns at once that it is heard
            if forward:
                self._on_array(msg, sent)
            else:
                self._on_trajectory(msg)

    def _on_array(self, msg: Float64MultiArray, sent: float) -> None:
        """One forward_command command, published at `sent` (monotonic seconds)."""
        if not self._active:
            self._refused_inactive()
            return
        now = time.monotonic()
        if not self._gate(now):
            return
        # Judged on the sender's schedule (when it published), not on when this node got
        # round to it: a stall of this process or of the transport delivers commands in a
        # burst, which is not a faster sender.
        verdict = self._review.review_array(msg.data, sent)
        if verdict.action == "passed":
            self._forward(msg)
        elif verdict.action == "clipped":
            self._forward(Float64MultiArray(data=verdict.values), verdict.findings)
        else:
            self._refused(verdict)
            return
        self._sent_valid(now)

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        if not self._active:
            self._refused_inactive()
            return
        now = time.monotonic()
        if not self._gate(now):
            return
        points = [
            TrajectoryPoint(
                p.time_from_start.sec + p.time_from_start.nanosec * 1e-9,
                p.positions,
                p.velocities,
                p.accelerations,
            )
            for p in msg.points
        ]
        verdict = self._review.review_trajectory(msg.joint_names, points, now)
        if verdict.action == "passed":
            self._forward(msg)
        elif verdict.action == "clipped":
            self._forward(clipped_trajectory(msg, verdict.points), verdict.findings)
        else:
            self._refused(verdict)
            return
        self._sent_valid(now)

    def _forward(self, msg: Any, clipped: list[Finding] | None = None) -> None:
        """Send a reviewed command: as it came, or clipped (its findings published)."""
        if clipped is None:
            self._counts.count_passed()
            self._pub_cmd.publish(msg)
            return
        self._counts.count_clipped()
        self._pub_cmd.publish(msg)
        self._publish_findings(clipped)

    def _sent_valid(self, now: float) -> None:
        self._t_valid = now
        self._armed = True

    # -- refusals and holds ------------------------------------------------------------------

    def _refused(self, verdict: Verdict) -> None:
        """Refused by the review, which has recorded its hold (`verdict.values`)."""
        refusals = [f for f in verdict.findings if f.action == "refused"] or verdict.findings
        self._counts.count_refused(
            "; ".join(map(_finding_text, refusals[:3])) or "refused by the review"
        )
        self._publish_findings(verdict.findings)
        self._publish_hold(verdict.values)

    def _refused_inactive(self) -> None:
        """A command read while the node is not active (lifecycle): refused, counted."""
        detail = "the shield is not active (lifecycle state inactive): nothing is forwarded"
        self._counts.count_refused(f"inactive: {detail}")
        self._intervene("inactive", "refused", detail)

    def _send_hold(self, now: float) -> None:
        """Send the hold command (needs a joint state for a position interface); a new
        hold is taken at the latest joint state that has reached the process."""
        self._take_joint_states()
        review = self._review
        if review is None or self._pub_cmd is None or not self._can_hold():
            return
        values = review.hold_values()
        self._publish_hold(values)
        review.record_hold(values, now)

    def _publish_hold(self, values: list[float]) -> None:
        config = self._config
        self._pub_cmd.publish(hold_message(config.controller, config.joints, values))
        self._counts.held += 1

    def _on_watchdog(self) -> None:
        self._take_commands()  # any command that its wake-up missed counts first
        if not (self._active and self._armed):
            return
        now = time.monotonic()
        silent = now - self._t_valid
        timeout = self._config.command_timeout_s
        if silent > timeout:
            self._armed = False
            self._counts.timeouts += 1
            self._send_hold(now)
            detail = f"no valid command for {silent:.3f} s"
            self._intervene("watchdog", "held", detail, value=silent, limit=timeout)
            self._logger.warning(f"watchdog: {detail}; hold sent")
            self._publish_state()

    # -- e-stop --------------------------------------------------------------------------------

    def _latched_now(self) -> None:
        """The circuit has just latched: keep it in the latch file, hold, report."""
        by = self._estop.latched_by
        try:
            self._latch_file.write(by)
        except OSError as exc:
            self._logger.error(f"latch_file {self._latch_file.path}: cannot write ({exc})")
        held = ""
        if self._active and self._review is not None:
            self._review.release_hold()  # hold where the robot is now
            self._send_hold(time.monotonic())
            if self._can_hold():
                # what the robot was sent, exactly (repr), and the joint state it came from
                stamp = self._js_stamp
                held = (
                    f"; holding at [{', '.join(map(repr, self._review.hold_values()))}]"
                    f" (the joint state stamped {stamp.sec}.{stamp.nanosec:09d})"
                )
        self._logger.warning(f"e-stop latched by {by}{held}")
        detail = f"e-stop latched by {by}"
        if by == LOST:  # value: the source's silence when noticed; limit: estop_timeout_s
            # how late this check came after the one before (the stall the silence includes)
            detail += f" ({self._estop.lost_detail()})"
            self._intervene(
                "estop",
                "held",
                detail,
                value=self._estop.lost_after_s,
                limit=self._estop.timeout_s,
            )
        else:
            self._intervene("estop", "held", detail)
        self._publish_state()

    def _take_estop(self) -> None:
        """Feed the circuit every e-stop sample waiting, each at its reception time."""
        for pressed, received in self._estop_input.take():
            by = (
                f"{self._estop.topic}: pressed ({self._estop_input.publishers_text()})"
                if pressed
                else ""
            )
            now = time.monotonic()
            if self._estop.sample(pressed, received, by):
                self._latched_now()
            elif (
                pressed != self._published_estop[0]
                or self._estop.source_state(now) != self._published_estop[1]
            ):
                self._publish_state()

    def _on_estop_tick(self) -> None:
        self._take_estop()  # what waited behind a stall of the executor counts first
        now = time.monotonic()
        if self._estop.tick(now):
            self._latched_now()
        elif (
            self._estop.source_state(now) != self._published_estop[1]
            or self._counts.key() != self._published_counts
        ):
            self._publish_state()

    def _on_estop_service(self, request: Trigger.Request, response: Trigger.Response):
        if self._estop.latch("~/estop service"):
            self._latched_now()
        response.success = True
        response.message = "e-stop latched"
        return response

    def _on_clear_fault(self, request: Trigger.Request, response: Trigger.Response):
        was_latched = self._estop.latched
        response.success, response.message = self._estop.clear(time.monotonic())
        if response.success and was_latched:
            self._latch_file.clear()
            self._reset_motion()  # resume from the measured state, watchdog disarmed
            self._logger.info("fault cleared")
            self._publish_state()
        return response

    # -- reporting -----------------------------------------------------------------------------

    def _intervene(
        self,
        guard: str,
        action: str,
        detail: str,
        *,
        joint: str = "",
        value: float = math.nan,
        limit: float = math.nan,
    ) -> None:
        """Publish one intervention: `guard` `action` (held, refused, clipped) for
        `detail`; `joint`, `value` and `limit` where it concerns one."""
        msg = ShieldIntervention()
        msg.stamp = self.get_clock().now().to_msg()
        msg.guard, msg.joint, msg.action, msg.detail = guard, joint, action, detail
        msg.value, msg.limit = float(value), float(limit)
        self._pub_iv.publish(msg)

    def _publish_findings(self, findings: list[Finding]) -> None:
        for f in findings:
            self._intervene(
                f.guard, f.action, f.detail, joint=f.joint, value=f.value, limit=f.limit
            )

    def destroy_node(self) -> None:
        if hasattr(self, "_estop_input"):
            self._estop_input.close()
            self._rx_node.destroy_node()
        super().destroy_node()
        release_state_machine(self)

    def state_name(self) -> str:
        return self._state_and_reason(time.monotonic())[0]

    def _state_and_reason(self, now: float) -> tuple[str, str]:
        """(state, why nothing is forwarded: '' while active)."""
        estop = self._estop
        if not self._active:
            return "inactive", (
                "not configured" if not self._configured else "inactive (lifecycle)"
            )
        if estop.latched:
            return "estopped", estop.reason(now)
        # Every reason that holds, not the first: a user fixing one must not find another.
        reasons = []
        if not self._have_js or self._review is None:
            reasons.append("no joint state yet for every joint")
        source = estop.reason(now, self._estop_input.publisher_count())
        if source and self._estop_input.incompatible_text:
            names = self._estop_input.publishers_text(incompatible=True)
            source += f"; {self._estop_input.incompatible_text} (publishers: {names})"
        if source:
            reasons.append(source)
        return ("waiting", "; ".join(reasons)) if reasons else ("active", "")

    def _publish_state(self) -> None:
        now = time.monotonic()
        estop, counts = self._estop, self._counts
        msg = ShieldState()
        msg.stamp = self.get_clock().now().to_msg()
        msg.state, msg.reason = self._state_and_reason(now)
        msg.estop_latched = estop.latched
        msg.estop_input = bool(estop.input)
        msg.estop_required = estop.required
        msg.estop_source = estop.source_state(now)
        msg.estop_latched_by = estop.latched_by
        msg.estop_incompatible_qos = self._estop_input.incompatible
        self._published_estop = (msg.estop_input, msg.estop_source)
        msg.have_limits = self._review is not None
        msg.have_joint_state = self._have_js
        msg.passed, msg.clipped, msg.refused = counts.passed, counts.clipped, counts.refused
        msg.held, msg.timeouts = counts.held, counts.timeouts
        msg.command_sender = counts.sender
        msg.sender_read, msg.sender_passed, msg.sender_clipped, msg.sender_refused = (
            counts.sender_counts()
        )
        msg.sender_last_seq = counts.sender_last_seq()
        msg.last_refusal = counts.last_refusal
        self._published_counts = counts.key()
        self._pub_state.publish(msg)
        self._log_forwarding(msg.state, msg.reason)

    def _log_forwarding(self, state: str, reason: str) -> None:
        """Say in the log when forwarding starts and stops (never that it forwards while
        it waits)."""
        if not self._active:
            self._forwarding_logged = None
            return
        forwarding = state == "active"
        if forwarding == self._forwarding_logged:
            return
        self._forwarding_logged = forwarding
        if forwarding:
            self._logger.info("forwarding commands")
        else:
            self._logger.warning(f"{state}: NOT forwarding commands: {reason}")

    def _on_get_state(
        self, request: GetState.Request, response: GetState.Response
    ) -> GetState.Response:
        """lifecycle ~/get_state: the primary state; while ACTIVE its label says whether
        commands are forwarded ('active') or why not ('active (not forwarding: ...)')."""
        state_id, label = self._state_machine.current_state
        response.current_state.id = state_id
        if self._active:
            state, reason = self._state_and_reason(time.monotonic())
            if state != "active":
                label = f"{label} (not forwarding: {state}: {reason})"
        response.current_state.label = label
        return response


def _finding_text(f: Finding) -> str:
    """'position shoulder_pan=2.5 (limit 1.92): <detail>' (what is known of it)."""
    what = f.guard + (f" {f.joint}" if f.joint else "")
    if math.isfinite(f.value):
        what += f"={f.value:.4g}"
    if math.isfinite(f.limit):
        what += f" (limit {f.limit:.4g})"
    return what + (f": {f.detail}" if f.detail else "")


def main(args: Sequence[str] | None = None) -> int:
    def started(node: SafetyShieldNode) -> None:
        if node._params.autostart:
            node.autostart()

    return run_node(SafetyShieldNode, args=args, on_started=started)


if __name__ == "__main__":
    exit_main(main)
