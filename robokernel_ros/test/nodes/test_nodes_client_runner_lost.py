"""WorkcellClient: a goal whose runner dies mid-goal ends with an error naming the runner.

The client waited for such a goal's result without a bound: a runner SIGKILLed while an
eval ran left its caller blocked for good. It now watches the runner that accepted the
goal in the ROS graph and raises RunnerLost once it has left (DDS notices a killed
process when its lease runs out: 20 s by default, 5 s for this test's runner)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.ros.client import RunnerLost, WorkcellClient  # noqa: E402

NS = "/rk_runner_lost"
PROFILES = Path(__file__).resolve().parents[2] / "config" / "fastdds_localhost.xml"
# The runner's participant announces itself every second and is dropped by its peers 5 s
# after it was last heard (Fast DDS's defaults: 3 s and 20 s): the wait for a killed
# runner's lease is what this test spent most of its time on. Any message from a live
# participant renews its lease, so a runner that streams feedback is never dropped early.
SHORT_LEASE = """<builtin>
        <discovery_config>
          <leaseDuration><sec>5</sec></leaseDuration>
          <leaseAnnouncement><sec>1</sec></leaseAnnouncement>
        </discovery_config>"""


def _short_lease_env(tmp_path: Path) -> dict[str, str]:
    """The workcell's Fast DDS profile (config/fastdds_localhost.xml) with a 5 s lease."""
    profile = PROFILES.read_text()
    assert profile.count("<builtin>") == 1, PROFILES
    path = tmp_path / "fastdds_short_lease.xml"
    path.write_text(profile.replace("<builtin>", SHORT_LEASE))
    return {
        "FASTDDS_DEFAULT_PROFILES_FILE": str(path),
        "FASTRTPS_DEFAULT_PROFILES_FILE": str(path),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT",
    }


def test_a_goal_whose_runner_is_killed_raises_runner_lost_naming_the_runner(
    processes, sim_runner, tmp_path
) -> None:
    proc, _ = sim_runner(NS, env=_short_lease_env(tmp_path))
    client = WorkcellClient(NS, server_timeout_s=60.0)
    try:
        assert client.list_policies_running().ok, processes.log(proc)
        feedback: list = []
        box: dict = {}

        def call() -> None:
            try:
                box["result"] = client.eval_policy(
                    robot_name="arm", policy_provider="mock", n_episodes=100, max_steps=200,
                    feedback=feedback.append, extra={"fast_mode": False, "control_frequency": 50.0},
                )  # fmt: skip
            except BaseException as exc:  # noqa: BLE001 - what the call raised is the result
                box["error"] = exc

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not any(m.step > 0 for m in feedback):  # the goal runs on the runner
            assert time.monotonic() < deadline and thread.is_alive(), (box, processes.log(proc))
            time.sleep(0.05)
        processes.kill(proc)  # SIGKILL: no result is ever sent
        # DDS drops a killed participant when its lease runs out (5 s here), then the
        # client's grace of 2 s; the wait was unbounded before.
        thread.join(timeout=120)
        assert not thread.is_alive(), "the call still waits for a runner that was killed"
        assert "result" not in box, box
        error = box["error"]
        assert isinstance(error, RunnerLost), repr(error)
        message = str(error)
        assert message.startswith("eval_policy: the runner ") and f"{NS}/runner" in message
        assert "outcome is unknown" in message
        assert client.cancel() == 0  # the lost goal is no longer in flight
    finally:
        client.close()
