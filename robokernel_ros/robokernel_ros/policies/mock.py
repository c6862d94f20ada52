"""The `mock` provider: moves every actuator, deterministically for a given seed.

Each action key follows `center + amplitude * half_range * sin(2 pi t / period_steps + phase)`
inside the key's command range (the range comes from `set_action_limits`; without one
the amplitude is absolute), with phases drawn from the seed. It needs no model, no
observation and no GPU, so it measures the loop itself: the per-key coefficients are
computed once per key set, a chunk is one vectorised numpy evaluation (a single action,
the default, is a few float operations per key).

policy_config:
  execution_horizon  actions per chunk (default 1: a single-step policy, so async_rtc=None
                     resolves to synchronous; > 1 makes it chunk-emitting)
  amplitude          fraction of each key's half range (default 0.3; 0 = a zero/centre policy)
  period_steps       steps per sine period (default 100)
  noise              std of Gaussian noise added per action, as a fraction of half range (default 0)
  latency_s          seconds every get_actions sleeps (simulated inference, default 0)
  extra_keys         action keys emitted besides the robot's (they resolve to nothing)
  key_mode           "bound" (the robot's actuator keys, default) or "generic" ("action_0", ...:
                     keys that resolve to nothing, and the binding flag says so)
  empty_chunks       emit an empty chunk on these call indices (0-based), for robustness tests
  fail_on_call       raise RuntimeError on this call index (None: never)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from robokernel_ros.policies.base import Action, ActionRows, Policy, register_provider

_CONFIG_KEYS = frozenset(
    {
        "execution_horizon",
        "amplitude",
        "period_steps",
        "noise",
        "latency_s",
        "extra_keys",
        "key_mode",
        "empty_chunks",
        "fail_on_call",
        "seed",
        "n_actions",
    }
)


def _num(config: Mapping[str, Any], key: str, *, minimum: float, strict: bool = False) -> None:
    if key not in config:
        return
    value = config[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > minimum if strict else value >= minimum)
    if not ok:
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ValueError(f"policy_config[{key!r}]={value!r}: must be a finite number {bound}")


_PYTHON_HORIZON = 16  # chunks up to this long are computed without numpy


class MockPolicy(Policy):
    provider = "mock"

    def __init__(
        self,
        *,
        execution_horizon: int = 1,
        amplitude: float = 0.3,
        period_steps: float = 100.0,
        noise: float = 0.0,
        latency_s: float = 0.0,
        extra_keys: Sequence[str] = (),
        key_mode: str = "bound",
        empty_chunks: Sequence[int] = (),
        fail_on_call: int | None = None,
        seed: int | None = None,
        n_actions: int = 6,
    ) -> None:
        super().__init__()
        self.preflight(
            {
                "execution_horizon": execution_horizon,
                "amplitude": amplitude,
                "period_steps": period_steps,
                "noise": noise,
                "latency_s": latency_s,
                "extra_keys": list(extra_keys),
                "key_mode": key_mode,
                "empty_chunks": list(empty_chunks),
            }
        )
        self.execution_horizon = int(execution_horizon)
        self.amplitude = float(amplitude)
        self.period_steps = float(period_steps)
        self.noise = float(noise)
        self.latency_s = float(latency_s)
        self.extra_keys = tuple(extra_keys)
        self.key_mode = key_mode
        self.empty_chunks = frozenset(int(i) for i in empty_chunks)
        self.fail_on_call = fail_on_call
        self.n_actions = int(n_actions)
        self._base_seed = seed
        self._rng = np.random.default_rng(seed)
        self._phases: dict[str, float] = {}
        self._plan: _Plan | None = None
        self._t = 0
        self.calls = 0

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config: unknown keys {unknown} for provider 'mock'; known: {sorted(_CONFIG_KEYS)}"
            )
        h = config.get("execution_horizon", 1)
        if isinstance(h, bool) or not isinstance(h, int) or h < 1:
            raise ValueError(
                f"policy_config['execution_horizon']={h!r}: must be a positive whole number"
            )
        _num(config, "amplitude", minimum=0.0)
        _num(config, "period_steps", minimum=0.0, strict=True)
        _num(config, "noise", minimum=0.0)
        _num(config, "latency_s", minimum=0.0)
        mode = config.get("key_mode", "bound")
        if mode not in ("bound", "generic"):
            raise ValueError(f"policy_config['key_mode']={mode!r}: must be 'bound' or 'generic'")
        extra = config.get("extra_keys", ())
        if isinstance(extra, str) or not all(isinstance(k, str) for k in extra):
            raise ValueError(f"policy_config['extra_keys']={extra!r}: must be a list of strings")

    def _keys(self) -> tuple[str, ...]:
        if self.key_mode == "generic" or not self.action_keys:
            n = len(self.action_keys) or self.n_actions
            if not self.action_keys:
                self.positional_fallback_used = True
            else:
                self.generic_state_keys_used = True
            return tuple(f"action_{i}" for i in range(n))
        return self.action_keys

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        if seed is None:
            seed = self._base_seed
        self._rng = np.random.default_rng(seed)
        keys = self._keys()
        self._phases = {
            k: float(p)
            for k, p in zip(keys, self._rng.uniform(0, 2 * math.pi, len(keys)), strict=True)
        }
        self._plan = None
        self._t = 0
        self.calls = 0

    def _current_plan(self) -> _Plan:
        """The per-key coefficients (cached until the keys, the limits or the config change)."""
        plan = self._plan
        if (  # the cached plan, checked by identity first (cheap on an idle server)
            plan is not None
            and plan.keys is self.action_keys
            and plan.limits is self.action_limits
            and plan.config[0] is self.amplitude
            and plan.config[1] is self.noise
            and plan.config[2] is self.extra_keys
            and self.key_mode == "bound"
        ):
            return plan
        keys = self._keys()
        limits = self.action_limits
        if (
            plan is not None
            and plan.keys == keys
            and plan.limits is limits
            and plan.config == (self.amplitude, self.noise, self.extra_keys)
        ):
            return plan
        rows = []
        for key in keys:
            lo, hi = limits.get(key, (-1.0, 1.0))
            phase = self._phases.get(key)
            if phase is None:  # a key that appeared after reset: its phase drawn now
                phase = self._phases[key] = float(self._rng.uniform(0, 2 * math.pi))
            if key not in limits:
                lo, hi = -math.inf, math.inf  # no clipping; centre 0, half range 1
                center, half = 0.0, 1.0
            else:
                center, half = (lo + hi) / 2.0, (hi - lo) / 2.0
            rows.append((center, self.amplitude * half, phase, lo, hi, self.noise * half))
        config = (self.amplitude, self.noise, self.extra_keys)
        plan = self._plan = _Plan(keys, limits, config, rows)
        return plan

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        plan, values, horizon = self._next_chunk()
        return self._actions(plan, values, horizon) if horizon else []

    def get_action_rows(
        self,
        observation: Mapping[str, Any],
        instruction: str = "",
        *,
        keys: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> ActionRows:
        plan, values, horizon = self._next_chunk()
        if not horizon:
            return ActionRows.from_actions([], keys)
        if plan.extra or (keys is not None and keys is not plan.keys and tuple(keys) != plan.keys):
            # columns other than the values' own: through the dicts, which fill them
            return ActionRows.from_actions(self._actions(plan, values, horizon), keys)
        return ActionRows(list(plan.keys), values, horizon)

    @staticmethod
    def _actions(plan: _Plan, values: list[float], horizon: int) -> list[Action]:
        keys = plan.keys
        if keys:
            flat = iter(values)  # zip stops at the end of `keys` first: one row each
            chunk = [dict(zip(keys, flat)) for _ in range(horizon)]  # noqa: B905
        else:
            chunk = [{} for _ in range(horizon)]
        if plan.extra:
            for action in chunk:
                action.update(dict.fromkeys(plan.extra, 0.0))
        return chunk

    def _next_chunk(self) -> tuple[Any, list[float], int]:
        """This call's chunk: its plan, its values (row-major) and its horizon (0, and no
        plan, for a configured empty chunk); the call counts, sleeps and fails as configured."""
        call = self.calls
        self.calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.fail_on_call is not None and call == self.fail_on_call:
            raise RuntimeError(f"mock policy failing on call {call} as configured (fail_on_call)")
        if call in self.empty_chunks:
            return None, [], 0
        plan = self._current_plan()
        horizon = self.execution_horizon
        t0 = self._t
        self._t = t0 + horizon
        omega = 2 * math.pi / self.period_steps
        if horizon <= _PYTHON_HORIZON and not self.noise:
            # Short chunks in plain Python: the same values as the numpy path below, at a
            # fraction of its cost when the process has been idle between calls (a policy
            # server at 50 Hz: ~0.12 vs ~0.24 ms for 8 actions here). Keys without limits
            # skip the clipping (min/max with infinite bounds: the value itself).
            sin = math.sin
            steps = [omega * t for t in range(t0, t0 + horizon)]
            if plan.clipped is None:
                values = [c + a * sin(x + p) for x in steps for c, a, p in plan.terms]
            else:
                values = [
                    min(hi, max(lo, c + a * sin(x + p))) if clip else c + a * sin(x + p)
                    for x in steps
                    for c, a, p, lo, hi, clip in plan.clipped
                ]
            return plan, values, horizon
        angles = np.multiply.outer(omega * np.arange(t0, t0 + horizon, dtype=float), plan.ones)
        angles += plan.phase
        values = plan.center + plan.scale * np.sin(angles)
        if self.noise:  # drawn in the order of the actions, then of the keys
            values += self._rng.normal(0.0, 1.0, values.shape) * plan.noise
        np.clip(values, plan.lo, plan.hi, out=values)
        return plan, values.ravel().tolist(), horizon


class _Plan:
    """The mock's per-key coefficients: value = center + scale * sin(omega t + phase), clipped."""

    __slots__ = ("keys", "limits", "config", "extra", "center", "scale", "phase", "lo",
                 "hi", "noise", "ones", "terms", "clipped")  # fmt: skip

    def __init__(
        self, keys: tuple[str, ...], limits: Any, config: tuple[Any, ...], rows: list[tuple]
    ) -> None:
        self.keys = keys
        self.limits = limits
        self.config = config  # (amplitude, noise, extra_keys) the rows were computed with
        self.extra = tuple(config[2])
        columns = np.array(rows, dtype=float).reshape(len(rows), 6).T
        self.center, self.scale, self.phase, self.lo, self.hi, self.noise = columns
        self.ones = np.ones(len(rows))
        # The plain-Python path's per-key terms: (center, scale, phase), and with the
        # bounds and whether they clip when any key has finite ones (else None).
        self.terms = [(row[0], row[1], row[2]) for row in rows]
        clip = [not (row[3] == -math.inf and row[4] == math.inf) for row in rows]
        self.clipped = (
            [
                (*term, row[3], row[4], c)
                for term, row, c in zip(self.terms, rows, clip, strict=True)
            ]
            if any(clip)
            else None
        )


register_provider("mock", MockPolicy, replace=True)
