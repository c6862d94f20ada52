"""Shared test setup: one ROS_DOMAIN_ID per test run, and processes that are always cleaned up."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastdds_files import clear_stale_fastdds_ports, fastdds_files, remove_fastdds_segments
from native_stacks import blocked_threads
from robokernel_ros.demo import use_dds_profile
from robokernel_ros.process import die_with_parent
from worker_domains import worker_domain

# Each pytest run gets its own DDS domain, one no participant on this host uses (another
# run, a bench, a demo: robokernel_ros.ros.domain), so they never see each other;
# discovery stays on this host. Under pytest-xdist each worker is a run of its own: it
# takes a domain of its share (worker_domains), whatever it inherited from the controller.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["ROS_DOMAIN_ID"] = str(worker_domain())
os.environ.setdefault("ROS_DOMAIN_ID", str(worker_domain()))
use_dds_profile()  # the workcell's DDS settings (env.sh's rule), for a suite run without it
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A suite started as a non-interactive shell's background job (`make test &`, a CI
# script that backgrounds it) inherits SIGINT and SIGQUIT ignored (POSIX), and so does
# every process a test starts: a CLI that a test interrupts with SIGINT then ran on to
# its end (test_nodes_ros_cli_output hung in every node-folder run started that way),
# and a process that ProcessGroup.close stops with SIGINT is killed 5 s later instead.
# The tests and what they start begin from the default dispositions.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True, scope="module")
def _no_long_collections() -> None:
    """Keep this process's garbage collections short while its tests time other processes.

    This process is the DDS peer of most tests (recorders, publishers, service clients), and
    by the late test modules it holds torch, LeRobot, Ray and MuJoCo: a full collection of
    that heap stalled every thread for 0.6-2 s here, long enough for a best-effort
    subscription to drop a second of 100 Hz joint states. Objects alive when a module
    starts are frozen (never scanned again), after a full collection: garbage frozen with
    them would never be freed (a context or node in a reference cycle, its DDS
    participant still alive).
    """
    gc.collect()  # only what came since the last module's freeze is scanned: short
    gc.freeze()


def _udp_sockets() -> int:
    """How many UDP sockets this process holds open (a DDS participant holds six)."""
    udp: set[str] = set()
    for table in ("udp", "udp6"):
        try:
            rows = Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        udp.update(f"socket:[{row.split()[9]}]" for row in rows)
    held = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            held += os.readlink(fd) in udp
        except OSError:
            pass
    return held


@pytest.fixture(autouse=True, scope="module")
def _no_dds_participant_left_behind() -> Iterator[None]:
    """Fail a test module that leaves a DDS participant alive in this process.

    A participant outlives its test when a node is not fully destroyed (rclpy's
    LifecycleNode keeps its node after destroy_node: ros.lifecycle.release_state_machine)
    or a context is not shut down. Its publishers, subscriptions and services stay
    matched by every process later tests start, under the same names: node tests then
    failed in full runs and never alone (replies that did not come, topics that stayed
    silent). A module's own participants must be gone when it ends.
    """
    before = _udp_sockets()
    yield
    left = _udp_sockets() - before
    if left > 0:
        pytest.fail(
            f"this module left {left} UDP socket(s) open in the test process: a DDS "
            "participant lives on (destroy every node, release a lifecycle node's state "
            "machine, shut every context down)"
        )


class ProcessGroup:
    """Processes a test starts; every one is terminated (then killed) at teardown.

    Before its first process on a DDS domain starts, that domain's stale Fast DDS ports
    are removed (fastdds_files.clear_stale_fastdds_ports). Before a process (and its
    process group) gets a signal from kill() or close(), the Fast DDS shared-memory files
    it has open or mapped are noted; at close, the noted files that no live process holds
    are removed (a SIGKILLed participant cannot clean its own). A file that a live
    process holds is never touched. A test that fails while the group's processes run
    reports their stacks and logs (dump_stacks)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.shm_files: set[str] = set()  # Fast DDS files in /dev/shm these processes held
        self._domains_cleared: set[str] = set()  # the DDS domains of its processes
        _open_groups.append(self)

    def start(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        # faulthandler: a process that ignores SIGINT at close gets SIGABRT first and
        # writes every thread's stack to its log (what it was stuck in)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1", **(env or {})}
        domain = full_env.get("ROS_DOMAIN_ID", "")
        if domain.isdigit() and domain not in self._domains_cleared:
            # whatever domain it runs on (the run's, shared by a worker's tests, or a
            # test's own): no port there left by a process killed earlier
            clear_stale_fastdds_ports(int(domain))
            self._domains_cleared.add(domain)
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        proc.log_path = self.log_dir / f"{name}.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def python(
        self, name: str, module: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        return self.start(name, [sys.executable, "-m", module, *args], env=env)

    def fastdds_files(self, proc: subprocess.Popen) -> set[str]:
        """The Fast DDS files in /dev/shm that `proc` and its process group hold now."""
        return fastdds_files(_group_pids(proc.pid))

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        self.shm_files |= self.fastdds_files(proc)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def log(self, proc: subprocess.Popen) -> str:
        return Path(proc.log_path).read_text(errors="replace")  # type: ignore[attr-defined]

    def dump_stacks(self, lines: int = 80) -> str:
        """Ask every live process that dumps its stacks on SIGUSR1 (a node's main:
        ros.node.run_node) to write them to its log, wait until the logs stop growing,
        and return the last `lines` lines of every process's log: what each was doing
        when a test failed, with its native threads that wait on a mutex
        (native_stacks.blocked_threads). Nothing is stopped."""
        for proc in self.procs:
            if proc.poll() is None and _catches_sigusr1(proc.pid):
                try:
                    os.kill(proc.pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        sizes: list[int] = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # the dumps are written from signal handlers
            now = [_size(proc.log_path) for proc in self.procs]  # type: ignore[attr-defined]
            if now == sizes:
                break
            sizes = now
            time.sleep(0.2)
        parts = []
        for proc in self.procs:
            status = "running" if proc.poll() is None else f"exit {proc.returncode}"
            tail = self.log(proc).splitlines()[-lines:]
            parts.append(f"--- {Path(proc.log_path).name} ({status}, pid {proc.pid}) ---")  # type: ignore[attr-defined]
            parts.extend(tail)
            if proc.poll() is None:  # its DDS threads, which have no Python frames
                parts.append(blocked_threads(proc.pid))
        return "\n".join(parts)

    def close(self) -> None:
        if self in _open_groups:
            _open_groups.remove(self)
        for proc in self.procs:
            if proc.poll() is None:
                self.shm_files |= self.fastdds_files(proc)
                try:
                    os.killpg(proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _abort_then_kill(proc)
        remove_fastdds_segments(self.shm_files)


_open_groups: list[ProcessGroup] = []  # the groups of the test now running (and its module)


def _catches_sigusr1(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGUSR1 (else the signal would end it)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGUSR1 - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails while processes it (or its module) started still run gets their
    stacks and the ends of their logs in its report (ProcessGroup.dump_stacks): a node
    test's failure under load says what each node was doing, not only what the test
    waited for."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call") and _open_groups:
        text = "\n".join(group.dump_stacks() for group in list(_open_groups))
        report.sections.append(("node processes at the failure", text))


def _abort_then_kill(proc: subprocess.Popen) -> None:
    """A process that did not end on SIGINT: SIGABRT (its Python stacks go to its log,
    PYTHONFAULTHANDLER), then SIGKILL for its group."""
    try:
        os.kill(proc.pid, signal.SIGABRT)
        proc.wait(timeout=3)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=5)


def _group_pids(pgid: int) -> set[int]:
    """The live processes of process group `pgid` (a started node and what it started)."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid):  # state, ppid, pgrp
            pids.add(int(stat.parent.name))
    return pids


@pytest.fixture(scope="session", autouse=True)
def _run_domain_ports_cleared() -> None:
    """The run's own domain starts without stale Fast DDS ports (clear_stale_fastdds_ports)."""
    clear_stale_fastdds_ports(int(os.environ["ROS_DOMAIN_ID"]))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ProcessGroup]:
    group = ProcessGroup(tmp_path)
    try:
        yield group
    finally:
        group.close()


@pytest.fixture(scope="module")
def module_processes(tmp_path_factory) -> Iterator[ProcessGroup]:
    """`processes` for a graph a module's tests share (a module-scoped fixture starts it
    once): every process is terminated (then killed) when the module ends."""
    group = ProcessGroup(tmp_path_factory.mktemp("module_processes"))
    try:
        yield group
    finally:
        group.close()


@pytest.fixture(autouse=True)
def _no_realtime_scheduling_left_behind() -> Iterator[None]:
    """A test that leaves this process on a real-time scheduling policy makes every node
    started afterwards real-time too (inherited), which can starve the machine: fail it."""
    yield
    if hasattr(os, "sched_getscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        pytest.fail("the test left the process on a real-time CPU scheduling policy")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (pytest-xdist, `make test`): whole files per worker, long files first, the
    `whole_machine` tests first and alone (xdist_schedule). Another --dist is xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist_schedule import FileScheduling

    return FileScheduling(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell each xdist worker the controller's --dist (a worker's own reads 'no')."""
    node.workerinput["robokernel_dist"] = node.config.getvalue("dist")


def pytest_collection_modifyitems(config, items) -> None:
    """On an xdist worker of `--dist load`, a `whole_machine` test's id ends with
    '@whole_machine': the controller's scheduler sees only ids (xdist's loadgroup does
    the same, through pytest 8's `_nodeid`; pytest 9 keeps the id in `_id`)."""
    if getattr(config, "workerinput", {}).get("robokernel_dist") != "load":
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        if item.get_closest_marker("whole_machine") is not None:
            item._id = coerce_node_id(f"{item.nodeid}@whole_machine")
            if not item.nodeid.endswith("@whole_machine"):  # another pytest: fail, not race
                raise pytest.UsageError(f"{item.nodeid}: cannot mark it whole_machine for xdist")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The run's test order, also under -q (CI's): pytest-randomly shuffles every run, and a
    failure that depends on the order is reproduced with this seed."""
    seed = getattr(config.option, "randomly_seed", None)
    if isinstance(seed, int):
        terminalreporter.write_line(f"test order: -p randomly --randomly-seed={seed}")
