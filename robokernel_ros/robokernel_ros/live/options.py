"""The `live=` option of the rollout API (and `--live [PORT]`, `foxglove_port`), checked.

    live_option("live", True)        -> LiveOptions(port=8765)
    live_option("live", 0)           -> LiveOptions(port=0)   (a free port, see LiveView.port)
    live_option("live", {"port": 9000, "image_hz": 5})
    live_option("live", {"port": 0, "wait_s": 30})   (the first episode waits for a viewer)
    live_option("live", None / False) -> None                  (no live view)

A refused value raises ValueError naming the parameter, the value and its domain; it
starts nothing (the server starts with the call's first episode).
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import Any

DEFAULT_PORT = 8765  # Foxglove's own default for a WebSocket connection
KEYS = ("port", "host", "queue_size", "image_hz", "display_hz", "mcap", "wait_s")


@dataclass(frozen=True)
class LiveOptions:
    """port: TCP port of the WebSocket server (0: a free one). host: the address it binds
    (127.0.0.1: this machine only). queue_size: events the loop may get ahead of the sender
    before the oldest is dropped (and counted). image_hz: at most this many camera frames
    per second per camera are JPEG-encoded and sent (the loop's own rate is never touched).
    display_hz: when the loop outruns real time (a fast, virtual-clock eval), clients get
    the joint and action channels at most this often per wall second, the latest sample
    each time; a loop paced at real time (or slower) sends every step whatever its rate.
    None: every step, always (the loop's process then queues every step of a fast eval).
    mcap: also write the channels to <run_dir>/foxglove.mcap of each recorded episode,
    every event at full rate (a pooled child process writes it: live.recorder).
    wait_s: once the server listens, the first episode waits up to this many seconds for
    a viewer (a client that subscribes to a channel) before it starts; None: no wait."""

    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    queue_size: int = 4096
    image_hz: float = 10.0
    display_hz: float | None = 60.0
    mcap: bool = True
    wait_s: float | None = None


def _port(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError(
            f"{name}={value!r}: must be a TCP port, a whole number in [0, 65535] (0: any free port)"
        )
    return value


def _free(name: str, value: Any, options: LiveOptions) -> LiveOptions:
    """Refuse a port something already listens on (a bind probe, released at once)."""
    if options.port == 0:
        return options
    probe = socket.socket(socket.AF_INET6 if ":" in options.host else socket.AF_INET)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((options.host, options.port))
    except OSError as exc:
        raise ValueError(
            f"{name}={value!r}: cannot listen on {options.host}:{options.port} ({exc.strerror}); "
            "pick another port, or 0 for any free one"
        ) from None
    finally:
        probe.close()
    return options


def _rate(name: str, key: str, hz: Any) -> float:
    if isinstance(hz, bool) or not isinstance(hz, int | float) or not math.isfinite(hz) or hz <= 0:
        raise ValueError(f"{name}['{key}']={hz!r}: must be a finite number > 0")
    return float(hz)


def live_option(name: str, value: Any) -> LiveOptions | None:
    """None/False: no live view; True: the default port; an int: that port; a dict of KEYS.

    The port is also probed: one something already listens on is refused here."""
    if value is None or value is False:
        return None
    if value is True:
        return _free(name, value, LiveOptions())
    if isinstance(value, int):
        return _free(name, value, LiveOptions(port=_port(name, value)))
    if not isinstance(value, dict):
        raise ValueError(
            f"{name}={value!r}: must be True (port {DEFAULT_PORT}), a TCP port, a dict with keys "
            f"{list(KEYS)}, or None/False for no live view"
        )
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ValueError(f"{name}={value!r}: unknown keys {unknown} (known: {list(KEYS)})")
    out = LiveOptions()
    port = _port(f"{name}['port']", value.get("port", out.port))
    host = value.get("host", out.host)
    if not isinstance(host, str) or not host:
        raise ValueError(f"{name}['host']={host!r}: must be a non-empty address string")
    queue = value.get("queue_size", out.queue_size)
    if isinstance(queue, bool) or not isinstance(queue, int) or queue < 16:
        raise ValueError(f"{name}['queue_size']={queue!r}: must be a whole number >= 16")
    hz = _rate(name, "image_hz", value.get("image_hz", out.image_hz))
    display = value.get("display_hz", out.display_hz)
    display = None if display is None else _rate(name, "display_hz", display)
    mcap = value.get("mcap", out.mcap)
    if not isinstance(mcap, bool):
        raise ValueError(f"{name}['mcap']={mcap!r}: must be a boolean")
    wait = value.get("wait_s")
    if wait is not None and (
        isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 < wait < math.inf
    ):
        raise ValueError(
            f"{name}['wait_s']={wait!r}: must be seconds, a finite number > 0, or None"
        )
    options = LiveOptions(port=port, host=host, queue_size=queue, image_hz=hz, display_hz=display,
                          mcap=mcap, wait_s=None if wait is None else float(wait))  # fmt: skip
    return _free(name, value, options)
