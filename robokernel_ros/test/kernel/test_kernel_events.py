"""EventBus: synchronous delivery, kind filters, unsubscribe, a raising subscriber is contained."""

from __future__ import annotations

import logging

import pytest
from robokernel_ros.kernel import Event, EventBus


def test_publish_is_synchronous_and_in_subscription_order() -> None:
    bus = EventBus()
    seen: list[tuple[str, int]] = []
    bus.subscribe(lambda e: seen.append(("a", e.seq)))
    bus.subscribe(lambda e: seen.append(("b", e.seq)))
    bus.publish(Event("action", 3, {"x": 1}, seq=7))
    assert seen == [("a", 7), ("b", 7)]


def test_kind_filter_and_unsubscribe() -> None:
    bus = EventBus()
    actions: list[Event] = []
    unsubscribe = bus.subscribe(actions.append, kinds=["action"])
    bus.publish(Event("observation", 0))
    bus.publish(Event("action", 0))
    unsubscribe()
    unsubscribe()  # twice is harmless
    bus.publish(Event("action", 1))
    assert [e.step for e in actions] == [0]
    assert bus.subscriber_count == 0


def test_subscribers_changed_after_a_kind_was_published_take_effect_at_once() -> None:
    # copy on write: a change made between two publishes applies to the second
    bus = EventBus()
    seen: list[tuple[str, int]] = []
    bus.subscribe(lambda e: seen.append(("all", e.step)))
    bus.publish(Event("action", 0))
    off = bus.subscribe(lambda e: seen.append(("actions", e.step)), kinds=["action"])
    bus.subscribe(lambda e: seen.append(("ends", e.step)), kinds=["episode.end"])
    bus.publish(Event("action", 1))
    off()
    bus.publish(Event("action", 2))
    bus.publish(Event("episode.end", 3))
    assert seen == [("all", 0), ("all", 1), ("actions", 1), ("all", 2), ("all", 3), ("ends", 3)]


def test_single_kind_string_is_one_kind() -> None:
    bus = EventBus()
    got: list[str] = []
    bus.subscribe(lambda e: got.append(e.kind), kinds="episode.end")
    bus.publish(Event("episode.end", 0))
    bus.publish(Event("e", 0))
    assert got == ["episode.end"]


def test_raising_subscriber_is_logged_and_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    got: list[int] = []

    def broken(event: Event) -> None:
        raise RuntimeError("dashboard crashed")

    bus.subscribe(broken)
    bus.subscribe(lambda e: got.append(e.step))
    with caplog.at_level(logging.ERROR):
        bus.publish(Event("action", 5))
    assert got == [5]
    assert "dashboard crashed" in caplog.text


def test_subscribe_refuses_non_callable() -> None:
    with pytest.raises(ValueError, match="callback"):
        EventBus().subscribe("not callable")  # type: ignore[arg-type]


def test_forwarding_reaches_the_parent_only_while_it_has_listeners() -> None:
    parent, child = EventBus(), EventBus()
    seen: list[tuple[str, int]] = []
    stop = child.forward_to(parent)
    assert child.subscriber_count == 0  # the parent has no listener: publishing reaches nobody
    child.publish(Event("action", 0))
    off = parent.subscribe(lambda e: seen.append(("parent", e.step)))
    assert child.subscriber_count == 1  # a listener joined the parent: the child counts it
    child.subscribe(lambda e: seen.append(("child", e.step)))
    assert child.subscriber_count == 2
    child.publish(Event("action", 1))
    assert seen == [("parent", 1), ("child", 1)]  # the parent first, as a subscription was
    off()
    assert child.subscriber_count == 1
    child.publish(Event("action", 2))
    parent.subscribe(lambda e: seen.append(("parent again", e.step)))
    stop()
    stop()  # twice is harmless
    child.publish(Event("action", 3))
    assert seen == [("parent", 1), ("child", 1), ("child", 2), ("child", 3)]
    with pytest.raises(ValueError, match="parent=.*: must be another EventBus"):
        child.forward_to(child)
    a, b, c = EventBus(), EventBus(), EventBus()
    c.forward_to(b)
    b.forward_to(a)
    with pytest.raises(ValueError, match="not one that forwards here"):
        a.forward_to(c)  # a loop would publish forever


def test_forwarding_counts_through_a_chain_and_the_parent_holds_no_child() -> None:
    import gc
    import weakref

    top, middle, bottom = EventBus(), EventBus(), EventBus()
    middle.forward_to(top)
    bottom.forward_to(middle)
    assert (middle.subscriber_count, bottom.subscriber_count) == (0, 0)
    seen: list[int] = []
    off = top.subscribe(lambda e: seen.append(e.step))
    assert (middle.subscriber_count, bottom.subscriber_count) == (1, 1)
    bottom.publish(Event("action", 5))
    assert seen == [5]
    off()
    assert (middle.subscriber_count, bottom.subscriber_count) == (0, 0)
    # an episode's bus forwards for good; the long-lived parent must not keep it alive
    gone = weakref.ref(bottom)
    del bottom
    gc.collect()
    assert gone() is None
    top.subscribe(lambda e: None)  # notifying a collected child is harmless
    assert middle.subscriber_count == 1 and len(middle._children) == 0
