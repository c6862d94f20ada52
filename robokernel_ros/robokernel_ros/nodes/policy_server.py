"""policy_server node: hosts one policy (any provider) and answers observations with action chunks.

    python -m robokernel_ros.nodes.policy_server --ros-args -r __ns:=/robokernel \\
        -p provider:=lerobot -p checkpoint:=/path/to/pretrained_model -p autostart:=true

Names (relative to the node's namespace, `/robokernel` in the launch files):
  subscribes  observation              robokernel_interfaces/Observation (reliable, depth 2)
  publishes   action_chunk             robokernel_interfaces/ActionChunk (reliable, depth 10),
                                        tagged with the observation's run_id and step and the
                                        inference time
  publishes   ~/status                 PolicyServerStatus heartbeat (reliable, transient_local)
  service     get_action_chunk         GetActionChunk: the same, synchronously (evaluation)
  lifecycle   ~/get_state, ~/change_state, ~/transition_event, ... (rclpy.lifecycle)

A lifecycle node in the ros2/demos manner (rclpy.lifecycle): configure loads the policy
(its load time on the log and in the heartbeat's `detail`; a load that fails leaves the
node unconfigured, the failure in `detail`, so it can be configured again) and creates
the data path, the observation subscription and `action_chunk` as a lifecycle publisher;
activate serves chunks (the publisher publishes), deactivate stops serving (an
observation is not answered, a get_action_chunk call is refused naming the state),
cleanup frees the policy and destroys the data path. The heartbeat and get_action_chunk
exist in every state (they say which state the node is in); the heartbeat says
`ready=true` only while active with a loaded policy. A runner reads this
node's lifecycle state (`<ns>/policy_server/get_state`) before it starts a rollout with
the `remote` provider, and refuses unless it is active. With `autostart:=true` the node
configures and activates itself (for demos, tests and launch files without a lifecycle
manager; a load failure then leaves it unconfigured, reporting why).
Observations are answered on one inference thread, latest first: an observation that
arrives while the policy computes replaces the one waiting, so the server never falls
behind the robot. A new `run_id` starts a new episode (the policy is reset with the
observation's instruction).

`openpi_port:=8000` also answers openpi's websocket clients (`openpi_client`), beside the
topics (ros/openpi_endpoint.py: `openpi_api_key`, `openpi_mapping`, docs/protocols.md).

`served:=true` starts the served endpoint instead (nodes/served_endpoint.py: an
external harness owns the loop); this node itself is driven mode only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType, JumpThreshold
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import (
    LifecycleNodeMixin,
    LifecyclePublisher,
    LifecycleState,
    TransitionCallbackReturn,
)

from robokernel_interfaces.msg import ActionChunk, Observation
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.ros import wire
from robokernel_ros.ros.lifecycle import release_state_machine
from robokernel_ros.ros.node import exit_main, peeked_parameter, run_node
from robokernel_ros.ros.openpi_endpoint import OpenpiHosting
from robokernel_ros.ros.params import ParameterError, declare_params, param
from robokernel_ros.ros.policy_host import NODE_NAME, PolicyHost
from robokernel_ros.ros.qos import CHUNK_QOS, OBSERVATION_QOS

SERVED_DESCRIPTION = (
    "served mode: an external harness owns the loop (served/* names; the served_endpoint "
    "node); false: answer observations with chunks (driven mode)"
)


@dataclass(frozen=True)
class ServerParams:
    """The policy_server's own parameters (the host's: `ros.policy_host.HostParams`)."""

    autostart: bool = param(False, "configure and activate without a lifecycle manager")
    served: bool = param(False, SERVED_DESCRIPTION)


class PolicyServer(LifecycleNodeMixin, PolicyHost):
    """Driven mode: observations in, action chunks out, as a lifecycle node (see the
    module docstring). rclpy's LifecycleNodeMixin adds the state machine and its services
    to the PolicyHost node (what rclpy.lifecycle.LifecycleNode does for a plain Node)."""

    def __init__(self, **kwargs: Any) -> None:
        PolicyHost.__init__(self, **kwargs)
        LifecycleNodeMixin.__init__(self, enable_communication_interface=True)
        self.server_params = declare_params(self, ServerParams)
        self.detail = "unconfigured: the policy is loaded by the configure transition"
        if self.server_params.served:
            raise ParameterError(
                "served",
                True,
                "served mode is the served_endpoint node (policy_server's main "
                "builds it when served is true)",
            )
        self._episode: str | None = None
        self._infer_lock = threading.Lock()  # one inference at a time (topic and service paths)
        self._stamps = _ChunkStamps(self.get_clock())
        self._chunk_pub: LifecyclePublisher | None = None  # configure creates it
        self._chunk_msg = ActionChunk()
        self._answered: tuple[str, int] | None = None  # (run_id, step) of _chunk_msg
        self.create_service(
            GetActionChunk,
            "get_action_chunk",
            self._on_get_chunk,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.start_hosting("observation", OBSERVATION_QOS, load=False, observe=False)
        # openpi's websocket protocol beside the topics (openpi_port; ros/openpi_endpoint.py)
        self._openpi = OpenpiHosting.from_parameters(self)
        if self._openpi is not None:
            self._openpi.start()

    # lifecycle ------------------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.detail = f"configuring: loading the {self.provider} policy"
        self._publish_status()
        with self._infer_lock:
            loaded = self.load_policy_on_a_passing_thread()
        if loaded:
            self._chunk_pub = self.create_lifecycle_publisher(
                ActionChunk, "action_chunk", CHUNK_QOS
            )
            self.open_observations()
            self.detail = f"inactive: {self.detail}; served once activated"
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS if loaded else TransitionCallbackReturn.FAILURE

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        activated = super().on_activate(state)  # the lifecycle publisher publishes from now
        if activated != TransitionCallbackReturn.SUCCESS:
            return activated
        self.ready = True
        self.detail = f"active: serving the {self.provider} policy (loaded in {self.load_s:.2f} s)"
        self.get_logger().info(self.detail)
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.ready = False
        self.detail = "inactive (lifecycle): observations are not answered until activated"
        self.get_logger().info(self.detail)
        self._publish_status()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._free()
        self.detail = "unconfigured: the policy was freed (cleanup)"
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._free()
        self.detail = "finalized (shutdown)"
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._free()
        return TransitionCallbackReturn.SUCCESS

    def _free(self) -> None:
        """Stop serving, destroy the data path configure created and free the policy."""
        self.ready = False
        self.close_observations()  # waits for an inference on the topic path to end
        chunk_pub, self._chunk_pub = self._chunk_pub, None
        if chunk_pub is not None:
            self.destroy_lifecycle_publisher(chunk_pub)
        with self._infer_lock:  # not under an inference (the service's)
            self.free_policy()
            self._episode = None
            self._answered = None

    def autostart(self) -> None:
        """Configure and activate (the `autostart` parameter). A load that fails leaves the
        node unconfigured and serving its heartbeat with the failure (not an exit: the
        runner's refusal and the remote provider name it)."""
        if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            self.trigger_activate()

    def on_observations(self, messages: list[Observation]) -> None:
        """Answer the latest observation waiting (an older one is dropped, so the server
        never falls behind the robot). The same observation again (its run_id and step:
        a client that resent it, its first copy or its chunk lost on the way) gets the
        chunk already computed, published again: a policy sees each observation once."""
        msg = messages[-1]
        if not self.ready:
            self.get_logger().warning(
                f"observation of step {msg.step} ignored: {self.detail}",
                throttle_duration_sec=2.0,
            )
            return
        key = (msg.run_id, int(msg.step))
        if key == self._answered:
            self.get_logger().warning(
                f"observation of step {msg.step} (run {msg.run_id}) came again: its chunk had "
                "not reached the client in time; published it again",
                throttle_duration_sec=1.0,
            )
            self._publish_chunk(self._chunk_msg)
            return
        try:
            # Published at once: one message, refilled (building one costs ~0.1 ms).
            chunk = self.infer(msg, out=self._chunk_msg)
        except Exception as exc:  # noqa: BLE001 - one bad observation must not stop the server
            self.get_logger().error(
                f"inference on the observation of step {msg.step} failed: "
                f"{type(exc).__name__}: {exc}"
            )
            return
        self._publish_chunk(chunk)
        self._answered = key
        self.chunks_served += 1  # bookkeeping after the chunk is out

    def _publish_chunk(self, chunk: ActionChunk) -> None:
        chunk_pub = self._chunk_pub  # configured: on_observations runs only while it is
        if chunk_pub is not None:
            chunk_pub.publish(chunk)

    def infer(self, msg: Observation, out: ActionChunk | None = None) -> ActionChunk:
        """One observation in, one ActionChunk out (tagged with run_id, obs_step, inference
        time); `out`: the message to fill instead of a new one."""
        with self._infer_lock:
            policy = self.policy
            if policy is None or not self.ready:
                raise RuntimeError(f"policy server not active: {self.detail}")
            # Converted as the policy reads it (the mock reads nothing of it).
            observation = wire.ObservationView(msg)
            if not self._bound:
                keys = sorted(observation.get("actuator_targets", {})) or list(
                    observation["joint_positions"]
                )
                policy.set_robot_state_keys(keys)
                self._bound = True
            run_id, instruction = msg.run_id, msg.instruction
            if run_id != self._episode:
                policy.reset(instruction=instruction)
                self._episode = run_id
            # The chunk as the wire takes it (ActionRows): no action dict per step when the
            # policy computes an array anyway (the mock, LeRobot).
            keys = policy.action_keys or None
            if getattr(policy, "supports_rtc", False):
                rtc = {
                    "queued_actions": wire.queued_actions_from_msg(msg, policy.action_keys),
                    "delay_steps": int(msg.delay_steps),
                }
                started = time.perf_counter()
                rows = policy.get_action_rows(observation, instruction, keys=keys, **rtc)
            else:
                started = time.perf_counter()
                rows = policy.get_action_rows(observation, instruction, keys=keys)
            elapsed = time.perf_counter() - started
            chunk = wire.chunk_to_msg(
                rows, run_id=run_id, obs_step=msg.step, inference_time_s=elapsed, msg=out
            )
            _stamp(chunk.header.stamp, self._stamps.now_ns())
            return chunk

    def _on_get_chunk(
        self, request: GetActionChunk.Request, response: GetActionChunk.Response
    ) -> GetActionChunk.Response:
        if not self.ready:
            response.ok = False
            response.message = f"policy server not ready: {self.detail}"
            return response
        try:
            response.chunk = self.infer(request.observation)
        except Exception as exc:  # noqa: BLE001 - answered, not raised into the executor
            response.ok = False
            response.message = f"inference failed: {type(exc).__name__}: {exc}"
            return response
        self.chunks_served += 1
        response.ok = True
        response.message = (
            f"{response.chunk.horizon} actions in {response.chunk.inference_time_s * 1e3:.2f} ms"
        )
        return response

    def destroy_node(self) -> None:
        openpi = getattr(self, "_openpi", None)
        if openpi is not None:
            openpi.stop()
        self.stop_hosting()
        self._stamps.close()
        super().destroy_node()
        release_state_machine(self)


class _ChunkStamps:
    """The chunks' stamps: the node's clock, read as the system clock while that is what
    it reads (Clock.now() builds a Time per call, a cost on every chunk); a jump callback
    follows use_sim_time turning ROS time on and off. It holds the clock, not the node."""

    def __init__(self, clock: Clock) -> None:
        self.now_ns: Callable[[], int] = time.time_ns
        self._watch = clock.create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=None, on_clock_change=True),
            post_callback=lambda _jump: self._follow(clock),
        )
        self._follow(clock)

    def _follow(self, clock: Clock) -> None:
        """Read the system clock while ROS time is off (what rcl reads then too), else
        the clock itself."""
        if clock.clock_type == ClockType.ROS_TIME and not clock.ros_time_is_active:
            self.now_ns = time.time_ns
        else:
            self.now_ns = lambda: clock.now().nanoseconds

    def close(self) -> None:
        self._watch.unregister()


def _stamp(stamp: Any, nanoseconds: int) -> None:
    """Set a builtin_interfaces/Time in place (cheaper than Time.to_msg()'s new message)."""
    stamp.sec, stamp.nanosec = divmod(nanoseconds, 1_000_000_000)


def main(args: list[str] | None = None) -> int:
    from robokernel_ros.nodes.served_endpoint import ServedEndpoint

    def make_node() -> PolicyHost:
        # `served:=true` (config/served.yaml) keeps naming served mode on this executable.
        with peeked_parameter(NODE_NAME, "served", False, SERVED_DESCRIPTION) as served:
            return ServedEndpoint() if served else PolicyServer()

    def started(node: PolicyHost) -> None:
        if isinstance(node, PolicyServer) and node.server_params.autostart:
            node.autostart()

    def executor_for(node: PolicyHost) -> Any:
        # Observations never pass the executor (the inference thread takes them), so in
        # driven mode it serves the heartbeat and get_action_chunk: one thread (rclpy's
        # MultiThreadedExecutor adds tens of milliseconds per call in this build; the
        # EventsExecutor measured no better here). Served mode needs several: a
        # served/step call may wait for its episode's start message.
        if isinstance(node, ServedEndpoint):
            return MultiThreadedExecutor(num_threads=4)
        return SingleThreadedExecutor()

    # Inference on the main thread, the policy loaded on a thread that ends with the load
    # (two living threads with OpenMP teams halve torch's speed: ros.policy_host); the
    # executor spins on a thread of its own.
    PolicyHost.infer_on_main_thread = True
    return run_node(
        make_node,
        args=args,
        executor=executor_for,
        on_started=started,
        main_work=lambda node: node.main_work(),
    )


if __name__ == "__main__":
    exit_main(main)
