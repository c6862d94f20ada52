"""Scorers and shadow replay over recorded traces (run directories or bags).

    from robokernel_ros.scoring import score_paths, score_trace, register_scorer, shadow_replay
    from robokernel_ros.scoring import write_report  # `robokernel report`: PNGs and one page

Scorers read only the trace: never the agent or the environment.
"""

from .. import recording as _recording  # noqa: F401 - registers the rosbag2 reader with load_trace
from .pictures import write_report
from .report import expand_paths, format_table, score_paths
from .scorers import (
    JerkScorer,
    OutcomeScorer,
    PredicateScorer,
    SafetyScorer,
    Scorer,
    TakeoverScorer,
    TimingScorer,
    aggregate,
    callable_scorer,
    get_scorers,
    register_scorer,
    score_trace,
    scorer_names,
)
from .shadow import ShadowReport, ShadowStep, shadow_replay

__all__ = [
    "JerkScorer",
    "OutcomeScorer",
    "PredicateScorer",
    "SafetyScorer",
    "Scorer",
    "ShadowReport",
    "ShadowStep",
    "TakeoverScorer",
    "TimingScorer",
    "aggregate",
    "callable_scorer",
    "expand_paths",
    "format_table",
    "get_scorers",
    "register_scorer",
    "score_paths",
    "score_trace",
    "scorer_names",
    "shadow_replay",
    "write_report",
]
