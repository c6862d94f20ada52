"""A PNG of one episode: executed actions over time, holds shaded, interventions marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..kernel.events import SAFETY_INTERVENTION
from ..kernel.trace import Trace
from .scorers import action_matrix, actions_of


def plot_episode(trace: Trace, out: str | Path) -> Path:
    """Write the plot to `out` (a .png path) and return it."""
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"out={str(out)!r}: must be a .png path")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys, _, values = action_matrix(trace)
    acts = actions_of(trace)
    t0 = trace.events[0].t if trace.events else 0.0
    times = np.asarray([e.t - t0 for e in acts], dtype=float)
    holds = np.asarray([bool(e.data.get("hold")) for e in acts])
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=100)
    try:
        for j, key in enumerate(keys):
            ax.plot(times, values[:, j], label=key, linewidth=1.2)
        dt = float(np.median(np.diff(times))) if len(times) > 1 else 0.0
        hold_label = "hold"
        for t in times[holds]:
            ax.axvspan(
                t - dt / 2, t + dt / 2, color="orange", alpha=0.3, linewidth=0, label=hold_label
            )
            hold_label = None
        iv_label = "shield intervention"
        for e in trace.events:
            if e.kind == SAFETY_INTERVENTION:
                ax.axvline(e.t - t0, color="red", linestyle="--", linewidth=1.0, label=iv_label)
                iv_label = None
        outcome = trace.meta.get("outcome", "")
        ax.set_title(
            f"{trace.meta.get('run_id', trace.path.name)}  {outcome}  ({len(acts)} steps, {int(holds.sum())} holds)"
        )
        ax.set_xlabel("episode time [s]")
        ax.set_ylabel("action")
        ax.grid(True, alpha=0.3)
        if keys or holds.any():
            ax.legend(loc="upper left", fontsize="small", ncol=2)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
