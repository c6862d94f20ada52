"""eval_policy(workers=N) on Ray: parallel equals serial, failures and stops, files that score alike."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from robokernel_ros.kernel.trace import load_trace
from robokernel_ros.rollout import SimWorkcell, envelope_json
from robokernel_ros.rollout.parallel import EpisodeWorker, _local_root, _unpack_run_dir

ray = pytest.importorskip("ray")

# Fields that measure the machine, not the episode (and the paths of the files written).
UNEQUAL = {"elapsed_s", "policy_load_time_s", "policy_load_cache_hit", "policy_resident_rss_mb",
           "avg_inference_ms", "max_inference_ms", "rtc_avg_inference_ms", "rtc_max_inference_ms",
           "trace_path", "run_id", "bag_path"}  # fmt: skip


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    c = SimWorkcell(trace_dir=tmp_path_factory.mktemp("runs"))
    c.add_robot("arm", "so101")
    c.add_object("cube", pos=(0.2, 0.05, 0.03))
    yield c
    c.close()
    ray.shutdown()  # the local Ray instance and its workers end with the module


def actions_of(result):
    return [e.data["action"] for e in load_trace(result["trace_path"]).of_kind("action")]


def ray_worker_pids() -> list[int]:
    """This test process's EpisodeWorker processes (its Ray instance runs below it; another
    session's parallel eval on the same machine has workers of the same name)."""
    parents, workers = {}, []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if b"ray::EpisodeWorker" in (proc / "cmdline").read_bytes():
                workers.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            pass

    def below_me(pid: int) -> bool:
        while pid in parents and pid > 1:
            pid = parents[pid]
            if pid == os.getpid():
                return True
        return False

    return [pid for pid in workers if below_me(pid)]


def test_parallel_episodes_equal_serial_field_by_field(cell):
    kwargs = dict(n_episodes=4, max_steps=40, seed=7, policy_config={"noise": 0.05})
    serial = envelope_json(cell.eval_policy("arm", **kwargs))
    parallel = envelope_json(cell.eval_policy("arm", workers=2, **kwargs))
    assert parallel["parallel"]["workers"] == 2
    assert parallel["parallel"]["episodes_completed"] == 4
    assert [e["episode"] for e in parallel["episodes"]] == [0, 1, 2, 3]
    for a, b in zip(serial["episodes"], parallel["episodes"], strict=True):
        assert {k: v for k, v in a.items() if k not in UNEQUAL} == {
            k: v for k, v in b.items() if k not in UNEQUAL
        }
        assert actions_of(a) == actions_of(b)  # the same commands, step by step
        assert Path(b["bag_path"]).is_dir()  # each worker's episode has its bag too
    # each worker built its policy once: the later episodes of a worker hit its cache
    assert sorted(e["policy_load_cache_hit"] for e in parallel["episodes"]) == [
        False,
        False,
        True,
        True,
    ]
    skip = UNEQUAL | {"episodes", "parallel", "bag_paths", "trace_paths", "run_ids"}
    assert {k: v for k, v in serial.items() if k not in skip} == {
        k: v for k, v in parallel.items() if k not in skip
    }


def episodes_running(trace_dir: Path, before: set[str], n: int) -> bool:
    """`n` run directories begun since `before` have events on disk (an episode's trace is
    flushed within its first half second): that many workers are in an episode."""
    new = [d for d in trace_dir.iterdir() if d.name not in before]
    return (
        sum(
            1 for d in new if (d / "events.jsonl").is_file() and (d / "events.jsonl").stat().st_size
        )
        >= n
    )


def test_a_killed_worker_has_its_episode_retried(cell):
    before = {d.name for d in cell.trace_dir.iterdir()}
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(
            envelope_json(cell.eval_policy("arm", n_episodes=6, max_steps=400, seed=1, workers=2))
        )
    )
    thread.start()
    deadline = time.monotonic() + 240  # the workers' start (torch, MuJoCo) under load
    while not episodes_running(cell.trace_dir, before, 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert episodes_running(cell.trace_dir, before, 2), "the workers run no episode"
    victims = ray_worker_pids()
    assert len(victims) >= 2
    # the local instance's workers run at this process's priority (Ray's default: 15 nicer)
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in victims} == {os.nice(0)}
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert [e["episode"] for e in out["episodes"]] == list(range(6))
    assert len(out["parallel"]["episodes_retried"]) == 1
    assert out["parallel"]["episodes_lost"] == []
    assert out["parallel"]["episodes_completed"] == 6
    assert all(e["outcome"] == "truncated" for e in out["episodes"])


def test_stop_policy_stops_every_worker_and_reports_what_finished(cell):
    before = {d.name for d in cell.trace_dir.iterdir()}
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(
            envelope_json(cell.eval_policy("arm", n_episodes=40, max_steps=2000, workers=2))
        )
    )
    thread.start()
    deadline = time.monotonic() + 240  # the workers' start (torch, MuJoCo) under load
    while not episodes_running(cell.trace_dir, before, 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert episodes_running(cell.trace_dir, before, 2), "the workers run no episode"
    t_stop = time.monotonic()
    cell.stop_policy("arm")
    thread.join(timeout=30)
    assert not thread.is_alive()
    # the stop's own bounds: 10 s for the episodes in flight to close their traces, 5 s for
    # the workers' close (parallel._STOP_GRACE_S; 6.7 s once at load average 40)
    assert time.monotonic() - t_stop < 15.0
    assert out["stopped"] is True
    assert 1 <= out["n_episodes"] < 40
    stopped = [e for e in out["episodes"] if e["outcome"] == "stopped"]
    assert stopped, "the episodes in flight end stopped"
    assert all(e["steps_advanced"] < 2000 for e in stopped), stopped  # cut short, not run out
    for e in stopped:  # closed with an outcome: the trace ends with episode.end
        assert load_trace(e["trace_path"]).events[-1].kind == "episode.end"
    assert envelope_json(cell.list_policies_running())["running"] == []


STOP_IN_A_THREAD_THEN_EVAL = """
import json, os, threading, time
from pathlib import Path
from robokernel_ros.rollout import SimWorkcell, envelope_json

def ray_heads():  # this process's live GCS and raylet (a killed one stays a zombie child)
    alive = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().split(" (", 1)[1].rsplit(")", 1)
        except (OSError, ValueError, IndexError):
            continue
        state, ppid = rest.split()[:2]
        if int(ppid) == os.getpid() and state != "Z" and name in ("gcs_server", "raylet"):
            alive.add(name)
    return sorted(alive)

def running():  # run directories with events on disk: workers in an episode
    return sum(1 for d in cell.trace_dir.iterdir() if (d / "events.jsonl").is_file()
               and (d / "events.jsonl").stat().st_size)

cell = SimWorkcell(trace_dir=%r)
cell.add_robot("arm", "so101")
first = {}
thread = threading.Thread(target=lambda: first.update(
    envelope_json(cell.eval_policy("arm", n_episodes=40, max_steps=2000, workers=2))))
thread.start()
deadline = time.monotonic() + 240  # the workers' start (torch, MuJoCo) under load
while running() < 2:
    assert time.monotonic() < deadline and thread.is_alive(), "the workers run no episode"
    time.sleep(0.05)
cell.stop_policy("arm")
thread.join(60)
assert not thread.is_alive()
deadline = time.monotonic() + 10  # the thread's OS task is gone (join returns a little before)
while Path(f"/proc/self/task/{thread.native_id}").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
heads = ray_heads()
print(json.dumps({"ray_heads_after_thread": heads}), flush=True)
second = envelope_json(cell.eval_policy("arm", n_episodes=2, max_steps=20, seed=0, workers=2))
cell.close()
print(json.dumps({"first_stopped": first["stopped"], "first_n": first["n_episodes"],
                  "second": second["parallel"], "status": second.get("status"),
                  "outcomes": [e["outcome"] for e in second["episodes"]]}), flush=True)
"""


@pytest.mark.timeout(600)  # a Ray instance and two evals of its own, under load
def test_a_parallel_eval_stopped_in_a_thread_leaves_ray_usable_for_the_next(tmp_path):
    """The local Ray instance was started by the eval's thread, which has ended: the next
    parallel eval of the same process still runs (Ray's processes followed the thread that
    started them, and the next eval's driver ended the process, exit 1 without output)."""
    proc = subprocess.run([sys.executable, "-c", STOP_IN_A_THREAD_THEN_EVAL % str(tmp_path)],
                          capture_output=True, text=True, timeout=420)  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {proc.returncode}, no report; stderr: {proc.stderr[-2000:]}"
    assert lines[0]["ray_heads_after_thread"] == ["gcs_server", "raylet"], lines[0]
    assert proc.returncode == 0 and len(lines) == 2, (
        f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    )
    report = lines[1]
    assert report["first_stopped"] is True and 1 <= report["first_n"] < 40, report
    assert report["second"]["episodes_completed"] == 2, report
    assert report["second"]["workers"] == 2 and report["second"]["episodes_lost"] == []
    assert report["outcomes"] == ["truncated", "truncated"], report


def test_a_worker_without_shared_storage_sends_its_run_directory_back(cell, tmp_path):
    from robokernel_ros.rollout import plan_eval

    plan = plan_eval("arm", robots=cell.scene.robots(), n_episodes=2, max_steps=20, seed=3,
                     trace_dir=tmp_path / "driver")  # fmt: skip
    settings = {"record_privileged": True, "privileged_every": 10}
    worker = EpisodeWorker(cell.scene.description(), settings, plan, trace_marker=None)
    try:
        result = worker.run_episode(1)
    finally:
        worker.close()
    assert not str(result["trace_path"]).startswith(str(tmp_path))  # written in the worker's folder
    _unpack_run_dir(result, tmp_path / "driver", _local_root(result))
    assert "_run_dir_tar" not in result
    assert str(result["trace_path"]).startswith(str(tmp_path / "driver"))
    trace = load_trace(result["trace_path"])
    assert trace.of_kind("episode.end") and len(trace.of_kind("action")) == 20


REFUSALS = """
import json, sys
from robokernel_ros.rollout import SimWorkcell
from robokernel_ros.policies.mock import MockPolicy
cell = SimWorkcell(trace_dir=None)
cell.add_robot("arm", "so101")
out = []
for kwargs in ({"workers": 0}, {"workers": "2"}, {"workers": 2, "batch_inference": "yes"},
               {"workers": 2, "policy_object": MockPolicy()}, {"workers": 2, "reset_between": False},
               {"workers": 2, "ray_address": ""}, {"workers": 2, "observer": print}):
    r = cell.eval_policy("arm", n_episodes=2, max_steps=5, **kwargs)
    out.append([r["status"], r["content"][0]["text"]])
print(json.dumps({"answers": out, "ray_imported": "ray" in sys.modules}))
"""


def test_refused_parallel_parameters_start_no_ray():
    proc = subprocess.run(
        [sys.executable, "-c", REFUSALS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ray_imported"] is False
    names = ["workers=0", "workers='2'", "batch_inference='yes'", "policy_object=", "reset_between=False",
             "ray_address=''", "observer"]  # fmt: skip
    for (status, text), name in zip(report["answers"], names, strict=True):
        assert status == "error" and text.startswith(name), text


CTRL_C = """
import json, signal
# Ctrl-C as a terminal's Python gets it: a test run started in the background (`make test &`)
# hands its children SIGINT ignored, and an eval leaves an ignored SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
from robokernel_ros.rollout import SimWorkcell, envelope_json
cell = SimWorkcell(trace_dir=%r)
cell.add_robot("arm", "so101")
cell.bus.subscribe(lambda e: print("progress", flush=True), "progress")
out = envelope_json(cell.eval_policy("arm", n_episodes=40, max_steps=2000, workers=2))
print(json.dumps({"stopped": out["stopped"], "outcomes": [e["outcome"] for e in out["episodes"]]}), flush=True)
"""


def test_ctrl_c_stops_the_workers_and_returns_the_report(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C % str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    try:
        for line in proc.stdout:
            if line.startswith("progress"):
                break
        t_interrupt = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
        rest = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    report = json.loads(rest.strip().splitlines()[-1])
    assert report["stopped"] is True, report
    # the episodes that ran end as they should: finished, or closed "stopped" by the interrupt
    assert set(report["outcomes"]) <= {"truncated", "stopped"}, report
    assert len(report["outcomes"]) < 40
    assert time.monotonic() - t_interrupt < 15.0  # the stop itself, plus Ray's shutdown at exit


def test_the_torque_shim_runs_in_every_worker(tmp_path):
    cell = SimWorkcell(trace_dir=tmp_path)
    try:
        cell.add_robot("dog", "go2")
        kwargs = dict(n_episodes=2, max_steps=60, seed=0, wbc_install_torque_control=True)
        serial = envelope_json(cell.eval_policy("dog", **kwargs))
        parallel = envelope_json(cell.eval_policy("dog", workers=2, **kwargs))
    finally:
        cell.close()
    assert parallel["wbc_install_torque_control"] is True
    for a, b in zip(serial["episodes"], parallel["episodes"], strict=True):
        assert actions_of(a) == actions_of(b)
        assert load_trace(b["trace_path"]).of_kind("episode.start")[0].data["torque_shim"]
        assert a["total_reward"] == b["total_reward"] and a["steps_advanced"] == b["steps_advanced"]
