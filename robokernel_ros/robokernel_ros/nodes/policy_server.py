"""policy_server node: hosts one policy (any provider) and answers observations with action chunks.

    python -m robokernel_ros.nodes.policy_server --ros-args -r __ns:=/robokernel \\
        -p provider:=lerobot -p checkpoint:=/path/to/pretrained_model

Names (relative to the node's namespace, `/robokernel` in the launch files):
  subscribes  observation              robokernel_interfaces/Observation (reliable, depth 2)
  publishes   action_chunk             robokernel_interfaces/ActionChunk (reliable, depth 10),
                                        tagged with the observation's run_id and step and the
                                        inference time
  publishes   ~/status                 PolicyServerStatus heartbeat (reliable, transient_local)
  service     get_action_chunk         GetActionChunk: the same, synchronously (evaluation)

The policy, its parameters and the heartbeat are ros.policy_host's: the heartbeat says
`ready=false` until the policy is loaded, so a runner refuses to start against it.
Observations are answered on one inference thread, latest first: an observation that
arrives while the policy computes replaces the one waiting, so the server never falls
behind the robot. A new `run_id` starts a new episode (the policy is reset with the
observation's instruction).

`served:=true` starts the served endpoint instead (nodes/served_endpoint.py: an
external harness owns the loop); this node itself is driven mode only.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import ClockType, JumpThreshold
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

from robokernel_interfaces.msg import ActionChunk, Observation
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.ros import wire
from robokernel_ros.ros.node import exit_main, peek_parameter, run_node
from robokernel_ros.ros.params import ParameterError, declare
from robokernel_ros.ros.policy_host import NODE_NAME, PolicyHost
from robokernel_ros.ros.qos import CHUNK_QOS, OBSERVATION_QOS

SERVED_DESCRIPTION = (
    "served mode: an external harness owns the loop (served/* names; the served_endpoint "
    "node); false: answer observations with chunks (driven mode)"
)


class PolicyServer(PolicyHost):
    """Driven mode: observations in, action chunks out (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if declare(self, "served", False, SERVED_DESCRIPTION):
            raise ParameterError(
                "served", True, "served mode is the served_endpoint node (policy_server's main "
                "builds it when served is true)"
            )  # fmt: skip
        self._episode: str | None = None
        self._infer_lock = threading.Lock()  # one inference at a time (topic and service paths)
        # The chunks' stamps: the node's clock, read as the system clock while that is what
        # it reads (Clock.now() builds a Time per call: ~50 us on an idle server's chunk
        # path); a jump callback follows use_sim_time turning ROS time on and off. (It holds
        # the node weakly: a node whose construction failed is freed as before.)
        self._now_ns = time.time_ns
        node = weakref.ref(self)
        self._clock_watch = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=None, on_clock_change=True),
            post_callback=lambda _jump: _follow_clock(node()),
        )
        _follow_clock(self)
        self._chunk_pub = self.create_publisher(ActionChunk, "action_chunk", CHUNK_QOS)
        self._chunk_msg = ActionChunk()
        self.create_service(
            GetActionChunk,
            "get_action_chunk",
            self._on_get_chunk,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.start_hosting("observation", OBSERVATION_QOS)

    def on_observations(self, messages: list[Observation]) -> None:
        """Answer the latest observation waiting (an older one is dropped, so the server
        never falls behind the robot)."""
        msg = messages[-1]
        if not self.ready:
            self.get_logger().warn(
                f"observation of step {msg.step} ignored: {self.detail}",
                throttle_duration_sec=2.0,
            )
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
        self._chunk_pub.publish(chunk)
        self.chunks_served += 1  # bookkeeping after the chunk is out

    def infer(self, msg: Observation, out: ActionChunk | None = None) -> ActionChunk:
        """One observation in, one ActionChunk out (tagged with run_id, obs_step, inference
        time); `out`: the message to fill instead of a new one."""
        with self._infer_lock:
            policy = self.policy
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
            _stamp(chunk.header.stamp, self._now_ns())
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
        self.stop_hosting()
        self._clock_watch.unregister()
        super().destroy_node()


def _follow_clock(server: PolicyServer | None) -> None:
    """Point server._now_ns at what its clock reads now: the system clock while ROS time
    is off (what rcl reads then too), else the clock itself."""
    if server is None:
        return
    clock = server.get_clock()
    if clock.clock_type == ClockType.ROS_TIME and not clock.ros_time_is_active:
        server._now_ns = time.time_ns
    else:
        server._now_ns = lambda: clock.now().nanoseconds


def _stamp(stamp: Any, nanoseconds: int) -> None:
    """Set a builtin_interfaces/Time in place (cheaper than Time.to_msg()'s new message)."""
    stamp.sec, stamp.nanosec = divmod(nanoseconds, 1_000_000_000)


def main(args: list[str] | None = None) -> int:
    from robokernel_ros.nodes.served_endpoint import ServedEndpoint

    def make_node() -> PolicyHost:
        # `served:=true` (config/served.yaml) keeps naming served mode on this executable.
        if peek_parameter(NODE_NAME, "served", False, SERVED_DESCRIPTION):
            return ServedEndpoint()
        return PolicyServer()

    def executor_for(node: PolicyHost) -> Any:
        # Observations never pass the executor (the inference thread takes them), so in
        # driven mode it serves the heartbeat and get_action_chunk: one thread (rclpy's
        # MultiThreadedExecutor adds tens of milliseconds per call in this build; the
        # EventsExecutor measured no better here). Served mode needs several: a
        # served/step call may wait for its episode's start message.
        if isinstance(node, ServedEndpoint):
            return MultiThreadedExecutor(num_threads=4)
        return SingleThreadedExecutor()

    return run_node(make_node, args=args, executor=executor_for)


if __name__ == "__main__":
    exit_main(main)
