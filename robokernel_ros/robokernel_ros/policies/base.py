"""The Policy protocol, the provider registry, and the adapter that makes a Policy a kernel Agent.

A provider is a named factory of Policy objects (`mock`, `scripted`, `lerobot`,
`openpi`, `lerobot_async`, or one a user registers). The rollout API builds policies through
`create_policy(provider, **policy_config)` after the provider's class-level
`preflight(config)` has accepted the config, so a malformed request is refused
before any robot is claimed.

Providers of other layers and packages are registered as Python entry points of the group
`robokernel_ros.policies` (`name = module:factory`): listed by available_providers without
being imported, imported when asked for. The ROS layer's `remote` provider is one
(robokernel_ros/setup.py), so this layer never names the layers above it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

_log = logging.getLogger(__name__)

Action = dict[str, float]


@dataclass(slots=True)
class ActionRows:
    """A chunk as one row-major block of floats: `horizon` rows of one value per key of
    `keys`. What the policy server puts on the wire (ActionChunk.keys / .actions), built
    without an action dict per step when the policy can (Policy.get_action_rows)."""

    keys: list[str]
    values: Sequence[float]
    horizon: int

    @classmethod
    def from_actions(
        cls, actions: Sequence[Mapping[str, float]], keys: Sequence[str] | None = None
    ) -> ActionRows:
        """Action dicts as rows: the columns are `keys`, else the first action's keys; a
        key a row lacks is NaN (the wire's "not sent", dropped again on the way back)."""
        rows = actions if isinstance(actions, list) else list(actions)
        columns = list(keys) if keys else (list(rows[0]) if rows else [])
        # (plain comprehensions: itemgetter/map/chain in C measured slower, cold and hot)
        try:
            values = [row[k] for row in rows for k in columns]
        except KeyError:
            nan = math.nan
            values = [row.get(k, nan) for row in rows for k in columns]
        return cls(columns, values, len(rows))


class Policy:
    """Base class of every policy provider's policy.

    Subclasses implement `get_actions`; the rest has sensible defaults.
    `execution_horizon` is the length of the chunks the policy emits (1 for a
    single-step policy); `supports_rtc` says the policy blends a new chunk with the
    actions still queued when `get_actions` receives `queued_actions`/`delay_steps`.
    """

    provider: ClassVar[str] = ""
    execution_horizon: int = 1
    supports_rtc: bool = False
    #: True: PolicyAgent passes the kernel's step of the observation as `step=` to
    #: get_actions (the remote provider tags its request with it, so the chunk's
    #: obs_step is the kernel's). Other providers' get_actions need not accept it.
    wants_step: ClassVar[bool] = False

    def __init__(self) -> None:
        self.action_keys: tuple[str, ...] = ()
        self.action_limits: dict[str, tuple[float, float]] = {}
        # Binding health: a true flag means the policy saw or emitted keys by position
        # or by generic names rather than by the robot's own names.
        self.positional_fallback_used = False
        self.generic_state_keys_used = False
        self.missing_state_keys_used = False

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        """Refuse a bad config before anything starts (raise ValueError naming the key)."""

    def set_robot_state_keys(self, action_keys: Sequence[str]) -> None:
        """Bind the policy's output to the robot's action keys (actuator names)."""
        self.action_keys = tuple(action_keys)

    def set_action_limits(self, limits: Mapping[str, tuple[float, float]]) -> None:
        """The robot's command range per action key (called after set_robot_state_keys)."""
        self.action_limits = {k: (float(lo), float(hi)) for k, (lo, hi) in limits.items()}

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        """Start a new episode."""

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        raise NotImplementedError

    def get_action_rows(
        self,
        observation: Mapping[str, Any],
        instruction: str = "",
        *,
        keys: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> ActionRows:
        """The chunk get_actions returns, as ActionRows with the columns `keys` (else the
        first action's keys): what the policy server sends. A policy whose chunk is an
        array already (the mock, LeRobot) overrides it to skip the per-step dicts."""
        return ActionRows.from_actions(self.get_actions(observation, instruction, **kwargs), keys)

    @classmethod
    def batch_refusal(cls, config: Mapping[str, Any]) -> str | None:
        """Why this config's policy cannot batch (get_actions_batch), or None when it can."""
        return f"the {cls.provider or cls.__name__} provider does not batch observations"

    def get_actions_batch(
        self, observations: Sequence[Mapping[str, Any]], instructions: Sequence[str]
    ) -> list[list[Action]]:
        """One chunk per observation from one forward pass (policies whose
        batch_refusal is None implement it; see policies.batching)."""
        raise NotImplementedError(self.batch_refusal(getattr(self, "config", {})) or "")

    def is_chunk_emitting(self) -> bool:
        return self.execution_horizon > 1

    def binding_report(self) -> dict[str, bool]:
        return {
            "positional_fallback_used": self.positional_fallback_used,
            "generic_state_keys_used": self.generic_state_keys_used,
            "missing_state_keys_used": self.missing_state_keys_used,
        }

    def close(self) -> None:
        """Release what the policy holds (threads, ROS nodes, GPU memory)."""


PolicyFactory = Callable[..., Policy]
_PROVIDERS: dict[str, type[Policy] | PolicyFactory] = {}


def register_provider(
    name: str, factory: type[Policy] | PolicyFactory, *, replace: bool = False
) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"provider name={name!r}: must be a non-empty string")
    if name in _PROVIDERS and not replace:
        raise ValueError(f"policy provider {name!r} is already registered (pass replace=True)")
    _PROVIDERS[name] = factory


def available_providers() -> list[str]:
    _load_builtin_providers()
    return sorted(set(_PROVIDERS) | set(_LAZY_PROVIDERS) | set(_entry_point_providers()))


def provider_class(name: str) -> type[Policy] | PolicyFactory:
    _load_builtin_providers()
    if isinstance(name, str) and name not in _PROVIDERS and name in _LAZY_PROVIDERS:
        importlib.import_module(_LAZY_PROVIDERS[name])  # registers itself on import
    if isinstance(name, str) and name not in _PROVIDERS and name in _entry_point_providers():
        factory = _entry_point_providers()[name].load()  # its module may register it too
        if name not in _PROVIDERS:
            register_provider(name, factory)
    if not isinstance(name, str) or name not in _PROVIDERS:
        raise ValueError(f"policy_provider={name!r}: must be one of {sorted(_PROVIDERS)}")
    return _PROVIDERS[name]


def preflight(name: str, config: Mapping[str, Any]) -> None:
    """The provider's class-level refusal hook (unknown provider refused too)."""
    factory = provider_class(name)
    hook = getattr(factory, "preflight", None)
    if hook is not None:
        hook(config)


def batch_refusal(name: str, config: Mapping[str, Any]) -> str | None:
    """Why provider `name` with `config` cannot serve batch_inference=True (None: it can)."""
    factory = provider_class(name)
    hook = getattr(factory, "batch_refusal", None)
    return hook(config) if hook is not None else f"the {name} provider does not batch observations"


def create_policy(name: str, **config: Any) -> Policy:
    factory = provider_class(name)
    policy = factory(**config)
    if not isinstance(policy, Policy):
        raise TypeError(f"provider {name!r} returned {type(policy).__name__}, not a Policy")
    return policy


_BUILTINS_LOADED = False
#: Built-in providers whose module is imported only when their name is asked for:
#: `openpi` and `lerobot_async` open network connections (docs/protocols.md).
_LAZY_PROVIDERS = {
    "openpi": "robokernel_ros.policies.openpi",
    "lerobot_async": "robokernel_ros.policies.lerobot_async",
}


#: The entry-point group of providers registered by other layers and packages.
ENTRY_POINT_GROUP = "robokernel_ros.policies"


@functools.cache
def _entry_point_providers() -> dict[str, importlib.metadata.EntryPoint]:
    """{name: entry point} of the installed providers of ENTRY_POINT_GROUP (none loaded)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _load_builtin_providers() -> None:
    """Import the built-in providers once; each module registers itself on import."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for module in ("mock", "scripted", "lerobot"):
        try:
            importlib.import_module(f"robokernel_ros.policies.{module}")
        except ModuleNotFoundError as exc:
            # Only a missing provider module is tolerated (the module itself must
            # import lazily whatever optional dependency it needs).
            if exc.name != f"robokernel_ros.policies.{module}":
                raise


class PolicyAgent:
    """A Policy seen as a kernel Agent: act() asks the policy for one chunk (its first
    `action_horizon` actions), with `policy_kwargs` passed along, and keeps running
    inference figures of its act() calls (count, total and max seconds: bounded state,
    zeroed by reset()).

    requery_empty: an empty chunk is asked for again at once (counted in empty_chunks),
    and a second empty one raises RuntimeError (the rollout's episode then ends with a
    policy error: a transient hiccup is not fatal, a policy that returns nothing is);
    without it an empty chunk is returned as it is (a served session holds and asks again).
    """

    def __init__(self, policy: Policy, *, action_horizon: int | None = None,
                 policy_kwargs: Mapping[str, Any] | None = None, requery_empty: bool = False) -> None:  # fmt: skip
        self.policy = policy
        self.action_horizon = action_horizon
        self.instruction = ""
        self.supports_rtc = bool(getattr(policy, "supports_rtc", False))
        self.wants_step = bool(getattr(policy, "wants_step", False))
        self.policy_kwargs: dict[str, Any] = dict(policy_kwargs or {})
        self.requery_empty = requery_empty
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self.inference_count = 0
        self.inference_total_s = 0.0
        self.inference_max_s = 0.0
        self.empty_chunks = 0
        self.instruction = instruction
        self.policy.reset(instruction=instruction, seed=seed)

    def act(self, observation: Mapping[str, Any], step: int, **rtc: Any) -> list[Action]:
        start = time.monotonic()
        if self.wants_step:
            rtc = {**self.policy_kwargs, **rtc, "step": step}
        elif self.policy_kwargs:
            rtc = {**self.policy_kwargs, **rtc}
        chunk = list(
            self.policy.get_actions(observation, self.instruction, **rtc)
        )  # a copy: the kernel's queue is its own
        if not chunk and self.requery_empty:
            self.empty_chunks += 1
            _log.warning("policy returned an empty chunk at step %d; re-querying once", step)
            chunk = list(self.policy.get_actions(observation, self.instruction, **rtc))
            if not chunk:
                raise RuntimeError(f"policy returned an empty chunk twice in a row at step {step}")
        horizon = self.action_horizon
        if horizon is not None and len(chunk) > horizon:
            del chunk[horizon:]
        elapsed = time.monotonic() - start
        self.inference_count += 1
        self.inference_total_s += elapsed
        if elapsed > self.inference_max_s:
            self.inference_max_s = elapsed
        return chunk
