"""The `remote` policy provider: a policy hosted by a policy_server node, reached over ROS 2.

    create_policy("remote", namespace="/robokernel", ready_timeout_s=10.0)

The provider publishes each observation on `<ns>/observation` and waits for the
`ActionChunk` on `<ns>/action_chunk` whose `run_id` and `obs_step` answer it (mode
"topic", the default), or calls `<ns>/get_action_chunk` (mode "service", for
synchronous evaluation). In topic mode an observation unanswered for a few recent round
trips (`resend_after_s`: 4x the longest of the last 16, 20 ms to 0.2 s) is published
again; the server answers a repeat (same run_id and step) with the chunk it computed, so
a lost copy of either message (a server that replaced a killed one is matched late: the
dead one's reader still counts as matched) costs that wait, not chunk_timeout_s, and the
policy never sees an observation twice. Chunks that answer an older request are dropped, so the
kernel's aligned merge always works from the observation step the chunk was computed
from. The server's heartbeat (`<ns>/policy_server/status`, `PolicyServerStatus`) is
watched: creating the policy against a server that is not ready (a lifecycle
policy_server is ready only while active) is refused with the server's own reason, and a chunk that does not come within `chunk_timeout_s` raises
TimeoutError (the kernel's hold watchdog usually ends the episode first).

The policy registry (policies.base) imports this module only when the provider
`remote` is asked for, so `policies/` stays free of rclpy. The messages are built by
`ros.wire`; the ROS side is this process's private link (`ros.transport`): chunks are
taken by the waiting thread itself (a DirectReader), the heartbeat and the service
client are served by the link's executor thread.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup

from robokernel_interfaces.msg import ActionChunk, Observation
from robokernel_interfaces.srv import GetActionChunk
from robokernel_ros.policies.base import Action, Policy, register_provider
from robokernel_ros.ros.qos import CHUNK_QOS
from robokernel_ros.ros.transport import DirectReader, ServerWatch, acquire_link, release_link
from robokernel_ros.ros.wire import (
    CHUNK_SERVICE,
    CHUNK_TOPIC,
    DEFAULT_NAMESPACE,
    OBSERVATION_TOPIC,
    join,
    msg_to_chunk,
    observation_to_msg,
)

_log = logging.getLogger(__name__)

#: Topic mode's resend timer: an observation without its chunk after RESEND_FACTOR x the
#: longest of the last RECENT_ROUND_TRIPS round trips, within [MIN_RESEND_S, RESEND_S]
#: (RESEND_S before the first chunk), is published again. Why adaptive: a chunk does
#: get lost now and then on a reliable topic between two processes here (about one
#: request in 500, bench/workcell_timing.py: the server answered the repeat from its
#: cache, so its chunk had not arrived), and with a fixed 0.2 s that was 10 holds at
#: 50 Hz, then a jump from rest that a shield's acceleration bound clips; a repeat costs
#: nothing (answered from the server's cache), so the timer can follow the round trip.
RESEND_S = 0.2
MIN_RESEND_S = 0.02
RESEND_FACTOR = 4.0
RECENT_ROUND_TRIPS = 16

_CONFIG_KEYS = {"namespace", "mode", "ready_timeout_s", "chunk_timeout_s", "stale_after_s"}


class RemotePolicy(Policy):
    """A policy served by a policy_server node (see the module docstring)."""

    provider = "remote"
    wants_step = True  # the request's step is the kernel's: the chunk's obs_step answers it

    def __init__(
        self,
        namespace: str = DEFAULT_NAMESPACE,
        mode: str = "topic",
        ready_timeout_s: float = 10.0,
        chunk_timeout_s: float = 10.0,
        stale_after_s: float = 3.0,
    ) -> None:
        super().__init__()
        self.preflight(
            {
                "namespace": namespace,
                "mode": mode,
                "ready_timeout_s": ready_timeout_s,
                "chunk_timeout_s": chunk_timeout_s,
                "stale_after_s": stale_after_s,
            }
        )
        self.namespace = namespace
        self.mode = mode
        self.chunk_timeout_s = float(chunk_timeout_s)
        self._run_id = secrets.token_hex(4)
        self._counter = 0
        self._closed = False
        self.last_inference_time_s = math.nan
        # The most recent chunks' (obs_step, inference_time_s, round_trip_s), bounded so a
        # long rollout does not grow it.
        self.chunk_log: deque[tuple[int, float, float]] = deque(maxlen=256)
        self.resends = 0  # observations published again (topic mode), all requests
        self._bound_keys: tuple[Any, Any, bool] = ((), None, False)  # _bind's last decision

        self._link = acquire_link()
        self.node = self._link.node
        self._private = True  # holds a reference on the shared link until close()
        try:
            self._setup_ros(stale_after_s)
            state = self._watch.wait_ready(float(ready_timeout_s))
        except BaseException:
            self.close()
            raise
        self.server_provider = state.provider
        self.server_action_keys = state.action_keys
        self.supports_rtc = state.rtc_supported
        self.execution_horizon = 2 if state.chunk_emitting else 1

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config keys {unknown} are unknown to the remote provider (known: {sorted(_CONFIG_KEYS)})"
            )
        ns = config.get("namespace", DEFAULT_NAMESPACE)
        if not isinstance(ns, str) or (ns and not ns.startswith("/")):
            raise ValueError(
                f"policy_config['namespace']={ns!r}: must be an absolute ROS namespace like '/robokernel'"
            )
        mode = config.get("mode", "topic")
        if mode not in ("topic", "service"):
            raise ValueError(f"policy_config['mode']={mode!r}: must be 'topic' or 'service'")
        for key in ("ready_timeout_s", "chunk_timeout_s", "stale_after_s"):
            if key in config:
                value = config[key]
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                    or value <= 0
                ):
                    raise ValueError(
                        f"policy_config[{key!r}]={value!r}: must be positive finite seconds"
                    )

    def _setup_ros(self, stale_after_s: float) -> None:
        group = ReentrantCallbackGroup()
        qos = CHUNK_QOS  # both ends: reliable, depth 10
        self._watch = ServerWatch(self.node, self.namespace, stale_after_s=stale_after_s)
        self._obs_pub = self.node.create_publisher(
            Observation, join(self.namespace, OBSERVATION_TOPIC), qos
        )
        self._obs_msg = Observation()
        self._matched = False  # both topic ends matched with the server (_await_match)
        # get_actions takes its chunk itself (no executor hop on the latency path).
        self._chunks = DirectReader(
            self._link.rx_node, ActionChunk, join(self.namespace, CHUNK_TOPIC), qos
        )
        self._link.readers.add(self._chunks)
        self._client = self.node.create_client(
            GetActionChunk, join(self.namespace, CHUNK_SERVICE), callback_group=group
        )

    # Policy API -------------------------------------------------------------------------------

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        # A new run id tells the server a new episode starts (it resets its policy).
        self._run_id = secrets.token_hex(4)
        self._counter = 0

    def is_chunk_emitting(self) -> bool:
        return self.execution_horizon > 1

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        step = kwargs.get("step")
        if step is None:
            step = observation.get("step") if isinstance(observation, Mapping) else None
            if step is None:
                step = self._counter
        step = int(step)
        self._counter = step + 1
        queued = kwargs.get("queued_actions")
        msg = observation_to_msg(
            observation,
            run_id=self._run_id,
            step=step,
            instruction=instruction,
            queued_actions=queued,
            queued_keys=(self.server_action_keys or self.action_keys) if queued is not None else (),
            delay_steps=kwargs.get("delay_steps") or 0,
            # Topic mode publishes at once: one message, refilled (a new one costs ~0.1 ms).
            msg=self._obs_msg if self.mode == "topic" else None,
        )
        started = time.monotonic()
        chunk_msg = self._call_service(msg) if self.mode == "service" else self._exchange(msg)
        round_trip = time.monotonic() - started
        self.last_inference_time_s = float(chunk_msg.inference_time_s)
        self.chunk_log.append((int(chunk_msg.obs_step), self.last_inference_time_s, round_trip))
        return self._bind(msg_to_chunk(chunk_msg))

    def _exchange(self, msg: Any) -> Any:
        key = (msg.run_id, int(msg.step))
        deadline = time.monotonic() + self.chunk_timeout_s
        if not self._matched:
            self._await_match(deadline)
        wait = self.resend_after_s()
        self._obs_pub.publish(msg)
        sent_at = time.monotonic()
        resend_at = sent_at + wait
        while True:
            now = time.monotonic()
            left = deadline - now
            if self._closed or self._chunks.closed:
                raise RuntimeError("remote policy closed while waiting for a chunk")
            if left <= 0:
                raise TimeoutError(self._timeout_message(msg.step))
            if now >= resend_at:
                # Unanswered: published again (the server answers a repeat with the chunk
                # it computed, never a second inference). A volatile topic loses what it
                # sends before discovery matches a server that replaced a killed one: the
                # dead server's reader still counts as matched until its lease runs out.
                if resend_at == sent_at + wait:  # the first resend of this request
                    # Late against the recent round trips: worth a warning. A policy slower
                    # than the timer's cap (RESEND_S), or a first request, gets its repeat as
                    # a routine insurance copy: logged at debug, not once per chunk.
                    longest = self._longest_recent_round_trip()
                    late = longest is not None and now - sent_at > longest
                    _log.log(
                        logging.WARNING if late else logging.DEBUG,
                        "remote policy %s: no chunk for the observation of step %d after %.0f ms "
                        "(the longest of the last round trips: %s): published it again",
                        self.namespace,
                        msg.step,
                        1000 * (now - sent_at),
                        "none yet" if longest is None else f"{1000 * longest:.0f} ms",
                    )
                self._obs_pub.publish(msg)
                self.resends += 1
                resend_at = now + RESEND_S
            for chunk in self._chunks.take(min(left, max(0.0, resend_at - now))):
                if (chunk.run_id, int(chunk.obs_step)) == key:
                    return chunk
                # any other chunk answers an older request (or another client's): dropped

    def resend_after_s(self) -> float:
        """Seconds topic mode waits for a chunk before publishing the observation again:
        RESEND_FACTOR x the longest of the last RECENT_ROUND_TRIPS round trips, within
        [MIN_RESEND_S, RESEND_S]; RESEND_S before the first chunk. Later resends of one
        request come every RESEND_S."""
        longest = self._longest_recent_round_trip()
        if longest is None:
            return RESEND_S
        return min(RESEND_S, max(MIN_RESEND_S, RESEND_FACTOR * longest))

    def _longest_recent_round_trip(self) -> float | None:
        """The longest of the last RECENT_ROUND_TRIPS round trips (s); None before the first."""
        recent = itertools.islice(reversed(self.chunk_log), RECENT_ROUND_TRIPS)
        return max((round_trip for _step, _inference, round_trip in recent), default=None)

    def _await_match(self, deadline: float) -> None:
        """Before the first observation: wait until the server's observation reader and our
        chunk reader are matched. A volatile topic drops what is published before discovery
        has matched the two ends, and the request would then wait out chunk_timeout_s."""
        while time.monotonic() < deadline and not self._closed:
            if self._obs_pub.get_subscription_count() and self._chunks.publisher_count():
                self._matched = True
                return
            time.sleep(0.005)

    def _call_service(self, msg: Any) -> Any:
        if not self._client.wait_for_service(timeout_sec=min(self.chunk_timeout_s, 5.0)):
            raise TimeoutError(self._timeout_message(msg.step))
        done = threading.Event()
        future = self._client.call_async(GetActionChunk.Request(observation=msg))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(self.chunk_timeout_s):
            future.cancel()
            raise TimeoutError(self._timeout_message(msg.step))
        response = future.result()
        if not response.ok:
            raise RuntimeError(
                f"policy server {self.namespace} refused the observation of step {msg.step}: {response.message}"
            )
        return response.chunk

    def _timeout_message(self, step: int) -> str:
        alive = "alive" if self._watch.alive() else "silent (no recent heartbeat)"
        return (
            f"no action chunk from the policy server at {self.namespace} for the observation of step {step} "
            f"within chunk_timeout_s={self.chunk_timeout_s:g} (server {alive})"
        )

    def _bind(self, chunk: list[Action]) -> list[Action]:
        """Chunk keys are bound by name; a chunk naming none of the robot's keys but of the
        same width is bound by position (and reported as positional_fallback_used)."""
        if not chunk or not self.action_keys:
            return chunk
        keys = tuple(chunk[0])
        seen = self._bound_keys  # the last decision: (chunk keys, action keys, by position)
        if seen[0] == keys and seen[1] is self.action_keys:
            by_position = seen[2]
        else:
            by_position = not (set(keys) & set(self.action_keys)) and len(keys) == len(
                self.action_keys
            )
            self._bound_keys = (keys, self.action_keys, by_position)
        if not by_position:
            return chunk
        self.positional_fallback_used = True
        return [dict(zip(self.action_keys, row.values(), strict=False)) for row in chunk]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        node = getattr(self, "node", None)
        if node is not None:
            for attr, destroy in (
                ("_watch", lambda w: w.destroy()),
                ("_chunks", lambda r: r.close()),
                ("_obs_pub", node.destroy_publisher),
                ("_client", node.destroy_client),
            ):
                obj = getattr(self, attr, None)
                if obj is None:
                    continue
                try:
                    destroy(obj)
                except Exception:  # noqa: BLE001 - best effort during teardown
                    _log.debug("remote policy: destroying %s failed", attr, exc_info=True)
        if getattr(self, "_private", False):
            self._private = False
            release_link()

    def __del__(self) -> None:  # a policy dropped without close() must not keep the link alive
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


register_provider("remote", RemotePolicy, replace=True)
