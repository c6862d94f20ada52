"""Benchmark of `import-bag` and `export-lerobot --contract` (issue #35), each figure next to
its anchor measured in the same run.

    python bench/import_bag.py [--quick] [--keep DIR]

The bench writes a teleop bag as `ros2 bag record -a` would leave it (rosbags' Writer,
MCAP): follower and leader JointState at 100 Hz, two 640x480 JPEG cameras at 30 Hz, /tf
at 50 Hz, receive stamps 3-15 ms after the header stamps; 10 minutes (`--quick`: 30 s),
as 60 s (`--quick`: 15 s) takes with a 2 s pause between them (the contract splits
episodes at gaps of 1 s). The machine's load average is printed with each phase: on a
shared machine the export and its anchor, minutes each, may run under different loads.

1. import_s: `import_bags` of the whole bag into run directories, against raw_read_s:
   rosbags' AnyReader reading and deserialising every message of the same topics; best
   of 3 of each, interleaved, each in a fresh process (imports not timed).
   Target: import_s <= 2x raw_read_s.
2. export_s: `export_lerobot` of those run directories (frames decoded from the bag,
   LeRobot's writer and video encoder), against lerobot_write_s: LeRobotDataset.create
   with the same features, the same frames (decoded from the bag in one pass) given to
   add_frame, save_episode per episode. Target: export_s <= 1.3x lerobot_write_s.
3. peak memory (max RSS) of each of the four, each measured in its own process, next to
   what importing LeRobot's dataset writer alone takes (torch included).
   Target: import and export under 1 GiB.

The last line is one JSON object with every figure and each target's verdict; exit 1 when
a verdict fails.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))

SO101 = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
BAG_ORDER = ["gripper", "wrist_roll", "shoulder_pan", "elbow_flex", "wrist_flex", "shoulder_lift"]
T0 = 1_700_000_000_000_000_000
CAMERAS = {
    "front": "/front_camera/image_raw/compressed",
    "wrist": "/wrist_camera/image_raw/compressed",
}
CONTRACT = {
    "fps": 30,
    "align": "header",
    "robot": "so101",
    "state": {"topic": "/follower/joint_states", "field": "position", "names": SO101},
    "action": {"topic": "/leader/joint_states", "field": "position", "names": SO101},
    "images": {name: {"topic": topic} for name, topic in CAMERAS.items()},
    "episodes": {"split": "gap", "gap_s": 1.0},
}
IMPORT_TARGET = 2.0
EXPORT_TARGET = 1.3
MEMORY_TARGET_MB = 1024.0


def _jpeg_pool(n: int, seed: int) -> list[np.ndarray]:
    """`n` 640x480 camera-like JPEGs (gradients, shapes and sensor noise; ~40-60 KB)."""
    import cv2

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:480, 0:640]
    out = []
    for i in range(n):
        img = np.stack(
            [(xx * 0.3 + i * 7) % 256, (yy * 0.4 + i * 3) % 256, ((xx + yy) * 0.2 + i) % 256],
            axis=2,
        ).astype(np.float32)
        cv2.circle(img, (100 + 20 * i % 440, 240), 60, (255, 40, 40), -1)
        img += rng.normal(0, 6, img.shape)
        ok, jpg = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8),
                               [cv2.IMWRITE_JPEG_QUALITY, 90])  # fmt: skip
        assert ok
        out.append(jpg.reshape(-1))
    return out


def write_bag(path: Path, minutes: float, take_s: float) -> dict[str, Any]:
    """The teleop bag (see the module docstring): {messages, bytes, seconds}."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    ty = store.types
    rng = np.random.default_rng(0)
    pools = {cam: _jpeg_pool(24, seed=i) for i, cam in enumerate(CAMERAS)}
    started = time.perf_counter()

    def header(ns: int) -> Any:
        return ty["std_msgs/msg/Header"](
            stamp=ty["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
            frame_id="base",
        )

    total_s = minutes * 60.0
    takes: list[tuple[float, float]] = []
    t = 0.0
    while t < total_s - 1e-9:
        takes.append((t, min(t + take_s, total_s)))
        t += take_s + 2.0
    types = {
        "/follower/joint_states": "sensor_msgs/msg/JointState",
        "/leader/joint_states": "sensor_msgs/msg/JointState",
        **{topic: "sensor_msgs/msg/CompressedImage" for topic in CAMERAS.values()},
        "/tf": "tf2_msgs/msg/TFMessage",
    }
    pending: list[tuple[int, int, str, bytes]] = []
    count = 0
    seq = 0
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {
            topic: writer.add_connection(topic, kind, typestore=store)
            for topic, kind in types.items()
        }

        def add(topic: str, ns: int, data: bytes) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(
                pending, (ns + int(rng.integers(3_000_000, 15_000_001)), seq, topic, data)
            )

        def flush(before_ns: int) -> None:
            nonlocal count
            while pending and pending[0][0] < before_ns:
                log, _, topic, data = heapq.heappop(pending)
                writer.write(conns[topic], log, data)
                count += 1

        for start, end in takes:
            for second in range(int(start), int(np.ceil(end))):
                lo, hi = max(start, second), min(end, second + 1)
                for k in range(round((lo - start) * 100), round((hi - start) * 100)):
                    ns = T0 + round((start + k / 100) * 1e9)
                    tt = (ns - T0) / 1e9
                    for topic, lead in (
                        ("/follower/joint_states", 0.0),
                        ("/leader/joint_states", 0.05),
                    ):
                        msg = ty["sensor_msgs/msg/JointState"](
                            header=header(ns),
                            name=BAG_ORDER,
                            position=np.array(
                                [np.sin(0.7 * (tt + lead) + SO101.index(j)) for j in BAG_ORDER]
                            ),
                            velocity=np.zeros(6),
                            effort=np.zeros(6),
                        )
                        add(
                            topic, ns, bytes(store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))
                        )
                    if k % 2 == 0:
                        tf = ty["tf2_msgs/msg/TFMessage"](transforms=[])
                        add("/tf", ns, bytes(store.serialize_cdr(tf, "tf2_msgs/msg/TFMessage")))
                for k in range(int(np.ceil((lo - start) * 30)), int(np.ceil((hi - start) * 30))):
                    ns = T0 + round((start + k / 30) * 1e9)
                    for cam, topic in CAMERAS.items():
                        msg = ty["sensor_msgs/msg/CompressedImage"](
                            header=header(ns), format="jpeg", data=pools[cam][k % len(pools[cam])]
                        )
                        add(
                            topic,
                            ns,
                            bytes(store.serialize_cdr(msg, "sensor_msgs/msg/CompressedImage")),
                        )
                flush(T0 + round(hi * 1e9))
        flush(1 << 63)
    size = sum(f.stat().st_size for f in path.iterdir())
    return {"messages": count, "bag_mb": size / 2**20, "bag_seconds": total_s,
            "takes": len(takes), "write_s": time.perf_counter() - started}  # fmt: skip


# ---------------------------------------------------------------- the measured phases (children)


def phase_raw(bag: Path) -> dict[str, Any]:
    from robokernel_ros.recording import types as T
    from rosbags.highlevel import AnyReader

    topics = {CONTRACT["state"]["topic"], CONTRACT["action"]["topic"], *CAMERAS.values()}
    t0 = time.perf_counter()
    n = 0
    with AnyReader([bag], default_typestore=T.typestore()) as reader:
        conns = [c for c in reader.connections if c.topic in topics]
        for conn, _, raw in reader.messages(connections=conns):
            reader.deserialize(raw, conn.msgtype)
            n += 1
    return {"seconds": time.perf_counter() - t0, "messages": n}


def phase_import(bag: Path, contract: Path, out: Path) -> dict[str, Any]:
    from robokernel_ros.recording.importer import import_bags

    t0 = time.perf_counter()
    results = import_bags([bag], contract, out, progress=False)
    return {
        "seconds": time.perf_counter() - t0,
        "episodes": len(results),
        "frames": sum(r.frames for r in results),
        "dropped": sum(r.dropped_leading for r in results),
    }


def phase_export(runs: Path, root: Path) -> dict[str, Any]:
    from robokernel_ros.cli.export import quiet_libraries
    from robokernel_ros.recording.export import export_lerobot

    t0 = time.perf_counter()
    with quiet_libraries():
        report = export_lerobot([runs], repo_id="bench/import", root=root)
    return {
        "seconds": time.perf_counter() - t0,
        "frames": report.frames,
        "episodes": report.episodes,
    }


def phase_lerobot(runs: Path, root: Path) -> dict[str, Any]:
    """LeRobot's own writer given the same frames: the imported episodes' steps, their
    frames decoded from the bag in one pass over both camera topics."""
    import cv2
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from robokernel_ros.cli.export import quiet_libraries
    from robokernel_ros.kernel.trace import load_trace
    from robokernel_ros.recording import types as T
    from rosbags.highlevel import AnyReader

    t0 = time.perf_counter()
    features = {
        "observation.state": {"dtype": "float32", "shape": (6,), "names": SO101},
        "action": {"dtype": "float32", "shape": (6,), "names": SO101},
        **{f"observation.images.{cam}": {"dtype": "video", "shape": (480, 640, 3),
                                          "names": ["height", "width", "channels"]} for cam in CAMERAS},
    }  # fmt: skip
    frames = 0
    with quiet_libraries():
        dataset = LeRobotDataset.create(
            repo_id="bench/anchor", fps=30, features=features, root=root
        )
        for run in sorted(p for p in runs.iterdir() if p.is_dir()):
            trace = load_trace(run)
            bag = Path(trace.extras["import"]["bag"])
            steps = []
            for e in trace.events:
                if e.kind == "observation":
                    steps.append(e)
            actions = {e.step: e.data["action"] for e in trace.events if e.kind == "action"}
            want = {
                cam: [int(s.data["images"][cam].rsplit("/", 1)[1]) for s in steps]
                for cam in CAMERAS
            }
            lo = min(min(v) for v in want.values())
            hi = max(max(v) for v in want.values())
            needed = {cam: set(v) for cam, v in want.items()}
            by_topic = {topic: cam for cam, topic in CAMERAS.items()}
            cache: dict[tuple[str, int], np.ndarray] = {}
            k = 0
            with AnyReader([bag], default_typestore=T.typestore()) as reader:
                conns = [c for c in reader.connections if c.topic in by_topic]
                for conn, ns, raw in reader.messages(connections=conns, start=lo, stop=hi + 1):
                    cam = by_topic[conn.topic]
                    if ns in needed[cam]:
                        msg = reader.deserialize(raw, conn.msgtype)
                        bgr = cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_COLOR)
                        cache[(cam, ns)] = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                    while k < len(steps) and all((c, want[c][k]) in cache for c in CAMERAS):
                        s = steps[k]
                        frame = {
                            "observation.state": np.array(
                                [s.data["obs"]["joint_positions"][j] for j in SO101], np.float32
                            ),
                            "action": np.array([actions[s.step][j] for j in SO101], np.float32),
                            "task": "",
                            **{f"observation.images.{c}": cache[(c, want[c][k])] for c in CAMERAS},
                        }
                        dataset.add_frame(frame)
                        k += 1
                        frames += 1
                        for c in CAMERAS:  # drop frames no later step holds
                            if k == len(steps) or want[c][k] != want[c][k - 1]:
                                cache.pop((c, want[c][k - 1]), None)
            dataset.save_episode()
        dataset.finalize()
    return {"seconds": time.perf_counter() - t0, "frames": frames}


def phase_floor() -> dict[str, Any]:
    """What importing LeRobot's dataset writer alone costs in memory (torch included)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: F401

    return {"seconds": 0.0}


def _child(argv: list[str]) -> dict[str, Any]:
    """Run one phase in a fresh interpreter: its figures, its peak RSS (MiB) and the
    1-minute load average when it started and ended."""
    load = os.getloadavg()[0]
    out = subprocess.run(
        [sys.executable, __file__, "--phase", *argv], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"phase {argv[0]} failed:\n{out.stderr[-3000:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["load"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    return figures


def _run_phase(args: argparse.Namespace) -> int:
    name, *rest = args.phase
    paths = [Path(p) for p in rest]
    figures = {
        "raw": lambda: phase_raw(paths[0]),
        "import": lambda: phase_import(paths[0], paths[1], paths[2]),
        "export": lambda: phase_export(paths[0], paths[1]),
        "lerobot": lambda: phase_lerobot(paths[0], paths[1]),
        "floor": phase_floor,
    }[name]()
    figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(figures))
    return 0


def _report_import_only(
    args: argparse.Namespace,
    minutes: float,
    made: dict[str, Any],
    raw: dict[str, Any],
    imp: dict[str, Any],
    ratio: float,
) -> int:
    figures = {
        "quick": args.quick,
        "import_only": True,
        "bag_minutes": minutes,
        "bag_mb": made["bag_mb"],
        "bag_messages": made["messages"],
        "raw_read_s": raw["seconds"],
        "import_s": imp["seconds"],
        "import_vs_raw_ratio": ratio,
        "frames": imp["frames"],
        "episodes": imp["episodes"],
        "peak_rss_mb": {"raw_read": raw["peak_rss_mb"], "import": imp["peak_rss_mb"]},
        "load_avg_1min": {"raw_read": raw["load"], "import": imp["load"]},
        "verdicts": {
            f"import_at_most_{IMPORT_TARGET:g}x_raw_read": ratio <= IMPORT_TARGET,
            "import_peak_under_1GiB": imp["peak_rss_mb"] < MEMORY_TARGET_MB,
        },
    }
    print(json.dumps(figures))
    return 0 if all(figures["verdicts"].values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 30-second bag instead of 10 min")
    parser.add_argument(
        "--import-only",
        action="store_true",
        help="measure the import and its anchor only (the export of a 10-minute bag takes "
        "tens of minutes on a 2-core machine)",
    )
    parser.add_argument("--keep", default=None, metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        return _run_phase(args)
    import yaml

    sys.stdout.reconfigure(line_buffering=True)  # each figure as it is measured

    minutes, take_s = (0.5, 15.0) if args.quick else (10.0, 60.0)
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        bag, contract = work / "teleop", work / "contract.yaml"
        contract.write_text(yaml.safe_dump(CONTRACT))
        made = write_bag(bag, minutes, take_s)
        print(f"bag: {minutes:g} min, {made['takes']} takes, {made['messages']} messages, "
              f"{made['bag_mb']:.0f} MiB (written in {made['write_s']:.1f} s)")  # fmt: skip
        # best of 3, interleaved (seconds each; the machine may be shared)
        raws, imps = [], []
        for i in range(3):
            raws.append(_child(["raw", str(bag)]))
            imps.append(_child(["import", str(bag), str(contract), str(work / f"runs{i}")]))
        raw = min(raws, key=lambda f: f["seconds"])
        imp = min(imps, key=lambda f: f["seconds"])
        imp["peak_rss_mb"] = max(f["peak_rss_mb"] for f in imps)
        raw["peak_rss_mb"] = max(f["peak_rss_mb"] for f in raws)
        ratio_import = imp["seconds"] / raw["seconds"]
        print(f"import: {imp['seconds']:.2f} s ({imp['episodes']} run dirs, {imp['frames']} frames, "
              f"{imp['dropped']} dropped before every stream had started), peak {imp['peak_rss_mb']:.0f} MiB; "
              f"raw rosbags read + deserialise {raw['seconds']:.2f} s ({raw['messages']} messages), peak "
              f"{raw['peak_rss_mb']:.0f} MiB -> {ratio_import:.2f}x (target <= {IMPORT_TARGET:g}x)")  # fmt: skip
        if args.import_only:
            return _report_import_only(args, minutes, made, raw, imp, ratio_import)
        anchor = _child(["lerobot", str(work / "runs0"), str(work / "anchor")])
        exp = _child(["export", str(work / "runs0"), str(work / "dataset")])
        ratio_export = exp["seconds"] / anchor["seconds"]
        floor = _child(["floor"])
        print(f"export: {exp['seconds']:.2f} s ({exp['frames']} frames), peak {exp['peak_rss_mb']:.0f} MiB; "
              f"LeRobot's writer given the same frames {anchor['seconds']:.2f} s ({anchor['frames']} frames), "
              f"peak {anchor['peak_rss_mb']:.0f} MiB -> {ratio_export:.2f}x (target <= {EXPORT_TARGET:g}x); "
              f"load average {anchor['load']} during the anchor, {exp['load']} during the export")  # fmt: skip
        print(f"  (importing LeRobot's dataset writer alone: peak {floor['peak_rss_mb']:.0f} MiB)")
    figures = {
        "quick": args.quick,
        "bag_minutes": minutes,
        "bag_mb": made["bag_mb"],
        "bag_messages": made["messages"],
        "raw_read_s": raw["seconds"],
        "import_s": imp["seconds"],
        "import_vs_raw_ratio": ratio_import,
        "frames": imp["frames"],
        "episodes": imp["episodes"],
        "dropped_leading_frames": imp["dropped"],
        "lerobot_write_s": anchor["seconds"],
        "export_s": exp["seconds"],
        "export_vs_lerobot_ratio": ratio_export,
        "peak_rss_mb": {
            "raw_read": raw["peak_rss_mb"],
            "import": imp["peak_rss_mb"],
            "lerobot_write": anchor["peak_rss_mb"],
            "export": exp["peak_rss_mb"],
            "lerobot_import_alone": floor["peak_rss_mb"],
        },
        "load_avg_1min": {
            "raw_read": raw["load"],
            "import": imp["load"],
            "lerobot_write": anchor["load"],
            "export": exp["load"],
        },
    }
    figures["verdicts"] = {
        f"import_at_most_{IMPORT_TARGET:g}x_raw_read": ratio_import <= IMPORT_TARGET,
        f"export_at_most_{EXPORT_TARGET:g}x_lerobot_writer": ratio_export <= EXPORT_TARGET,
        "import_peak_under_1GiB": imp["peak_rss_mb"] < MEMORY_TARGET_MB,
        "export_peak_under_1GiB": exp["peak_rss_mb"] < MEMORY_TARGET_MB,
        "same_frames_exported": exp["frames"] == anchor["frames"] == imp["frames"],
    }
    print(json.dumps(figures))
    return 0 if all(figures["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
