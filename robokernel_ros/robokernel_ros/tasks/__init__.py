"""Tasks: predicates over the predicate context (one context online and offline),
benchmark specs, per-episode goals, and the statistics of a benchmark's successes.

    from robokernel_ros.tasks import BenchmarkRegistry, compile_criteria, predicate_context
    success = compile_criteria("success", {"predicate": "base_beyond_x", "x": 2.0})

Imports only the kernel (and numpy): never the rollout, the envs, the policies, scoring
or ROS. The rollout's monitor and the offline scorers both evaluate criteria on
`tasks.context`'s contexts, so an episode scores the same online and offline.
"""

from .benchmarks import BenchmarkRegistry, builtin_benchmark_specs, validate_spec
from .context import judge, predicate_context, trace_contexts
from .goals import GoalEnv, draw_goal, validate_goal, with_goal
from .predicates import (
    PREDICATES,
    REWARDS,
    Criterion,
    CriterionError,
    RewardTerm,
    compile_criteria,
    compile_rewards,
    first_true,
    register_predicate,
    register_reward,
    total_reward,
)
from .statistics import pass_hat_k, wilson_interval

__all__ = [
    "PREDICATES",
    "REWARDS",
    "BenchmarkRegistry",
    "Criterion",
    "CriterionError",
    "GoalEnv",
    "RewardTerm",
    "builtin_benchmark_specs",
    "compile_criteria",
    "compile_rewards",
    "draw_goal",
    "first_true",
    "judge",
    "pass_hat_k",
    "predicate_context",
    "register_predicate",
    "register_reward",
    "total_reward",
    "trace_contexts",
    "validate_goal",
    "validate_spec",
    "wilson_interval",
    "with_goal",
]
