"""What the safety shield did with the commands it read: totals, and per sender.

    counts = ShieldCounts()
    counts.heard_from(gid, seq)     # a command of `gid` read: True when the sender changed
    counts.count_passed(); counts.count_clipped(); counts.count_refused("estop: ...")
    counts.sender_counts()          # (read, passed, clipped, refused) of the last sender
    counts.sender_last_seq()        # the last sender's last counted command's sequence no.

Totals (`passed`, `clipped`, `refused`, `held`, `timeouts`) cover every sender; the
per-sender counts are the current sender's (the publisher of the last command read), so
that a sender learns from the shield's state what became of its own commands. The 64
most recent senders are remembered. No ROS.

A sender's `read` is the number of its commands whose outcome is counted (passed +
clipped + refused), not of those `heard_from` saw, so counts published between
the two (the shield publishes its state while it judges a command: a latch, a new
sender) never say a command was read while its outcome is missing. A sender that has
seen `read` reach the number of commands it sent knows every one of their outcomes
(the runner's ShieldLedger settles an episode on that; when a read ran ahead of its
outcome, an e-stop's refusal of an episode's last command was charged to the next
episode once another sender had taken the shield's per-sender slot).

`seq` is the command's publication sequence number (DDS numbers a writer's samples from
1): `sender_last_seq` is that of the sender's last command whose outcome is counted, so
a sender that published N commands knows, once it reads N there, that every one that
will ever arrive has its outcome counted; N minus `read` never arrived (a volatile
reader drops what a writer sends before it knows the writer).
"""

from __future__ import annotations

#: senders remembered (senders come and go: the recent ones are kept)
MAX_SENDERS = 64


class ShieldCounts:
    """The shield's counters (see the module docstring)."""

    def __init__(self) -> None:
        self.passed = self.clipped = self.refused = self.held = self.timeouts = 0
        #: the publisher (DDS GID, hex) of the last command read; '' before any
        self.sender = ""
        #: why the last refused command was refused
        self.last_refusal = ""
        # [passed, clipped, refused, last_seq] per sender (read is the first three's sum)
        self._senders: dict[str, list[int]] = {}
        self._current = self._senders.setdefault("", [0, 0, 0, 0])
        self._seq = 0  # the sequence number of the command whose outcome is counted next

    def heard_from(self, sender: str, seq: int = 0) -> bool:
        """A command of `sender` (its publication sequence number `seq`; 0: unknown) was
        read, its outcome is counted next; True when `sender` is not the last command's
        sender."""
        counts = self._senders.get(sender)
        if counts is None:
            if len(self._senders) > MAX_SENDERS:
                self._senders.pop(next(iter(self._senders)))
            counts = self._senders[sender] = [0, 0, 0, 0]
        self._current = counts
        self._seq = int(seq)
        changed = sender != self.sender
        self.sender = sender
        return changed

    def count_passed(self) -> None:
        self.passed += 1
        self._counted(0)

    def count_clipped(self) -> None:
        self.clipped += 1
        self._counted(1)

    def count_refused(self, reason: str) -> None:
        """A command of the current sender was not forwarded, for `reason`."""
        self.refused += 1
        self._counted(2)
        self.last_refusal = reason

    def _counted(self, outcome: int) -> None:
        current = self._current
        current[outcome] += 1
        current[3] = max(current[3], self._seq)

    def sender_counts(self) -> tuple[int, int, int, int]:
        """(read, passed, clipped, refused) of the current sender's commands."""
        passed, clipped, refused, _ = self._current
        return passed + clipped + refused, passed, clipped, refused

    def sender_last_seq(self) -> int:
        """The publication sequence number of the current sender's last command whose
        outcome is counted (0: none, or the RMW gives none)."""
        return self._current[3]

    def key(self) -> tuple[int, ...]:
        """What a change of makes the state worth publishing again."""
        return (*self._current, self.held, self.timeouts)
