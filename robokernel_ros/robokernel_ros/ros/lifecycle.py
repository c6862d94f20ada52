"""Another node's lifecycle state, read and changed over ROS: the client side of
rclpy.lifecycle's `<node>/get_state` and `<node>/change_state` (lifecycle_msgs).

    peer = LifecyclePeer(node, "/robokernel/policy_server")
    peer.state(timeout_s=2.0)                    # 'active', 'inactive', ... or None (no answer)
    peer.wait_for("active", timeout_s=30.0)      # RuntimeError naming the node and its state
    peer.change("deactivate", timeout_s=10.0)    # True when the transition succeeded

The node's executor must be spinning in another thread (the answers arrive through it);
the calling thread waits on an event, never on the executor. Every wait is a request
and its answer: a state is known only when the node said it. A request that DDS drops
(a new client's response path is matched separately from its request path, so the
first answers to a new client can be lost) is asked again until the deadline.

`release_state_machine(node)` finishes a lifecycle node's `destroy_node()` (below).

Who uses it: the runner before a start with the `remote` provider (it starts only
while the policy server is known to be active: fail closed), the demo, the benches and
the tests waiting for the graph to come up.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import ChangeState, GetState

#: The primary states (lifecycle_msgs/State labels).
ACTIVE = "active"
INACTIVE = "inactive"
UNCONFIGURED = "unconfigured"
FINALIZED = "finalized"
#: Transition states: the node is on its way to another primary state.
TRANSITIONAL = {
    State.TRANSITION_STATE_CONFIGURING,
    State.TRANSITION_STATE_CLEANINGUP,
    State.TRANSITION_STATE_SHUTTINGDOWN,
    State.TRANSITION_STATE_ACTIVATING,
    State.TRANSITION_STATE_DEACTIVATING,
    State.TRANSITION_STATE_ERRORPROCESSING,
}
TRANSITIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown")

_TO_ACTIVE = {UNCONFIGURED: "configure, then activate", INACTIVE: "activate"}
_ASK_S = 1.0  # one request's wait before it is asked again
_POLL_S = 0.05  # between two questions while the node is in a transition state


class LifecyclePeer:
    """The lifecycle services of the node `target` (its fully qualified name)."""

    def __init__(self, node: Any, target: str, *, callback_group: Any = None) -> None:
        self.node = node
        self.target = target.rstrip("/") or "/"
        # change_state's client first: an answer on get_state's (created after it) then
        # proves the target has matched change_state's response path too (change()).
        self._change = node.create_client(
            ChangeState, f"{self.target}/change_state", callback_group=callback_group
        )
        self._get = node.create_client(
            GetState, f"{self.target}/get_state", callback_group=callback_group
        )
        self.last: tuple[int, str] | None = None  # (id, label) of the last answer
        self.answered = False  # whether the last question (state()) got an answer

    def state(self, timeout_s: float) -> str | None:
        """The node's state label, or None when it did not answer within timeout_s."""
        deadline = time.monotonic() + timeout_s
        answer = self._ask(self._get, GetState.Request(), deadline)
        self.answered = answer is not None
        if answer is None:
            return None
        self.last = (int(answer.current_state.id), str(answer.current_state.label))
        return self.last[1]

    def wait_for(self, label: str, timeout_s: float, *, patient: bool = False) -> str:
        """Wait until the node says it is in `label`; RuntimeError (naming the node, the
        state it is in and what it takes) once the deadline passes, or, unless `patient`,
        at once when the node says it is in another primary state (no transition under
        way: a start refused now rather than later). `patient` waits out the deadline
        for a node that a lifecycle manager or its autostart is still bringing up."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.state(max(0.0, deadline - time.monotonic()))
            if seen == label:
                return seen
            settled = (
                seen is not None and self.last is not None and self.last[0] not in TRANSITIONAL
            )
            if (settled and not patient) or time.monotonic() >= deadline:
                raise RuntimeError(self.refusal(seen, label, timeout_s))
            time.sleep(_POLL_S)  # not there yet: ask again

    def refusal(self, seen: str | None, wanted: str, timeout_s: float) -> str:
        """Why the node is not `wanted`: its state, or that it did not answer."""
        if seen is None:
            return (
                f"{self.target} is not {wanted}: no answer from {self.target}/get_state within "
                f"{timeout_s:g} s (is the node running on this ROS_DOMAIN_ID?)"
            )
        return f"{self.target} is not {wanted}: its lifecycle state is '{seen}'" + (
            f" ({self.target}/change_state: {_TO_ACTIVE[seen]})"
            if wanted == ACTIVE and seen in _TO_ACTIVE
            else ""
        )

    def change(self, transition: str, timeout_s: float) -> bool:
        """Trigger `transition` (one of TRANSITIONS, by label); True when it succeeded."""
        if transition not in TRANSITIONS:
            raise ValueError(f"transition={transition!r}: must be one of {TRANSITIONS}")
        request = ChangeState.Request()
        request.transition.label = transition
        deadline = time.monotonic() + timeout_s
        # Asked once: a transition is not idempotent, so a lost answer is not asked again
        # (the caller reads the state to learn what happened). So first a get_state,
        # asked until answered: the target's readers are matched in the order this node
        # created them, so after that answer change_state's answer cannot be dropped.
        if self._ask(self._get, GetState.Request(), deadline) is None:
            return False
        answer = self._ask(self._change, request, deadline, once=True)
        return bool(answer is not None and answer.success)

    def _ask(self, client: Any, request: Any, deadline: float, once: bool = False) -> Any:
        if not client.wait_for_service(timeout_sec=max(0.0, deadline - time.monotonic())):
            return None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            done = threading.Event()
            future = client.call_async(request)
            future.add_done_callback(lambda _f, done=done: done.set())
            if done.wait(left if once else min(_ASK_S, left)):
                return future.result()
            future.cancel()
            if once:
                return None

    def destroy(self) -> None:
        """Destroy the clients (only while no executor spins the node)."""
        self.node.destroy_client(self._get)
        self.node.destroy_client(self._change)


def wait_active(node: Any, target: str, timeout_s: float) -> None:
    """Return once the node `target` says it is active; RuntimeError naming it and its
    state otherwise (a readiness handshake for demos, benches and tests). The clients
    stay with `node` for its life (one pair per target): destroying a client while an
    executor spins the node races its wait set in this rclpy."""
    with _peers_lock:
        peers = _peers.setdefault(node, {})
        peer = peers.get(target)
        if peer is None:
            peer = peers[target] = LifecyclePeer(node, target)
    peer.wait_for(ACTIVE, timeout_s, patient=True)


_peers: weakref.WeakKeyDictionary[Any, dict[str, LifecyclePeer]] = weakref.WeakKeyDictionary()
_peers_lock = threading.Lock()


def release_state_machine(node: Any) -> None:
    """Destroy what rclpy.lifecycle leaves behind after `node.destroy_node()`.

    rclpy's lifecycle state machine holds the node's handle and is not destroyed with the
    node: the node, its publishers, subscriptions and services, and its context's DDS
    participant then live on, matched by every peer, until the process exits (measured:
    a LifecycleNode's 6 UDP sockets stay open after destroy_node and rclpy.shutdown).
    Call it at the end of a lifecycle node's destroy_node; the node is destroyed once
    the machine lets go of it.
    """
    machine = getattr(node, "_state_machine", None)
    if machine is not None:
        machine.destroy_when_not_in_use()
