"""The `mock` provider: moves every actuator, deterministically for a given seed.

Each action key follows `center + amplitude * half_range * sin(2 pi t / period_steps + phase)`
inside the key's command range (the range comes from `set_action_limits`; without one
the amplitude is absolute), with phases drawn from the seed. It needs no model, no
observation and no GPU, so it measures the loop itself.

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

from robokernel_ros.policies.base import Action, Policy, register_provider

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
        self._t = 0
        self.calls = 0

    def _value(self, key: str, t: int) -> float:
        lo, hi = self.action_limits.get(key, (-1.0, 1.0))
        center, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        phase = self._phases.get(key)
        if phase is None:
            phase = self._phases[key] = float(self._rng.uniform(0, 2 * math.pi))
        value = center + self.amplitude * half * math.sin(
            2 * math.pi * t / self.period_steps + phase
        )
        if self.noise:
            value += float(self._rng.normal(0.0, self.noise * half))
        return min(hi, max(lo, value)) if key in self.action_limits else value

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        call = self.calls
        self.calls += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        if self.fail_on_call is not None and call == self.fail_on_call:
            raise RuntimeError(f"mock policy failing on call {call} as configured (fail_on_call)")
        if call in self.empty_chunks:
            return []
        keys = self._keys()
        chunk: list[Action] = []
        for _ in range(self.execution_horizon):
            action = {k: self._value(k, self._t) for k in keys}
            for k in self.extra_keys:
                action[k] = 0.0
            chunk.append(action)
            self._t += 1
        return chunk


register_provider("mock", MockPolicy, replace=True)
