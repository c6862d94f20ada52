"""The one predicate context: what a criterion sees after a control step, online and offline.

    ctx = predicate_context(3, obs, env.privileged_state(), robot="arm", episode=0)
    verdict = judge(failure, success, ctx, episode=0)     # ("failure" | "success", criterion)
    for ctx in trace_contexts(trace): ...                  # the same contexts, from a trace

A context is the env's privileged state (qpos, qvel, ctrl, time, bodies, contacts,
robots) updated with the rollout's own keys, which the state can never shadow:

    step     control steps taken: 0 at reset, k after the k-th env.step
    robot    the rollout's robot (the first of its robots): robot predicates default to it
    episode  the episode's index in its call
    obs      the observation after that step (offline: the trace's JSON copy, no images)
    joints   observed_joint_positions(obs)

Online, the rollout's monitor builds one after every env.step from that step's
observation and privileged state; offline, `trace_contexts` builds it from the trace's
observation(s) and privileged(s) events (the kernel records both at s = steps taken,
and the rollout records the privileged state at every step whenever it evaluates a
criterion). Criteria are evaluated on the contexts after steps 1, 2, ...: the reset
context (step 0) only arms a stop_when clause that already holds at reset, online.
At each step a benchmark is judged failure first, then success (`judge`), so the same
episode gives the same verdict at the same step online and offline.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..kernel.events import OBSERVATION, PRIVILEGED
from ..kernel.observation import observed_joint_positions
from ..kernel.trace import Trace
from .predicates import Criterion, first_true

FAILURE = "failure"
SUCCESS = "success"


def predicate_context(
    step: int,
    obs: Any,
    state: Mapping[str, Any] | None,
    *,
    robot: str | None,
    episode: int | None,
) -> dict[str, Any]:
    """The context of the step `step` (see the module docstring for its keys)."""
    ctx = dict(state or {})  # first: the rollout's keys below win over the state's
    ctx["step"] = int(step)
    ctx["robot"] = robot
    ctx["episode"] = episode
    ctx["obs"] = obs
    ctx["joints"] = observed_joint_positions(obs) if isinstance(obs, Mapping) else {}
    return ctx


def judge(
    failure: Sequence[Criterion],
    success: Sequence[Criterion],
    ctx: Mapping[str, Any],
    *,
    episode: int,
) -> tuple[str, Criterion] | None:
    """The step's verdict: (FAILURE, the first failure criterion that holds), else
    (SUCCESS, the first success criterion that holds), else None. A criterion that
    raises becomes a CriterionError."""
    failed = first_true(failure, ctx, episode=episode)
    if failed is not None:
        return FAILURE, failed
    won = first_true(success, ctx, episode=episode)
    if won is not None:
        return SUCCESS, won
    return None


def trace_robot(meta: Mapping[str, Any]) -> str | None:
    """The robot a recorded rollout's predicates defaulted to: its first robot."""
    robots = meta.get("robots")
    if isinstance(robots, list | tuple) and robots and isinstance(robots[0], str):
        return robots[0]
    robot = meta.get("robot")
    return robot if isinstance(robot, str) else None


def trace_contexts(trace: Trace) -> Iterator[dict[str, Any]]:
    """The contexts criteria were evaluated on (steps >= 1), rebuilt from a trace.

    One per privileged event: steps whose privileged state was not recorded are
    skipped (a rollout that evaluates no criterion records it every 10th step)."""
    robot = trace_robot(trace.meta)
    episode = trace.meta.get("episode")
    obs_by_step: dict[int, Any] = {}
    for e in trace.events:
        if e.kind == OBSERVATION:
            obs_by_step[e.step] = e.data.get("obs") or {}
        elif e.kind == PRIVILEGED and e.step >= 1:
            state = e.data.get("state") or {}
            yield predicate_context(
                e.step, obs_by_step.get(e.step, {}), state, robot=robot, episode=episode
            )
