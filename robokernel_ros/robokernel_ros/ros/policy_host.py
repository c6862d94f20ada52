"""The node base of the two policy-hosting nodes (nodes/policy_server.py, the streaming
server; nodes/served_endpoint.py, served mode): one policy, its heartbeat, and an
inference thread that takes observations from one topic itself.

    class MyServer(PolicyHost):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)          # the policy's parameters, ~/status
            ...                                 # this node's own names
            self.start_hosting("observation", OBSERVATION_QOS)

        def on_observations(self, messages): ...   # on the inference thread

Parameters (both nodes): `HostParams` (`provider`, `policy_config_json`, `checkpoint`,
`device`, `action_keys`, `heartbeat_hz`, `plugin_modules`).

The observation reader opens with `start_hosting` (served mode) or later, with
`open_observations` (the lifecycle policy_server: in its configure transition), and
closes with `close_observations` (its cleanup) or `stop_hosting`; the inference loop
waits while none is open.

The policy is built by `load_policy` with the rollout API's own provider registry
(`preflight` then `create_policy`): in the policy_server's configure transition (a
lifecycle node), or in the served endpoint's loader thread that `start_hosting` starts.
The heartbeat (`~/status`, PolicyServerStatus) says `ready=false` with what is loading,
why the load failed or the lifecycle state until the policy is served; `detail`
carries the load time. The inference thread takes the observations itself,
without an executor in between: their subscription sits on a companion node
`<name>_rx` (in `ros2 node list` too) that no executor spins.

Which thread infers: the process's main thread when the node runs as its process
(`infer_on_main_thread`; ros.node.run_node calls `main_work` there while the executor
spins on another thread), else a thread of its own ("policy-infer", a node built inside another
process). Torch's threaded kernels (MKL, OpenMP) run slower on a thread while another
living thread of the process keeps an OpenMP team of its own, so the main thread infers
and the policy is loaded on a thread that ends with the load
(`load_policy_on_a_passing_thread`; served mode's loader thread ends too; the figures:
bench/RESULTS.md, "Observations moved out of docstrings"). Not covered: the
`get_action_chunk` service infers on the executor's thread (a client using both it and
the topic makes two teams).

A constructor that raises (a refused parameter, in PolicyHost's or a subclass's own
`__init__`) destroys the node it had made before the exception leaves (its DDS
participant would otherwise live on in a process that builds nodes, matched by every
peer), and `destroy_node` works on a node that never started hosting.
"""

from __future__ import annotations

import functools
import importlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from robokernel_interfaces.msg import Observation, PolicyServerStatus
from robokernel_ros.ros.node import freeze_heap
from robokernel_ros.ros.params import ParameterError, declare_params, param
from robokernel_ros.ros.qos import STATUS_QOS
from robokernel_ros.ros.transport import DirectReader

#: The node name both policy-hosting nodes take by default: clients watch
#: `<ns>/policy_server/status` (ros.wire.STATUS_TOPIC).
NODE_NAME = "policy_server"


@dataclass(frozen=True)
class HostParams:
    """The parameters of both policy-hosting nodes, as declared."""

    provider: str = param("mock", "policy provider: mock, scripted, lerobot, or a registered one")
    policy_config_json: str = param("{}", "the provider's config as a JSON object")
    checkpoint: str = param("", "a local checkpoint folder (sets policy_config['path'])")
    device: str = param("", "cpu | cuda | auto (sets policy_config['device']); '' leaves it")
    action_keys: tuple[str, ...] = param(
        (),
        "action keys the policy is bound to; [] binds to the first observation's joint names",
        array_type=str,
    )
    heartbeat_hz: float = param(
        2.0, "status heartbeat rate", min_value=0.0, min_exclusive=True, max_value=100.0
    )
    plugin_modules: tuple[str, ...] = param(
        (),
        "Python modules imported before the provider is built (they register their own providers)",
        array_type=str,
    )


class PolicyHost(Node):
    """A node hosting one policy (see the module docstring). Subclasses create their own
    names, call `start_hosting` last in their constructor and implement `on_observations`."""

    #: True: no inference thread; `main_work()` infers on the thread that calls it (a
    #: node's `main()` sets it for its process before building the node).
    infer_on_main_thread = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass's own __init__ that raises destroys the node first (see the module
        docstring): its destroy_node may need what the constructor did not get to make."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        @functools.wraps(init)
        def guarded(self: PolicyHost, *args: Any, **kw: Any) -> None:
            try:
                init(self, *args, **kw)
            except BaseException:
                self._destroy_unbuilt()
                raise

        cls.__init__ = guarded  # type: ignore[method-assign]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        # what destroy_node reads, before anything can raise
        self._observations: DirectReader | None = None
        self._observation_topic = ""
        self._observation_qos: Any = None
        self._reader_open = threading.Event()  # an observation reader is open (or stopping)
        self._hosting = threading.Lock()  # held while on_observations runs
        self._rx_node: Node | None = None
        self._worker: threading.Thread | None = None
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._stopping = False
        self._unbuilt_destroyed = False
        try:
            self._declare_parameters()
        except BaseException:
            self._destroy_unbuilt()
            raise

    def _destroy_unbuilt(self) -> None:
        """Destroy the node of a constructor that raised (once): the rclpy node and a
        lifecycle mixin's state machine, nothing a subclass's destroy_node adds."""
        if getattr(self, "_unbuilt_destroyed", True):
            return  # done, or Node.__init__ itself raised (there is no node)
        self._unbuilt_destroyed = True
        from robokernel_ros.ros.lifecycle import release_state_machine

        Node.destroy_node(self)
        release_state_machine(self)

    def _declare_parameters(self) -> None:
        params = self.host_params = declare_params(self, HostParams)
        self.provider = params.provider
        self.action_keys = list(params.action_keys)
        self.heartbeat_hz = params.heartbeat_hz
        self.plugin_modules = list(params.plugin_modules)
        self.config = _policy_config(params.policy_config_json, params.checkpoint, params.device)
        self.policy: Any = None
        self.ready = False
        self.detail = f"loading {self.provider} policy"
        self.chunks_served = 0
        self.load_s: float | None = None  # the last load's duration (s)
        self._bound = False  # the policy is bound to its action keys
        self._serving = threading.Event()  # the inference loop has started
        self._served_out = threading.Event()  # ... and left
        self._status_pub = self.create_publisher(PolicyServerStatus, "~/status", STATUS_QOS)

    def start_hosting(
        self,
        observation_topic: str,
        observation_qos: Any,
        *,
        load: bool = True,
        observe: bool = True,
    ) -> None:
        """Start the inference thread and the heartbeat timer for observations from
        `observation_topic` (relative names resolve as this node's, remaps included);
        `observe`: open their reader now (else `open_observations` does); `load`: also
        load the policy now, in the loader thread (served mode; the lifecycle
        policy_server loads it in its configure transition instead)."""
        self._rx_node = Node(
            f"{self.get_name()}_rx",
            namespace=self.get_namespace(),
            context=self.context,
            use_global_arguments=False,
            start_parameter_services=False,
        )
        self._observation_topic = self.resolve_topic_name(observation_topic)
        self._observation_qos = observation_qos
        if observe:
            self.open_observations()
        self.create_timer(
            1.0 / self.heartbeat_hz,
            self._publish_status,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self._publish_status()
        if load:
            self._loader = threading.Thread(target=self._load, name="policy-load", daemon=True)
            self._loader.start()
        if not self.infer_on_main_thread:
            self._worker = threading.Thread(target=self._serve, name="policy-infer", daemon=True)
            self._worker.start()

    def open_observations(self) -> None:
        """Subscribe to the observations (the inference thread takes them from now on)."""
        with self._hosting:
            if self._observations is None and not self._stopping:
                self._observations = DirectReader(
                    self._rx_node, Observation, self._observation_topic, self._observation_qos
                )
                self._reader_open.set()

    def close_observations(self) -> None:
        """Destroy the observations' subscription, once the inference thread is out of
        on_observations (what it publishes may be destroyed next)."""
        with self._hosting:
            reader, self._observations = self._observations, None
            if not self._stopping:
                self._reader_open.clear()
        if reader is not None:
            reader.close()

    def main_work(self) -> None:
        """The inference loop on the calling thread, until `stop_hosting` (ros.node.run_node
        runs it on the main thread while the executor spins on another)."""
        self._serve()

    def on_observations(self, messages: list[Observation]) -> None:
        """What the inference thread does with the observations it took (in arrival order)."""
        raise NotImplementedError

    # loading ------------------------------------------------------------------------------

    def load_policy(self) -> bool:
        """Build the policy (plugin modules, preflight, create_policy); False when that
        failed, with why in `detail` (the heartbeat and the log say it too). The load
        time is `load_s` and is in `detail`."""
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
            return False
        self.policy = policy
        freeze_heap()  # the loaded model is never scanned by a collection again
        self.load_s = time.monotonic() - started
        self.detail = f"{self.provider} policy loaded in {self.load_s:.2f} s"
        self.get_logger().info(self.detail)
        return True

    def load_policy_on_a_passing_thread(self) -> bool:
        """`load_policy` on a thread that ends with it: a load runs torch's threaded
        kernels, and the OpenMP team a living thread keeps from them (the executor's
        thread, which a lifecycle manager's configure runs on) would halve the speed of
        the inference thread's (see the module docstring)."""
        result: list[bool] = []
        loader = threading.Thread(
            target=lambda: result.append(self.load_policy()), name="policy-load", daemon=True
        )
        loader.start()
        loader.join()
        return bool(result and result[0])

    def free_policy(self) -> None:
        """Close and drop the policy (the next load builds it again)."""
        policy, self.policy = self.policy, None
        self._bound = False
        close = getattr(policy, "close", None)
        if close is not None:
            close()

    def _load(self) -> None:
        """The loader thread of served mode: load, then serve."""
        if self.load_policy():
            self.ready = True
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

    def _serve(self) -> None:
        """The inference loop: every batch of observations taken goes to on_observations."""
        self._serving.set()
        try:
            while not self._stopping:
                reader = self._observations
                if reader is None:  # not open (yet, or any more)
                    self._reader_open.wait(1.0)
                    continue
                messages = reader.take(1.0)
                if messages:
                    with self._hosting:
                        if self._observations is reader:  # not closed meanwhile
                            self.on_observations(messages)
        finally:
            self._served_out.set()

    def stop_hosting(self) -> None:
        """Stop the inference loop (waiting for it to leave the observation reader, on
        whichever thread it runs) and destroy the reader's node. Callable from any
        thread, more than once: the second call waits for the first."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopping = True
            if self._rx_node is None:  # never hosted: nothing runs
                self._stopped = True
                return
            self._reader_open.set()  # wakes an inference loop waiting for a reader
            self.close_observations()  # wakes one taking observations
            here = threading.current_thread()
            if self._worker is not None and self._worker is not here:
                self._worker.join(timeout=5)
            elif (
                self._worker is None
                and self._serving.is_set()
                and here is not threading.main_thread()
            ):
                self._served_out.wait(timeout=5)  # main_work is inferring on the main thread
            self._rx_node.destroy_node()
            self._stopped = True

    def destroy_node(self) -> None:
        self.stop_hosting()
        self.free_policy()
        super().destroy_node()


def _policy_config(config_json: str, checkpoint: str, device: str) -> dict[str, Any]:
    """policy_config_json with `checkpoint` and `device` applied (ParameterError unless
    it is a JSON object)."""
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
    return config
