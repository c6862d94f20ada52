"""The one episode loop (driven and served), its timing, safety shield, events, trace
and operator channel. Imports no ROS, torch or MuJoCo, ever."""

from .events import Event, EventBus
from .shield import (
    AccelerationGuard,
    DeltaGuard,
    FiniteGuard,
    Guard,
    GuardContext,
    Intervention,
    LimitGuard,
    SafetyShield,
    ShieldResult,
    VelocityGuard,
    build_guards,
    run_guards,
)
from .spec import Capabilities, EnvSpec, StepResult
from .trace import RunWriter, Trace, TraceStore, load_trace, register_trace_loader

__all__ = [
    "AccelerationGuard",
    "Capabilities",
    "DeltaGuard",
    "EnvSpec",
    "Event",
    "EventBus",
    "FiniteGuard",
    "Guard",
    "GuardContext",
    "Intervention",
    "LimitGuard",
    "RunWriter",
    "SafetyShield",
    "ShieldResult",
    "StepResult",
    "Trace",
    "TraceStore",
    "VelocityGuard",
    "build_guards",
    "load_trace",
    "register_trace_loader",
    "run_guards",
]
