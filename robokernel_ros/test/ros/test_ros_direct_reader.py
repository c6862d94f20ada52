"""DirectReader (ros/transport.py) taken from two threads at once: one takes at a time,
both get messages, and the process lives (an rcl wait set waited on by two threads
killed the runner with SIGSEGV in the chaos soak, bench/soak.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("rclpy")

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    import rclpy
    from rclpy.duration import Duration
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    from robokernel_ros.ros.transport import DirectReader

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("direct_reader_threads", context=context)
    # deep enough for all 3000: a loaded machine's takers fall behind, and a keep-last
    # history of 100 then replaced messages (2950 of 3000 taken once at load 40)
    qos = QoSProfile(depth=3000, reliability=ReliabilityPolicy.RELIABLE)
    reader = DirectReader(node, String, "/direct_reader_threads", qos)
    if sys.argv[1] == "unlocked":  # the reader before the fix, to show the test can fail
        import contextlib
        reader._taking = contextlib.nullcontext()
    pub = node.create_publisher(String, "/direct_reader_threads", qos)
    deadline = time.monotonic() + 10
    while reader.publisher_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    got = [0, 0]
    stop = threading.Event()

    def taker(i):
        while not stop.is_set():
            got[i] += len(reader.take(0.002))

    threads = [threading.Thread(target=taker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for k in range(3000):
        pub.publish(String(data=str(k)))
        if k % 50 == 0:
            time.sleep(0.001)
    # every message reached the reader (acked), then the takers took them all, or 30 s
    pub.wait_for_all_acked(Duration(seconds=30))
    deadline = time.monotonic() + 30
    while sum(got) < 3000 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(5)
    reader.close()
    node.destroy_node()
    rclpy.try_shutdown(context=context)
    context.destroy()
    print("taken", got[0], got[1], sum(got))
    """
)


def test_two_threads_take_from_one_reader_and_the_process_lives() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, "locked"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    taken = [int(x) for x in out.stdout.split("taken")[1].split()]
    assert taken[0] > 0 and taken[1] > 0, taken
    assert taken[2] == 3000, taken  # every message taken once, by one of the two


CLOSE_SCRIPT = textwrap.dedent(
    """
    import threading, time
    import rclpy
    from std_msgs.msg import String
    from robokernel_ros.ros.transport import DirectReader

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("direct_reader_close", context=context)
    reader = DirectReader(node, String, "/direct_reader_close", 10)
    out = {}

    def taker():
        started = time.monotonic()
        out["taken"] = reader.take(30.0)  # no publisher: waits until closed
        out["waited"] = time.monotonic() - started

    thread = threading.Thread(target=taker)
    thread.start()
    time.sleep(0.3)  # the taker waits in its wait set
    t0 = time.monotonic()
    reader.close()
    closed_in = time.monotonic() - t0
    # when close returns, the taker has left and the subscription is gone
    print("alive", thread.is_alive(), "subs", len(list(node.subscriptions)))
    thread.join(5)
    print("taken", len(out["taken"]), "waited", round(out["waited"], 2), "closed_in", round(closed_in, 2))
    print("after", reader.take(0.5), reader.closed)
    node.destroy_node()
    rclpy.try_shutdown(context=context)
    context.destroy()
    """
)


def test_close_wakes_a_waiting_take_and_destroys_the_reader_once_it_left() -> None:
    out = subprocess.run([sys.executable, "-c", CLOSE_SCRIPT], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert lines["alive"] == "False subs 0", out.stdout  # left, then destroyed
    taken, _, waited, _, closed_in = lines["taken"].split()
    assert taken == "0" and float(waited) < 10 and float(closed_in) < 5, out.stdout
    assert lines["after"] == "[] True", out.stdout  # a take after close: nothing, no error
