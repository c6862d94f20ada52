"""Parallel evaluation on Ray: an eval's episodes sharded over worker processes.

    workcell.eval_policy("arm", n_episodes=200, seed=0, workers=8)            # local Ray
    workcell.eval_policy("arm", n_episodes=2000, workers=64, ray_address="auto")  # a cluster

`eval_policy` / `evaluate_benchmark` come here when `workers` > 1 (workers=1 never
imports Ray). The contract:

- **Workers.** N Ray actors (`EpisodeWorker`, one CPU each), each with its own scene
  rebuilt from the workcell's description (`MujocoScene.description()`: robots, objects
  and cameras as added through the API) and its own policy, built once per worker by an
  `EvalSession`: `policy_load_cache_hit` is true from a worker's second episode on. Ray
  starts a local instance when no address is given (kept for the life of the process:
  the second eval does not pay the start again), whichever thread the first eval ran in
  (`ray_init`).
- **Same seeds, same episodes.** Episode i runs with seed + i, exactly as on the serial
  path, so in sync mode each episode's result (outcome, steps, reward, actions) equals
  the serial run's and the aggregate is built from them in episode order by the same
  `eval_report`. Episodes are handed out one at a time (a slow episode never holds a
  shard back).
- **Traces and bags.** Every episode writes its run directory and bag under trace_dir.
  A worker writes there directly when it sees the driver's marker file in it (the same
  machine, or shared storage); otherwise it writes to a local folder and its run
  directory comes back with the result (a tar in the object store) and is unpacked into
  trace_dir. Either way a scorer cannot tell a parallel eval from a serial one.
- **Progress, stop, failures.** One progress bar / `progress` event per finished
  episode, whichever worker ran it. `stop_policy` or Ctrl-C (KeyboardInterrupt in the
  driver) stops every worker's episode (each ends "stopped" with its trace closed) and
  the report covers the episodes that finished. A worker that dies has its episode
  retried once on a fresh worker; a second death reports that episode as an error.
  `report["parallel"]` says how many episodes of how many completed, and which were
  retried or lost.

What does not cross the process boundary is refused up front (validation.parallel_options):
a live policy_object, observer / on_frame callbacks, reset_between=False. Per-episode
bus events (the trace's) stay in the workers; only progress reaches the driver's bus.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
import logging
import os
import queue
import shutil
import signal
import tarfile
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .control import RolloutControl
    from .episode import EpisodeOutlet
    from .plan import RolloutPlan

_log = logging.getLogger(__name__)

_STOP_GRACE_S = 10.0  # after a stop: how long in-flight episodes get to close their traces
_POLL_S = 0.05
_READY_TIMEOUT_S = 120.0
_LOAD_FIELDS = ("policy_load_time_s", "policy_load_cache_hit", "policy_resident_rss_mb")


def ray_init(address: str | None, workers: int) -> None:
    """Connect to `address`, or start a local Ray instance sized for `workers` (once per process).

    A local instance runs its workers at this process's priority: Ray's default starts them
    15 nicer than the raylet, so on a machine with any other load a parallel eval's episodes
    (and their bag writers) would get less CPU than the serial path or a process pool.
    A cluster's own settings are left as they are.

    A local instance lives as long as this process, whichever thread asked for it. Ray
    starts its processes (GCS, raylet, monitors) with PR_SET_PDEATHSIG=SIGKILL, and Linux
    sends that signal when the *thread* that started them ends: an eval run in a thread
    (a ROS action's, a caller's `threading.Thread`) took the instance down with it when
    it returned, and the next parallel eval's driver ended the whole process (Ray's core
    worker exits after 60 s without its GCS, exit 1 and no Python error). So `ray.init`
    runs in the main thread, or else in one daemon thread kept for the life of the process
    (`_lasting_thread`)."""
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "log_to_driver": False}  # fmt: skip
    if address is None:
        kwargs["num_cpus"] = max(workers, os.cpu_count() or 1)
        kwargs["_system_config"] = {"worker_niceness": 0}
    else:
        kwargs["address"] = address
    if threading.current_thread() is threading.main_thread():
        ray.init(**kwargs)
    else:
        _lasting_thread().call(lambda: ray.init(**kwargs))


class _LastingThread:
    """One daemon thread, never ended before the process, that runs the calls it is given
    (so that the children they start, tied to their starting thread, outlive any caller)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Any, concurrent.futures.Future]] = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, name="robokernel-ray-starter", daemon=True)
        thread.start()

    def _serve(self) -> None:
        while True:
            fn, done = self._calls.get()
            try:
                done.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)

    def call(self, fn: Any) -> Any:
        """fn() run in the lasting thread; its result, or its exception raised here."""
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, done))
        return done.result()


_LASTING: _LastingThread | None = None
_LASTING_LOCK = threading.Lock()


def _lasting_thread() -> _LastingThread:
    global _LASTING
    with _LASTING_LOCK:
        if _LASTING is None:
            _LASTING = _LastingThread()
        return _LASTING


class EpisodeWorker:
    """One Ray worker of a parallel eval (used as a Ray actor; see the module docstring)."""

    def __init__(self, scene_description: Mapping[str, Any], runner_settings: Mapping[str, Any],
                 plan: RolloutPlan, trace_marker: str | None, batch_server: Any = None) -> None:  # fmt: skip
        from robokernel_ros.envs import MujocoScene

        from . import torque
        from .control import RolloutControl
        from .episode import EpisodeOutlet
        from .session import EvalSession

        self.scene = MujocoScene.from_description(dict(scene_description))
        self._held = contextlib.ExitStack()  # the call's torque shims, for the worker's life
        self._held.enter_context(torque.installed(plan, self.scene))
        self.local_trace: Path | None = None
        if plan.trace_dir is not None and not (trace_marker and Path(trace_marker).exists()):
            # Not shared storage: write here, send the run directories back with the results.
            self.local_trace = Path(tempfile.mkdtemp(prefix="robokernel-worker-"))
            plan = dataclasses.replace(plan, trace_dir=self.local_trace)
        if batch_server is not None:  # every episode's inference goes to the shared server
            from robokernel_ros.policies.batching import BatchedPolicy

            name, config, _ = plan.policies[plan.robot]
            proxy = BatchedPolicy(batch_server)
            plan = dataclasses.replace(plan, policies={plan.robot: (name, config, proxy)})
        self.plan = plan
        self.control = RolloutControl(plan.robots, plan.call)
        self.control.state = "running"
        # the worker's episodes publish on a bus of their own: only progress reaches the driver
        self.session = EvalSession(EpisodeOutlet(**runner_settings), plan, self.scene)

    def pid(self) -> int:
        return os.getpid()

    def stop(self, reason: str = "stopped") -> None:
        self.control.stop(reason)

    def estop(self) -> None:
        self.control.estop()

    def run_episode(self, episode: int) -> dict[str, Any]:
        """Episode `episode` of the plan; with a local trace folder, its run directory as a tar."""
        result = self.session.episode(episode, self.control).to_dict()
        if self.local_trace is not None and result.get("run_id"):
            run_dir = self.local_trace / str(result["run_id"])
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(run_dir, arcname=run_dir.name)
            result["_run_dir_tar"] = buffer.getvalue()
        return result

    def close(self) -> None:
        self.session.close()
        self._held.close()
        if self.local_trace is not None:
            shutil.rmtree(self.local_trace, ignore_errors=True)


def _lost_episode(episode: int, seed: int | None, error: str) -> dict[str, Any]:
    """The record of an episode lost with its worker twice: reported, not silently dropped."""
    return {"episode": episode, "seed": seed, "outcome": "error", "success": False,
            "stopped_early": True, "stopped_reason": f"error: worker died: {error}",
            "steps_advanced": 0, "actions_applied": 0, "total_reward": 0.0, "hold_steps": 0,
            "error": f"worker died: {error}", "error_category": "worker", "trace_path": None,
            "run_id": None, "bag_path": None}  # fmt: skip


def _unpack_run_dir(result: dict[str, Any], trace_dir: Path, local_root: str | None) -> None:
    """Unpack a worker's run directory into trace_dir and point the result's paths at it."""
    blob = result.pop("_run_dir_tar", None)
    if blob is None:
        return
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        tar.extractall(trace_dir, filter="data")
    for key in ("trace_path", "bag_path"):
        value = result.get(key)
        if value and local_root and str(value).startswith(local_root):
            result[key] = str(trace_dir / Path(value).relative_to(local_root))


def execute_parallel_eval(outlet: EpisodeOutlet, plan: RolloutPlan, control: RolloutControl,
                          scene: Any) -> dict[str, Any]:  # fmt: skip
    """Run a validated eval plan with plan.workers > 1 Ray workers; the aggregate as on the serial path."""
    from .session import eval_progress

    t_start = time.monotonic()
    ray_init(plan.ray_address, plan.workers)
    run = _ParallelEval(outlet, plan, control, scene)
    progress = eval_progress(plan, outlet.bus)
    try:
        with _interrupt_stops(control):
            run.start()
            t0 = time.monotonic()
            run.loop(progress)
    finally:
        progress.close()
        run.close()
    return run.report(startup_s=t0 - t_start, elapsed_s=time.monotonic() - t0)


class _ParallelEval:
    """The driver's side of one parallel eval: workers, the episode queue, the results."""

    def __init__(
        self, outlet: EpisodeOutlet, plan: RolloutPlan, control: RolloutControl, scene: Any
    ) -> None:
        import ray

        self.plan, self.control = plan, control
        shipped = dataclasses.replace(plan, scene_override=None, observers=[], on_frame=None,
                                      progress=False, workers=1)  # fmt: skip
        settings = {"record_privileged": outlet.record_privileged, "image_every": outlet.image_every,
                    "privileged_every": outlet.privileged_every}  # fmt: skip
        self.marker: Path | None = None
        if plan.trace_dir is not None:  # a worker that sees it shares the driver's storage
            plan.trace_dir.mkdir(parents=True, exist_ok=True)
            self.marker = plan.trace_dir / f".ray-driver-{uuid.uuid4().hex}"
            self.marker.touch()
        self.server = None
        if plan.batch_inference:
            from robokernel_ros.policies.batching import BatchServer

            name, config, _ = plan.policies[plan.robot]
            # No CPU reserved: it runs while the workers wait for it (workers=N fits N CPUs).
            server_class = ray.remote(num_cpus=0, max_concurrency=4 * plan.workers + 4)(BatchServer)
            self.server = server_class.remote(name, config, max_batch=plan.max_batch,
                                              max_wait_ms=plan.max_wait_ms)  # fmt: skip
        actor_class = ray.remote(num_cpus=1, max_concurrency=2)(EpisodeWorker)
        args = (
            scene.description(),
            settings,
            shipped,
            str(self.marker) if self.marker else None,
            self.server,
        )
        self._spawn = lambda: actor_class.remote(*args)  # noqa: E731 - also on every worker death
        self.workers = [self._spawn() for _ in range(plan.workers)]
        self.idle: deque[Any] = deque()
        self.pending = deque(range(plan.n_episodes))
        self.in_flight: dict[Any, tuple[Any, int]] = {}  # ref -> (worker, episode)
        self.results: dict[int, dict[str, Any]] = {}
        self.attempts: dict[int, int] = {}
        self.retried: list[int] = []
        self.lost: list[int] = []
        self.policy_report: dict[str, Any] = {}
        self.batching: dict[str, Any] | None = None
        self.expected = 0  # the episodes in flight the batch server was last told of
        self.stopping = False

    def start(self) -> None:
        """Every worker has built its scene and policy (a failure there is the eval's error)."""
        import ray

        refs = [w.pid.remote() for w in self.workers]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=_READY_TIMEOUT_S)
        if len(ready) < len(refs):
            raise RuntimeError(
                f"workers={self.plan.workers}: only {len(ready)} Ray workers started within "
                f"{_READY_TIMEOUT_S:.0f} s; the Ray cluster has {ray.cluster_resources().get('CPU', 0):.0f} "
                "CPUs (one per worker is needed)"
            )
        ray.get(refs)
        self.idle.extend(self.workers)

    def loop(self, progress: Any) -> None:
        """Hand out episodes one at a time until all are done or the eval is stopped."""
        import ray

        while self.pending or self.in_flight:
            if self.control.stop_requested and not self.stopping:
                self._stop_all()
            while self.pending and self.idle and not self.stopping:
                worker, episode = self.idle.popleft(), self.pending.popleft()
                self.in_flight[worker.run_episode.remote(episode)] = (worker, episode)
            self._expect_callers(len(self.in_flight))
            if not self.in_flight:
                break
            ready, _ = ray.wait(list(self.in_flight), num_returns=1, timeout=_POLL_S)
            for ref in ready:
                self._collect(ref, progress)
        if self.server is not None:  # the server's own figures: batch sizes, queue waits
            self.batching = {**ray.get(self.server.stats.remote()), "max_batch": self.plan.max_batch,
                             "max_wait_ms": self.plan.max_wait_ms}  # fmt: skip

    def _expect_callers(self, callers: int) -> None:
        """Tell the batch server how many episodes can ask it at once: a batch closes as
        soon as all of them wait, not when max_wait_ms runs out (policies.batching)."""
        if self.server is not None and callers and callers != self.expected:
            self.server.expect_callers.remote(callers)
            self.expected = callers

    def _stop_all(self) -> None:
        self.stopping = True
        self.pending.clear()
        for worker, _ in self.in_flight.values():
            if self.control.estopped:
                worker.estop.remote()
            else:
                worker.stop.remote(self.control.stop_reason or "stopped")

    def _collect(self, ref: Any, progress: Any) -> None:
        import ray
        from ray.exceptions import RayActorError

        worker, episode = self.in_flight.pop(ref)
        try:
            result = ray.get(ref)
        except RayActorError as exc:
            self._worker_died(episode, type(exc).__name__)
            return
        if self.plan.trace_dir is not None:
            _unpack_run_dir(result, self.plan.trace_dir, _local_root(result))
        if not self.policy_report:
            self.policy_report = {k: result[k] for k in _LOAD_FIELDS if k in result}
        self.results[episode] = result
        self.control.episode = len(self.results)
        progress.episode_done(episode, success=bool(result.get("success")),
                              steps=int(result.get("steps_advanced") or 0),
                              outcome=str(result.get("outcome")))  # fmt: skip
        if result.get("outcome") == "estopped" and not self.control.stop_requested:
            self.control.stop("estopped")
        self.idle.append(worker)

    def _worker_died(self, episode: int, error: str) -> None:
        """Retry the episode once on a fresh worker; a second death reports it as an error."""
        _log.warning("the worker of episode %d died (%s)", episode, error)
        self.attempts[episode] = self.attempts.get(episode, 0) + 1
        replacement = self._spawn()
        self.workers.append(replacement)
        self.idle.append(replacement)
        if self.attempts[episode] == 1 and not self.stopping:
            self.retried.append(episode)
            self.pending.appendleft(episode)
        else:
            self.lost.append(episode)
            n = self.plan.first_episode + episode  # the session numbers episodes so
            self.results[episode] = _lost_episode(n, (self.plan.seed or 0) + n, error)

    def close(self) -> None:
        import ray

        _shutdown_workers(self.workers, self.in_flight)
        if self.server is not None:
            ray.kill(self.server)
        if self.marker is not None:
            self.marker.unlink(missing_ok=True)

    def report(self, *, startup_s: float, elapsed_s: float) -> dict[str, Any]:
        from .report import eval_report
        from .results import BINDING_FLAGS

        episodes = [self.results[i] for i in sorted(self.results)]
        first = episodes[0] if episodes else {}
        policy_report = dict(self.policy_report)
        for flag in BINDING_FLAGS:
            policy_report[flag] = any(bool(e.get(flag)) for e in episodes)
        out = eval_report(self.plan, self.control, episodes, policy_report,
                          chunk_prefetch=bool(first.get("chunk_prefetch_enabled")),
                          policy_rtc=bool(first.get("policy_rtc_enabled")), elapsed_s=elapsed_s).to_dict()  # fmt: skip
        out["parallel"] = {
            "workers": self.plan.workers,
            "ray_address": self.plan.ray_address,
            "startup_s": startup_s,
            "episodes_requested": self.plan.n_episodes,
            "episodes_completed": sum(1 for e in episodes if e.get("error_category") != "worker"),
            "episodes_retried": sorted(self.retried),
            "episodes_lost": sorted(self.lost),
            "batching": self.batching,
        }
        return out


@contextlib.contextmanager
def _interrupt_stops(control: RolloutControl) -> Iterator[None]:
    """In the main thread, with Python's default SIGINT handler in place, the first Ctrl-C
    stops the eval as stop_policy does (the finished episodes are reported, the running
    ones end "stopped"); a second one raises KeyboardInterrupt."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield  # not ours to handle: the caller installed its own (the CLI's stops the call too)
        return

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, previous)
        control.stop("interrupted")

    previous = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is stop:
            signal.signal(signal.SIGINT, previous)


def _local_root(result: Mapping[str, Any]) -> str | None:
    """The worker-local trace folder a result's paths start with (its run directory's parent)."""
    trace = result.get("trace_path")
    run_id = result.get("run_id")
    if not trace or not run_id:
        return None
    path = Path(trace)
    for parent in (path, *path.parents):
        if parent.name == run_id:
            return str(parent.parent)
    return None


def _shutdown_workers(workers: list[Any], in_flight: Mapping[Any, Any]) -> None:
    """Stop what still runs, give its episodes a moment to close their traces, end the actors."""
    import ray

    for worker, _ in in_flight.values():
        try:
            worker.stop.remote("stopped")
        except Exception:  # noqa: BLE001 - the actor may already be gone
            pass
    if in_flight:
        ray.wait(list(in_flight), num_returns=len(in_flight), timeout=_STOP_GRACE_S)
    closes = []
    for worker in workers:
        try:
            closes.append(worker.close.remote())
        except Exception:  # noqa: BLE001
            pass
    if closes:
        ray.wait(closes, num_returns=len(closes), timeout=5.0)
    for worker in workers:
        ray.kill(worker)
