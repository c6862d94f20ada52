"""The JSON the rollout API returns keeps its keys, their order and their value types.

result_shapes.json was captured from the API before the rollout package was split into
typed modules; the typed results inside must turn into exactly this JSON at the edge.
Re-capture (only for a deliberate API change): python test_rollout_result_shape.py --capture
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from robokernel_ros.rollout import SimWorkcell, envelope_json

SHAPES = Path(__file__).with_name("result_shapes.json")


def shape(value: Any) -> Any:
    """A JSON value's shape: a dict's keys in order with their shapes, a list's distinct
    element shapes, a scalar's JSON type name."""
    if isinstance(value, dict):
        return {"dict": [[k, shape(v)] for k, v in value.items()]}
    if isinstance(value, list):
        shapes: list[Any] = []
        for item in value:
            s = shape(item)
            if s not in shapes:
                shapes.append(s)
        return {"list": shapes}
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str"}[type(value)]


def capture(trace_dir: Path) -> dict[str, Any]:
    """The envelopes of one run_policy, one eval_policy and one run_multi_policy call."""
    cell = SimWorkcell(trace_dir=trace_dir)
    try:
        cell.add_robot("arm", "so101")
        run = cell.run_policy("arm", n_steps=12, seed=0, instruction="wave")
        ev = cell.eval_policy("arm", n_episodes=2, max_steps=10, seed=0)
        cell.add_robot("arm2", "so101", pos=[0.5, 0, 0])
        multi = cell.run_multi_policy({"arm": "mock", "arm2": "mock"}, n_steps=8, seed=0)
    finally:
        cell.close()
    out = {}
    for name, envelope in (("run_policy", run), ("eval_policy", ev), ("run_multi_policy", multi)):
        assert envelope["status"] == "success", envelope
        out[name] = {
            "envelope": [list(envelope), [list(b) for b in envelope["content"]]],
            "json": shape(envelope_json(envelope)),
        }
    return out


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    return capture(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("call", ["run_policy", "eval_policy", "run_multi_policy"])
def test_result_json_keeps_its_keys_order_and_types(shapes, call):
    expected = json.loads(SHAPES.read_text())[call]
    assert shapes[call]["envelope"] == expected["envelope"]
    got, want = shapes[call]["json"], expected["json"]
    assert [k for k, _ in got["dict"]] == [k for k, _ in want["dict"]]  # names and order
    assert got == want  # and every value's type, nested ones included


if __name__ == "__main__" and "--capture" in sys.argv:
    with tempfile.TemporaryDirectory() as tmp:
        SHAPES.write_text(json.dumps(capture(Path(tmp)), indent=1) + "\n")
    print(f"wrote {SHAPES}")
