"""The shield's counters (safety.shield_counts): a sender's `read` never runs ahead of
its commands' outcomes, and each sender's counts are its own."""

from __future__ import annotations

from robokernel_ros.safety.shield_counts import MAX_SENDERS, ShieldCounts


def test_a_command_is_read_when_its_outcome_is_counted_not_before() -> None:
    counts = ShieldCounts()
    assert counts.heard_from("runner")
    # The shield publishes its state while it judges (a latch, a new sender): what it
    # publishes there must not say the command was read while its refusal is missing.
    assert counts.sender_counts() == (0, 0, 0, 0)
    counts.count_refused("estop: e-stop latched (panel)")
    assert counts.sender_counts() == (1, 0, 0, 1)
    assert not counts.heard_from("runner")
    counts.count_passed()
    assert not counts.heard_from("runner")
    counts.count_clipped()
    read, passed, clipped, refused = counts.sender_counts()
    assert (read, passed, clipped, refused) == (3, 1, 1, 1)
    assert read == passed + clipped + refused
    assert counts.last_refusal == "estop: e-stop latched (panel)"


def test_each_sender_keeps_its_own_counts_across_a_switch() -> None:
    counts = ShieldCounts()
    counts.heard_from("runner")
    counts.count_passed()
    counts.heard_from("runner")
    counts.count_refused("estop: e-stop latched (panel)")
    assert counts.heard_from("rogue")  # a second source takes the per-sender slot
    for _ in range(5):
        counts.heard_from("rogue")
        counts.count_refused("estop: e-stop latched (panel)")
    assert counts.sender == "rogue" and counts.sender_counts() == (5, 0, 0, 5)
    assert counts.heard_from("runner")
    # the runner's counts resume where they were: its refusal before the switch is there
    assert counts.sender_counts() == (2, 1, 0, 1)
    assert (counts.passed, counts.refused) == (1, 6)


def test_the_recent_senders_are_remembered() -> None:
    counts = ShieldCounts()
    for i in range(MAX_SENDERS + 10):
        counts.heard_from(f"sender-{i}")
        counts.count_passed()
    last = f"sender-{MAX_SENDERS + 9}"
    counts.heard_from(last)
    assert counts.sender_counts() == (1, 1, 0, 0)
    counts.heard_from("sender-0")  # forgotten long ago: counted afresh
    assert counts.sender_counts() == (0, 0, 0, 0)


def test_the_last_sequence_number_is_the_last_counted_commands() -> None:
    """`sender_last_seq` moves with the outcome, not with the read, and per sender: a
    sender that published N knows every arriving command is counted once it reads N."""
    counts = ShieldCounts()
    counts.heard_from("runner", 7)  # 1..6 never arrived (sent before the reader knew it)
    assert counts.sender_last_seq() == 0  # judged, not counted yet
    counts.count_passed()
    assert (counts.sender_counts()[0], counts.sender_last_seq()) == (1, 7)
    counts.heard_from("runner", 8)
    counts.count_clipped()
    counts.heard_from("rogue", 3)
    counts.count_refused("estop: e-stop latched (panel)")
    assert counts.sender_last_seq() == 3
    counts.heard_from("runner", 9)
    assert counts.sender_last_seq() == 8  # the runner's own, its 9th not counted yet
    counts.count_refused("estop: e-stop latched (panel)")
    read = counts.sender_counts()[0]
    assert (read, counts.sender_last_seq()) == (3, 9)
    assert counts.sender_last_seq() - read == 6  # the commands that never arrived
