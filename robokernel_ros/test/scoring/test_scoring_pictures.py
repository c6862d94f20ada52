"""`robokernel report`: PNGs checked by their pixels, one self-contained HTML page.

Every image is inlined as a PNG data URI that decodes and nothing is fetched; a headless
Chromium (Debian's package, which scripts/setup.sh installs when run as root) renders the
page from disk and its screenshot shows the pictures."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image
from robokernel_ros.scoring.pictures import PALETTE


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)])


def _pixels(png: np.ndarray, colour: str) -> int:
    return int((np.abs(png[..., :3].astype(int) - _rgb(colour)).sum(axis=-1) < 12).sum())


def test_report_pictures_and_page(tmp_path, record_episode, capsys):
    from robokernel_ros import cli

    for _ in range(2):  # A: 2 of 2 succeed
        record_episode(storage=None, root=tmp_path / "A", success_at=9)
    record_episode(storage=None, root=tmp_path / "B", success_at=9)  # B: 1 of 2
    record_episode(storage=None, root=tmp_path / "B", success_at=None, interventions=(2, 4, 6))

    out = tmp_path / "report"
    argv = [
        "report",
        str(tmp_path / "A"),
        str(tmp_path / "B"),
        "--out",
        str(out),
        "--episodes",
        "0,1",
    ]
    assert cli.main(argv) == 0
    assert "index.html (8 pictures)" in capsys.readouterr().out

    success = np.asarray(Image.open(out / "success_rate.png"))
    bar_a, bar_b = _pixels(success, PALETTE[0]), _pixels(success, PALETTE[1])
    assert bar_b > 0 and abs(bar_a / bar_b - 2.0) < 0.1  # heights 1.0 and 0.5
    shield = np.asarray(Image.open(out / "interventions.png"))
    # A: 1 + 1 interventions; B: 1 + 3 -> B's bars have 4/2 of A's area
    assert abs(_pixels(shield, PALETTE[1]) / _pixels(shield, PALETTE[0]) - 2.0) < 0.15
    returns = np.asarray(Image.open(out / "returns.png"))
    assert _pixels(returns, PALETTE[0]) > 0 and _pixels(returns, PALETTE[1]) > 0

    page = (out / "index.html").read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)">', page)
    assert len(images) == 8 and len(re.findall(r"<img ", page)) == 8
    for _, data in images:
        with Image.open(io.BytesIO(base64.b64decode(data))) as img:
            assert img.format == "PNG" and img.width > 100
    assert "http" not in page and 'src="' not in page.replace('src="data:', "")
    assert "1.000 [" in page and "0.500 [" in page  # the success rates with their intervals


def test_the_report_page_renders_with_its_pictures_in_a_headless_browser(tmp_path, record_episode):
    """Chromium (Debian's package, installed by scripts/setup.sh) loads index.html from disk
    and its screenshot shows the success bars in the palette's colours, 2:1 as in the PNG."""
    from robokernel_ros import cli

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on PATH (scripts/setup.sh installs it when run as root)")
    for _ in range(2):
        record_episode(storage=None, root=tmp_path / "A", success_at=9)
    record_episode(storage=None, root=tmp_path / "B", success_at=9)
    record_episode(storage=None, root=tmp_path / "B", success_at=None)
    out = tmp_path / "report"
    assert cli.main(["report", str(tmp_path / "A"), str(tmp_path / "B"), "--out", str(out)]) == 0
    shot = tmp_path / "page.png"
    subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,900",
         f"--screenshot={shot}", (out / "index.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    page = np.asarray(Image.open(shot))
    assert page.shape[1] == 1400
    bar_a, bar_b = _pixels(page, PALETTE[0]), _pixels(page, PALETTE[1])
    assert bar_a > 500 and bar_b > 0, "the success-rate picture did not load in the browser"
    assert abs(bar_a / bar_b - 2.0) < 0.25  # the same 2:1 bars as the PNG itself
