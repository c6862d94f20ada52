"""Two evaluations on the same seeds, compared episode by episode (`robokernel compare A B`).

Each of A and B is an `eval --output` folder (its eval_info.json) or a folder of run
directories (runs/). Episodes are paired by seed; unpaired ones are counted and left out.

- success: McNemar's exact test on the discordant pairs (b: A succeeded and B did not,
  c: the reverse): two-sided p = min(1, 2 * P[X <= min(b, c)]), X ~ Binomial(b + c, 1/2);
  p = 1 when no pair disagrees.
- return: the paired difference B - A per seed, its mean and the 95 % Student t interval
  (mean +- t(0.975, n - 1) * sd / sqrt(n); no interval for fewer than two pairs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# t(0.975, df) for df = 1..30; beyond, the Cornish-Fisher expansion around the normal's 1.96
_T975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"df={df!r}: must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant pairs."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def load_episodes(path: str | Path) -> list[dict[str, Any]]:
    """The per-episode records (seed, success, sum_reward, ...) of an evaluation folder."""
    from ..tasks.eval_output import EVAL_INFO, RUNS_DIR, episode_from_run

    folder = Path(path)
    info = folder / EVAL_INFO
    if info.is_file():
        return list(json.loads(info.read_text())["per_episode"])
    runs = folder / RUNS_DIR if (folder / RUNS_DIR).is_dir() else folder
    if not runs.is_dir():
        raise ValueError(
            f"path={str(path)!r}: neither an eval --output folder nor a folder of run directories"
        )
    records = [episode_from_run(p, 0) for p in sorted(runs.iterdir()) if p.is_dir()]
    found = [r for r in records if r is not None]
    if not found:
        raise ValueError(f"path={str(path)!r}: holds no finished episode")
    return found


def horizon(path: str | Path, episodes: Sequence[Mapping[str, Any]] | None = None) -> int | None:
    """An evaluation's steps per episode: its eval_config.json / eval_info.json's max_steps,
    else the length of its episodes that ran out of steps (outcome truncated); None when
    neither says."""
    from ..tasks.eval_output import EVAL_CONFIG, EVAL_INFO

    folder = Path(path)
    for name, key in ((EVAL_CONFIG, None), (EVAL_INFO, "config")):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        config = data.get(key) if key else data
        if isinstance(config, Mapping) and isinstance(config.get("max_steps"), int):
            return int(config["max_steps"])
    steps = [e.get("steps") for e in episodes or () if e.get("outcome") == "truncated"]
    steps = [s for s in steps if isinstance(s, int)]
    return max(steps) if steps else None


def horizon_warnings(a: str | Path, b: str | Path, records_a: Sequence[Mapping[str, Any]],
                     records_b: Sequence[Mapping[str, Any]]) -> list[str]:  # fmt: skip
    """A warning when A and B ran different steps per episode (their pairs then compare
    episodes of different lengths)."""
    ha, hb = horizon(a, records_a), horizon(b, records_b)
    if ha is None or hb is None or ha == hb:
        return []
    return [
        f"A ran max_steps={ha} and B max_steps={hb} per episode: the paired episodes had "
        "different horizons, so their success and return are not like for like"
    ]


def compare(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The paired comparison of two lists of per-episode records (see the module doc)."""
    by_seed_a = {r["seed"]: r for r in a}
    by_seed_b = {r["seed"]: r for r in b}
    seeds = sorted(set(by_seed_a) & set(by_seed_b), key=lambda s: (s is None, s))
    seeds = [s for s in seeds if s is not None]
    if not seeds:
        raise ValueError("the two evaluations share no seed: nothing to pair")
    pairs = [(by_seed_a[s], by_seed_b[s]) for s in seeds]
    both = sum(1 for x, y in pairs if x["success"] and y["success"])
    only_a = sum(1 for x, y in pairs if x["success"] and not y["success"])
    only_b = sum(1 for x, y in pairs if not x["success"] and y["success"])
    diffs = [
        float(y["sum_reward"]) - float(x["sum_reward"])
        for x, y in pairs
        if x.get("sum_reward") is not None and y.get("sum_reward") is not None
    ]
    n = len(diffs)
    mean = sum(diffs) / n if n else None
    interval = None
    if n >= 2 and mean is not None:
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
        half = t975(n - 1) * sd / math.sqrt(n)
        interval = [mean - half, mean + half]
    return {
        "pairs": len(pairs),
        "unpaired_a": len(by_seed_a) - len(pairs),
        "unpaired_b": len(by_seed_b) - len(pairs),
        "success_rate_a": sum(1 for x, _ in pairs if x["success"]) / len(pairs),
        "success_rate_b": sum(1 for _, y in pairs if y["success"]) / len(pairs),
        "both_succeeded": both,
        "only_a_succeeded": only_a,
        "only_b_succeeded": only_b,
        "neither_succeeded": len(pairs) - both - only_a - only_b,
        "mcnemar_exact_p": mcnemar_exact(only_a, only_b),
        "return_diff_mean": mean,
        "return_diff_ci95": interval,
        "per_seed": [
            {
                "seed": s,
                "success_a": bool(x["success"]),
                "success_b": bool(y["success"]),
                "return_a": x.get("sum_reward"),
                "return_b": y.get("sum_reward"),
            }
            for s, (x, y) in zip(seeds, pairs, strict=True)
        ],
    }


def format_comparison(result: Mapping[str, Any], a: str, b: str) -> str:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.4g}"

    ci = result["return_diff_ci95"]
    lines = [
        f"A: {a}",
        f"B: {b}",
        f"paired by seed: {result['pairs']} episode(s)"
        + (
            f" ({result['unpaired_a']} of A and {result['unpaired_b']} of B unpaired, left out)"
            if result["unpaired_a"] or result["unpaired_b"]
            else ""
        ),
        f"success rate: A {result['success_rate_a']:.3f}, B {result['success_rate_b']:.3f}",
        f"  both {result['both_succeeded']}, only A {result['only_a_succeeded']}, "
        f"only B {result['only_b_succeeded']}, neither {result['neither_succeeded']}",
        f"  McNemar's exact test: p = {result['mcnemar_exact_p']:.4g}",
        f"return, B - A per seed: mean {fmt(result['return_diff_mean'])}"
        + (f", 95% CI [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else " (no interval for < 2 pairs)"),
    ]
    return "\n".join(lines)
