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

The policy is built once, in a loader thread started at construction, with the rollout
API's own provider registry (`preflight` then `create_policy`); the heartbeat says
`ready=false` with what is loading (or why the load failed) until it is done, so a
runner refuses to start against it. Observations are answered on one inference
thread, latest first: an observation that arrives while the policy computes replaces
the one waiting, so the server never falls behind the robot. A new `run_id` starts a
new episode (the policy is reset with the observation's instruction).
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from robokernel_interfaces.msg import ActionChunk, Observation, PolicyServerStatus
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.nodes._common import STATUS_QOS, ParameterError, declare, run_multithreaded
from robokernel_ros.policies import remote as wire

OBSERVATION_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=2, reliability=ReliabilityPolicy.RELIABLE
)
CHUNK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)


class PolicyServer(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("policy_server", **kwargs)
        self.provider = declare(
            self,
            "provider",
            "mock",
            "policy provider: mock, scripted, lerobot, or a registered one",
        )
        config_json = declare(
            self, "policy_config_json", "{}", "the provider's config as a JSON object"
        )
        checkpoint = declare(
            self, "checkpoint", "", "a local checkpoint folder (sets policy_config['path'])"
        )
        device = declare(
            self, "device", "", "cpu | cuda | auto (sets policy_config['device']); '' leaves it"
        )
        self.action_keys = list(
            declare(
                self,
                "action_keys",
                [],
                "action keys the policy is bound to; [] binds to "
                "the first observation's joint names",
                array_type=str,
            )
        )
        self.heartbeat_hz = declare(
            self,
            "heartbeat_hz",
            2.0,
            "status heartbeat rate",
            min_value=0.0,
            min_exclusive=True,
            max_value=100.0,
        )
        self.plugin_modules = list(
            declare(
                self,
                "plugin_modules",
                [],
                "Python modules imported before the "
                "provider is built (they register their own providers)",
                array_type=str,
            )
        )
        try:
            config = json.loads(config_json)
        except json.JSONDecodeError as exc:
            raise ParameterError(
                "policy_config_json", config_json, f"must be a JSON object ({exc})"
            ) from exc
        if not isinstance(config, dict):
            raise ParameterError("policy_config_json", config_json, "must be a JSON object")
        if checkpoint:
            config["path"] = checkpoint
        if device:
            config["device"] = device
        self.config = config

        self.policy: Any = None
        self.ready = False
        self.detail = f"loading {self.provider} policy"
        self.chunks_served = 0
        self._episode: str | None = None
        self._bound = False
        self._infer_lock = threading.Lock()  # one inference at a time (topic and service paths)
        self._cond = threading.Condition()
        self._pending: Observation | None = None
        self._stopping = False

        self._status_pub = self.create_publisher(PolicyServerStatus, "~/status", STATUS_QOS)
        self._chunk_pub = self.create_publisher(ActionChunk, "action_chunk", CHUNK_QOS)
        self.create_subscription(
            Observation,
            "observation",
            self._on_observation,
            OBSERVATION_QOS,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.create_service(
            GetActionChunk,
            "get_action_chunk",
            self._on_get_chunk,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.create_timer(
            1.0 / self.heartbeat_hz,
            self._publish_status,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self._publish_status()
        self._loader = threading.Thread(target=self._load, name="policy-load", daemon=True)
        self._loader.start()
        self._worker = threading.Thread(target=self._serve, name="policy-infer", daemon=True)
        self._worker.start()

    # loading ------------------------------------------------------------------------------

    def _load(self) -> None:
        from robokernel_ros.policies import create_policy, preflight

        started = time.monotonic()
        try:
            for module in self.plugin_modules:
                importlib.import_module(module)
            preflight(self.provider, self.config)
            policy = create_policy(self.provider, **self.config)
            if self.action_keys:
                policy.set_robot_state_keys(self.action_keys)
                self._bound = True
        except Exception as exc:  # noqa: BLE001 - reported on the heartbeat and the log
            self.detail = f"loading the {self.provider} policy failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(self.detail)
            self._publish_status()
            return
        self.policy = policy
        self.ready = True
        self.detail = f"{self.provider} policy loaded in {time.monotonic() - started:.2f} s"
        self.get_logger().info(self.detail)
        self._publish_status()

    def _publish_status(self) -> None:
        policy = self.policy
        msg = PolicyServerStatus()
        msg.stamp = self.get_clock().now().to_msg()
        msg.ready = self.ready
        msg.provider = self.provider
        msg.detail = self.detail
        msg.action_keys = list(getattr(policy, "action_keys", ()) or self.action_keys)
        msg.chunk_emitting = bool(policy.is_chunk_emitting()) if policy is not None else False
        msg.rtc_supported = bool(getattr(policy, "supports_rtc", False))
        msg.chunks_served = self.chunks_served
        self._status_pub.publish(msg)

    # inference ------------------------------------------------------------------------------

    def _on_observation(self, msg: Observation) -> None:
        if not self.ready:
            self.get_logger().warn(
                f"observation of step {msg.step} ignored: {self.detail}", throttle_duration_sec=2.0
            )
            return
        with self._cond:
            self._pending = msg  # latest wins: an older waiting observation is dropped
            self._cond.notify()

    def _serve(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                msg, self._pending = self._pending, None
            try:
                chunk = self.infer(msg)
            except Exception as exc:  # noqa: BLE001 - one bad observation must not stop the server
                self.get_logger().error(
                    f"inference on the observation of step {msg.step} failed: "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            self._chunk_pub.publish(chunk)

    def infer(self, msg: Observation) -> ActionChunk:
        """One observation in, one ActionChunk out (tagged with run_id, obs_step, inference time)."""
        with self._infer_lock:
            policy = self.policy
            observation = wire.msg_to_observation(msg)
            if not self._bound:
                keys = sorted(observation.get("actuator_targets", {})) or list(
                    observation["joint_positions"]
                )
                policy.set_robot_state_keys(keys)
                self._bound = True
            if msg.run_id != self._episode:
                policy.reset(instruction=msg.instruction)
                self._episode = msg.run_id
            kwargs: dict[str, Any] = {}
            if getattr(policy, "supports_rtc", False):
                kwargs["queued_actions"] = wire.queued_actions_from_msg(msg, policy.action_keys)
                kwargs["delay_steps"] = int(msg.delay_steps)
            started = time.perf_counter()
            actions = policy.get_actions(observation, msg.instruction, **kwargs)
            elapsed = time.perf_counter() - started
            chunk = wire.chunk_to_msg(
                list(actions),
                run_id=msg.run_id,
                obs_step=msg.step,
                inference_time_s=elapsed,
                keys=policy.action_keys or None,
            )
            chunk.header.stamp = self.get_clock().now().to_msg()
            self.chunks_served += 1
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
        response.ok = True
        response.message = (
            f"{response.chunk.horizon} actions in {response.chunk.inference_time_s * 1e3:.2f} ms"
        )
        return response

    def destroy_node(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._worker.join(timeout=5)
        close = getattr(self.policy, "close", None)
        if close is not None:
            close()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return run_multithreaded(PolicyServer, args=args)


if __name__ == "__main__":
    import sys

    sys.exit(main())
