"""The runner's takeover topic, message by message (ros.takeover.pedal_calls): a Bool
pedal calls on its changes only (true = correct, false = resume), a Joy on its buttons'
presses; real rclpy messages, no graph. `robokernel ros pause|correct|resume` take no
arguments (exit 2 before anything is sent)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("rclpy")

from robokernel_ros.contract import Takeover  # noqa: E402
from robokernel_ros.ros.takeover import pedal_calls  # noqa: E402
from sensor_msgs.msg import Joy  # noqa: E402
from std_msgs.msg import Bool  # noqa: E402

PEDAL = Takeover("/pedal", "std_msgs/msg/Bool")
JOY = Takeover("/joy", "sensor_msgs/msg/Joy", {"pause": 0, "correct": 4, "resume": 5})


def feed(takeover: Takeover, messages: list[Any]) -> list[list[str]]:
    last: Any = None
    out = []
    for msg in messages:
        calls, last = pedal_calls(takeover, msg, last, takeover.topic)
        out.append([verb for verb, _ in calls])
    return out


def test_a_pedal_calls_correct_and_resume_on_its_changes_only() -> None:
    values = [False, False, True, True, True, False, True]
    assert feed(PEDAL, [Bool(data=v) for v in values]) == [
        ["resume"], [], ["correct"], [], [], ["resume"], ["correct"]
    ]  # fmt: skip
    calls, _ = pedal_calls(PEDAL, Bool(data=True), None, "/robokernel/pedal")
    assert calls == [("correct", "pedal /robokernel/pedal")]


def test_a_joystick_calls_on_each_named_buttons_press_not_while_it_is_held() -> None:
    def joy(*pressed: int, width: int = 8) -> Joy:
        return Joy(buttons=[1 if i in pressed else 0 for i in range(width)])

    messages = [joy(), joy(4), joy(4), joy(), joy(0, 5), joy(1, 2, 3), joy(4, width=3)]
    assert feed(JOY, messages) == [[], ["correct"], [], [], ["pause", "resume"], [], []]
    calls, _ = pedal_calls(JOY, joy(5), None, "/joy")
    assert calls == [("resume", "joystick /joy button 5")]


@pytest.mark.parametrize("verb", ["pause", "correct", "resume"])
def test_the_takeover_verbs_take_no_arguments(verb: str, capsys: Any) -> None:
    import argparse

    from robokernel_ros.cli import ros as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.run(parser.parse_args([verb, "now"])) == 2
    assert (
        capsys.readouterr().err
        == f"robokernel ros: error: {verb} takes no arguments, got ['now']\n"
    )
