"""The benches' plumbing, without running them (each takes minutes): every bench (a file
of bench/ with a __main__ block, what `make bench` runs) accepts --quick and ends with
its verdicts' exit status; bench/verdicts.py fails a bench on any failed verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MAIN = 'if __name__ == "__main__":'
BENCHES = sorted(p for p in BENCH.glob("*.py") if MAIN in p.read_text())

sys.path.insert(0, str(BENCH))
from verdicts import exit_status, failed  # noqa: E402


def test_failed_verdicts_in_every_shape_the_benches_use() -> None:
    verdicts = {
        "a": True,
        "b": False,
        "c": "pass",
        "d": "fail",
        "e": {"pass": False, "reason": "a run failed"},
        "f": {"pass": True},
        "g": {"inner": False, "ok": True},
        "h": None,  # not judged
    }
    assert failed(verdicts) == ["b", "d", "e", "g/inner"]
    assert exit_status(verdicts) == 1
    assert exit_status({"a": True, "c": "PASS", "h": None}) == 0
    assert exit_status({}) == 0


@pytest.mark.parametrize("bench", BENCHES, ids=[p.stem for p in BENCHES])
def test_every_bench_takes_quick_and_exits_with_its_verdicts(bench: Path) -> None:
    text = bench.read_text()
    assert "--quick" in text, f"{bench.name}: make bench runs it with --quick"
    assert '"verdicts"' in text, f"{bench.name}: its JSON line has no verdicts"
    # the exit status: bench/verdicts.py's, a bench's own check of every verdict, or none
    # to judge (a bench without a target of its own says so with empty verdicts)
    judged = "exit_status(" in text or "all(" in text
    assert judged or '"verdicts"] = {}' in text or '"verdicts": {}' in text, (
        f"{bench.name}: exits 0 whatever its verdicts"
    )
    main_block = text[text.index(MAIN) :]
    assert "exit(main(" in main_block or "SystemExit(main(" in main_block, (
        f"{bench.name}: main()'s status is not the process's"
    )


def test_make_bench_runs_every_bench_and_fails_when_one_fails() -> None:
    out = subprocess.run(
        ["make", "-n", "bench"], cwd=BENCH.parent, capture_output=True, text=True, check=True
    ).stdout
    assert "--quick" in out and "failed" in out and "exit 1" in out, out
