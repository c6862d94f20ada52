"""Policy protocol and providers: mock, scripted, lerobot (openpi, lerobot_async imported when
asked for); providers of other layers (the ROS layer's `remote`) are entry points of the group
`robokernel_ros.policies`, imported only when the provider is asked for."""

from robokernel_ros.policies.base import (
    Policy,
    PolicyAgent,
    available_providers,
    create_policy,
    preflight,
    provider_class,
    register_provider,
)

__all__ = [
    "Policy",
    "PolicyAgent",
    "available_providers",
    "create_policy",
    "preflight",
    "provider_class",
    "register_provider",
]
