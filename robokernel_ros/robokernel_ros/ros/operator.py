"""The runner node's operator channel over ROS: the e-stop and what a person at the cell
calls, in every lifecycle state of the runner.

    operator = RunnerOperator(node, scene=lambda: node.cell, call=node.cell_call, ...)
    operator.check_start()      # Refused while the e-stop is latched or its source not live

Names (relative to the runner's namespace):
  estop        std_msgs/Bool (reliable + transient_local depth 1, the one the shield hears,
               from the estop_panel node): true latches the e-stop. With `required` (env=ros
               by default) rollouts start only while its source is live and released, and a
               source silent for `timeout_s` latches it: the shield's EstopCircuit
               (robokernel_ros.safety.estop). One thread of its own reads the topic (a
               DirectReader, no executor in between) and judges the silence by when each
               sample reached the process: a stall of the runner's executor (a long
               call, the control loop holding the GIL) is not a silent source.
  stop         std_srvs/Trigger: stop every rollout.
  clear_fault  std_srvs/Trigger: unlatch (refused while pressed or, when required, until
               the source is live and released), then the shield's clear_fault.
  reset_done   std_srvs/Trigger: confirm the reset the running episode waits for.
  verdict      SubmitVerdict service and Verdict topic: the operator's outcome.

A latch reaches the scene at once (every in-flight episode ends "estopped"); while the
runner has no scene (unconfigured) the circuit keeps it, and `apply_latch` hands it to
the scene configure builds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from std_msgs.msg import Bool
from std_srvs.srv import Trigger

from robokernel_interfaces.msg import Verdict
from robokernel_interfaces.srv import SubmitVerdict
from robokernel_ros.ros.qos import ESTOP_READER_QOS
from robokernel_ros.ros.requests import Refused, text
from robokernel_ros.ros.transport import DirectReader, acquire_link, release_link
from robokernel_ros.safety.estop import LOST, EstopCircuit

# How long after the node's start a rollout start waits for the e-stop source to be discovered.
_ESTOP_DISCOVERY_GRACE_S = 15.0


class RunnerOperator:
    """See the module docstring. scene: the runner's scene now (None while unconfigured);
    call(method, *args): a quick call of the scene, answered as an envelope in any state."""

    def __init__(
        self,
        node: Any,
        *,
        scene: Callable[[], Any],
        call: Callable[..., Mapping[str, Any]],
        required: bool,
        timeout_s: float,
        shield_clear_fault: str,
        callback_group: Any,
    ) -> None:
        self._node = node
        self._scene = scene
        self._call = call
        self._started_at = time.monotonic()
        self._estop = EstopCircuit(
            required=required,
            timeout_s=timeout_s,
            wait_s=0.0,
            now=time.monotonic(),
            topic=node.resolve_topic_name("estop"),  # the panel's, as the shield's default
        )
        self._lock = threading.Lock()
        quick = callback_group
        node.create_service(Trigger, "stop", self._on_stop, callback_group=quick)
        node.create_service(Trigger, "clear_fault", self._on_clear_fault, callback_group=quick)
        node.create_service(Trigger, "reset_done", self._on_reset_done, callback_group=quick)
        node.create_service(
            SubmitVerdict, "verdict", self._on_verdict_service, callback_group=quick
        )
        # Taken by the watch thread only: on the private link's node that no executor spins.
        self._link = acquire_link()
        self._estop_reader = DirectReader(
            self._link.rx_node, Bool, node.resolve_topic_name("estop"), ESTOP_READER_QOS
        )
        node.create_subscription(
            Verdict, "verdict", self._on_verdict_topic, 10, callback_group=quick
        )
        self._quick = quick
        self._shield_clients: list[Any] = []  # the clear_fault of each shield, in order
        self.use_shields([shield_clear_fault] if shield_clear_fault else [])
        self._stop = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch,
            args=(max(0.005, min(0.05, timeout_s / 10)),),
            name="estop_watch",
            daemon=True,
        )
        self._watcher.start()

    # start checks -------------------------------------------------------------------------

    def check_start(self) -> None:
        """Refused (naming why) while the e-stop is latched or its source is not live."""
        with self._lock:
            latched = self._estop.latched
        if latched:
            raise Refused(
                "refused: the e-stop is latched; release it (estop false) and call clear_fault first"
            )
        # A source that is arming (one sample so far) becomes live within a period or two; in
        # the node's first seconds the panel may not be discovered yet (DDS discovery takes
        # seconds on a loaded machine): a start then waits for it, up to the grace.
        deadline = max(
            time.monotonic() + 2 * self._estop.timeout_s,
            self._started_at + _ESTOP_DISCOVERY_GRACE_S,
        )
        while True:
            with self._lock:
                now = time.monotonic()
                ready = self._estop.may_forward(now)
                reason = self._estop.reason(now)
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not ready:
            raise Refused(f"refused: {reason}")

    @property
    def latched(self) -> bool:
        """Whether the runner's e-stop is latched now."""
        with self._lock:
            return self._estop.latched

    def latch(self, by: str) -> None:
        """Latch the e-stop because a part of the workcell says its e-stop latched (a
        safety shield that holds for an e-stop: `by` names it and why), as a pressed
        sample does: in-flight episodes end "estopped", rollouts are refused until
        clear_fault. Nothing changes when it is latched already."""
        with self._lock:
            latched = self._estop.latch(by)
        if latched:
            self._latched()

    def apply_latch(self, scene: Any) -> None:
        """A scene built while the e-stop is latched is latched too."""
        with self._lock:
            if self._estop.latched:
                scene.estop()

    def destroy(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._estop_reader.close()  # wakes the watch thread's take
        self._watcher.join(timeout=2.0)
        release_link()

    # e-stop -------------------------------------------------------------------------------

    def _watch(self, period: float) -> None:
        """Take every e-stop sample waiting, each at its reception time, then judge the
        source's silence now: samples that waited for this thread count from their arrival."""
        reader = self._estop_reader
        while not self._stop.is_set() and not reader.closed:
            samples = reader.take_received(period)
            latched = False
            with self._lock:
                for msg, received in samples:
                    latched |= self._estop.sample(bool(msg.data), received, "estop topic: pressed")
                latched |= self._estop.tick(time.monotonic())
            if latched:
                self._latched()

    def _latched(self) -> None:
        by = self._estop.latched_by
        if by == LOST:  # how long silent, and whether this process was late to check
            by += f" (silent {1000 * self._estop.lost_after_s:.0f} ms; {self._estop.lost_detail()})"
        self._node.get_logger().warning(f"e-stop latched by {by}; every rollout ends estopped")
        # The workcell latches too: every in-flight episode ends "estopped" at once, the
        # rollouts stop (no further episodes) and new ones are refused until clear_fault.
        scene = self._scene()
        if scene is not None:
            scene.estop()

    def _on_clear_fault(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        with self._lock:
            ok, message = self._estop.clear(time.monotonic())
            if not ok:
                response.success, response.message = False, message
                return response
            scene = self._scene()
            if scene is not None:
                scene.clear_fault()
        response.success = True
        response.message = "e-stop cleared on the runner"
        for client in list(self._shield_clients):
            ok, detail = self._clear_shield(client)
            response.success = response.success and ok
            named = f" {client.srv_name}" if len(self._shield_clients) > 1 else ""
            response.message += f"; shield{named}: {detail}"
        return response

    def use_shields(self, clear_fault_services: list[str]) -> None:
        """clear_fault also calls these shields' clear_fault services, in order (the
        runner's robot env commands through them; a client is made once per name)."""
        made = {c.srv_name: c for c in self._shield_clients}
        clients = []
        for name in clear_fault_services:
            client = made.get(name)
            if client is None:
                client = self._node.create_client(Trigger, name, callback_group=self._quick)
            clients.append(client)
        self._shield_clients = clients

    def _clear_shield(self, client: Any) -> tuple[bool, str]:
        if not client.wait_for_service(timeout_sec=1.0):
            return True, f"no {client.srv_name} service (no shield running)"
        done = threading.Event()
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(3.0):
            future.cancel()
            return False, f"{client.srv_name} did not answer within 3 s"
        result = future.result()
        return bool(result.success), result.message

    # stop, reset, verdict ---------------------------------------------------------------------

    def _trigger(self, response: Trigger.Response, out: Mapping[str, Any]) -> Trigger.Response:
        response.success = out.get("status") == "success"
        response.message = text(out)
        return response

    def _on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        return self._trigger(response, self._call("stop_policy", ""))

    def _on_reset_done(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        return self._trigger(response, self._call("reset_done"))

    def _verdict(self, outcome: str, note: str) -> tuple[bool, str]:
        out = self._call("verdict", outcome, note)
        return out.get("status") == "success", text(out)

    def _on_verdict_service(
        self, request: SubmitVerdict.Request, response: SubmitVerdict.Response
    ) -> Any:
        response.ok, response.message = self._verdict(request.outcome, request.note)
        return response

    def _on_verdict_topic(self, msg: Verdict) -> None:
        ok, message = self._verdict(msg.outcome, msg.note)
        if not ok:
            self._node.get_logger().warning(f"verdict refused: {message}")
