"""`robokernel compare A B`: McNemar's exact test on paired success and the paired return
difference with its t interval, by seed."""

from __future__ import annotations

import json
import math

import pytest
from robokernel_ros.scoring.compare import compare, mcnemar_exact, t975


def _records(successes, returns, seeds=None):
    seeds = seeds or list(range(len(successes)))
    return [
        {"seed": s, "success": ok, "sum_reward": r}
        for s, ok, r in zip(seeds, successes, returns, strict=True)
    ]


def test_known_answers():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 2 * P[X <= 0], X ~ Bin(5, 1/2)
    assert mcnemar_exact(6, 1) == pytest.approx(2 * 8 / 128)  # C(7,0) + C(7,1) = 8
    assert t975(1) == pytest.approx(12.706, abs=1e-3) and t975(40) == pytest.approx(2.021, abs=1e-3)
    assert t975(120) == pytest.approx(1.980, abs=1e-3)

    a = _records([True, False, False, True, False], [1.0, 0.0, 2.0, 3.0, 5.0])
    b = _records([True, True, True, False, True], [2.0, 2.0, 5.0, 3.0, 5.0], seeds=[0, 1, 2, 3, 9])
    r = compare(a, b)
    assert (r["pairs"], r["unpaired_a"], r["unpaired_b"]) == (4, 1, 1)
    assert (r["both_succeeded"], r["only_a_succeeded"], r["only_b_succeeded"]) == (1, 1, 2)
    assert r["mcnemar_exact_p"] == pytest.approx(1.0)  # min(1, 2 * (1 + 3) / 8)
    diffs = [1.0, 2.0, 3.0, 0.0]  # B - A on seeds 0..3
    mean = sum(diffs) / 4
    half = t975(3) * math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3) / 2
    assert r["return_diff_mean"] == mean
    assert r["return_diff_ci95"] == pytest.approx([mean - half, mean + half])
    with pytest.raises(ValueError, match="share no seed"):
        compare(a, _records([True], [0.0], seeds=[99]))


def test_compare_two_eval_folders_on_the_shell(tmp_path, capsys):
    from robokernel_ros import cli

    for name, amplitude in (("a", 0.3), ("b", 0.0)):
        argv = ["eval", "--robot", "so101", "--episodes", "3", "--max-steps", "4",
                "--policy-config", json.dumps({"amplitude": amplitude}), "--output", str(tmp_path / name)]  # fmt: skip
        assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pairs"] == 3 and [p["seed"] for p in result["per_seed"]] == [0, 1, 2]
    assert result["mcnemar_exact_p"] == 1.0  # the mock succeeds in neither
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "runs_nowhere")]) == 1
    assert "neither an eval --output folder" in capsys.readouterr().err
