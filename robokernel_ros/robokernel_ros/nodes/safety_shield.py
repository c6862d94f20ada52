"""safety_shield: the last node between every command source and the robot's controllers.

    command source --input_topic--> safety_shield --output_topic--> ros2_control controller
                                          ^  /joint_states (measured positions)
                                          |  estop_topic (std_msgs/Bool, latched): the panel's
                                          |  <ns>/estop by default; operator

It speaks the controllers' own message types: `std_msgs/Float64MultiArray` for a
forward_command_controller (`<ctrl>/commands`, values in `joints` order) or
`trajectory_msgs/JointTrajectory` for a joint_trajectory_controller
(`<ctrl>/joint_trajectory`), selected by the `controller` parameter.

Every command is reviewed by `robokernel_ros.safety.review.CommandReview` (ROS-free:
the kernel's guards built from the joint limits, the same rules the in-process shield of
the episode loop uses): finite, of the right shape, every joint known; within the
position limits (a small excess clipped, more refused); velocity and acceleration
rate-limited relative to the last command sent. A forward_command stream is judged over
its nominal period (`command_rate_hz`, the sender's control rate; 0: learned from the
stream's arrivals), not over its messages' arrival jitter (`safety.command_clock`: a
stream that really is faster is judged at its real rate, a late command as one period);
a trajectory point by point over its time_from_start. A refused command is dropped, a hold command is sent (the measured
position, clamped into the limits, frozen until the next command passes; zeros for a
velocity interface; for a trajectory controller a one-point trajectory to it), and the
intervention is published.

Watchdog: no valid command for `command_timeout_s` -> one hold command and a reported
timeout (interventions guard "watchdog", counter `timeouts`); the next valid command
resumes.

E-stop, a normally-closed circuit (robokernel_ros.safety.estop.EstopCircuit, where the
choice of a heartbeat over DDS liveliness is argued): the `estop_topic` topic (default
`estop`, i.e. `<ns>/estop`: the one nodes/estop_panel.py and the runner use in the same
namespace, so a shield started with no config and no remap hears the panel; `~/estop`
makes it a source of this shield alone); std_msgs/Bool, true = pressed;
reliable + transient_local depth 1, so a shield that starts or restarts receives the last
value at once). With `estop_required:=true` (the default) nothing
passes until a live source has said released: the source (nodes/estop_panel.py, or a
hardware bridge) republishes its state every period; two samples make it live, the
last one must be at most `estop_timeout_s` old. A source that goes silent latches the
e-stop ("e-stop source lost"), checked on a timer and before every command, so a
source killed mid-stream is answered by a hold within estop_timeout_s + one command
period; a sample counts from when it reached the process (a stall of this node's
executor is not a silent source). A pressed sample, the `~/estop` service (std_srvs/Trigger, `<ns>/<shield>/estop`:
this shield alone) or a lost source
latch it; while latched nothing but hold passes. `~/clear_fault` (std_srvs/Trigger)
unlatches it, and is refused while the input is pressed and, when required, until the
source is live and released (no pressed sample within estop_timeout_s). With
`estop_required:=false` the shield forwards unless the e-stop is latched, after
`estop_wait_s` with no publisher (the behaviour before the circuit; a silent source is
not noticed). An e-stop publisher whose QoS this subscription cannot match (best
effort, volatile) is never heard: it is reported in `~/state` and the log (rclpy's
incompatible-QoS event). With `latch_file` set, the latch is also kept in that file,
so a shield that is restarted after the e-stop input was released still comes up
latched. `~/state` says why nothing is forwarded (`reason`: every cause that holds, joined by
"; ": no joint state yet, waiting for the e-stop source, latched and by what, source
silent, incompatible QoS).
`command_sender` in `~/state` is the publisher (DDS GID) of the last command read,
published when it changes: a sender that finds itself there knows that its commands
arrive (RosRobotEnv's first reset waits for it; its publisher's own match says only
that it found this reader). `sender_read/passed/clipped/refused` count what became of
that sender's commands (every lifecycle and e-stop state: a command read while inactive
or waiting is refused, and counted), `last_refusal` says why the last one was refused;
`~/state` is also published when these counts change (at most every 50 ms), so a sender
learns within a moment what the shield did with its commands (the runner's report).

Honesty: `~/state`'s `state` is `active` only while commands are forwarded; the
lifecycle's `~/get_state` answers the primary state ACTIVE with the label
`active (not forwarding: <reason>)` while the node waits (the e-stop source, a joint
state) or is latched, and the log says "forwarding commands" only when it does.

Lifecycle (rclpy.lifecycle): configure validates the parameters and loads the limits
(`safety.limits`: a `limits_file` in the joint_limits layout of ros2_control, MoveIt or
UR, `joint_limits.<joint>.*` parameters, and the URDF of `robot_description` and/or of
`robot_description_topic` (its latched sample, waited for up to
`robot_description_wait_s`, else configure fails); where several give a limit for one
joint the most restrictive wins, and the log lists each limit's source); activate starts
forwarding (nothing is forwarded until the node also has a joint state for every joint);
deactivate sends a hold and stops. The e-stop topic, the services, `~/state`
(ShieldState, on change and every `state_period_s`, transient_local) and
`~/interventions` (ShieldIntervention, every one) exist in every lifecycle state. With
`autostart:=true` the node configures and activates itself (for launch files and demos
without a lifecycle manager); a configuration it refuses then ends the process with
status 2.

Run: python -m robokernel_ros.nodes.safety_shield --ros-args -p joints:="[a,b]" \
        -p limits_file:=config/joint_limits_so101.yaml -p autostart:=true

Why one module of ~1,000 lines: it is one node whose callbacks share one gate's state
(the e-stop circuit, the command review, the hold, the watchdog), and a reader checking
that it fails closed wants every path to a forward in one file; ~70 lines are this
contract and ~220 its parameters. The ROS-free parts live elsewhere (safety.review,
safety.estop, safety.limits).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, ReliabilityPolicy, qos_policy_name_from_kind
from rclpy.wait_for_message import wait_for_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robokernel_interfaces.msg import ShieldIntervention, ShieldState
from robokernel_ros.ros.lifecycle import release_state_machine
from robokernel_ros.ros.node import EXECUTORS, exit_main, run_node
from robokernel_ros.ros.params import ParameterError, check, declare
from robokernel_ros.ros.qos import (
    COMMAND_QOS,
    COMMAND_READER_QOS,
    ESTOP_QOS,
    ESTOP_READER_QOS,
    EVENT_QOS,
    LATCHED_QOS,
    SENSOR_QOS,
    STATUS_QOS,
)
from robokernel_ros.ros.transport import DirectReader
from robokernel_ros.safety.estop import LOST, EstopCircuit
from robokernel_ros.safety.limits import (
    LIMIT_KEYS,
    NOT_ENFORCED,
    JointLimit,
    MissingLimitsError,
    describe_limit,
    load_limits_file,
    merge_limit_sources,
    parse_joint_limits,
    urdf_limit_sources,
)
from robokernel_ros.safety.review import (
    COMMAND_INTERFACES,
    CommandReview,
    Finding,
    TrajectoryPoint,
    Verdict,
)

CONTROLLERS = ("forward_command", "joint_trajectory")
DEFAULT_OUTPUT = {
    "forward_command": "/forward_position_controller/commands",
    "joint_trajectory": "/joint_trajectory_controller/joint_trajectory",
}
DEFAULT_INPUT = {"forward_command": "~/commands", "joint_trajectory": "~/joint_trajectory"}
#: time_from_start of the single point of a hold trajectory
HOLD_TRAJECTORY_TIME_S = 0.05
#: How long a command wake-up waits for the command reader's copy of the sample (the two
#: readers of one topic in this process are delivered one after the other).
COMMAND_WAKE_WAIT_S = 0.002


# --- the node -------------------------------------------------------------------------------


class SafetyShieldNode(LifecycleNode):
    """See the module docstring."""

    def __init__(self, node_name: str = "safety_shield", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._declare_parameters()
        self._logger = self.get_logger()
        # Counters and state (node-level: they survive lifecycle transitions).
        self.passed = self.clipped = self.refused = self.held = self.timeouts = 0
        self._active = False
        self._configured = False
        self._last_state: tuple | None = None
        self._configure_error: ParameterError | None = None
        self._have_js = False
        # Lifecycle-managed entities (created in on_configure).
        self._review: CommandReview | None = None
        self._limits: dict[str, JointLimit] = {}
        self._pub_cmd = None
        self._sub_cmd = None
        self._cmd_reader: DirectReader | None = None  # the command stream, with stamps and senders
        self._sub_js = None
        self._watchdog = None
        self._reset_motion()

        latch_file = self.get_parameter("latch_file").value
        self._latch_path = Path(latch_file) if latch_file else None
        latched_by = ""
        if self._latch_path is not None and self._latch_path.exists():
            latched_by = f"latch_file {self._latch_path}"
            self._logger.warning(
                f"e-stop latched at start: {self._latch_path} exists (an earlier e-stop was "
                "never cleared); call ~/clear_fault to release"
            )
        # The e-stop decision (robokernel_ros.safety.estop): node-level, every lifecycle state.
        self._estop = EstopCircuit(
            required=self.get_parameter("estop_required").value,
            timeout_s=self.get_parameter("estop_timeout_s").value,
            wait_s=self.get_parameter("estop_wait_s").value,
            now=time.monotonic(),
            latched_by=latched_by,
        )
        self._estop_incompatible = 0  # e-stop publishers seen with a QoS we cannot match
        self._estop_incompatible_text = ""
        self._published_estop = (False, "")  # (input, source state) last sent on ~/state
        # The publisher of the last command read (GID, hex), in ~/state on change: a sender
        # that sees itself there knows DDS delivers its commands here (its own publisher's
        # match says only that it found this reader, not that this reader found it).
        self._command_sender = ""
        # What became of each sender's commands: [read, passed, clipped, refused].
        self._sender_counts: dict[str, list[int]] = {}
        self._counts = self._sender_counts.setdefault("", [0, 0, 0, 0])
        self._last_refusal = ""
        self._published_counts: tuple[int, ...] = ()
        self._forwarding_logged: bool | None = None  # the last "forwarding" state logged
        # ~/get_state says whether the active node forwards (module docstring)
        self._service_get_state.callback = self._on_get_state

        # Always present, whatever the lifecycle state.
        self._pub_state = self.create_publisher(ShieldState, "~/state", STATUS_QOS)
        self._pub_iv = self.create_publisher(ShieldIntervention, "~/interventions", EVENT_QOS)
        # The e-stop samples are taken from a DirectReader on a node of this context that
        # no executor spins (`_rx_node`), each with its reception time, before every
        # judgement (the liveness tick, every command): a stall of this node's executor is
        # then not a silent source, by construction. The executor's subscription of the
        # same topic wakes the shield at once for a new sample, counts the publishers and
        # reports an incompatible QoS; the messages it delivers are not used. The
        # forward_command stream is read the same way (`_take_commands`), for its
        # samples' source timestamps.
        self._rx_node = rclpy.create_node(
            f"{self.get_name()}_rx",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        estop_topic = self.get_parameter("estop_topic").value or "estop"
        self._estop.topic = self.resolve_topic_name(estop_topic)  # the reasons name it
        self._estop_reader = DirectReader(
            self._rx_node, Bool, self.resolve_topic_name(estop_topic), ESTOP_READER_QOS
        )
        self._estop_sub = self.create_subscription(
            Bool,
            estop_topic,
            lambda _msg: self._take_estop(),
            ESTOP_QOS,
            event_callbacks=SubscriptionEventCallbacks(incompatible_qos=self._on_estop_qos),
        )
        self.create_service(Trigger, "~/estop", self._on_estop_service)
        self.create_service(Trigger, "~/clear_fault", self._on_clear_fault)
        self.create_timer(self.get_parameter("state_period_s").value, self._publish_state)
        # liveness of the e-stop source, checked besides every command
        self.create_timer(max(0.005, min(0.05, self._estop.timeout_s / 10)), self._on_estop_tick)
        self._publish_state()

    # -- parameters --------------------------------------------------------------------------

    def _declare_parameters(self) -> None:
        declare(self, "joints", [], "joint names, the order of the command arrays", array_type=str)
        declare(
            self,
            "controller",
            "forward_command",
            "kind of controller in front of which the shield sits",
            choices=CONTROLLERS,
        )
        declare(
            self,
            "input_topic",
            "",
            "topic the command sources publish to ('' = ~/commands or ~/joint_trajectory)",
        )
        declare(
            self,
            "output_topic",
            "",
            "the controller's command topic ('' = /forward_position_controller/commands "
            "or /joint_trajectory_controller/joint_trajectory)",
        )
        declare(self, "joint_states_topic", "/joint_states", "measured joint positions")
        declare(
            self,
            "command_timeout_s",
            0.5,
            "no valid command for this long -> one hold command",
            min_value=0.0,
            min_exclusive=True,
        )
        declare(
            self, "limits_file", "", "joint_limits YAML file (ros2_control, MoveIt or UR layout)"
        )
        declare(
            self,
            "robot_description",
            "",
            "URDF whose <limit>, <safety_controller> and <ros2_control> limits are also used",
        )
        declare(
            self,
            "robot_description_topic",
            "",
            "topic with the URDF (std_msgs/String, transient_local, as robot_state_publisher "
            "publishes /robot_description); configure waits for it ('' = not read)",
        )
        declare(
            self,
            "robot_description_wait_s",
            10.0,
            "longest configure waits for the URDF on robot_description_topic",
            min_value=0.0,
            min_exclusive=True,
        )
        declare(
            self,
            "command_interface",
            "position",
            "what the controller's commands are",
            choices=COMMAND_INTERFACES,
        )
        declare(
            self,
            "clip_tolerance",
            0.05,
            "a value outside its limit by at most this x range is clipped, further refused",
            min_value=0.0,
            max_value=1.0,
        )
        declare(
            self,
            "max_step_dt_s",
            0.05,
            "longest interval credited to one step by the velocity/acceleration limits",
            min_value=0.0,
            min_exclusive=True,
        )
        declare(
            self,
            "command_rate_hz",
            0.0,
            "nominal rate of the command stream (the sender's control rate): the velocity and "
            "acceleration limits judge each command over its period, not its arrival "
            "interval (0 = learned from the stream's arrival intervals)",
            min_value=0.0,
        )
        declare(
            self,
            "state_period_s",
            0.5,
            "period of ~/state besides publishing on change",
            min_value=0.0,
            min_exclusive=True,
        )
        declare(self, "autostart", False, "configure and activate without a lifecycle manager")
        declare(
            self, "latch_file", "", "file that keeps the e-stop latch across restarts ('' = none)"
        )
        declare(
            self,
            "estop_required",
            True,
            "forward only while a live e-stop source (estop_topic) says released (a normally-closed "
            "circuit); false: forward unless pressed, and after estop_wait_s with no source",
        )
        declare(
            self,
            "estop_timeout_s",
            0.5,
            "estop_required: the source is lost (the e-stop latches) when silent this long",
            min_value=0.0,
            min_exclusive=True,
            max_value=60.0,
        )
        declare(
            self,
            "estop_wait_s",
            1.0,
            "estop_required false: after start, forward nothing until an estop_topic sample "
            "arrived or this long passed (time for a latched e-stop to be delivered by DDS)",
            min_value=0.0,
            max_value=60.0,
        )
        declare(
            self,
            "estop_topic",
            "estop",
            "the e-stop source's topic (std_msgs/Bool, true = pressed); relative names are in "
            "the node's namespace: 'estop' (the default) is <ns>/estop, the estop_panel's "
            "and the runner's; '~/estop' is this shield's own",
        )
        declare(self, "executor", "events", "rclpy executor", choices=EXECUTORS)
        # ros2_control's joint_limits.<joint>.<key> parameters, for the joints named.
        joints = self.get_parameter("joints").value or []
        for joint in joints:
            for key in LIMIT_KEYS:
                self.declare_parameter(
                    f"joint_limits.{joint}.{key}",
                    None,
                    ParameterDescriptor(
                        dynamic_typing=True,
                        read_only=True,
                        description=f"ros2_control joint limit {key}",
                    ),
                )

    def _read_configuration(self) -> dict[str, Any]:
        """Validate the parameters and load the limits; ParameterError when refused."""
        p = {
            name: self.get_parameter(name).value
            for name in (
                "joints",
                "controller",
                "input_topic",
                "output_topic",
                "joint_states_topic",
                "command_timeout_s",
                "limits_file",
                "robot_description",
                "robot_description_topic",
                "robot_description_wait_s",
                "command_interface",
                "clip_tolerance",
                "max_step_dt_s",
                "command_rate_hz",
            )
        }
        joints = list(p["joints"] or [])
        if not joints:
            raise ParameterError("joints", joints, "must name at least one joint")
        if len(set(joints)) != len(joints) or not all(joints):
            raise ParameterError("joints", joints, "must be distinct, non-empty names")
        check("controller", p["controller"], choices=CONTROLLERS)
        p["input_topic"] = p["input_topic"] or DEFAULT_INPUT[p["controller"]]
        p["output_topic"] = p["output_topic"] or DEFAULT_OUTPUT[p["controller"]]
        if p["input_topic"] == p["output_topic"]:
            raise ParameterError("output_topic", p["output_topic"], "must differ from input_topic")
        sources: list[tuple[str, Mapping[str, JointLimit]]] = []
        if p["robot_description"]:
            try:
                sources.extend(urdf_limit_sources(p["robot_description"]))
            except ValueError as exc:
                raise ParameterError("robot_description", "<urdf>", str(exc)) from exc
        if p["robot_description_topic"]:
            sources.extend(
                self._urdf_from_topic(p["robot_description_topic"], p["robot_description_wait_s"])
            )
        if p["limits_file"]:
            try:
                sources.append(("limits_file", load_limits_file(p["limits_file"])))
            except ValueError as exc:
                raise ParameterError("limits_file", p["limits_file"], str(exc)) from exc
        direct: dict[str, dict[str, Any]] = {}
        for joint in joints:
            for key in LIMIT_KEYS:
                value = self.get_parameter(f"joint_limits.{joint}.{key}").value
                if value is not None:
                    direct.setdefault(joint, {})[key] = value
        if direct:
            try:
                sources.append(
                    ("joint_limits parameters", parse_joint_limits(direct, "parameters"))
                )
            except ValueError as exc:
                raise ParameterError("joint_limits", direct, str(exc)) from exc
        try:
            p["limit_sources"] = merge_limit_sources(joints, sources)
        except MissingLimitsError as exc:
            raise ParameterError("joints", joints, str(exc)) from exc
        except ValueError as exc:
            raise ParameterError("joint_limits", "<merged>", str(exc)) from exc
        p["limits"] = {j: s.limit for j, s in p["limit_sources"].items()}
        p["joints"] = joints
        try:
            p["review"] = CommandReview(
                joints,
                p["limits"],
                command_interface=p["command_interface"],
                clip_tolerance=p["clip_tolerance"],
                max_step_dt_s=p["max_step_dt_s"],
                command_rate_hz=p["command_rate_hz"],
            )
        except ValueError as exc:
            name, _, domain = str(exc).partition(": ")  # "command_rate_hz=...: <domain>"
            if name.startswith("command_rate_hz="):
                raise ParameterError("command_rate_hz", p["command_rate_hz"], domain) from exc
            raise ParameterError("joint_limits", "<merged>", str(exc)) from exc
        return p

    def _urdf_from_topic(self, topic: str, wait_s: float) -> list[tuple[str, Any]]:
        """The limit sources of the URDF on `topic` (its latched sample); ParameterError
        when none arrives within wait_s: configure fails, nothing is forwarded."""
        received, msg = wait_for_message(
            String, self, topic, qos_profile=LATCHED_QOS, time_to_wait=wait_s
        )
        if not received:
            raise ParameterError(
                "robot_description_topic",
                topic,
                f"no URDF received within robot_description_wait_s={wait_s} s (a publisher "
                "such as robot_state_publisher must publish it reliable + transient_local)",
            )
        try:
            return urdf_limit_sources(msg.data, f"{topic} topic")
        except ValueError as exc:
            raise ParameterError("robot_description_topic", topic, str(exc)) from exc

    # -- lifecycle ---------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            p = self._read_configuration()
        except ParameterError as exc:
            self._configure_error = exc
            self._logger.error(f"configure refused: {exc}")
            return TransitionCallbackReturn.FAILURE
        self._configure_error = None
        self._joints: list[str] = p["joints"]
        self._n = len(self._joints)
        self._index = {j: i for i, j in enumerate(self._joints)}
        self._controller = p["controller"]
        self._interface = p["command_interface"]
        self._timeout = p["command_timeout_s"]
        self._limits = p["limits"]
        self._review = p["review"]
        self._seen = [False] * self._n
        self._have_js = False
        self._reset_motion()
        msg_type = Float64MultiArray if self._controller == "forward_command" else JointTrajectory
        self._pub_cmd = self.create_publisher(msg_type, p["output_topic"], COMMAND_QOS)
        # The executor's subscription only wakes the node: the commands are taken from a
        # DirectReader of the same topic with their source timestamps (`sent_at`: the
        # sender's schedule that the rate guards judge, safety.command_clock) and senders.
        self._cmd_reader = DirectReader(
            self._rx_node, msg_type, self.resolve_topic_name(p["input_topic"]),
            COMMAND_READER_QOS,
        )  # fmt: skip
        self._sub_cmd = self.create_subscription(
            msg_type,
            p["input_topic"],
            lambda _msg: self._take_commands(COMMAND_WAKE_WAIT_S),
            COMMAND_QOS,
        )
        self._sub_js = self.create_subscription(
            JointState, p["joint_states_topic"], self._on_joint_state, SENSOR_QOS
        )
        period = max(0.001, min(0.005, self._timeout / 10))  # watchdog resolution
        self._watchdog = self.create_timer(period, self._on_watchdog)
        self._configured = True
        ignored = sorted(
            {
                k
                for j in self._joints
                for k in NOT_ENFORCED
                if self.get_parameter(f"joint_limits.{j}.{k}").value
            }
        )
        self._logger.info(
            f"configured: {self._n} joints, {self._controller} "
            f"({self._interface}) {p['input_topic']} -> {p['output_topic']}"
            + (f"; not enforced: {ignored}" if ignored else "")
            + "; limits (source):\n  "
            + "\n  ".join(describe_limit(j, s) for j, s in p["limit_sources"].items())
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
        if self._have_js or self._interface == "velocity":
            self._send_hold(time.monotonic())
            self._intervene("deactivate", "", math.nan, math.nan, "held", "node deactivated")
        self._active = False
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._teardown()
        self._publish_state()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active and (self._have_js or self._interface == "velocity"):
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
        if self._cmd_reader is not None:
            self._cmd_reader.close()
            self._cmd_reader = None
        for entity, destroy in (
            (self._sub_cmd, self.destroy_subscription),
            (self._sub_js, self.destroy_subscription),
            (self._pub_cmd, self.destroy_publisher),
            (self._watchdog, self.destroy_timer),
        ):
            if entity is not None:
                destroy(entity)
        self._sub_cmd = self._sub_js = self._pub_cmd = self._watchdog = None
        self._review = None
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

    # -- inputs ------------------------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        review = self._review
        if review is None:  # a sample taken before cleanup destroyed the subscription
            return
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
        forward = estop.may_forward(
            now, self._estop_sub.get_publisher_count() if legacy_wait else 0
        )
        if estop.latched and not latched:  # the source was lost just now
            self._latched_now()
        if estop.latched:
            self._refuse(
                now, "estop", "", math.nan, math.nan, f"e-stop latched ({estop.latched_by})"
            )
            return False
        if not self._have_js:
            detail = "no joint state yet for every joint; nothing is forwarded"
            self._count_refusal(f"waiting: {detail}")
            self._intervene("waiting", "", math.nan, math.nan, "refused", detail)
            return False
        if not forward:
            detail = estop.reason(now, self._estop_sub.get_publisher_count())
            self._count_refusal(f"waiting: {detail}")
            self._intervene("waiting", "", math.nan, math.nan, "refused", detail)
            return False
        if not self._review.seeded:
            self._review.seed()
        return True

    def _take_commands(self, wait_s: float = 0.0) -> None:
        """Review every command waiting in the command reader, in order.
        `wait_s`: how long to wait for one when none is there yet (the executor's copy of
        a sample can be delivered before the reader's; the watchdog tick takes any that
        a wake-up missed)."""
        reader = self._cmd_reader
        if reader is None:
            return
        forward = self._controller == "forward_command"
        for msg, sent, sender in reader.take_sent_by(wait_s):
            self._heard_from(sender)
            if forward:
                self._on_array(msg, sent)
            else:
                self._on_trajectory(msg)

    def _heard_from(self, sender: str) -> None:
        """A command of `sender` was read, whatever becomes of it (a lifecycle state or
        the e-stop may refuse it): a new sender is published in ~/state at once."""
        counts = self._sender_counts.get(sender)
        if counts is None:
            if len(self._sender_counts) > 64:  # senders come and go: keep the recent ones
                self._sender_counts.pop(next(iter(self._sender_counts)))
            counts = self._sender_counts[sender] = [0, 0, 0, 0]
        self._counts = counts
        counts[0] += 1
        if sender != self._command_sender:
            self._command_sender = sender
            self._publish_state()

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
            self.passed += 1
            self._counts[1] += 1
            self._pub_cmd.publish(msg)
        elif verdict.action == "clipped":
            self.clipped += 1
            self._counts[2] += 1
            self._pub_cmd.publish(Float64MultiArray(data=verdict.values))
            self._publish_findings(verdict.findings)
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
            self.passed += 1
            self._counts[1] += 1
            self._pub_cmd.publish(msg)
        elif verdict.action == "clipped":
            out = JointTrajectory()
            out.header = msg.header
            out.joint_names = msg.joint_names
            for point, reviewed in zip(msg.points, verdict.points, strict=True):
                if reviewed is not None:
                    new = JointTrajectoryPoint()
                    new.positions = reviewed.positions
                    new.velocities = (
                        point.velocities if reviewed.velocities is None else reviewed.velocities
                    )
                    new.accelerations = (
                        point.accelerations
                        if reviewed.accelerations is None
                        else reviewed.accelerations
                    )
                    new.effort = point.effort
                    new.time_from_start = point.time_from_start
                    point = new
                out.points.append(point)
            self.clipped += 1
            self._counts[2] += 1
            self._pub_cmd.publish(out)
            self._publish_findings(verdict.findings)
        else:
            self._refused(verdict)
            return
        self._sent_valid(now)

    def _sent_valid(self, now: float) -> None:
        self._t_valid = now
        self._armed = True

    # -- refusals and holds ------------------------------------------------------------------

    def _refuse(
        self, now: float, guard: str, joint: str, value: float, limit: float, detail: str
    ) -> None:
        """Refused by the node itself (e-stop): one intervention, then the hold."""
        self._count_refusal(f"{guard}: {detail}")
        self._intervene(guard, joint, value, limit, "refused", detail)
        self._send_hold(now)

    def _refused(self, verdict: Verdict) -> None:
        """Refused by the review, which has recorded its hold (`verdict.values`)."""
        refusals = [f for f in verdict.findings if f.action == "refused"] or verdict.findings
        self._count_refusal("; ".join(map(_finding_text, refusals[:3])) or "refused by the review")
        self._publish_findings(verdict.findings)
        self._publish_hold(verdict.values)

    def _count_refusal(self, reason: str) -> None:
        """A command of the current sender was not forwarded, for `reason`."""
        self.refused += 1
        self._counts[3] += 1
        self._last_refusal = reason

    def _refused_inactive(self) -> None:
        """A command read while the node is not active (lifecycle): refused, counted."""
        detail = "the shield is not active (lifecycle state inactive): nothing is forwarded"
        self._count_refusal(f"inactive: {detail}")
        self._intervene("inactive", "", math.nan, math.nan, "refused", detail)

    def _send_hold(self, now: float) -> None:
        """Send the hold command (needs a joint state for a position interface)."""
        review = self._review
        if review is None or self._pub_cmd is None:
            return
        if not (self._have_js or self._interface == "velocity"):
            return
        values = review.hold_values()
        self._publish_hold(values)
        review.record_hold(values, now)

    def _publish_hold(self, values: list[float]) -> None:
        if self._controller == "forward_command":
            out = Float64MultiArray()
            out.data = values
        else:
            out = JointTrajectory()
            out.joint_names = self._joints
            point = JointTrajectoryPoint()
            point.positions = values
            point.velocities = [0.0] * self._n
            point.time_from_start.sec = 0
            point.time_from_start.nanosec = int(HOLD_TRAJECTORY_TIME_S * 1e9)
            out.points = [point]
        self._pub_cmd.publish(out)
        self.held += 1

    def _on_watchdog(self) -> None:
        self._take_commands()  # any command that its wake-up missed counts first
        if not (self._active and self._armed):
            return
        now = time.monotonic()
        silent = now - self._t_valid
        if silent > self._timeout:
            self._armed = False
            self.timeouts += 1
            self._send_hold(now)
            self._intervene(
                "watchdog",
                "",
                silent,
                self._timeout,
                "held",
                f"no valid command for {silent:.3f} s",
            )
            self._logger.warning(f"watchdog: no valid command for {silent:.3f} s; hold sent")
            self._publish_state()

    # -- e-stop --------------------------------------------------------------------------------

    def _latch(self, by: str) -> None:
        if self._estop.latch(by):
            self._latched_now()

    def _latched_now(self) -> None:
        """The circuit has just latched: keep it in the latch file, hold, report."""
        by = self._estop.latched_by
        if self._latch_path is not None:
            try:
                self._latch_path.parent.mkdir(parents=True, exist_ok=True)
                self._latch_path.write_text(f"e-stop latched by {by}\n")
            except OSError as exc:
                self._logger.error(f"latch_file {self._latch_path}: cannot write ({exc})")
        self._logger.warning(f"e-stop latched by {by}")
        if self._active and self._review is not None:
            self._review.release_hold()  # hold where the robot is now
            self._send_hold(time.monotonic())
        detail = f"e-stop latched by {by}"
        if by == LOST:  # value: the source's silence when noticed; limit: estop_timeout_s
            value, limit = self._estop.lost_after_s, self._estop.timeout_s
            # how late this check came after the one before (the stall the silence includes)
            detail += f" ({self._estop.lost_detail()})"
        else:
            value = limit = math.nan
        self._intervene("estop", "", value, limit, "held", detail)
        self._publish_state()

    def _take_estop(self) -> None:
        """Feed the circuit every e-stop sample waiting, each at its reception time."""
        for msg, received in self._estop_reader.take_received(0.0):
            pressed = bool(msg.data)
            by = (
                f"{self._estop.topic}: pressed ({self._estop_publishers_text()})" if pressed else ""
            )
            now = time.monotonic()
            if self._estop.sample(pressed, received, by):
                self._latched_now()
            elif (
                pressed != self._published_estop[0]
                or self._estop.source_state(now) != (self._published_estop[1])
            ):
                self._publish_state()

    def _on_estop_tick(self) -> None:
        self._take_estop()  # what waited behind a stall of the executor counts first
        now = time.monotonic()
        if self._estop.tick(now):
            self._latched_now()
        elif (
            self._estop.source_state(now) != self._published_estop[1]
            or self._count_key() != self._published_counts
        ):
            self._publish_state()

    def _on_estop_qos(self, info: QoSRequestedIncompatibleQoSInfo) -> None:
        """A publisher on the e-stop topic offers a QoS this subscription cannot match: it is never
        heard. Reported in ~/state and the log, with the publishers' names where known."""
        self._estop_incompatible = int(info.total_count)
        policy = qos_policy_name_from_kind(info.last_policy_kind)
        self._estop_incompatible_text = (
            f"an e-stop publisher with an incompatible QoS ({policy}) is not heard; the "
            "e-stop topic is reliable + transient_local depth 1"
        )
        self._logger.error(
            f"{self._estop_sub.topic_name}: {self._estop_incompatible_text} "
            f"(publishers: {self._estop_publishers_text(incompatible=True)})"
        )
        self._publish_state()

    def _estop_publishers_text(self, incompatible: bool = False) -> str:
        """The e-stop publishers' node names (only those this subscription cannot match
        when `incompatible`). A node discovered a moment ago may still be unnamed."""
        infos = self.get_publishers_info_by_topic(self._estop_sub.topic_name)
        if incompatible:
            infos = [
                i
                for i in infos
                if i.qos_profile.reliability != ReliabilityPolicy.RELIABLE
                or i.qos_profile.durability != DurabilityPolicy.TRANSIENT_LOCAL
            ]
        names = [f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in infos]
        return ", ".join(sorted(names)) or "none"

    def _on_estop_service(self, request: Trigger.Request, response: Trigger.Response):
        self._latch("~/estop service")
        response.success = True
        response.message = "e-stop latched"
        return response

    def _on_clear_fault(self, request: Trigger.Request, response: Trigger.Response):
        was_latched = self._estop.latched
        response.success, response.message = self._estop.clear(time.monotonic())
        if response.success and was_latched:
            if self._latch_path is not None:
                self._latch_path.unlink(missing_ok=True)
            self._reset_motion()  # resume from the measured state, watchdog disarmed
            self._logger.info("fault cleared")
            self._publish_state()
        return response

    # -- reporting -----------------------------------------------------------------------------

    def _intervene(
        self, guard: str, joint: str, value: float, limit: float, action: str, detail: str
    ) -> None:
        msg = ShieldIntervention()
        msg.stamp = self.get_clock().now().to_msg()
        msg.guard, msg.joint, msg.action, msg.detail = guard, joint, action, detail
        msg.value, msg.limit = float(value), float(limit)
        self._pub_iv.publish(msg)

    def _publish_findings(self, findings: list[Finding]) -> None:
        for f in findings:
            self._intervene(f.guard, f.joint, f.value, f.limit, f.action, f.detail)

    def destroy_node(self) -> None:
        if hasattr(self, "_estop_reader"):
            self._estop_reader.close()
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
        source = estop.reason(now, self._estop_sub.get_publisher_count())
        if source and self._estop_incompatible_text:
            names = self._estop_publishers_text(incompatible=True)
            source += f"; {self._estop_incompatible_text} (publishers: {names})"
        if source:
            reasons.append(source)
        return ("waiting", "; ".join(reasons)) if reasons else ("active", "")

    def _publish_state(self) -> None:
        now = time.monotonic()
        msg = ShieldState()
        msg.stamp = self.get_clock().now().to_msg()
        msg.state, msg.reason = self._state_and_reason(now)
        msg.estop_latched = self._estop.latched
        msg.estop_input = bool(self._estop.input)
        msg.estop_required = self._estop.required
        msg.estop_source = self._estop.source_state(now)
        msg.estop_latched_by = self._estop.latched_by
        msg.estop_incompatible_qos = self._estop_incompatible
        self._published_estop = (msg.estop_input, msg.estop_source)
        msg.have_limits = self._review is not None
        msg.have_joint_state = self._have_js
        msg.passed, msg.clipped, msg.refused = self.passed, self.clipped, self.refused
        msg.held, msg.timeouts = self.held, self.timeouts
        msg.command_sender = self._command_sender
        counts = self._counts
        msg.sender_read, msg.sender_passed, msg.sender_clipped, msg.sender_refused = counts
        msg.last_refusal = self._last_refusal
        self._published_counts = self._count_key()
        self._pub_state.publish(msg)
        self._log_forwarding(msg.state, msg.reason)

    def _count_key(self) -> tuple[int, ...]:
        return (*self._counts, self.held, self.timeouts)

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

    def _on_get_state(self, request: Any, response: Any) -> Any:
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
        if node.get_parameter("autostart").value:
            node.autostart()

    return run_node(SafetyShieldNode, args=args, on_started=started)


if __name__ == "__main__":
    exit_main(main)
