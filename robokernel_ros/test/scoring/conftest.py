"""The scoring tests record hand-built episodes with the recording tests' `record_episode` fixture
(loaded under its own module name: two modules called `conftest` must not collide)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_bag_test_conftest", Path(__file__).resolve().parent.parent / "recording" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_bag = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bag)

record_episode = _bag.record_episode
