"""The runner node's takeover channel over ROS: pause / correct / resume as services and
from the contract's pedal or joystick, and the contract's teleop source attached to the
robot env (docs/operator_ros.md).

    takeover = RunnerTakeover(node, call=node.cell_call, callback_group=quick)
    takeover.configure(contract, env)   # configure: the teleop source, the pedal's reader
    takeover.release()                  # cleanup: both closed

Names (relative to the runner's namespace), in every lifecycle state:
  pause    std_srvs/Trigger: the robot holds (the policy stops driving).
  correct  std_srvs/Trigger: the teleop source drives (through the kernel's handover
           limiter, then the runner's command topic: the same safety shield as the
           policy's commands; the policy keeps inferring in the shadow).
  resume   std_srvs/Trigger: the policy drives again (its queue flushed, re-queried).
  the contract's `takeover.topic`: a std_msgs/Bool pedal (a change to true = correct,
           to false = resume) or a sensor_msgs/Joy (a press of its `buttons` pause /
           correct / resume), read by a thread of its own (reliable, depth 10).

pause and correct are refused, naming it, while the runner has no teleop source (it is
unconfigured, env=sim, or its contract_file has no `teleop:`); every call is refused
while no episode runs, and pause / correct while the e-stop is latched (the kernel's
refusal). A refused call changes nothing. The e-stop wins in every mode: a latch ends
the episode "estopped" whoever drives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger

from robokernel_ros.ros.requests import text
from robokernel_ros.ros.transport import DirectReader, acquire_link, release_link

VERBS = ("pause", "correct", "resume")
#: the pedal's reader: every press counts (reliable), a few queued while the thread works
TAKEOVER_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)


class RunnerTakeover:
    """See the module docstring. call(method, *args): a quick call of the runner's scene,
    answered as an envelope in every state (the runner's `_cell_call`)."""

    def __init__(
        self, node: Any, *, call: Callable[..., Mapping[str, Any]], callback_group: Any
    ) -> None:
        self._node = node
        self._call = call
        self._lock = threading.Lock()
        self.teleop: Any = None  # the RosTeleopSource while configured with one
        self.contract_file = ""
        self._pedal: _PedalReader | None = None
        for verb in VERBS:
            node.create_service(
                Trigger,
                verb,
                lambda request, response, verb=verb: self._on_service(verb, response),
                callback_group=callback_group,
            )

    # configure / cleanup --------------------------------------------------------------------

    def configure(self, contract: Any, env: Any, contract_file: str = "") -> None:
        """Attach the contract's teleop source to `env` (its `teleop_source`, which the
        rollout hands the episode loop) and start reading its takeover topic."""
        from robokernel_ros.ros.teleop import RosTeleopSource

        self.release()
        self.contract_file = contract_file
        teleop = RosTeleopSource(self._node, contract.teleop) if contract.teleop else None
        env.teleop_source = teleop
        pedal = _PedalReader(self, contract.takeover) if contract.takeover else None
        with self._lock:
            self.teleop, self._pedal = teleop, pedal

    def release(self) -> None:
        with self._lock:
            teleop, pedal = self.teleop, self._pedal
            self.teleop = self._pedal = None
            self.contract_file = ""  # not configured: the refusal says so
        if pedal is not None:
            pedal.close()
        if teleop is not None:
            teleop.close()

    # the calls ----------------------------------------------------------------------------

    def ask(self, verb: str, by: str) -> tuple[bool, str]:
        """pause / correct / resume the running episode, asked by `by`; (accepted, text)."""
        if verb not in VERBS:
            raise ValueError(f"verb={verb!r}: one of {list(VERBS)}")
        with self._lock:
            teleop = self.teleop
        if teleop is None and verb != "resume":
            return False, self._no_teleop(verb)
        out = self._call(verb, None, by)
        return out.get("status") == "success", text(out)

    def _no_teleop(self, verb: str) -> str:
        runner = self._node.get_fully_qualified_name()
        if self.contract_file:
            why = f"its contract_file {self.contract_file!r} has no teleop: channel"
        else:
            why = (
                "it is not configured (lifecycle) with a contract_file that names a teleop: "
                "channel (env=ros; docs/contract.md)"
            )
        return f"{verb} refused: no teleop source is attached to the runner {runner}: {why}"

    def _on_service(self, verb: str, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = self.ask(verb, f"{verb} service")
        # one logging call site per severity (rclpy refuses a site that changes it)
        if response.success:
            self._node.get_logger().info(f"{verb}: {response.message}")
        else:
            self._node.get_logger().warning(f"{verb}: {response.message}")
        return response

    def on_pedal(self, verb: str, by: str) -> None:
        ok, message = self.ask(verb, by)
        if ok:
            self._node.get_logger().info(f"takeover: {message}")
        else:
            self._node.get_logger().warning(f"takeover: {by}: {message}")


class _PedalReader:
    """The contract's takeover topic, read by a thread of its own (a DirectReader: no
    executor, nothing destroyed under a spinning wait set): a Bool's changes, a Joy's
    button presses, each handed to `owner.on_pedal(verb, by)`."""

    def __init__(self, owner: RunnerTakeover, takeover: Any) -> None:
        from robokernel_ros.ros.env_config import message_class

        node = owner._node
        self.owner = owner
        self.takeover = takeover
        self.topic = node.resolve_topic_name(takeover.topic)
        self._last: Any = None  # the last message's state (pedal_calls)
        self._link = acquire_link()
        self._reader = DirectReader(
            self._link.rx_node, message_class(takeover.type), self.topic, TAKEOVER_QOS
        )
        self._link.readers.add(self._reader)
        self._thread = threading.Thread(target=self._run, name="takeover_topic", daemon=True)
        self._thread.start()

    def publisher_count(self) -> int:
        return self._reader.publisher_count()

    def _run(self) -> None:
        reader = self._reader
        while not reader.closed:
            for msg in reader.take(0.1):
                for verb, by in self._calls(msg):
                    try:
                        self.owner.on_pedal(verb, by)
                    except Exception as exc:  # noqa: BLE001 - the reader keeps reading
                        self.owner._node.get_logger().error(
                            f"takeover {self.topic}: {type(exc).__name__}: {exc}"
                        )

    def _calls(self, msg: Any) -> list[tuple[str, str]]:
        calls, self._last = pedal_calls(self.takeover, msg, self._last, self.topic)
        return calls

    def close(self) -> None:
        self._reader.close()  # wakes the thread's take
        self._thread.join(timeout=2.0)
        release_link()


def pedal_calls(
    takeover: Any, msg: Any, last: Any, topic: str
) -> tuple[list[tuple[str, str]], Any]:
    """The calls (verb, by) one message on the takeover topic makes, and the state to
    pass with the next message (`last`: None before the first). A Bool: its change (the
    first message counts as one) to true is correct, to false resume; a repeated value
    is nothing. A Joy: each of `takeover.buttons` going from 0 (or absent) to pressed,
    in the order pause, correct, resume."""
    if not takeover.type.endswith("/Joy"):
        value = bool(msg.data)
        if value == last:
            return [], value
        return [("correct" if value else "resume", f"pedal {topic}")], value
    buttons = [int(b) for b in msg.buttons]
    previous = list(last or [])
    calls = []
    for verb in VERBS:
        index = takeover.buttons.get(verb)
        if index is None or index >= len(buttons):
            continue
        was = previous[index] if index < len(previous) else 0
        if buttons[index] and not was:
            calls.append((verb, f"joystick {topic} button {index}"))
    return calls, buttons
