"""Fixtures of the node tests: a ROS client in the test process (`ros`), the runner node
with a simulated robot as a process (`sim_runner`), and `peer` for the safety_shield tests
(helpers in shield_harness.py). Every test here runs on a DDS domain of its own
(`_own_domain`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from native_stacks import blocked_threads

rclpy = pytest.importorskip("rclpy")


class RosClient:
    """A node of the test process, spun by a background thread (spun_node.Spinner: a spin
    thread that dies fails the test); `call` waits for an answer. Its clients stay for
    its life (one per service name); subscriptions are made on the spin thread."""

    def __init__(self, name: str = "test_client") -> None:
        from rclpy.executors import SingleThreadedExecutor
        from spun_node import Spinner

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        # One thread: every callback here is a list append or a future's completion. (A
        # MultiThreadedExecutor's pool left a task's exception unretrieved at close.)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = Spinner(self.executor, name)
        self._clients: dict[str, Any] = {}
        self._subscriptions: dict[str, list[Any]] = {}  # topic: what collect() made
        self._closed = False
        _open_clients.append(self)

    def client(self, srv_type: Any, name: str) -> Any:
        if name not in self._clients:
            self._clients[name] = self.spinner.run(lambda: self.node.create_client(srv_type, name))
        return self._clients[name]

    def wait_for(self, srv_type: Any, name: str, timeout_s: float = 30.0) -> bool:
        return self.client(srv_type, name).wait_for_service(timeout_sec=timeout_s)

    def call(self, srv_type: Any, name: str, request: Any = None, timeout_s: float = 60.0) -> Any:
        client = self.client(srv_type, name)
        if not client.wait_for_service(timeout_sec=min(timeout_s, 30.0)):
            self.spinner.check()
            raise TimeoutError(f"service {name} not available")
        done = threading.Event()
        future = client.call_async(request if request is not None else srv_type.Request())
        future.add_done_callback(lambda _f: done.set())
        deadline = time.monotonic() + timeout_s
        while not done.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
            self.spinner.check()  # a dead spin thread answers nothing: fail now
            if time.monotonic() >= deadline:
                future.cancel()
                raise TimeoutError(f"service {name} did not answer within {timeout_s} s")
        return future.result()

    def answered(self, srv_type: Any, name: str, request: Any, timeout_s: float = 60.0) -> Any:
        """Call a harmless request until one is answered: DDS matches a service's response
        path separately from its request path, so a server that wait_for_service sees can
        still drop the first responses to a new client. Returns the answer."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.call(srv_type, name, request, timeout_s=2.0)
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def collect(self, msg_type: Any, topic: str, qos: Any = 100) -> list[Any]:
        received: list[Any] = []
        sub = self.spinner.run(
            lambda: self.node.create_subscription(msg_type, topic, received.append, qos)
        )
        self._subscriptions.setdefault(topic, []).append(sub)
        return received

    def wait_matched(self, topic: str, timeout_s: float = 20.0) -> None:
        """Return once every subscription `collect` made on `topic` has matched a
        publisher (what a publisher sends from then on reaches it): the handshake that
        replaces a sleep after the publisher appears in the graph. AssertionError else."""
        subs = self._subscriptions.get(topic, [])
        assert subs, f"no collect() on {topic}"
        matched = self.wait_until(
            lambda: all(sub.get_publisher_count() >= 1 for sub in subs), timeout_s
        )
        assert matched, f"{topic}: no publisher matched within {timeout_s:g} s"

    def wait_until(self, predicate: Any, timeout_s: float, period_s: float = 0.05) -> bool:
        """Poll `predicate` until true (True) or `timeout_s` (False); AssertionError at
        once when the spin thread died (what the predicate waits for would not come)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return True
            self.spinner.check()
            time.sleep(period_s)
        return bool(predicate())

    def close(self) -> None:
        """Stop the spin thread (checked), destroy the node, shut the context down and
        destroy it; a second call does nothing."""
        from spun_node import close_context

        if self._closed:
            return
        self._closed = True
        if self in _open_clients:
            _open_clients.remove(self)
        try:
            self.spinner.stop()
        finally:
            if not self.spinner.alive:  # else destroying the node races the executor
                close_context(self.node, self.context)

    def graph_view(self) -> str:
        """What this client's participant knows of the graph (a failure's report: a
        service never seen is a discovery problem when its node is missing too)."""
        lines = [
            f"--- {self.node.get_name()} (ROS_DOMAIN_ID {os.environ.get('ROS_DOMAIN_ID')}) ---"
        ]
        try:
            nodes = sorted(
                f"{ns.rstrip('/')}/{n}" for n, ns in self.node.get_node_names_and_namespaces()
            )
            services = sorted(
                name
                for name, _ in self.node.get_service_names_and_types()
                if not name.rsplit("/", 1)[-1].startswith(
                    ("describe_", "get_param", "list_param", "set_param", "get_type")
                )
            )
            lines.append(f"nodes ({len(nodes)}): {', '.join(nodes)}")
            lines.append(
                f"service names, of servers or clients ({len(services)}): {', '.join(services)}"
            )
            for name, client in self._clients.items():
                lines.append(f"client {name}: server ready {client.service_is_ready()}")
        except Exception as exc:  # noqa: BLE001 - a report, whatever the node's state
            lines.append(f"(graph unavailable: {exc!r})")
        return "\n".join(lines)


_open_clients: list[RosClient] = []  # the RosClients now open (the failure report's)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A node test that fails gets the graph as its own ROS clients see it, and this
    process's native threads that wait on a mutex (its clients' DDS threads)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call") and _open_clients:
        text = "\n".join(client.graph_view() for client in list(_open_clients))
        native = blocked_threads(os.getpid())  # gdb, a child, reads this process
        text += f"\n--- this test process's native threads ---\n{native}"
        report.sections.append(("the test's ROS clients' graph at the failure", text))


@pytest.fixture
def ros() -> Iterator[RosClient]:
    client = RosClient()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def shared_ros(shared_domain) -> Iterator[RosClient]:
    """A `ros` client for a module's shared graph, on its `shared_domain`, for the
    module's life (what it collects spans the tests: mark where a test starts)."""
    client = RosClient("shared_test_client")
    try:
        yield client
    finally:
        client.close()


def _start_sim_runner(
    processes: Any,
    trace_dir: Path,
    namespace: str,
    *params: str,
    autostart: bool = True,
    env: dict[str, str] | None = None,
) -> Any:
    args = ["--ros-args", "-r", f"__ns:={namespace}"]
    for item in ("env:=sim", "robot:=so101", "robot_name:=arm", f"trace_dir:={trace_dir}",
                 f"autostart:={str(autostart).lower()}", *params):  # fmt: skip
        args += ["-p", item]
    name = f"runner{namespace.replace('/', '_')}"
    return processes.python(name, "robokernel_ros.nodes.runner", *args, env=env)


@pytest.fixture
def sim_runner(processes, tmp_path) -> Callable[..., tuple[Any, Path]]:
    """Start the runner node as a process: env=sim (the MuJoCo SO-101 in-process) with the
    robot "arm", traces and bags in tmp_path/runs, in `namespace`.

        proc, trace_dir = sim_runner("/rk_runner")
        proc, _ = sim_runner("/rk_lc", "server_ready_timeout_s:=1.0", autostart=False)

    `params` are further `name:=value` parameters. With autostart (the default) the node
    configures and activates itself before it answers any call, so a request that reaches
    it is served by an active runner; without, it waits unconfigured for ~/change_state.
    `env`: variables for the runner's process over this one's (a DDS profile).
    """

    def start(
        namespace: str, *params: str, autostart: bool = True, env: dict[str, str] | None = None
    ) -> tuple[Any, Path]:
        trace_dir = tmp_path / "runs"
        proc = _start_sim_runner(
            processes, trace_dir, namespace, *params, autostart=autostart, env=env
        )
        return proc, trace_dir

    return start


@pytest.fixture(scope="module")
def shared_sim_runner(
    module_processes, shared_domain, tmp_path_factory
) -> Callable[..., tuple[Any, Path]]:
    """`sim_runner` for a runner that a module's tests share (a module-scoped fixture
    starts it once, on the module's `shared_domain`; traces and bags of all its tests in
    one folder: a test tells its own runs by their reports or by what it found before)."""

    def start(namespace: str, *params: str, autostart: bool = True) -> tuple[Any, Path]:
        trace_dir = tmp_path_factory.mktemp("shared_runner") / "runs"
        proc = _start_sim_runner(
            module_processes, trace_dir, namespace, *params, autostart=autostart
        )
        return proc, trace_dir

    return start


@pytest.fixture
def runner_at_rest(shared_ros) -> Callable[[Any, Any, str], None]:
    """runner_at_rest(processes, proc, namespace): a shared runner handed to the test as a
    fresh one would be: alive, answering, no policy running (one a failed test left is
    stopped). Asked by the module's `shared_ros` (discovered once)."""
    return lambda processes, proc, namespace: _runner_at_rest(
        shared_ros, processes, proc, namespace
    )


def _runner_at_rest(ros: RosClient, processes: Any, proc: Any, namespace: str) -> None:
    from robokernel_interfaces.srv import ListPoliciesRunning, RunPolicy, StopPolicy

    assert proc.poll() is None, processes.log(proc)
    assert ros.wait_for(RunPolicy, f"{namespace}/run_policy", 60), processes.log(proc)

    def running() -> list[str]:
        # answered(): a new client's first requests can go unanswered while DDS matches
        # the reply path (RosClient.answered)
        name = f"{namespace}/list_policies_running"
        return list(ros.answered(ListPoliciesRunning, name, ListPoliciesRunning.Request()).robots)

    for robot in running():
        ros.call(StopPolicy, f"{namespace}/stop_policy", StopPolicy.Request(robot_name=robot))
    assert ros.wait_until(lambda: not running(), 30), "a policy still runs after stop_policy"


_recent_domains: list[int] = []  # this process's last test domains: not reused at once
_RUN_DOMAIN = int(os.environ["ROS_DOMAIN_ID"])  # the run's (test/conftest.py)


def _fresh_domain() -> int:
    """A DDS domain no process on this host uses (ros.domain.free_domain_id: not the run's,
    not another run's or a bench's), in this xdist worker's share (worker_domains), and
    none of this process's last eight test domains; its stale Fast DDS ports removed
    (fastdds_files.clear_stale_fastdds_ports)."""
    from fastdds_files import clear_stale_fastdds_ports
    from worker_domains import worker_domain

    start = 1 + (_RUN_DOMAIN + len(_recent_domains) + 1) % 101
    domain = worker_domain(start, exclude=[_RUN_DOMAIN, *_recent_domains[-8:]])
    _recent_domains.append(domain)
    clear_stale_fastdds_ports(domain)
    return domain


@pytest.fixture(scope="module")
def shared_domain() -> Iterator[int]:
    """The DDS domain of a graph that a module's tests share (started once by a
    module-scoped fixture that uses it, with `module_processes`: ROS_DOMAIN_ID is this
    domain while the module's fixtures are made): a test that uses it runs on it
    (`_own_domain`), every other test on a domain of its own.
    Such a graph is put back in its resting state before each test that uses it (the
    fixture's reset), so each test passes alone and in any order."""
    domain = _fresh_domain()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROS_DOMAIN_ID", str(domain))
        yield domain


@pytest.fixture(autouse=True)
def _own_domain(request, monkeypatch) -> int:
    """Every node test on a DDS domain of its own (ROS_DOMAIN_ID for this process's nodes
    made during the test and for the processes it starts): no participant of an earlier
    test (a SIGKILLed shield, runner or panel that discovery still lists until its lease
    runs out, under the same node and topic names) meets it, whatever order the tests
    run in (`_fresh_domain`). A test that uses a module's shared graph runs on that
    graph's `shared_domain`. Autouse fixtures are made first: `ros`, `peer` and
    `processes` see it."""
    if "shared_domain" in request.fixturenames:
        domain = request.getfixturevalue("shared_domain")
    else:
        domain = _fresh_domain()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    return domain


@pytest.fixture
def peer(_own_domain) -> Iterator[Any]:
    """The test process as one real ROS node, in its own rclpy context (shield_harness.Peer),
    on the test's own DDS domain (`_own_domain`)."""
    from shield_harness import Peer

    p = Peer()
    try:
        yield p
    finally:
        p.close()
