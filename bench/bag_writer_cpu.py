"""CPU of the bag writer process per event, on the wire stream of a recorded Panda eval.

    python bench/bag_writer_cpu.py [--episodes 3] [--repeats 5]

Records N Panda episodes (eval_policy, mock policy, sync, 500 steps, run directory on,
no bag), builds from their events.jsonl the very frames ProcessBagMirror sends its writer
process (recording.writer_process: open, run_id, one line per event, close), and feeds
them to the child's own loop (`writer_process._serve`) in this process, timed in CPU
seconds (best of the repeats): what one writer process spends beside each episode of a
serial eval, and of each worker of a parallel one (bench/eval_scaling.py). Also printed:
whether ruamel.yaml writes rosbags' metadata.yaml through libyaml (ruamel.yaml.clib).

The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "robokernel_ros"))

from robokernel_ros.recording import writer_process  # noqa: E402
from verdicts import exit_status  # noqa: E402 - bench/verdicts.py, beside this file


def record(root: Path, episodes: int) -> list[Path]:
    from robokernel_ros.rollout import SimWorkcell

    cell = SimWorkcell(trace_dir=root, bag=False)
    cell.add_robot("arm", "panda")
    cell.eval_policy("arm", n_episodes=episodes, max_steps=500, seed=0, progress=False)
    cell.close()
    return sorted(p for p in root.iterdir() if (p / "events.jsonl").is_file())


def wire(run_dirs: list[Path], out: Path) -> tuple[bytes, int]:
    """The frames a ProcessBagMirror sends for these episodes, and their number of events."""
    frame = writer_process.pack_frame
    spec = {"root": str(out), "storage": "mcap", "kwargs": {}}
    buf = bytearray(frame(b"O", json.dumps(spec).encode()))
    n = 0
    for run_dir in run_dirs:
        buf += frame(b"R", run_dir.name.encode())
        for line in (run_dir / "events.jsonl").read_bytes().splitlines(keepends=True):
            buf += frame(b"L", line)
            n += 1
    buf += frame(b"C", b"")
    return bytes(buf), n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 episode, 2 repeats")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.repeats = 1, 2
    import ruamel.yaml.main

    tmp = Path(tempfile.mkdtemp(prefix="bag_writer_cpu-"))
    try:
        run_dirs = record(tmp / "runs", args.episodes)
        best = float("inf")
        for r in range(args.repeats):
            out = tmp / f"out{r}"
            data, n = wire(run_dirs, out)
            reply = io.BytesIO()
            t0 = time.process_time()
            writer_process._serve(io.BufferedReader(io.BytesIO(data)), reply)
            best = min(best, time.process_time() - t0)
            assert len(json.loads(reply.getvalue())["bag_paths"]) == len(run_dirs)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {
        "bench": "bag_writer_cpu",
        "episodes": len(run_dirs),
        "events": n,
        "cpu_us_per_event": 1e6 * best / n,
        "cpu_ms_per_episode": 1e3 * best / len(run_dirs),
        "events_per_cpu_s": n / best,
        "yaml_libyaml": ruamel.yaml.main.CEmitter is not None,
    }
    # metadata.yaml in pure Python was a third of the writer's CPU (requirements/base.txt)
    figures["verdicts"] = {"metadata.yaml through libyaml": figures["yaml_libyaml"]}
    print(f"bag writer process: {figures['cpu_us_per_event']:.1f} us CPU per event, "
          f"{figures['cpu_ms_per_episode']:.1f} ms per 500-step Panda episode "
          f"({n // len(run_dirs)} events), {figures['events_per_cpu_s']:.0f} events per CPU-s; "
          f"metadata.yaml through libyaml: {figures['yaml_libyaml']}")  # fmt: skip
    print(json.dumps(figures))
    return exit_status(figures["verdicts"], "bag_writer_cpu")


if __name__ == "__main__":
    raise SystemExit(main())
