"""Tiny LeRobot checkpoints, built once per test session (random weights, no hub)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lerobot_test_helpers import SO101


@pytest.fixture(scope="session")
def lerobot_available() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("lerobot")


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory: pytest.TempPathFactory, lerobot_available: None) -> Path:
    return tmp_path_factory.mktemp("lerobot_ckpts")


@pytest.fixture(scope="session")
def ckpt_act(ckpt_root: Path) -> Path:
    from fixtures.lerobot import build_tiny_checkpoint

    return build_tiny_checkpoint(ckpt_root / "act", kind="act", chunk_size=10, n_action_steps=5)


@pytest.fixture(scope="session")
def ckpt_diffusion(ckpt_root: Path) -> Path:
    from fixtures.lerobot import build_tiny_checkpoint

    return build_tiny_checkpoint(
        ckpt_root / "diffusion", kind="diffusion", chunk_size=8, n_action_steps=4
    )


@pytest.fixture(scope="session")
def ckpt_flow(ckpt_root: Path) -> Path:
    """tiny_flow with its action names in an order the robot does not use."""
    from fixtures.lerobot import build_tiny_checkpoint

    return build_tiny_checkpoint(
        ckpt_root / "flow",
        kind="tiny_flow",
        action_names=tuple(reversed(SO101)),
        chunk_size=12,
        n_action_steps=6,
    )
