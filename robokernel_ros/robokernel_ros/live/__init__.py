"""A live Foxglove view of any episode: one more subscriber of the kernel's event bus.

    from robokernel_ros.live import LiveView, live_option
    with LiveView(live_option("live", 8765)) as view:
        detach = view.attach(bus, run_dir=trace_dir)
        ...
        stats = detach()

`live.view` (the server, the bounded queue, the sampled channels' slots and the sender
thread), `live.channels` (events as Foxglove well-known schemas), `live.recorder` (the
episode's foxglove.mcap, written from the run directory by a pooled child process),
`live.layout` (the layout file), `live.options` (the checked `live=` option). Imports no
rclpy.
"""

from .channels import LiveChannels
from .layout import LAYOUT_FILE, workcell_layout, write_layout
from .options import DEFAULT_PORT, LiveOptions, live_option
from .recorder import MCAP_FILE
from .view import LiveView

__all__ = [
    "DEFAULT_PORT",
    "LAYOUT_FILE",
    "MCAP_FILE",
    "LiveChannels",
    "LiveOptions",
    "LiveView",
    "live_option",
    "workcell_layout",
    "write_layout",
]
