"""`robokernel eval --live 0 --live-wait S --realtime` (issue #36, item 9): the command
prints the port the view got, waits for a viewer before the first episode, and runs at the
control rate, so a viewer sees the whole episode."""

from __future__ import annotations

import json
import re
import sys
import time

from foxglove_client import FoxgloveClient
from robokernel_ros.live.channels import JOINTS_TOPIC

STEPS, HZ = 50, 50.0


def test_live_0_prints_its_port_and_live_wait_holds_the_eval_for_a_viewer(processes):
    proc = processes.start("eval", [sys.executable, "-m", "robokernel_ros.cli", "eval", "--robot", "so101",
                                    "--max-steps", str(STEPS), "--control-frequency", str(HZ), "--no-trace",
                                    "--json", "--live", "0", "--live-wait", "120", "--realtime"])  # fmt: skip
    deadline = time.monotonic() + 120
    port = None
    while port is None:  # the line with the port it got, then the wait
        assert proc.poll() is None, processes.log(proc)
        assert time.monotonic() < deadline, processes.log(proc)
        found = re.search(r"ws://127\.0\.0\.1:(\d+)", processes.log(proc))
        if found and int(found.group(1)) > 0 and "waiting up to 120 s" in processes.log(proc):
            port = int(found.group(1))
        time.sleep(0.02)
    time.sleep(0.5)
    assert proc.poll() is None, "the eval ran before a viewer came"
    client = FoxgloveClient(port, deadline_s=30.0)
    connected = time.monotonic()
    channels = client.wait_for({JOINTS_TOPIC}, deadline_s=30.0)
    client.subscribe([channels[JOINTS_TOPIC]["id"]])
    end = time.monotonic() + 120
    while not client.closed and time.monotonic() < end:
        client._read(0.2)
    proc.wait(timeout=60)
    took = time.monotonic() - connected
    log = processes.log(proc)
    assert proc.returncode == 0, log
    report = json.loads(log[log.index("{") : log.rindex("}") + 1])
    assert report["episodes"][0]["live"]["port"] == port
    joints = [m for m in client.messages if m[0] == channels[JOINTS_TOPIC]["id"]]
    assert len(joints) >= 0.8 * STEPS, f"the viewer saw {len(joints)} of {STEPS} steps"
    assert took >= 0.9 * STEPS / HZ, f"{took:.2f} s: not paced at {HZ} Hz"
