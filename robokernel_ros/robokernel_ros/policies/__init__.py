"""Policy protocol and providers: mock, scripted, lerobot; remote (ROS: robokernel_ros.ros.remote_policy,
imported only when the provider is asked for)."""

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
