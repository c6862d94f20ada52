"""How `pytest -n 2` (pytest-xdist, `make test`) hands the suite to its workers.

- A test file is one unit of work, run whole by one worker: the node tests' module-scoped
  graphs (nodes/conftest.py) start once, as in a serial run, not once per worker.
- The longest files go first (`LONG_FILES`, seconds measured in a serial run), so the run
  does not end with one worker on a long file while the other idles; the others follow
  in the run's random order (pytest-randomly, the same seed on every worker).
- Tests marked `whole_machine` (they load both cores themselves, or need them quiet: the
  chaos soak, the lossy network, the handshake under two CPU burners) are one unit that
  runs first, on one worker, while the other workers wait: no other test shares the
  machine with them, as in a serial run. (First, not last: a worker keeps its last test
  until it is sent the next one or told to stop, pytest's `nextitem`, so a scheduler
  cannot tell a worker that is running its last test from one that waits; it can tell
  when every whole-machine test has reported.)

Outside xdist (no `-n`) none of this applies: the suite runs in one process as before.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler.loadscope import LoadScopeScheduling

WHOLE_MACHINE = "whole_machine"  # the marker, and the nodeid suffix a worker adds for it

# Files whose tests take longest (seconds: the sum of their tests' --durations in a run of
# test/nodes under -n 2 at load 10-15, and the serial full runs' for the other folders),
# longest first; a file not named here counts as short and keeps its random place.
LONG_FILES = {
    "nodes/test_nodes_workcell_by_hand.py": 99,
    "nodes/test_nodes_lifecycle.py": 79,
    "nodes/test_nodes_policy_server.py": 66,
    "nodes/test_nodes_takeover.py": 50,
    "nodes/test_nodes_contract_workcell.py": 43,
    "nodes/test_nodes_reset_interrupt.py": 43,
    "nodes/test_nodes_shield_estop_source.py": 41,
    "nodes/test_nodes_shield_faults.py": 40,
    "nodes/test_nodes_served.py": 38,
    "nodes/test_nodes_workcell.py": 37,
    "nodes/test_nodes_runner_actions.py": 35,
    "nodes/test_nodes_runner.py": 31,
    "nodes/test_nodes_contract_recorder.py": 28,
    "nodes/test_nodes_contract_trajectory.py": 27,
    "rollout/test_rollout_parallel.py": 25,
    "policies/test_policies_lerobot_async.py": 20,
    "nodes/test_nodes_shield_sim_robot.py": 20,
    "policies/test_policies_batching.py": 18,
    "policies/test_policies_lerobot_dagger.py": 15,
}


def _weight(scope: str) -> int:
    return next((s for name, s in LONG_FILES.items() if scope.endswith(name)), 0)


class FileScheduling(LoadScopeScheduling):
    """xdist's `loadscope` with files as scopes, long files first, `whole_machine` first
    and alone (see the module docstring)."""

    _solo_node = None  # the worker that took the whole-machine unit

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.endswith("@" + WHOLE_MACHINE):
            return WHOLE_MACHINE
        return nodeid.split("::", 1)[0]

    def _solo_running(self) -> bool:
        """Whether a whole-machine test is yet to report (queued or on its worker)."""
        if WHOLE_MACHINE in self.workqueue:
            return True
        work = self.assigned_work.get(self._solo_node, {}).get(WHOLE_MACHINE, {})
        return not all(work.values())

    def _assign_work_unit(self, node) -> None:
        if self.workqueue and next(iter(self.workqueue)) == WHOLE_MACHINE:
            self._solo_node = node
        elif self._solo_running() and node is not self._solo_node:
            return  # waits until every whole-machine test has reported
        super()._assign_work_unit(node)

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        solo = self._solo_node is not None and self._solo_running()
        super().mark_test_complete(node, item_index, duration)
        if solo and not self._solo_running():  # the waiting workers start now
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)

    def remove_node(self, node) -> str | None:
        crashed = super().remove_node(node)  # a crashed worker's tests go back in the queue
        if WHOLE_MACHINE in self.workqueue:  # taken next, by whichever worker asks first
            self.workqueue.move_to_end(WHOLE_MACHINE, last=False)
        return crashed

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # the initial distribution happened: top up
            for node in self.nodes:
                self._reschedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: OrderedDict[str, dict[str, bool]] = OrderedDict()
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        order = sorted(units, key=lambda s: (s != WHOLE_MACHINE, -_weight(s)))  # stable
        for scope in order:
            self.workqueue[scope] = units[scope]
        extra_nodes = len(self.nodes) - len(self.workqueue)
        for _ in range(max(0, extra_nodes)):
            unused_node, _assigned = self.assigned_work.popitem()
            unused_node.shutdown()
        for node in self.nodes:
            if self.workqueue:
                self._assign_work_unit(node)
        for node in self.nodes:
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()
