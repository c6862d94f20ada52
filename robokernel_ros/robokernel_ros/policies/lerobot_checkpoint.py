"""The process-wide cache of loaded LeRobot checkpoints: one load per (folder, device,
overrides, rtc), shared by every LerobotPolicy on it.

A checkpoint is loaded the way LeRobot loads it (`PreTrainedConfig.from_pretrained`, the
policy class's `from_pretrained`, `make_pre_post_processors(cfg, pretrained_path=...)`);
real-time chunking is switched on, required or off as policy_config `rtc` asks, by
LeRobot's own test of a policy's RTC support. The key includes the checkpoint files'
mtimes, so a checkpoint rewritten in place loads again. torch and lerobot are imported
only by `load_checkpoint`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LoadedCheckpoint:
    """A checkpoint loaded once: model, config, processors; shared by policies on it."""

    key: tuple[Any, ...]
    path: Path
    device: str
    model: Any
    config: Any
    preprocessor: Any
    postprocessor: Any
    load_time_s: float
    rss_after_mb: float
    lock: threading.RLock = field(default_factory=threading.RLock)
    rtc_signature: bool = False


_CACHE: dict[tuple[Any, ...], LoadedCheckpoint] = {}
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget every loaded checkpoint (the next create_policy loads again)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def cached_checkpoints() -> list[tuple[str, str]]:
    with _CACHE_LOCK:
        return [(str(v.path), v.device) for v in _CACHE.values()]


def resident_rss_mb() -> float:
    """Resident set size of this process, in MiB (Linux /proc; peak RSS elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cache_key(path: Path, device: str, overrides: Mapping[str, Any], rtc: Any) -> tuple[Any, ...]:
    stamps = []
    for name in ("config.json", "model.safetensors"):
        f = path / name
        stamps.append(f.stat().st_mtime_ns if f.exists() else 0)
    return (
        str(path.resolve()),
        device,
        tuple(stamps),
        json.dumps(dict(overrides), sort_keys=True, default=str),
        json.dumps(rtc, sort_keys=True, default=str) if isinstance(rtc, Mapping) else rtc,
    )


def lerobot_supports_rtc(model: Any) -> bool:
    """LeRobot's own test (lerobot.rollout.inference.rtc.supports_rtc_inference)."""
    import inspect

    probe = getattr(model, "supports_rtc", None)
    if not callable(probe) or not probe():
        return False
    try:
        inspect.signature(model.predict_action_chunk).bind(
            object(), inference_delay=0, prev_chunk_left_over=None
        )
    except (TypeError, ValueError):
        return False
    return True


def load_checkpoint(
    path: Path, device: str, overrides: Mapping[str, Any], rtc: Any
) -> tuple[LoadedCheckpoint, bool]:
    """(the loaded checkpoint, whether it came from the cache); rtc=True on a policy that
    cannot do real-time chunking is refused by name."""
    key = _cache_key(path, device, overrides, rtc)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit, True
        start = time.monotonic()
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        cfg = PreTrainedConfig.from_pretrained(str(path))
        cfg.device = device
        if hasattr(cfg, "pretrained_path"):
            cfg.pretrained_path = path
        for name, value in overrides.items():
            setattr(cfg, name, value)
        policy_cls = get_policy_class(cfg.type)
        model = policy_cls.from_pretrained(str(path), config=cfg)
        model.to(device)
        model.eval()
        rtc_capable = lerobot_supports_rtc(model)
        if rtc is True and not rtc_capable:
            raise ValueError(
                f"policy_config rtc=True: the {cfg.type} policy does not support real-time chunking in lerobot "
                "(supports_rtc() is False or predict_action_chunk takes no inference_delay/prev_chunk_left_over)"
            )
        if rtc_capable and rtc is not False:
            from lerobot.policies.rtc.configuration_rtc import RTCConfig

            if isinstance(rtc, Mapping):
                cfg.rtc_config = RTCConfig(**dict(rtc))
            elif getattr(cfg, "rtc_config", None) is None:
                cfg.rtc_config = RTCConfig(
                    execution_horizon=int(getattr(cfg, "n_action_steps", 10) or 10)
                )
            if hasattr(model, "init_rtc_processor"):
                model.init_rtc_processor()
        elif rtc is False and getattr(cfg, "rtc_config", None) is not None:
            cfg.rtc_config = None
            if hasattr(model, "init_rtc_processor"):
                model.init_rtc_processor()
        pre, post = make_pre_post_processors(
            cfg,
            pretrained_path=str(path),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
        loaded = LoadedCheckpoint(
            key=key,
            path=path,
            device=device,
            model=model,
            config=cfg,
            preprocessor=pre,
            postprocessor=post,
            load_time_s=time.monotonic() - start,
            rss_after_mb=resident_rss_mb(),
            rtc_signature=rtc_capable and rtc is not False,
        )
        _CACHE[key] = loaded
        return loaded, False
