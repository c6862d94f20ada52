"""Event-sourced, replayable episode trace: the JSON encoder, the run directory store, the loader.

    from robokernel_ros.kernel.trace import TraceStore, load_trace
    writer = TraceStore("runs").open_run()      # one run directory per episode
    bus.subscribe(writer)                       # every event becomes an events.jsonl line
    trace = load_trace(writer.path)             # meta, events, images

jsonl: the one encoder (numpy, non-finite numbers as null, ...) every JSON line of the
project goes through. store: the run directory layout and its streaming writer. load:
`load_trace` and the loader registry other formats (the rosbag mirror) plug into.
"""

from .jsonl import (
    dumps_line,
    dumps_pretty,
    dumps_text,
    event_line,
    line_with_data,
    snapshot,
    to_jsonable,
)
from .load import (
    Trace,
    TraceLoader,
    iter_event_lines,
    load_trace,
    meta_from_events,
    register_trace_loader,
    trace_loaders,
)
from .store import (
    EVENTS_FILE,
    IMAGES_DIR,
    META_FILE,
    RunWriter,
    TraceStore,
    append_event,
    new_run_id,
)

__all__ = [
    "EVENTS_FILE",
    "IMAGES_DIR",
    "META_FILE",
    "RunWriter",
    "Trace",
    "TraceLoader",
    "TraceStore",
    "append_event",
    "dumps_line",
    "dumps_pretty",
    "dumps_text",
    "event_line",
    "iter_event_lines",
    "line_with_data",
    "load_trace",
    "meta_from_events",
    "new_run_id",
    "register_trace_loader",
    "snapshot",
    "to_jsonable",
    "trace_loaders",
]
