"""The one episode loop (driven and served), its timing, safety shield, events, trace
and operator channel. Imports no ROS, torch or MuJoCo, ever.

    from robokernel_ros.kernel import EpisodeRunner, Timing, TraceStore
    record = EpisodeRunner(env, agent, trace=TraceStore("runs")).run(200, seed=0)
"""

from .events import EVENT_KINDS, Event, EventBus
from .handover import HandoverLimiter
from .operator import AUTONOMOUS, CORRECTING, MODES, PAUSED, Latch, OperatorChannel
from .recorder import CompatReport, EpisodeOutcome, EpisodeRecord
from .runner import EpisodeRunner
from .served import ServedSession
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
from .spec import (
    Agent,
    Capabilities,
    Environment,
    EnvSpec,
    HoldActionSource,
    PrivilegedStateSource,
    StepResult,
    TeleopSource,
)
from .timing import Timing, delay_steps
from .trace import RunWriter, Trace, TraceStore, load_trace, register_trace_loader

__all__ = [
    "AUTONOMOUS",
    "CORRECTING",
    "EVENT_KINDS",
    "MODES",
    "PAUSED",
    "AccelerationGuard",
    "Agent",
    "Capabilities",
    "CompatReport",
    "DeltaGuard",
    "EnvSpec",
    "Environment",
    "EpisodeOutcome",
    "EpisodeRecord",
    "EpisodeRunner",
    "Event",
    "EventBus",
    "FiniteGuard",
    "Guard",
    "GuardContext",
    "HandoverLimiter",
    "HoldActionSource",
    "Intervention",
    "Latch",
    "LimitGuard",
    "OperatorChannel",
    "PrivilegedStateSource",
    "RunWriter",
    "SafetyShield",
    "ServedSession",
    "ShieldResult",
    "StepResult",
    "TeleopSource",
    "Timing",
    "Trace",
    "TraceStore",
    "VelocityGuard",
    "build_guards",
    "delay_steps",
    "load_trace",
    "register_trace_loader",
    "run_guards",
]
