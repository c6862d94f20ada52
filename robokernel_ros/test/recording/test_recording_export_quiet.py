"""export-lerobot is quiet on success unless --verbose (issue #17, defect 6): the libraries'
logs, warnings and progress bars (torchcodec's import traceback, datasets' Map bars) stay
off the terminal, while robokernel_ros's own warnings still show."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _export(*args: str) -> subprocess.CompletedProcess:
    # a fresh process: the libraries print on their first import, as for a user
    cmd = [sys.executable, "-m", "robokernel_ros.cli.export", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_export_prints_one_line_and_keeps_our_warnings(tmp_path: Path, record_episode):
    pytest.importorskip("lerobot")
    run_dir, _ = record_episode(steps=12, success_at=None, cameras=())
    cut = tmp_path / "cut" / "bag"  # a cut recording: our warning must still be shown
    shutil.copytree(run_dir / "bag", cut)
    (mcap,) = cut.glob("*.mcap")
    mcap.write_bytes(mcap.read_bytes()[: int(mcap.stat().st_size * 0.8)])
    (cut / "metadata.yaml").unlink()

    done = _export(str(run_dir), str(cut), "--repo-id", "u/quiet", "--root", str(tmp_path / "ds"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote 2 episode(s)") and done.stdout.count("\n") == 1
    assert done.stderr.count("\n") == 1 and "cut short" in done.stderr, done.stderr  # only ours
