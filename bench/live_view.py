"""Live view cost: the traced SO-101 eval with the Foxglove server on and one client, vs without.

In the same run, interleaved (one pass of each per repeat, best pass reported):
  traced    the anchor: eval_policy(mock) on the SO-101, traced (run directory streamed to
            disk, bag=False), exactly bench/rollout_throughput.py's "eval sync, traced"
  live      the same call with live=PORT (the server, its sender thread and the episode's
            foxglove.mcap, written from the run directory by a pooled child process whose
            CPU time is printed apart) and one client subscribed to every channel: a separate process
            (this script with --client, as the Foxglove app would be) that reads everything
            until the server closes the connection
  floor     the live pass with the view's sender doing nothing (it takes the queue and the
            sampled channels' slots and drops them; no client messages, no MCAP): what the
            bare bus subscription, queue and server cost the loop, the view's floor
Figures: steps per wall second and per CPU second of this process (every thread: the
sender and the SDK's threads count), the ratio live/traced (target >= 0.9x), and loop
stalls: step-to-step intervals of the loop (an observer records each action event's
`wall`) longer than STALL_MS. Stalls attributable to the viewer are the live pass's
stalls beyond the anchor's in the same repeat (floored at 0; the best repeat is the
verdict's, as for the throughput); the view's own queue drops must be 0.

    python bench/live_view.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

from robokernel_ros.rollout import SimWorkcell, envelope_json  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file

STALL_MS = 10.0  # a step of the fast (virtual-time) loop takes ~0.1-0.3 ms: 10 ms is a stall
TOPICS = (
    "/robokernel/joint_states",
    "/robokernel/action",
    "/robokernel/log",
    "/robokernel/progress",
    "/robokernel/scene",
)


def client_main(port: int) -> None:
    """The subscribed client: connect (retrying until the server listens), subscribe to
    the advertised channels, then read every byte until the server closes, parsing the
    frames only afterwards (a client that keeps up at any rate; its CPU is a recv loop).
    Prints "subscribed", then JSON with the message count."""
    from websockets.client import ClientProtocol
    from websockets.frames import Frame, Opcode
    from websockets.uri import parse_uri

    end = time.monotonic() + 60.0
    while True:
        sock = socket.socket()
        try:
            sock.connect(("127.0.0.1", port))
            break
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.02)
    proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/"), subprotocols=["foxglove.sdk.v1"],
                           max_size=None)  # fmt: skip

    def flush() -> None:
        for chunk in proto.data_to_send():
            if chunk:
                sock.sendall(chunk)

    proto.send_request(proto.connect())
    flush()
    channels: set[int] = set()
    while len(channels) < len(TOPICS):  # the handshake, serverInfo, the advertisements
        proto.receive_data(sock.recv(1 << 16))
        for frame in proto.events_received():
            if isinstance(frame, Frame) and frame.opcode is Opcode.TEXT:
                msg = json.loads(frame.data)
                if msg["op"] == "advertise":
                    channels.update(c["id"] for c in msg["channels"] if c["topic"] in TOPICS)
    subs = [{"id": c, "channelId": c} for c in sorted(channels)]
    proto.send_text(json.dumps({"op": "subscribe", "subscriptions": subs}).encode())
    flush()
    print("subscribed", flush=True)
    received = bytearray()
    while data := sock.recv(1 << 20):
        received += data
    proto.receive_data(bytes(received))
    proto.receive_eof()
    count = sum(1 for f in proto.events_received()
                if isinstance(f, Frame) and f.opcode is Opcode.BINARY and f.data[:1] == b"\x01")  # fmt: skip
    print(json.dumps({"received": count, "channels": len(channels)}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _idle_sender(view: Any, batch: list[Any]) -> None:
    """The floor pass's LiveView._handle: counts and drops what it is given (drains answered)."""
    for item in batch:
        if type(item) is tuple:
            if item[0] == "drain":
                item[1].set()
        else:
            view.handled += 1


def one_pass(cell: SimWorkcell, steps: int, episodes: int, live: bool,
             floor: bool = False) -> dict[str, Any]:  # fmt: skip
    walls: list[float] = []
    clock: dict[str, float] = {}
    client: Any = None

    def observer(event: Any) -> None:
        if event.kind == "action":
            walls.append(event.wall)
        elif event.kind == "episode.start" and "wall" not in clock:
            if client is not None:  # the server listens now: wait until the client subscribed
                end = time.monotonic() + 60.0
                while client.stdout.readline().strip() != "subscribed":
                    if time.monotonic() > end:
                        raise RuntimeError("the client never subscribed")
            clock["cpu"], clock["wall"] = time.process_time(), time.perf_counter()
        elif event.kind == "episode.end":
            clock["cpu_end"], clock["wall_end"] = time.process_time(), time.perf_counter()

    kwargs: dict[str, Any] = {}
    if live:
        port = free_port()
        kwargs["live"] = port
        client = subprocess.Popen([sys.executable, __file__, "--client", str(port)],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
    # Timed: the first episode's start (once the client subscribed) to the last one's end.
    from robokernel_ros.live.view import LiveView

    handle = LiveView._handle
    if floor:
        LiveView._handle = _idle_sender
    try:
        out = cell.eval_policy("so101", n_episodes=episodes, max_steps=steps, seed=0, progress=False,
                           bag=False, observer=observer, **kwargs)  # fmt: skip
    finally:
        LiveView._handle = handle
    if out["status"] != "success":
        raise RuntimeError(out["content"][0]["text"])
    wall, cpu = clock["wall_end"] - clock["wall"], clock["cpu_end"] - clock["cpu"]
    report = envelope_json(out)
    result: dict[str, Any] = {"wall": wall, "cpu": cpu, "steps": report["total_steps"]}
    # per-episode intervals (the observer sees every episode; wall restarts at each)
    intervals = [1e3 * (b - a) for a, b in zip(walls, walls[1:], strict=False) if b > a]
    result["stalls"] = sum(1 for x in intervals if x > STALL_MS)
    result["max_step_ms"] = max(intervals) if intervals else 0.0
    if live:
        stats = [e["live"] for e in report["episodes"]]
        result["dropped"] = sum(s["dropped"] for s in stats)
        result["sent"] = sum(s["messages"] for s in stats)
        result["clients_seen"] = max(s["clients_seen"] for s in stats)
        # the episode MCAP's writer: a child process (not in this process's CPU time)
        result["recorder_cpu_s"] = sum(s["recorder_cpu_s"] or 0.0 for s in stats)
        result["coalesced"] = sum(s["coalesced"] for s in stats)
        stdout, _ = client.communicate(timeout=60)
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        result["received"] = lines[-1]["received"] if lines else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--client", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        client_main(args.client)
        return
    steps, episodes, repeats = (200, 2, 3) if args.quick else (500, 3, 5)
    with tempfile.TemporaryDirectory() as runs:
        cell = SimWorkcell(trace_dir=runs)
        cell.add_robot("so101", "so101")
        one_pass(cell, 20, 1, False)  # warm up (imports, caches)
        one_pass(cell, 20, 1, True)
        passes: dict[str, list[dict[str, Any]]] = {"traced": [], "live": [], "floor": []}
        for _ in range(repeats):
            passes["traced"].append(one_pass(cell, steps, episodes, False))
            passes["live"].append(one_pass(cell, steps, episodes, True))
            passes["floor"].append(one_pass(cell, steps, episodes, True, floor=True))
        cell.close()
    best = {k: min(v, key=lambda p: p["wall"]) for k, v in passes.items()}
    sps = {k: p["steps"] / p["wall"] for k, p in best.items()}
    sps_cpu = {k: max(p["steps"] / p["cpu"] for p in v) for k, v in passes.items()}
    median = {k: statistics.median(p["steps"] / p["wall"] for p in v) for k, v in passes.items()}
    ratio = sps["live"] / sps["traced"]
    cpu_ratio = sps_cpu["live"] / sps_cpu["traced"]
    excess = [
        max(0, lv["stalls"] - tr["stalls"])
        for tr, lv in zip(passes["traced"], passes["live"], strict=True)
    ]
    attributable = min(excess)
    dropped = sum(p["dropped"] for p in passes["live"])
    live = best["live"]
    print(f"so101: eval_policy(mock) traced, {episodes} x {steps} steps; best of {repeats} "
          "interleaved passes: steps per wall second, per CPU second [median wall]")  # fmt: skip
    floor_ratio = sps["floor"] / sps["traced"]
    floor_cpu_ratio = sps_cpu["floor"] / sps_cpu["traced"]
    for name in ("traced", "live", "floor"):
        p = best[name]
        extra = ""
        if name == "floor":
            extra = f"  ({floor_ratio:.2f}x traced, CPU {floor_cpu_ratio:.2f}x: the view's floor)"
        if name == "live":
            extra = (f"  ({ratio:.2f}x traced, CPU {cpu_ratio:.2f}x; target >= 0.9x; client got "
                     f"{p['received']} of {p['sent']} messages, queue drops {p['dropped']})")  # fmt: skip
        print(
            f"  {name:7s} {sps[name]:7.0f} wall {sps_cpu[name]:7.0f} cpu [{median[name]:6.0f}]{extra}"
        )
    print(f"  loop stalls (> {STALL_MS:g} ms between steps) per pass: traced "
          f"{[p['stalls'] for p in passes['traced']]}, live {[p['stalls'] for p in passes['live']]}; "
          f"attributable to the viewer (live beyond traced, best pass): {attributable}")  # fmt: skip
    print(
        f"  max step interval: traced {best['traced']['max_step_ms']:.2f} ms, live {live['max_step_ms']:.2f} ms"
    )
    recorder_us = 1e6 * live["recorder_cpu_s"] / live["steps"]
    print(f"  the episode MCAP's writer process (every event, from the run directory): "
          f"{recorder_us:.1f} us CPU per step, on another core (not in the figures above); "
          f"events the loop's side coalesced (sampled channels, plain merges): {live['coalesced']}")  # fmt: skip
    verdicts = {
        "live_ge_0.9x_traced": "pass" if ratio >= 0.9 else "fail",
        "zero_stalls_attributable_to_viewer": "pass" if attributable == 0 else "fail",
        "zero_queue_drops": "pass" if dropped == 0 else "fail",
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps({"bench": "live_view", "quick": args.quick, "steps": steps, "episodes": episodes,
                      "repeats": repeats, "load_avg_1min": load, "cpu_count": os.cpu_count(),
                      "traced_steps_per_s": round(sps["traced"], 1), "live_steps_per_s": round(sps["live"], 1),
                      "traced_steps_per_s_median": round(median["traced"], 1),
                      "live_steps_per_s_median": round(median["live"], 1),
                      "traced_steps_per_cpu_s": round(sps_cpu["traced"], 1),
                      "live_steps_per_cpu_s": round(sps_cpu["live"], 1),
                      "live_vs_traced": round(ratio, 3), "live_vs_traced_cpu": round(cpu_ratio, 3),
                      "floor_vs_traced": round(floor_ratio, 3),
                      "floor_vs_traced_cpu": round(floor_cpu_ratio, 3),
                      "stalls_traced": [p["stalls"] for p in passes["traced"]],
                      "stalls_live": [p["stalls"] for p in passes["live"]],
                      "stalls_attributable": attributable, "queue_drops": dropped,
                      "client_received": live["received"], "messages_sent": live["sent"],
                      "recorder_cpu_us_per_step": round(recorder_us, 1),
                      "verdicts": verdicts}))  # fmt: skip
    return exit_status(verdicts, "live_view")


if __name__ == "__main__":
    sys.exit(main())
