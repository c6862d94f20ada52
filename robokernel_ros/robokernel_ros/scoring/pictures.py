"""Pictures of evaluations (`robokernel report DIR... [--out OUT]`): matplotlib PNGs and one
self-contained HTML page (the PNGs inlined as data URIs: the page opens anywhere alone).

Each DIR is an evaluation: an `eval --output` folder (its runs/) or a folder of run
directories or bags. Every figure is computed from the traces by the scorers:

    success_rate.png    success rate per evaluation with its 95 % (Wilson) interval
    returns.png         return and episode length across episodes, per evaluation
    latency_holds.png   histograms of chunk inference latency and of holds per episode
    interventions.png   shield interventions per episode, per evaluation (left out, with
                        a sentence on the page, when the shield intervened in no episode)
    episode_<run>.png   the executed actions over time of the chosen episodes (`plot_episode`)
    index.html          all of the above, with the aggregate table
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..kernel.trace import load_trace
from ..tasks.statistics import wilson_interval
from .plot import plot_episode
from .report import expand_paths, load_episode
from .scorers import get_scorers, score_trace

# one colour per evaluation, in order (matplotlib's tab10, as RGB for the tests' pixel counts)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def _runs_of(path: Path) -> Path:
    from ..tasks.eval_output import RUNS_DIR

    return path / RUNS_DIR if (path / RUNS_DIR).is_dir() else path


def evaluation(path: str | Path) -> dict[str, Any]:
    """{"name", "path", "episodes": [scores per episode, with "_chunk_latencies_s"]}."""
    folder = Path(path)
    scorers = get_scorers()
    episodes = []
    for p in expand_paths([_runs_of(folder)]):
        trace = load_episode(p)
        figures = score_trace(trace, scorers)
        figures["_source"] = str(p)
        # run ids of one second sort by their random part: order by start time instead
        figures["_started"] = (str(trace.meta.get("started_at") or ""), str(p))
        episodes.append(figures)
    episodes.sort(key=lambda e: e["_started"])
    if not episodes:
        raise ValueError(f"path={str(path)!r}: holds no recorded episode")
    return {"name": folder.name or str(folder), "path": str(folder), "episodes": episodes}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    _plt().close(fig)
    return out


def plot_success(evals: Sequence[dict[str, Any]], out: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(evals)), 4))
    for i, ev in enumerate(evals):
        n = len(ev["episodes"])
        k = sum(1 for e in ev["episodes"] if e.get("success"))
        lo, hi = wilson_interval(k, n)
        rate = k / n
        ax.bar(i, rate, color=PALETTE[i % len(PALETTE)], width=0.6)
        ax.errorbar(i, rate, yerr=[[rate - lo], [hi - rate]], color="black", capsize=8)
        ax.text(i, min(1.02, hi + 0.02), f"{k}/{n}", ha="center", va="bottom")
    ax.set_xticks(range(len(evals)), [ev["name"] for ev in evals])
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("success rate (95 % interval)")
    ax.set_title("success rate")
    return _save(fig, out)


# the page's heading of each picture (its file name is the key)
TITLES = {
    "success_rate": "Success rate",
    "returns": "Return and episode length",
    "latency_holds": "Inference latency and holds",
    "interventions": "Shield interventions",
}


def _whole_episodes(ax: Any) -> None:
    """Episode axes count episodes: whole-number ticks only."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def returns_figure(evals: Sequence[dict[str, Any]]) -> Any:
    """The figure of plot_returns (unsaved, open: the caller closes it)."""
    plt = _plt()
    fig, (ax_r, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    for i, ev in enumerate(evals):
        color = PALETTE[i % len(PALETTE)]
        xs = range(len(ev["episodes"]))
        ax_r.plot(
            xs, [e.get("return") for e in ev["episodes"]], "o-", color=color, label=ev["name"]
        )
        ax_l.plot(
            xs, [e.get("length") for e in ev["episodes"]], "o-", color=color, label=ev["name"]
        )
    ax_r.set(title="return per episode", xlabel="episode", ylabel="return")
    ax_l.set(title="episode length", xlabel="episode", ylabel="executed steps")
    ax_r.legend(fontsize=8)
    _whole_episodes(ax_r)
    _whole_episodes(ax_l)
    return fig


def plot_returns(evals: Sequence[dict[str, Any]], out: Path) -> Path:
    return _save(returns_figure(evals), out)


def plot_latency_holds(evals: Sequence[dict[str, Any]], out: Path) -> Path:
    plt = _plt()
    fig, (ax_c, ax_h) = plt.subplots(1, 2, figsize=(10, 4))
    for i, ev in enumerate(evals):
        color = PALETTE[i % len(PALETTE)]
        latencies = [1e3 * x for e in ev["episodes"] for x in e.get("_chunk_latencies_s", [])]
        if latencies:
            ax_c.hist(latencies, bins=30, color=color, alpha=0.6, label=ev["name"])
        ax_h.hist([e.get("holds") or 0 for e in ev["episodes"]], bins=10, color=color, alpha=0.6,
                  label=ev["name"])  # fmt: skip
    ax_c.set(title="chunk inference latency", xlabel="ms", ylabel="chunks")
    ax_h.set(title="holds per episode", xlabel="hold steps", ylabel="episodes")
    from matplotlib.ticker import MaxNLocator

    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of episodes
    ax_h.legend(fontsize=8)
    return _save(fig, out)


def plot_interventions(evals: Sequence[dict[str, Any]], out: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(evals))
    for i, ev in enumerate(evals):
        counts = [e.get("shield_interventions") or 0 for e in ev["episodes"]]
        xs = [j + i * width for j in range(len(counts))]
        ax.bar(xs, counts, width=width, color=PALETTE[i % len(PALETTE)], label=ev["name"])
    ax.set(title="shield interventions per episode", xlabel="episode", ylabel="interventions")
    ax.legend(fontsize=8)
    _whole_episodes(ax)
    return _save(fig, out)


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def write_report(
    paths: Sequence[str | Path], out: str | Path, *, episodes: Sequence[int] = (0,)
) -> dict[str, Any]:
    """Render every picture and index.html into `out`; returns {"html", "pngs"}.

    episodes: which episodes (0-based, of each evaluation) get a trajectory plot.
    """
    evals = [evaluation(p) for p in paths]
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    pngs = [
        plot_success(evals, folder / "success_rate.png"),
        plot_returns(evals, folder / "returns.png"),
        plot_latency_holds(evals, folder / "latency_holds.png"),
    ]
    titles = {p.stem: TITLES[p.stem] for p in pngs}
    intervened = any(e.get("shield_interventions") for ev in evals for e in ev["episodes"])
    if intervened:
        pngs.append(plot_interventions(evals, folder / "interventions.png"))
        titles["interventions"] = TITLES["interventions"]
    else:  # an all-zero plot says less than a sentence
        (folder / "interventions.png").unlink(missing_ok=True)
    for ev in evals:
        for i in episodes:
            if 0 <= i < len(ev["episodes"]):
                source = ev["episodes"][i]["_source"]
                name = f"episode_{ev['name']}_{i}.png".replace("/", "_")
                pngs.append(plot_episode(load_trace(source), folder / name))
                titles[Path(name).stem] = f"Episode {i} of {ev['name']}: executed actions"
    rows = []
    for ev in evals:
        n = len(ev["episodes"])
        k = sum(1 for e in ev["episodes"] if e.get("success"))
        lo, hi = wilson_interval(k, n)
        mean_ret = sum(e.get("return") or 0.0 for e in ev["episodes"]) / n
        rows.append(
            f"<tr><td>{html.escape(ev['name'])}</td><td>{n}</td><td>{k}</td>"
            f"<td>{k / n:.3f} [{lo:.3f}, {hi:.3f}]</td><td>{mean_ret:.4g}</td></tr>"
        )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>robokernel report</title>"
        "<style>body{font-family:sans-serif;margin:2em}img{max-width:100%;display:block;"
        "margin:1em 0}td,th{padding:.2em .8em;text-align:left}</style></head><body>"
        "<h1>robokernel report</h1><table><tr><th>evaluation</th><th>episodes</th>"
        "<th>successes</th><th>success rate [95 % interval]</th><th>mean return</th></tr>"
        + "".join(rows)
        + "</table>"
        + (
            ""
            if intervened
            else "<p>Shield interventions: none (no shield intervention in any episode).</p>"
        )
        + "".join(f"<h2>{html.escape(titles[p.stem])}</h2>{_img(p)}" for p in pngs)
        + "</body></html>\n"
    )
    index = folder / "index.html"
    index.write_text(page)
    return {"html": str(index), "pngs": [str(p) for p in pngs]}
