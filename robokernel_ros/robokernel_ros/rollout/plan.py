"""RolloutPlan: every parameter of a rollout call, checked and normalised (see rollout.requests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robokernel_ros.policies.base import Policy
from robokernel_ros.tasks.predicates import Criterion, RewardTerm

DEFAULT_TRACE_DIR = "runs/"
# The parallel options' defaults, defined here only: RolloutPlan, the EvalRequest
# (rollout.requests) and the CLI take them from these.
DEFAULT_WORKERS = 1  # in this process, no Ray
DEFAULT_MAX_BATCH = 8  # a batched eval's observations per forward pass at most
DEFAULT_MAX_WAIT_MS = 50.0  # bounds a caller whose peers are away; full batches close at once


@dataclass
class RolloutPlan:
    """Every parameter of a call, checked and normalised (see plan_run / plan_eval / plan_multi)."""

    call: str
    robots: tuple[str, ...]
    policies: dict[
        str, tuple[str, dict[str, Any], Policy | None]
    ]  # robot -> (provider, config, object)
    policy_kwargs: dict[str, Any]
    instructions: dict[str, str]
    n_steps: int
    duration: float
    control_hz: float
    action_horizons: dict[str, int]
    seed: int | None
    async_rtc: bool | None
    rtc_timeout: float | None
    latency_s: float | None = None  # the virtual clock's inference latency (None: measured)
    stop_when: list[Criterion] = field(default_factory=list)
    success: list[Criterion] = field(default_factory=list)
    failure: list[Criterion] = field(default_factory=list)
    rewards: list[RewardTerm] = field(default_factory=list)
    success_fn: Criterion | None = None
    observers: list[Callable[..., Any]] = field(default_factory=list)
    on_frame: Callable[..., Any] | None = None
    video: dict[str, Any] | None = None
    fast_mode: bool = True
    reset_between: bool = True
    n_episodes: int = 1
    first_episode: int = 0  # an eval's episodes are numbered first_episode + i (seed + that)
    trace_dir: Path | None = None
    safety: dict[str, Any] | None = None
    progress: bool | None = None
    benchmark: dict[str, Any] | None = None
    scene_override: Any = None  # a benchmark's own scene
    bag: str | None = None  # the rosbag2 storage of each episode's <run_dir>/bag, None: no bag
    cameras: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # cameras= as asked
    image_size: tuple[int, int] | None = None  # image_size= as asked
    env_cameras: tuple[str, ...] = ()  # resolved by resolve_cameras: what the env renders
    env_image_size: tuple[int, int] | None = None
    workers: int = DEFAULT_WORKERS  # > 1: episodes sharded over Ray workers (rollout.parallel)
    ray_address: str | None = None  # None: a local Ray instance
    batch_inference: bool = False  # one policy actor batches every worker's inference
    max_batch: int = DEFAULT_MAX_BATCH
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    wbc_install_torque_control: bool = False  # the torque shim for the call (rollout.torque)
    wbc_gains: dict[str, Any] = field(default_factory=dict)  # robot -> wbc_gains as asked
    torque_gains: dict[str, Any] = field(default_factory=dict)  # robot -> resolved, by preflight
    live: Any = None  # live.LiveOptions: a Foxglove view of every episode; None: none
    live_view: Any = field(default=None, repr=False, compare=False)  # started by the first episode
    teleop: Any = None  # a kernel TeleopSource for every episode (None: the env's, if any)
    sentry_rotate_s: float | None = None  # rollout.sentry: a new episode every N s (None: one)

    @property
    def robot(self) -> str:
        return self.robots[0]
