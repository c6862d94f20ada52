"""The workcell across machines: the sim graph split over network namespaces, lossy links.

    sudo python bench/network.py [--quick] [--levels 0,1,5,20] [--cuts 3]

Hosts (bench/netns.py: one network namespace each, veth pairs on a bridge, made by this
run with unique names and always deleted): robot (sim_robot, safety_shield, runner),
inference (policy_server), operator (estop_panel). DDS over UDP only:
config/fastdds_udp.xml (no shared memory, no data sharing; reliable repair timers for a
lossy link), discovery by multicast on the subnet (ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET)
and the hosts' addresses as ROS_STATIC_PEERS. The driver (a WorkcellClient and a monitor
node) runs on the robot host.

Anchor, in the same run: the same graph on one host (every node in one namespace, the
same profile), at no loss. Then, split:

* At 0, 1, 5 and 20 % packet loss (nftables on the bridge: each packet between two hosts
  is dropped with that probability; a host's own loopback is not touched), eval_policy
  episodes: holds per episode (the kernel's hold steps: no chunk in time), the chunk
  round trip p50/p99 (the traces' chunk.merge inference_s: observation out to chunk in,
  over the inference link), and false e-stop latches: the shield latched "e-stop source
  lost" while the operator link was up although the panel did publish throughout
  (a listener on the panel's host records every sample it sent). A latch while the
  panel itself was silent (a process stalled on a loaded machine) is a true silence,
  counted apart as a panel-silent latch.
* The operator link cut mid-episode (`--cuts` times, at no loss): the time from the cut
  to the shield's latch (its ~/state stamp), the episode's outcome, and after the link
  is restored the time until clear_fault succeeds and the shield forwards again.
* The inference link cut mid-episode for 2 s: the episode ends (watchdog) and, restored,
  the next episode runs.

Targets: zero false latches up to 20 % loss; a cut operator link latches within
estop_timeout_s + one control period (0.52 s); holds per episode at 5 % loss within 20 %
of no loss (the split graph's own 0 %, with an absolute slack of 2 holds per episode for
the few episodes of --quick). Ends with one JSON line (figures, verdicts); exits 1 when a
verdict fails or the namespaces cannot be made (as root it must work), 2 on a bad flag.

    python bench/network.py --quick         # 4 episodes per level, 2 cuts (about 4 min)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netns import NetLab, missing_tools  # noqa: E402
from robokernel_ros.demo import NAMESPACE, config_dir, workcell_graph  # noqa: E402
from robokernel_ros.process import die_with_parent, stop_process_groups  # noqa: E402

NS = NAMESPACE
ESTOP_TIMEOUT_S = 0.5  # shield_so101.yaml
CONTROL_PERIOD_S = 0.02  # runner_ros_so101.yaml: 50 Hz
PLACEMENT = {  # node -> host in the split graph
    "sim_robot": "robot",
    "safety_shield": "robot",
    "runner": "robot",
    "policy_server": "inference",
    "estop_panel": "operator",
}
HOLD_SLACK = 2.0  # holds per episode: absolute slack of the 20 % target


def dds_env(peers: list[str]) -> dict[str, str]:
    profile = str(config_dir() / "fastdds_udp.xml")
    old = os.environ.get("ROS_DISTRO", "") in ("humble", "jazzy")  # Fast DDS 2 reads the old name
    return {
        ("FASTRTPS_DEFAULT_PROFILES_FILE" if old else "FASTDDS_DEFAULT_PROFILES_FILE"): profile,
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET",
        "ROS_STATIC_PEERS": ";".join(peers),
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "PYTHONUNBUFFERED": "1",
    }


def node_env(net: NetLab) -> dict[str, str]:
    """This process's environment with the UDP profile in place of any other."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_DEFAULT_PROFILES_FILE")}
    return {**base, **dds_env(list(net.ip.values()))}


# --- the driver (runs on the robot host) --------------------------------------------------


class Driver:
    """A WorkcellClient and a monitor node on the robot host."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from robokernel_ros.ros.client import WorkcellClient
        from robokernel_ros.ros.qos import ESTOP_READER_QOS, STATUS_QOS
        from std_msgs.msg import Bool

        from robokernel_interfaces.msg import ShieldState

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("network_monitor", context=self.context)
        self.states: list[tuple[float, Any]] = []  # (stamp s, ShieldState)
        self.estop_heard: list[float] = []  # received, time.time()
        self.node.create_subscription(
            ShieldState, f"{NS}/safety_shield/state", self._on_state, STATUS_QOS
        )
        self.node.create_subscription(Bool, f"{NS}/estop", self._on_estop, ESTOP_READER_QOS)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self.spin_error: BaseException | None = None
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        self.client = WorkcellClient(NS, server_timeout_s=60.0)
        self._trigger_clients: dict[str, Any] = {}

    def _spin(self) -> None:
        try:
            while not self._stop.is_set():
                self.executor.spin_once(timeout_sec=0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by close()
            self.spin_error = exc

    def _on_state(self, msg: Any) -> None:
        self.states.append((msg.stamp.sec + msg.stamp.nanosec * 1e-9, msg))

    def _on_estop(self, msg: Any) -> None:
        self.estop_heard.append(time.time())

    @property
    def state(self) -> Any:
        return self.states[-1][1] if self.states else None

    def latches(self, since: float) -> list[tuple[float, str]]:
        """(stamp, latched_by) of every transition to latched after `since` (time.time())."""
        out, prev = [], None
        for stamp, s in list(self.states):
            if s.estop_latched and (prev is None or not prev.estop_latched) and stamp >= since:
                out.append((stamp, s.estop_latched_by))
            prev = s
        return out

    def trigger(self, name: str, timeout_s: float = 5.0) -> tuple[bool, str]:
        from std_srvs.srv import Trigger

        client = self._trigger_clients.get(name)
        if client is None:
            client = self._trigger_clients[name] = self.node.create_client(Trigger, name)
        if not client.wait_for_service(timeout_sec=timeout_s):
            return False, "not available"
        done = threading.Event()
        future = client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout_s):
            future.cancel()
            return False, "no answer"
        reply = future.result()
        return bool(reply.success), reply.message

    def clear(self, timeout_s: float = 30.0) -> float | None:
        """clear_fault until the shield forwards; seconds taken, None on timeout."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            s = self.state
            if s is not None and s.state == "active" and not s.estop_latched:
                return time.monotonic() - t0
            if s is not None and s.estop_latched:
                self.trigger(f"{NS}/clear_fault")
            time.sleep(0.1)
        return None

    def close(self) -> list[str]:
        import rclpy

        problems = []
        self.client.close()
        self._stop.set()
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            problems.append("the monitor's spin thread did not stop")
        if self.spin_error is not None:
            problems.append(f"the monitor's spin thread died: {self.spin_error!r}")
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        self.context.destroy()
        return problems


def _chunk_rtts(trace_path: str) -> list[float]:
    from robokernel_ros.kernel import load_trace

    try:
        trace = load_trace(trace_path)
    except Exception:  # noqa: BLE001 - a missing trace gives no round trips
        return []
    return [
        float(e.data["inference_s"])
        for e in trace.of_kind("chunk.merge")
        if "inference_s" in e.data
    ]


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def panel_samples(path: str) -> list[float]:
    """Source times (time.time() s) of every e-stop sample the panel published, as the
    listener on the panel's own host heard them (no network between them)."""
    try:
        return [int(x) / 1e9 for x in Path(path).read_text().split()]
    except (OSError, ValueError):
        return []


def classify(latches: list[tuple[float, str]], panel: list[float]) -> tuple[int, int]:
    """(false latches, panel-silent latches) among "source lost" latches: false when the
    panel did publish through the estop_timeout_s before the latch (no gap of the
    timeout in its own samples, heard on its host), so the network lost them; silent
    when the panel itself did not (a stalled process on a loaded machine): a true
    silence, which the shield must latch on."""
    false = silent = 0
    for stamp, by in latches:
        if "lost" not in by:
            continue
        window = [t for t in panel if stamp - ESTOP_TIMEOUT_S - 0.2 <= t <= stamp]
        gaps = [b - a for a, b in zip(window, window[1:], strict=False)]
        covered = (
            bool(window)
            and window[0] <= stamp - ESTOP_TIMEOUT_S
            and max(gaps or [0]) < ESTOP_TIMEOUT_S
        )
        if covered:
            false += 1
        else:
            silent += 1
    return false, silent


def evals(drv: Driver, episodes: int, max_steps: int, seed: int, listener: str) -> dict[str, Any]:
    """`episodes` episodes (one eval_policy call at a time, re-asked after a refusal),
    with the latches of the shield in the meantime."""
    t0 = time.time()
    eps: list[dict[str, Any]] = []
    refusals: list[str] = []
    deadline = time.monotonic() + 60 + episodes * (max_steps / 50.0 + 20)
    while len(eps) < episodes and time.monotonic() < deadline:
        result = drv.client.eval_policy(
            robot_name="arm", policy_provider="remote", n_episodes=min(2, episodes - len(eps)),
            max_steps=max_steps, seed=seed + len(eps), async_rtc=True,
        )  # fmt: skip
        got = result.report.get("episodes", [])
        eps.extend(got)
        if not got:
            refusals.append(result.message.splitlines()[0] if result.message else result.status)
        if drv.state is not None and drv.state.estop_latched:
            drv.clear()
    rtts = [x for ep in eps for x in _chunk_rtts(str(ep.get("trace_path", "")))]
    holds = [int(ep.get("hold_steps") or 0) for ep in eps]
    latches = drv.latches(t0)
    outcomes: dict[str, int] = {}
    for ep in eps:
        outcomes[str(ep.get("outcome"))] = outcomes.get(str(ep.get("outcome")), 0) + 1
    return {
        "episodes": len(eps), "outcomes": outcomes, "holds": holds,
        "holds_per_episode": round(statistics.mean(holds), 2) if holds else None,
        "chunks": len(rtts),
        "chunk_p50_ms": round(1e3 * _pct(rtts, 50), 2) if rtts else None,
        "chunk_p99_ms": round(1e3 * _pct(rtts, 99), 2) if rtts else None,
        "latches": len(latches), "latched_by": [b for _, b in latches],
        "false_latches": classify(latches, panel_samples(listener))[0],
        "panel_silent_latches": classify(latches, panel_samples(listener))[1],
        "refusals": refusals[:5],
    }  # fmt: skip


def _stepping(drv: Driver, forwarded: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = drv.state
        if s is not None and s.passed + s.clipped > forwarded + 25:
            return True
        time.sleep(0.02)
    return False


def _eval_in_thread(
    drv: Driver, max_steps: int, seed: int
) -> tuple[threading.Thread, dict[str, Any]]:
    """One eval_policy episode on a thread; its outcomes land in the returned dict."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            r = drv.client.eval_policy(robot_name="arm", policy_provider="remote", n_episodes=1,
                                       max_steps=max_steps, seed=seed, async_rtc=True)  # fmt: skip
            result["outcomes"] = [ep.get("outcome") for ep in r.report.get("episodes", [])]
            result["message"] = r.message.splitlines()[0] if r.message else r.status
        except Exception as exc:  # noqa: BLE001 - reported with the cut
            result["error"] = repr(exc)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, result


def cut_operator(drv: Driver, net: NetLab, max_steps: int) -> dict[str, Any]:
    """The operator link cut mid-episode: latch time, outcome, restore time."""
    s = drv.state
    forwarded = s.passed + s.clipped if s else 0
    th, during = _eval_in_thread(drv, max_steps * 4, seed=7)
    if not _stepping(drv, forwarded, 30):
        th.join(120)
        return {"error": f"the episode did not reach the shield ({during})"}
    heard = len(drv.estop_heard)
    t_cut = time.time()
    net.cut("operator")
    deadline = time.monotonic() + 5
    latch = None
    while time.monotonic() < deadline and latch is None:
        found = drv.latches(t_cut - 0.05)
        latch = found[0] if found else None
        time.sleep(0.01)
    last_heard = max([t for t in drv.estop_heard[max(0, heard - 1) :] if t <= t_cut] or [t_cut])
    out: dict[str, Any] = {}
    if latch is None:
        out["error"] = "the shield did not latch within 5 s of the cut"
    else:
        out["latch_after_cut_s"] = round(latch[0] - t_cut, 3)
        out["latch_after_last_sample_s"] = round(latch[0] - last_heard, 3)
        out["latched_by"] = latch[1]
    th.join(60)
    out["episode"] = during.get("outcomes") or during
    t_restore = time.monotonic()
    net.restore("operator")
    cleared = drv.clear(60)
    out["forwarding_again_s"] = round(cleared, 2) if cleared is not None else None
    out["restore_s"] = round(time.monotonic() - t_restore, 2)
    return out


def cut_inference(drv: Driver, net: NetLab, max_steps: int) -> dict[str, Any]:
    """The inference link cut for 2 s mid-episode; then the next episode must run."""
    s = drv.state
    forwarded = s.passed + s.clipped if s else 0
    th, during = _eval_in_thread(drv, max_steps * 3, seed=99)
    _stepping(drv, forwarded, 30)
    net.cut("inference")
    time.sleep(2.0)
    net.restore("inference")
    th.join(120)
    after = drv.client.eval_policy(robot_name="arm", policy_provider="remote", n_episodes=1,
                                   max_steps=max_steps, seed=100, async_rtc=True)  # fmt: skip
    return {
        "during": during.get("outcomes") or during,
        "after": [ep.get("outcome") for ep in after.report.get("episodes", [])],
        "after_ok": bool(after.ok and after.report.get("episodes")),
    }


def role_driver(config: dict[str, Any]) -> int:
    """Runs on the robot host; prints one JSON line."""
    net = NetLab.__new__(NetLab)
    net.__dict__.update(config["net"]) if config.get("net") else None
    drv = Driver()
    out: dict[str, Any] = {"levels": {}, "cuts": [], "errors": []}
    try:
        drv.client.wait_until_ready(120.0)
        for level in config["levels"]:
            if config.get("net"):
                net.set_loss(level)
            out["levels"][str(level)] = evals(
                drv, config["episodes"], config["max_steps"], 10 * level, config["listener"]
            )
            if config.get("net"):
                out["levels"][str(level)]["dropped_packets"] = net.dropped()
        if config.get("net"):
            net.set_loss(0)
            for _ in range(config["cuts"]):
                out["cuts"].append(cut_operator(drv, net, config["max_steps"]))
            out["inference_cut"] = cut_inference(drv, net, config["max_steps"])
    except Exception as exc:  # noqa: BLE001 - the parent reports it as a failed verdict
        out["errors"].append(repr(exc))
    finally:
        out["errors"] += drv.close()
    print("DRIVER " + json.dumps(out), flush=True)
    return 0


# --- the parent: namespaces, graphs, the report ------------------------------------------


def role_listener(path: str) -> int:
    """On the panel's host: append the source time (ns) of every e-stop sample heard."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from robokernel_ros.ros.qos import ESTOP_READER_QOS
    from std_msgs.msg import Bool

    rclpy.init()
    node = rclpy.create_node("estop_listener")
    out = open(path, "a")  # noqa: SIM115 - closed below
    node.create_subscription(
        Bool, f"{NS}/estop",
        lambda _msg, info: out.write(f"{info.get('source_timestamp') or time.time_ns()}\n") or out.flush(),
        ESTOP_READER_QOS,
    )  # fmt: skip
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        out.close()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def start_graph(
    net: NetLab, placement: dict[str, str], trace_dir: Path, log_dir: Path
) -> list[subprocess.Popen]:
    env = node_env(net)
    procs = []
    log_dir.mkdir(parents=True, exist_ok=True)
    listener = [sys.executable, __file__, "--role-listener", str(log_dir / "panel_samples.txt")]
    log = open(log_dir / "estop_listener.log", "w")  # noqa: SIM115 - closed below
    procs.append(subprocess.Popen(net.argv(placement["estop_panel"], listener), stdout=log,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                  preexec_fn=die_with_parent))  # fmt: skip
    log.close()
    for node in workcell_graph(trace_dir=str(trace_dir)):
        log = open(log_dir / f"{node.name}.log", "w")  # noqa: SIM115 - closed below
        procs.append(subprocess.Popen(net.argv(placement.get(node.name, "robot"), node.argv()), stdout=log,
                                      stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                      preexec_fn=die_with_parent))  # fmt: skip
        log.close()
    return procs


def run_graph(
    net: NetLab, placement: dict[str, str], work: Path, config: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    procs = start_graph(net, placement, work / "runs", work / "logs")
    config = {**config, "listener": str(work / "logs" / "panel_samples.txt")}
    env = node_env(net)
    try:
        driver = subprocess.run(
            net.argv("robot", [sys.executable, __file__, "--role-driver", json.dumps(config)]),
            capture_output=True, text=True, env=env, timeout=timeout_s, preexec_fn=die_with_parent,
        )  # fmt: skip
        (work / "driver.log").write_text(driver.stdout + driver.stderr)
        line = next((x for x in driver.stdout.splitlines() if x.startswith("DRIVER ")), None)
        if line is None:
            return {
                "errors": [
                    f"the driver printed no result (exit {driver.returncode}; {work / 'driver.log'})"
                ]
            }
        return json.loads(line[len("DRIVER ") :])
    except subprocess.TimeoutExpired:
        return {"errors": [f"the driver did not finish within {timeout_s:g} s"]}
    finally:
        killed = stop_process_groups(procs)
        if killed:
            print(f"network: {len(killed)} node(s) needed SIGKILL at stop ({work})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes per level, 2 cuts")
    parser.add_argument(
        "--levels", default="0,1,5,20", help="loss levels, %% in [0, 100], comma-separated"
    )
    parser.add_argument(
        "--episodes", type=int, default=None, help="episodes per level (>= 2; default 10, quick 4)"
    )
    parser.add_argument(
        "--cuts", type=int, default=None, help="operator link cuts (>= 1; default 5, quick 2)"
    )
    parser.add_argument(
        "--max-steps", type=int, default=150, help="steps per episode at 50 Hz (>= 20)"
    )
    parser.add_argument("--work-dir", default="", help="traces and logs (default: a new temp dir)")
    parser.add_argument("--role-driver", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--role-listener", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role_driver is not None:
        return role_driver(json.loads(args.role_driver))
    if args.role_listener is not None:
        return role_listener(args.role_listener)
    try:
        levels = [float(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        levels = []
    episodes = args.episodes if args.episodes is not None else (4 if args.quick else 10)
    cuts = args.cuts if args.cuts is not None else (2 if args.quick else 5)
    checks = [
        ("--levels", args.levels, bool(levels) and all(0 <= x <= 100 for x in levels) and 0 in levels,
         "comma-separated percentages in [0, 100], 0 among them"),
        ("--episodes", episodes, episodes >= 2, ">= 2"),
        ("--cuts", cuts, cuts >= 1, ">= 1"),
        ("--max-steps", args.max_steps, args.max_steps >= 20, ">= 20"),
    ]  # fmt: skip
    for flag, value, ok, domain in checks:
        if not ok:
            parser.exit(2, f"network.py: {flag}={value}: must be {domain}\n")
    levels = [int(x) if x == int(x) else x for x in levels]
    missing = missing_tools()
    if missing:
        print(f"network: cannot make network namespaces here: missing {', '.join(missing)}")
        print(
            json.dumps(
                {
                    "bench": "network",
                    "error": f"missing {missing}",
                    "verdicts": {"namespaces": False},
                }
            )
        )
        return 1
    work = (
        Path(args.work_dir).resolve()
        if args.work_dir
        else Path(tempfile.mkdtemp(prefix="rk_network_"))
    )
    work.mkdir(parents=True, exist_ok=True)
    per_level_s = episodes * (args.max_steps / 50.0 + 10) + 60
    config = {"episodes": episodes, "max_steps": args.max_steps, "cuts": cuts}
    t0 = time.monotonic()

    solo = NetLab(["robot"])
    split = NetLab(["robot", "inference", "operator"])
    try:
        solo.up()
        print(
            f"network: one host (namespace {solo.ns['robot']}): {episodes} episodes, no loss",
            flush=True,
        )
        one = run_graph(solo, dict.fromkeys(PLACEMENT, "robot"), work / "one_host",
                        {**config, "levels": [0], "net": None}, per_level_s + 120)  # fmt: skip
        solo.down()
        split.up()
        print(f"network: split over {sorted(split.ns.values())} (subnet {split.subnet}.0/24): loss "
              f"{levels} %, {cuts} operator cuts, one inference cut", flush=True)  # fmt: skip
        net_cfg = {
            k: getattr(split, k)
            for k in ("tag", "switch", "hosts", "ns", "subnet", "ip", "port", "made", "loss")
        }
        spl = run_graph(split, PLACEMENT, work / "split", {**config, "levels": levels, "net": net_cfg},
                        per_level_s * len(levels) + 60 * cuts + 300)  # fmt: skip
    finally:
        left = solo.down() + split.down()
    return report(args, levels, one, spl, left, work, time.monotonic() - t0)


def report(args, levels, one, spl, left, work, took) -> int:  # noqa: ANN001
    rows = [("graph", "loss %", "episodes", "outcomes", "holds/ep", "chunk p50 ms", "chunk p99 ms",
             "false latches", "panel-silent latches", "dropped pkts")]  # fmt: skip
    anchor = one.get("levels", {}).get("0", {})

    def row(name: str, level: Any, r: dict[str, Any]) -> tuple[str, ...]:
        return (name, str(level), str(r.get("episodes")), json.dumps(r.get("outcomes")), str(r.get("holds_per_episode")),
                str(r.get("chunk_p50_ms")), str(r.get("chunk_p99_ms")), str(r.get("false_latches")),
                str(r.get("panel_silent_latches")), str(r.get("dropped_packets", "-")))  # fmt: skip

    rows.append(row("one host (anchor)", 0, anchor))
    for level in levels:
        rows.append(row("split", level, spl.get("levels", {}).get(str(level), {})))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows))
    cuts = spl.get("cuts", [])
    bound = ESTOP_TIMEOUT_S + CONTROL_PERIOD_S
    for i, c in enumerate(cuts):
        print(f"operator cut {i + 1}: {c}")
    print(f"inference cut: {spl.get('inference_cut')}")
    errors = one.get("errors", []) + spl.get("errors", [])
    for e in errors:
        print(f"  ERROR {e}")
    lv = spl.get("levels", {})
    base = lv.get("0", {}).get("holds_per_episode")
    at5 = lv.get("5", {}).get("holds_per_episode")
    latch_times = [c.get("latch_after_cut_s") for c in cuts]
    verdicts = {
        "namespaces_made_and_removed": not left,
        "every_level_ran_its_episodes": all(lv.get(str(x), {}).get("episodes", 0) >= 1 for x in levels)
        and bool(anchor.get("episodes")),
        "zero_false_latches_up_to_20pct": all(lv.get(str(x), {}).get("false_latches", 1) == 0 for x in levels if x <= 20),
        "cut_operator_latches_within_timeout_plus_period": bool(cuts)
        and all(t is not None and t <= bound for t in latch_times),
        "forwarding_again_after_restore": bool(cuts) and all(c.get("forwarding_again_s") is not None for c in cuts),
        "inference_cut_next_episode_runs": bool(spl.get("inference_cut", {}).get("after_ok")),
        "driver_without_errors": not errors,
    }  # fmt: skip
    if 5 in levels:
        verdicts["holds_at_5pct_within_20pct_of_no_loss"] = (
            base is not None and at5 is not None and at5 <= base * 1.2 + HOLD_SLACK
        )
    result = {
        "bench": "network", "quick": args.quick, "levels": levels, "one_host": anchor, "split": lv,
        "operator_cuts": cuts, "latch_bound_s": bound, "inference_cut": spl.get("inference_cut"),
        "errors": errors, "namespaces_left": left, "work_dir": str(work), "seconds": round(took, 1),
        "verdicts": verdicts,
    }  # fmt: skip
    print(json.dumps(result))
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
