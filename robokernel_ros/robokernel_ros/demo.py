"""`make demo`: the simulated workcell over ROS 2, evaluated end to end, then shut down.

    python -m robokernel_ros.demo [--episodes 3] [--trace-dir runs/demo] [--max-steps 300]

1. Starts the graph of `launch/sim_workcell.launch.py` as processes, from the same
   config files, on a private ROS_DOMAIN_ID. The robot is described by one topic
   contract (config/contract_so101_arm_gripper.yaml): an SO-101 whose arm and gripper
   are two controllers. sim_robot (MuJoCo SO-101 standing in for ros2_control, serving
   the contract's two controllers), one safety_shield per controller (safety_shield
   for the arm, gripper_shield for the gripper: limits, watchdog, latched e-stop),
   one estop_panel that both shields and the runner hear, policy_server (the scripted
   reaching policy) and runner (env=ros, contract_file: /joint_states in, each
   controller's command to its shield). The lifecycle nodes (shields, policy_server,
   runner) bring themselves up (`autostart: true` in their config files); the demo
   waits until the policy server and the runner say they are active (their
   ~/get_state) and both shields' ~/state say they forward.
2. Calls the runner's `eval_policy` service: the `remote` provider asks the policy
   server for chunks over ROS, the kernel runs in realtime mode (the robot keeps
   moving while the next chunk is computed), the shield gates every command.
3. Prints one row per episode (success, steps, holds, interventions of the kernel's
   shield, chunk round-trip latency) and each shield node's counters, with the run
   directories and bags written.
4. Stops every process (SIGINT, then SIGKILL after a grace period) and checks none is
   left.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.process import die_with_parent, stop_process_groups
from robokernel_ros.ros.launch_steps import DDS_PROFILE_VARS as DDS_PROFILE_VARS
from robokernel_ros.ros.launch_steps import dds_environment

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # robokernel_ros/ (setup.py, config/, launch/)
CONFIG_DIR = PACKAGE_DIR / "config"
NAMESPACE = "/robokernel"
SO101_JOINTS = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
#: the workcell's robot: an SO-101 whose arm and gripper are two controllers
CONTRACT = "contract_so101_arm_gripper.yaml"
#: one safety_shield node per command of the contract, in its order
SHIELDS = ("safety_shield", "gripper_shield")


def config_dir() -> Path:
    """The config folder: the source tree's, else the installed share folder."""
    if CONFIG_DIR.is_dir():
        return CONFIG_DIR
    from ament_index_python.packages import get_package_share_directory

    return Path(get_package_share_directory("robokernel_ros")) / "config"


def use_dds_profile(environ: dict[str, str] | Any = os.environ) -> None:
    """Give this process (and the nodes it starts) the workcell's DDS settings unless the
    user chose theirs: config/fastdds_localhost.xml (UDP loopback, no shared memory) with
    ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT (the launch files' rule:
    ros.launch_steps.dds_environment)."""
    environ.update(dds_environment(environ, str(config_dir())))


@dataclass
class NodeProcess:
    """One node of the workcell graph, as `launch/*.launch.py` declares it."""

    name: str
    executable: str  # the console script (setup.py) the launch file names
    params_files: list[str]  # file names in config/
    params: dict[str, str] = field(default_factory=dict)
    remaps: list[tuple[str, str]] = field(default_factory=list)

    @property
    def module(self) -> str:
        return f"robokernel_ros.nodes.{self.executable}"

    def argv(self, namespace: str = NAMESPACE, config: Path | None = None) -> list[str]:
        config = config or config_dir()
        args = [sys.executable, "-m", self.module, "--ros-args", "-r", f"__ns:={namespace}",
                "-r", f"__node:={self.name}"]  # fmt: skip
        for name in self.params_files:
            args += ["--params-file", str(config / name)]
        for key, value in self.params.items():
            args += ["-p", f"{key}:={value}"]
        for src, dst in self.remaps:
            args += ["-r", f"{src}:={dst}"]
        return args


def workcell_graph(
    *,
    trace_dir: str,
    sim: bool = True,
    policy_params: str = "policy_server_scripted_so101.yaml",
    sim_operator: bool = False,
) -> list[NodeProcess]:
    """The nodes of sim_workcell.launch.py (sim=True) or workcell.launch.py (sim=False):
    the contract's two controllers (arm, gripper), a shield in front of each, one panel;
    with sim_operator (sim_workcell.launch.py's sim_operator:=true) the simulated
    operator too."""
    config = config_dir()
    limits = str(config / "joint_limits_so101.yaml")
    contract = str(config / CONTRACT)
    nodes = [
        NodeProcess(
            "safety_shield", "safety_shield", ["shield_so101_arm.yaml"],
            {"limits_file": limits},  # its e-stop: <ns>/estop, the shield's default
        ),
        NodeProcess(
            "gripper_shield", "safety_shield", ["shield_so101_gripper.yaml"],
            {"limits_file": limits},  # its e-stop: <ns>/estop, the shield's default
        ),
        NodeProcess("estop_panel", "estop_panel", ["estop_panel.yaml"]),  # <ns>/estop
        NodeProcess("policy_server", "policy_server", [policy_params]),
        NodeProcess(
            "runner", "runner", ["runner_ros_so101.yaml"],
            {"trace_dir": trace_dir, "limits_file": limits, "contract_file": contract,
             "shields": "[" + ",".join(SHIELDS) + "]"},
        ),
    ]  # fmt: skip
    if sim:
        nodes.insert(
            0,
            NodeProcess(
                "sim_robot", "sim_robot", ["workcell_sim_robot_so101.yaml"],
                {"contract_file": contract},
            ),
        )  # fmt: skip
    if sim_operator:
        nodes.append(
            NodeProcess("sim_operator", "sim_operator", ["sim_operator_so101.yaml"],
                        {"contract_file": contract}),
        )  # fmt: skip
    return nodes


def start_graph(
    nodes: list[NodeProcess], log_dir: Path, env: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for node in nodes:
        log = open(log_dir / f"{node.name}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(
            subprocess.Popen(
                node.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        )  # fmt: skip
    return procs


def _chunk_latencies(trace_path: str | None) -> list[float]:
    """Round-trip seconds of every chunk of an episode (chunk.merge events of its trace)."""
    if not trace_path:
        return []
    path = Path(trace_path) / "events.jsonl"
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("kind") == "chunk.merge" and "inference_s" in event.get("data", {}):
                out.append(float(event["data"]["inference_s"]))
    return out


def _table(report: dict[str, Any]) -> str:
    rows = [("ep", "success", "outcome", "steps", "holds", "kernel_shield", "chunks", "chunk_p50_ms",
             "chunk_max_ms", "bag")]  # fmt: skip
    for ep in report.get("episodes", []):
        lat = _chunk_latencies(ep.get("trace_path"))
        rows.append((
            str(ep.get("episode")), str(ep.get("success")), str(ep.get("outcome")), str(ep.get("steps_advanced")),
            str(ep.get("hold_steps")), str(ep.get("safety_interventions")), str(len(lat)),
            f"{1e3 * statistics.median(lat):.2f}" if lat else "-", f"{1e3 * max(lat):.2f}" if lat else "-",
            "yes" if ep.get("bag_path") and Path(ep["bag_path"]).is_dir() else "no",
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=300, help="steps per episode at 50 Hz")
    parser.add_argument("--trace-dir", default="runs/demo")
    args = parser.parse_args(argv)

    os.environ["ROS_DOMAIN_ID"] = os.environ.get("ROS_DOMAIN_ID") or str(1 + os.getpid() % 100)
    use_dds_profile()
    trace_dir = Path(args.trace_dir).resolve()
    log_dir = trace_dir / "logs"
    t0 = time.monotonic()
    print(f"demo: ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']}, traces and bags in {trace_dir}")
    procs = start_graph(workcell_graph(trace_dir=str(trace_dir)), log_dir)
    status = 1
    try:
        status = _evaluate(args, log_dir)
    finally:
        killed = stop_process_groups(procs)
        left = [p.pid for p in procs if p.poll() is None]
        print(f"demo: {len(procs)} processes stopped"
              + (f" ({len(killed)} needed SIGKILL)" if killed else " cleanly")
              + (f"; STILL RUNNING: {left}" if left else "")
              + f"; total {time.monotonic() - t0:.1f} s")  # fmt: skip
        if left or killed:
            status = status or 1
    return status


def _evaluate(args: argparse.Namespace, log_dir: Path) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from robokernel_interfaces.msg import ShieldState
    from robokernel_interfaces.srv import EvalPolicy
    from robokernel_ros.ros.lifecycle import wait_active
    from robokernel_ros.ros.qos import STATUS_QOS

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("robokernel_demo", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        states: dict[str, list[Any]] = {name: [] for name in SHIELDS}
        for name, received in states.items():
            node.create_subscription(
                ShieldState, f"{NAMESPACE}/{name}/state", received.append, STATUS_QOS
            )
        client = node.create_client(EvalPolicy, f"{NAMESPACE}/eval_policy")
        # The graph is up when its lifecycle nodes say so: the policy server once its
        # policy is loaded and served, the runner once its robot binding is (autostart).
        try:
            for name in ("policy_server", "runner"):
                wait_active(node, f"{NAMESPACE}/{name}", timeout_s=60)
        except RuntimeError as exc:
            print(f"demo: {exc} (logs in {log_dir})", file=sys.stderr)
            return 1
        if not client.wait_for_service(timeout_sec=60):
            print(f"demo: the runner did not come up (logs in {log_dir})", file=sys.stderr)
            return 1
        deadline = time.monotonic() + 60  # the shields forward once the panel is live
        for name, shield_state in states.items():
            while not (shield_state and shield_state[-1].state == "active"):
                if time.monotonic() > deadline:
                    why = shield_state[-1].reason if shield_state else "no state"
                    print(f"demo: {name} is not active ({why}; logs in {log_dir})", file=sys.stderr)
                    return 1
                time.sleep(0.05)
        config = json.loads(_policy_config())
        final = config["targets"][-1]
        request = EvalPolicy.Request(
            robot_name="arm", policy_provider="remote", n_episodes=args.episodes, max_steps=args.max_steps,
            seed=0, async_rtc=True, instruction="reach the three waypoints in order",
        )  # fmt: skip
        request.extra_json = json.dumps(
            {
                "success": {
                    "predicate": "joint_near_target",
                    "targets": final,
                    "tolerance": config["tolerance"],
                }
            }
        )
        print(f"demo: eval_policy over ROS: scripted policy on the policy_server, {args.episodes} episodes, "
              "realtime (async_rtc), 50 Hz")  # fmt: skip
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(args.episodes * (args.max_steps / 50.0 + 15) + 30):
            print("demo: eval_policy did not answer in time", file=sys.stderr)
            return 1
        response = future.result()
        report = json.loads(response.report_json or "{}")
        print(_table(report))
        for name, shield_state in states.items():
            if shield_state:
                s = shield_state[-1]
                print(f"{name} node: state={s.state} passed={s.passed} clipped={s.clipped} "
                      f"refused={s.refused} held={s.held} timeouts={s.timeouts}")  # fmt: skip
        print(
            f"success_rate={report.get('success_rate')}  ok={response.ok}  {response.message.splitlines()[0]}"
        )
        return 0 if response.ok and report.get("success_rate", 0) > 0 else 1
    finally:
        stop.set()
        thread.join(timeout=5)
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def _policy_config() -> str:
    import yaml

    data = yaml.safe_load((config_dir() / "policy_server_scripted_so101.yaml").read_text())
    return data["/**"]["ros__parameters"]["policy_config_json"]


if __name__ == "__main__":
    sys.exit(main())
