"""The policy-rollout API: run / start / stop / list / eval / benchmark / replay on MuJoCo.

    from robokernel_ros.rollout import SimWorkcell, PolicyRunner
    cell = SimWorkcell()                    # an empty MuJoCo scene
    cell.add_robot("arm", "so101")          # a packaged model name or an MJCF path
    out = cell.run_policy("arm", policy_provider="mock", n_steps=20, seed=0)   # a RunResult
    out.ok, out.status, out.text, out.report  # True, Status.SUCCESS, its line, its fields
    out.envelope()                          # {"status": "success" | "error", "content": [...]}

Imports no ROS: the runner node wraps SimWorkcell and serves its calls as services.
Predicates, benchmark specs and goals are `robokernel_ros.tasks`'.
"""

from .control import RolloutControl
from .episode import EpisodeResult, seed_everything
from .errors import RecordingFrameError
from .plan import DEFAULT_TRACE_DIR, RolloutPlan
from .policy_runner import PolicyRunner
from .progress import PROGRESS, Progress
from .replay import RecordedEpisode, ReplayPolicy, resolve_recording
from .requests import EvalRequest, MultiRequest, RunRequest, plan_eval, plan_multi, plan_run
from .results import (
    CallResult,
    EvalResult,
    ListResult,
    MultiResult,
    RunResult,
    StartResult,
    Status,
    StopResult,
    envelope,
    envelope_json,
    envelope_text,
    error_envelope,
)
from .signatures import WORKCELL
from .sinks import EpisodeSink, EpisodeSinkContext
from .validation import boolean_flag_error
from .workcell import SCENE_MUTATIONS, SceneBusyError, SimWorkcell

__all__ = [
    "DEFAULT_TRACE_DIR",
    "WORKCELL",
    "CallResult",
    "EvalResult",
    "ListResult",
    "MultiResult",
    "RunResult",
    "StartResult",
    "Status",
    "StopResult",
    "PROGRESS",
    "SCENE_MUTATIONS",
    "EpisodeResult",
    "EpisodeSink",
    "EpisodeSinkContext",
    "EvalRequest",
    "MultiRequest",
    "PolicyRunner",
    "Progress",
    "RecordedEpisode",
    "RecordingFrameError",
    "ReplayPolicy",
    "RolloutControl",
    "RolloutPlan",
    "RunRequest",
    "SceneBusyError",
    "SimWorkcell",
    "boolean_flag_error",
    "envelope",
    "envelope_json",
    "envelope_text",
    "error_envelope",
    "plan_eval",
    "plan_multi",
    "plan_run",
    "resolve_recording",
    "seed_everything",
]
