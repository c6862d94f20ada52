"""WorkcellClient.close() leaves no node behind in its process: a node held by an action
client was only marked for destruction, its DDS participant lived on, and the process's
other participants then missed a policy server that replaced a killed one."""

from __future__ import annotations

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.ros.client import WorkcellClient  # noqa: E402


def _names(ros) -> list[str]:
    return [name for name, _ns in ros.node.get_node_names_and_namespaces()]


def test_close_destroys_the_node_and_its_action_clients(ros) -> None:
    client = WorkcellClient("/rk_nobody", server_timeout_s=0.5)
    assert ros.wait_until(lambda: "robokernel_client" in _names(ros), 30), _names(ros)
    with pytest.raises(Exception, match="run_policy"):  # no runner: the action is not found
        client.run_policy(robot_name="arm", policy_provider="mock", n_steps=1)
    client.close()
    # seen by a participant of the same process while the node lived on half-destroyed
    assert ros.wait_until(lambda: "robokernel_client" not in _names(ros), 10), _names(ros)


def test_close_waits_out_a_blocked_callback_and_leaves_no_spin_thread() -> None:
    import threading
    import time

    client = WorkcellClient("/rk_nobody_blocked", server_timeout_s=0.5)
    blocking = threading.Event()
    timer = None

    def block() -> None:  # one callback that outlasts close()'s first join (5 s)
        timer.cancel()
        blocking.set()
        time.sleep(6.0)

    timer = client._node.create_timer(0.01, block)
    assert blocking.wait(30), "the blocking callback never ran"
    client.close()
    assert not client._thread.is_alive(), "close() returned with the spin thread running"
