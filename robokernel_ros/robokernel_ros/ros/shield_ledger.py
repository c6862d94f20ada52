"""What the safety shield(s) did with the runner's own commands, episode by episode.

    ledger = ShieldLedger(node, [ShieldLink("safety_shield", "safety_shield/state",
                                            "safety_shield/commands", lambda: env.commands_sent)])
    ledger.check_ready()            # Refused unless every shield says it forwards
    ledger.begin()                  # an episode starts (its reset's commands count too)
    ledger.check(estop)             # ShieldRefusal once a shield refused one of its commands
                                    # (an e-stop's refusal latches `estop(by)` instead)
    counts = ledger.settle()        # before episode.end: {shield: {"passed", "clipped", ...}}
    counts, settled = ledger.end()  # after it: those counts, True (or settled now, False)

Each shield publishes `~/state` (robokernel_interfaces/ShieldState) with the counts of
the last sender it read (`sender_read/passed/clipped/refused`, `last_refusal`), on
change and when they change (within ~50 ms). A shield's counts are this runner's when
`command_sender` is one of this runner's publishers on the shield's command topic
(`transport.publisher_gids`); an episode's counts are the difference between its end
and its start. `settle` waits (up to `confirm_timeout_s`) until a shield has counted
the outcome of the runner's last command (`sender_last_seq` reached the number the runner
published: its writer numbers them from 1, so every command that will ever arrive has
arrived), or, from a shield (or RMW) that gives no sequence numbers, has read as many as
the runner sent in the episode. `confirmed` false says that the shield did not read
every command of the episode (one lost, or a shield that stopped publishing its state).
`begin` waits the same way for the commands sent before it, so none of them is charged
to the episode; the commands a first reset's handshake published before the shield's
reader knew the runner's writer (RosRobotEnv.connect: lost, by DDS's design) come
before `begin` and are in no episode.
`held` and `timeouts` are the shield's own hold commands and watchdog timeouts over the
episode (whoever's commands they followed).

Keyed by the shield's node name over a list of shields (an arm's and a gripper's:
each has its own command topic and state topic). Reads on DirectReaders of the private
link's rx node (no executor); thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from robokernel_interfaces.msg import ShieldState
from robokernel_ros.ros.qos import STATUS_READER_QOS
from robokernel_ros.ros.requests import Refused
from robokernel_ros.ros.transport import DirectReader, acquire_link, publisher_gids, release_link

#: How long `end` waits for a shield to confirm the episode's last commands.
CONFIRM_TIMEOUT_S = 1.5
#: How long a start waits for a shield that does not forward yet.
FIRST_STATE_WAIT_S = 3.0
#: How long a start waits for a shield this ledger has never heard: DDS discovery of the
#: runner's new participant by a shield can take seconds on a loaded machine (a full
#: run's eval was refused "no state from the safety shield" after 3 s, the shield
#: forwarding); RosRobotEnv's discovery_timeout_s, which its first reset waits likewise.
DISCOVERY_WAIT_S = 15.0


def _estop_cause(state: Any) -> bool:
    """The shield holds because of an e-stop (latched, or its last refusal was one)."""
    return state is not None and (
        state.state == "estopped" or str(state.last_refusal).startswith("estop")
    )


class ShieldRefusal(RuntimeError):
    """A shield refused this runner's commands (or does not forward them): the message
    names the shield, the counts and its reason."""


@dataclass(frozen=True)
class ShieldLink:
    """One shield the runner commands through: its node name (the report's key), its
    ~/state topic, the command topic the runner publishes to (its input), and how many
    commands the runner has published there (a counter read, never reset: the number its
    one publisher there has written, which is the DDS sequence number of the last)."""

    name: str
    state_topic: str
    command_topic: str
    commands_sent: Callable[[], int]


_COUNTS = ("read", "passed", "clipped", "refused")


class _Shield:
    def __init__(self, node: Any, link: ShieldLink, rx: Any) -> None:
        self.link = link
        self.node = node
        self.topic = node.resolve_topic_name(link.state_topic)
        self.reader = DirectReader(rx, ShieldState, self.topic, STATUS_READER_QOS)
        self.last: Any = None  # the latest state
        self.mine: tuple[int, int, int, int] = (0, 0, 0, 0)  # our counts, latest known
        self.base: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.base_held = self.base_timeouts = 0
        self.base_sent = 0
        # What a shield process that restarted within the episode had counted (its
        # successor counts from 0 again): added to the episode's counts.
        self.carried: tuple[int, ...] = (0, 0, 0, 0, 0, 0)  # read..refused, held, timeouts
        # The sequence number of our last command the shield counted (our writer's
        # numbering: it goes on across restarts of the shield); 0 until a state gives one.
        self.last_seq = 0
        self._gids: set[str] = set()

    def poll(self, timeout_s: float = 0.0) -> None:
        for state in self.reader.take(timeout_s):
            last = self.last
            if last is not None and (
                state.held < last.held
                or state.timeouts < last.timeouts
                or state.passed < last.passed
            ):
                # a new shield process (restarted): its counters start at 0 again
                self._carry(
                    4, (int(last.held) - self.base_held, int(last.timeouts) - self.base_timeouts)
                )
                self.base_held = self.base_timeouts = 0
            self.last = state
            if state.command_sender and state.command_sender in self._senders():
                mine = (
                    int(state.sender_read),
                    int(state.sender_passed),
                    int(state.sender_clipped),
                    int(state.sender_refused),
                )
                if any(m < o for m, o in zip(mine, self.mine, strict=True)):
                    # a restarted shield counts this runner's commands from 0 again
                    self._carry(0, tuple(o - b for o, b in zip(self.mine, self.base, strict=True)))
                    self.base = (0, 0, 0, 0)
                self.mine = mine
                self.last_seq = max(self.last_seq, int(state.sender_last_seq))

    def _carry(self, start: int, values: tuple[int, ...]) -> None:
        carried = list(self.carried)
        for i, v in enumerate(values, start):
            carried[i] += v
        self.carried = tuple(carried)

    def _senders(self) -> set[str]:
        if not self._gids:  # a publisher appears in its own node's graph once created
            self._gids = publisher_gids(self.node, self.link.command_topic)
        return self._gids

    def settled(self) -> bool:
        """Every command sent so far has its outcome counted, or never arrives: the
        shield counted our last one (by its sequence number). Without sequence numbers:
        the shield read as many as were sent since `begin`."""
        if self.last_seq > 0:
            return self.last_seq >= self.link.commands_sent()
        counts = self.counts()
        return counts["read"] >= counts["commands_sent"]

    def await_confirmed(self, deadline: float) -> None:
        """Poll until `settled` (or the monotonic `deadline` passed)."""
        self.poll()
        while not self.settled() and time.monotonic() < deadline:
            self.poll(min(0.05, max(0.0, deadline - time.monotonic())))

    def begin(self) -> None:
        self.poll()
        self.base = self.mine
        last = self.last
        self.base_held = int(last.held) if last is not None else 0
        self.base_timeouts = int(last.timeouts) if last is not None else 0
        self.base_sent = self.link.commands_sent()
        self.carried = (0, 0, 0, 0, 0, 0)

    def counts(self) -> dict[str, Any]:
        c = self.carried
        read, passed, clipped, refused = (
            m - b + k for m, b, k in zip(self.mine, self.base, c, strict=False)
        )
        last = self.last
        sent = self.link.commands_sent() - self.base_sent
        return {
            "commands_sent": sent,
            "read": read,
            "passed": passed,
            "clipped": clipped,
            "refused": refused,
            "held": c[4] + ((int(last.held) - self.base_held) if last is not None else 0),
            "watchdog_timeouts": c[5]
            + ((int(last.timeouts) - self.base_timeouts) if last is not None else 0),
            "confirmed": read >= sent,
            "state": str(last.state) if last is not None else "unknown",
            "reason": str(last.reason) if last is not None else "no ~/state received",
            "last_refusal": str(last.last_refusal) if last is not None and refused > 0 else "",
        }

    def not_forwarding(self) -> str:
        """'' while the shield says it forwards; else what it says (or that it is silent)."""
        last = self.last
        if last is None:
            return (
                f"no state from the safety shield on {self.topic} (is it running, on this "
                "ROS_DOMAIN_ID?)"
            )
        if last.state == "active":
            return ""
        if last.state == "inactive":
            return (
                f"the safety shield {self.link.name} is inactive ({last.reason}): activate it "
                f"(robokernel ros lifecycle {self.link.name} activate)"
            )
        return f"the safety shield {self.link.name} is {last.state}: {last.reason}"


class ShieldLedger:
    """See the module docstring."""

    def __init__(
        self,
        node: Any,
        links: Sequence[ShieldLink],
        *,
        confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
        discovery_s: float = DISCOVERY_WAIT_S,
    ) -> None:
        names = [link.name for link in links]
        if len(set(names)) != len(names):
            raise ValueError(f"shields={names!r}: names must be unique")
        self._link = acquire_link()
        rx = self._link.rx_node
        self._shields = [_Shield(node, link, rx) for link in links]
        for shield in self._shields:
            self._link.readers.add(shield.reader)
        self.confirm_timeout_s = float(confirm_timeout_s)
        self.discovery_s = float(discovery_s)
        self._lock = threading.Lock()
        self._open = False
        self._settled: dict[str, dict[str, Any]] | None = None  # settle()'s, until end()

    @property
    def names(self) -> list[str]:
        return [s.link.name for s in self._shields]

    def check_ready(self, wait_s: float = FIRST_STATE_WAIT_S) -> None:
        """Refused (naming the shield and why) unless every shield says it forwards; a
        shield whose last state says it does not forward is waited for up to `wait_s` (a
        state can reach this reader a moment after another node's), one this ledger has
        never heard up to `discovery_s` (DDS discovery; a shield that is not running is
        refused after it)."""
        start = time.monotonic()
        with self._lock:
            for shield in self._shields:
                shield.poll()
                while shield.not_forwarding():
                    heard = shield.last is not None  # heard: no discovery wait
                    left = start + (wait_s if heard else max(wait_s, self.discovery_s))
                    left -= time.monotonic()
                    if left <= 0:
                        break
                    shield.poll(min(0.1, left))
            problems = [p for p in (s.not_forwarding() for s in self._shields) if p]
        if problems:
            raise Refused("refused: " + "; ".join(problems))

    def begin(self) -> None:
        """An episode starts: its counts start here, once each shield has confirmed the
        commands sent before it (or `confirm_timeout_s` passed). Without that handshake a
        refusal of the last episode's last commands, reported after this point, was
        charged to this one: a start right after an e-stop's clear_fault ended "estopped
        after 1 steps" on the e-stop's refusals of the commands before it."""
        deadline = time.monotonic() + self.confirm_timeout_s
        with self._lock:
            self._settled = None
            for shield in self._shields:
                shield.await_confirmed(deadline)
                shield.begin()
            self._open = True

    def estop_cause(self) -> str:
        """'' unless a shield holds because of an e-stop (its state says estopped, or its
        last refusal of this runner's commands was an e-stop's): then which shield and
        why, e.g. "the safety shield arm_shield: estop: e-stop latched (e-stop source
        lost)"."""
        with self._lock:
            for shield in self._shields:
                shield.poll()
                last = shield.last
                if _estop_cause(last):
                    why = str(last.reason) if last.state == "estopped" else str(last.last_refusal)
                    return f"the safety shield {shield.link.name}: {why}"
        return ""

    def check(self, estop: Callable[[str], None] | None = None) -> None:
        """ShieldRefusal when a shield refused a command of this episode or stopped
        forwarding (deactivated, its e-stop latched, its source lost). `estop(by)`: the
        runner's own e-stop latch. A shield that holds because of an e-stop (its state
        says estopped, or its refusal was an e-stop's) latches it, naming the shield and
        its reason, and no ShieldRefusal is raised: the cause is the e-stop, and the
        episode ends "estopped" at its next step boundary, by the latch's state, however
        late the runner heard the e-stop itself (a loaded runner, or a shield that lost
        its source while the runner did not)."""
        if not self._open:
            return
        with self._lock:
            for shield in self._shields:
                shield.poll()
                counts = shield.counts()
                problem = ""
                if counts["refused"] > 0:
                    problem = (
                        f"the safety shield {shield.link.name} refused {counts['refused']} of "
                        f"this episode's {counts['read']} commands it read: "
                        f"{counts['last_refusal'] or counts['reason']}"
                    )
                elif shield.last is not None and shield.not_forwarding():
                    problem = f"{shield.not_forwarding()} (the robot is held)"
                if not problem:
                    continue
                if estop is not None and _estop_cause(shield.last):
                    estop(problem)
                    return
                raise ShieldRefusal(problem)

    def settle(self) -> dict[str, dict[str, Any]]:
        """The episode's counts per shield, once each shield confirmed the episode's
        commands (or `confirm_timeout_s` passed: then `confirmed` is false); {} when no
        episode began. The episode's accounts close here (the env's before_episode_end,
        before episode.end): `end` then returns these counts."""
        deadline = time.monotonic() + self.confirm_timeout_s
        with self._lock:
            if not self._open:
                return {}
            self._open = False
            out = {}
            for shield in self._shields:
                shield.await_confirmed(deadline)
                out[shield.link.name] = shield.counts()
            self._settled = out
        return out

    def end(self) -> tuple[dict[str, dict[str, Any]], bool]:
        """After the episode: (its counts, settled before episode.end). The counts that
        `settle` gave (True: they are in the trace already), else settled now (False);
        ({}, False) when no episode began."""
        with self._lock:
            settled, self._settled = self._settled, None
        if settled is not None:
            return settled, True
        return self.settle(), False

    def close(self) -> None:
        for shield in self._shields:
            shield.reader.close()
        if self._link is not None:
            self._link = None
            release_link()


#: The event of an episode's shield counts, and the `shield` entry of its meta.json and
#: result: report_data(counts), {"shields": {name: counts}, "passed", "clipped",
#: "refused", "held"} (the totals over the shields). CheckedRobotEnv.before_episode_end
#: gives it to the kernel, which emits it before episode.end: in the trace, the bag
#: (the mirror writes every event) and the runner's ROS events topic.
SHIELD_REPORT = "shield.report"


def report_data(counts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The SHIELD_REPORT event's data (and the result's `shield`) of per-shield counts."""
    return {"shields": {k: dict(v) for k, v in counts.items()}, **totals(counts)}


def shield_sink(ledger: ShieldLedger) -> Callable[[Any], Callable[[Any], dict[str, Any]]]:
    """An episode sink (rollout.sinks.EpisodeSink) whose finisher reports the episode's
    shield counts in the episode's result (`shield`) and in the run directory's meta.json
    (`shield`). The counts were settled before episode.end (the env's
    before_episode_end: the SHIELD_REPORT event is in the trace and the bag); an env
    without that hook has them settled here, and the event goes to the episode's bus
    after episode.end (the runner's ROS events topic; not the trace, not the bag)."""

    def attach(context: Any) -> Callable[[Any], dict[str, Any]]:
        def finish(record: Any) -> dict[str, Any]:
            counts, in_trace = ledger.end()
            if not counts:
                return {}
            data = report_data(counts)
            _append(context, record, data, publish=not in_trace)
            return {"shield": data}

        return finish

    return attach


def _append(context: Any, record: Any, data: dict[str, Any], *, publish: bool) -> None:
    """`shield` into the run directory's meta.json, and (`publish`) the event on the
    episode's bus when the kernel did not emit it before episode.end."""
    from robokernel_ros.kernel.events import Event

    if record.trace_path is not None:
        merge_meta(record.trace_path, {"shield": data})
    if publish:
        context.bus.publish(
            Event(SHIELD_REPORT, int(record.steps), data, seq=int(record.events),
                  run_id=str(record.run_id))
        )  # fmt: skip


def merge_meta(run_dir: Any, fields: Mapping[str, Any]) -> None:
    """Merge `fields` into a closed run directory's meta.json (written whole, replaced)."""
    import json
    from pathlib import Path

    from robokernel_ros.kernel.trace import dumps_pretty

    path = Path(run_dir) / "meta.json"
    merged = json.loads(path.read_text()) if path.exists() else {}
    merged.update(fields)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(dumps_pretty(merged))
    tmp.replace(path)


def totals(counts: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """passed/clipped/refused/held summed over the shields (the report's one line)."""
    return {
        key: sum(int(c.get(key, 0)) for c in counts.values())
        for key in ("passed", "clipped", "refused", "held")
    }
