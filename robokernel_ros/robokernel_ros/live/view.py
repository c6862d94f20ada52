"""LiveView: a Foxglove WebSocket server fed by one more subscriber of the episode's bus.

    view = LiveView(LiveOptions(port=8765)).start()     # binds the port, starts the sender
    detach = view.attach(bus, run_dir=run_dir, n_steps=300, n_episodes=5, episode=0)
    ...                                                 # the episode runs
    stats = detach()                                    # drains; closes the episode's MCAP
    view.close()                                        # stops the server, frees the port

The loop never waits for the viewer. The bus subscriber (for the kinds the channels show)
only appends the event to a bounded queue under a lock held for the append (well under a
microsecond); when the queue is full the oldest entry is dropped and counted (`dropped`). A sender thread drains the queue in batches and translates the events into
channel messages (live.channels); foxglove-sdk serialises and sends them from its own
(Rust) threads. A client that stops reading never blocks the sender either: the SDK keeps
a bounded backlog per client (message_backlog_size, 1024 messages) and drops that
client's oldest messages. The SDK exposes no count of those, so the view reports what a
client's losses are measured against: `messages` sent per episode and `sent` per topic
(a client that got fewer lost the difference), and the clients subscribed.
The SDK's own log records are not forwarded into Python's logging on purpose: with the
forwarding on, stopping a server that has a stalled client blocks until that client
reads or disconnects.

Recording. When the episode is recorded (a run directory) and `mcap` is on, the same
channels go to <run_dir>/foxglove.mcap, written by foxglove-sdk's MCAP writer as a second
sink of the same Context: the file holds exactly the messages a client saw, so a replay
looks like the live view. It is a sibling of the episode's rosbag2 (<run_dir>/bag), not
channels inside it: the bag is written by rosbags' Writer in a pooled writer process
(bag.writer_process) and read back by load_trace, scoring and export, which expect ROS
2 message types only; Foxglove-schema channels (protobuf, JSON) inside it would be
unreadable to rosbags and ros2 bag. The layout file is written next to it
(<run_dir>/foxglove_layout.json, see live.layout); `live.layout.write_layout` writes
one anywhere.

Imports no rclpy: the rollout API and the runner node both use it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import foxglove

from ..kernel.events import CHUNK_REQUEST, EVENT_KINDS, Event, EventBus
from .channels import LiveChannels
from .layout import LAYOUT_FILE, write_layout
from .options import LiveOptions

_log = logging.getLogger(__name__)

MCAP_FILE = "foxglove.mcap"
# What the channels show: the bus filters the rest (chunk requests) before the loop pays for
# queueing them. The privileged state (the scene) comes every privileged_every-th step.
SHOWN_KINDS = tuple(k for k in EVENT_KINDS if k != CHUNK_REQUEST)
# The sender drains the queue this often: the view's latency, never the loop's. Each wake
# takes the GIL from the loop once; 20 ms is a frame of a 50 Hz display.
SEND_PERIOD_S = 0.02
_DRAIN = "drain"  # (_DRAIN, threading.Event) in the queue: the sender sets it when it gets there


class _Listener:
    """foxglove ServerListener: counts subscriptions per client (on the SDK's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subscriptions: dict[int, set[str]] = {}
        self.clients_seen = 0

    def on_subscribe(self, client: Any, channel: Any) -> None:
        with self.lock:
            if client.id not in self.subscriptions:
                self.clients_seen += 1
            self.subscriptions.setdefault(client.id, set()).add(channel.topic)

    def on_unsubscribe(self, client: Any, channel: Any) -> None:
        with self.lock:
            topics = self.subscriptions.get(client.id)
            if topics is not None:
                topics.discard(channel.topic)
                if not topics:
                    del self.subscriptions[client.id]


class LiveView:
    """One Foxglove server and its channels; episodes attach to it one after another.

    Thread model: attach/detach/close from the rollout's thread; the bus callback on the
    loop's thread; one sender thread; the SDK's own threads for sockets and files.
    """

    STOP_WAIT_S = 0.5  # how long close() waits for the clients' graceful close

    def __init__(self, options: LiveOptions | None = None, *, name: str = "robokernel") -> None:
        self.options = options or LiveOptions()
        self.name = name
        self.context = foxglove.Context()
        self.channels = LiveChannels(self.context, image_hz=self.options.image_hz)
        self.server: Any = None
        self._listener = _Listener()
        self._lock = threading.Lock()
        self._queue: deque[Any] = deque()
        self._max = self.options.queue_size
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.queued = 0  # events the bus gave the view
        self.dropped = 0  # of those, dropped (oldest first) because the queue was full
        self.handled = 0  # of those, translated by the sender
        self.max_depth = 0
        self.layout_path: Path | None = None
        self._base_ns = time.time_ns()  # stamp of t = 0 of the current episode
        self._last_ns = 0
        self._mcap: Any = None
        self._mcap_path: Path | None = None
        self._mcap_dir: Path | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def port(self) -> int | None:
        return self.server.port if self.server is not None else None

    @property
    def url(self) -> str | None:
        return f"ws://{self.options.host}:{self.port}" if self.server is not None else None

    def start(self) -> LiveView:
        """Bind the port (raises OSError/RuntimeError when it is taken) and start the sender."""
        if self.server is not None:
            return self
        self.server = foxglove.start_server(
            name=self.name,
            host=self.options.host,
            port=self.options.port,
            context=self.context,
            server_listener=self._listener,
        )
        self._stop = False
        self._thread = threading.Thread(
            target=self._send_loop, name="live-view-sender", daemon=True
        )
        self._thread.start()
        _log.info("live view: %s (Foxglove: open connection, Foxglove WebSocket)", self.url)
        return self

    def close(self) -> None:
        """Drain, stop the sender, close an open MCAP, stop the server (frees the port)."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join(timeout=10.0)
            self._thread = None
        self._close_mcap()
        if self.server is not None:
            server, self.server = self.server, None
            # stop() waits for every client's graceful close; the listener closes (the port
            # is free) at once, so a client that never reads costs no more than this bound.
            stopper = threading.Thread(target=server.stop, name="live-view-stop", daemon=True)
            stopper.start()
            stopper.join(self.STOP_WAIT_S)
            if stopper.is_alive():
                _log.warning("live view: a client is still closing; its connection ends when it "
                             "reads or disconnects (the port is free)")  # fmt: skip

    def __enter__(self) -> LiveView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's side ------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        q = self._queue
        with self._lock:
            if len(q) >= self._max:
                q.popleft()
                self.dropped += 1
            q.append(event)
            self.queued += 1

    def attach(
        self,
        bus: EventBus,
        *,
        run_dir: Path | None = None,
        n_steps: int | None = None,
        n_episodes: int | None = None,
        episode: int = 0,
    ) -> Callable[[], dict[str, Any]]:
        """Subscribe to one episode's bus; returns detach() -> this episode's live stats.

        run_dir: the episode's run directory parent (the trace_dir); the episode's MCAP
        goes to <run_dir>/<run_id>/foxglove.mcap when options.mcap is on."""  # fmt: skip
        self.start()
        self._mcap_dir = run_dir if self.options.mcap else None
        state = self.channels.progress_state
        state.update(n_steps=n_steps, n_episodes=n_episodes, episode=episode)
        before = (self.queued, self.dropped, self.channels.messages, self.channels.frames,
                  self.handled)  # fmt: skip
        sent_before = dict(self.channels.sent)
        unsubscribe = bus.subscribe(self._on_event, SHOWN_KINDS)

        def detach() -> dict[str, Any]:
            unsubscribe()
            self.drain()
            self._close_mcap()
            stats = self.stats()
            stats.update(
                events=self.queued - before[0],
                dropped=self.dropped - before[1],
                handled=self.handled - before[4],
                messages=self.channels.messages - before[2],
                frames=self.channels.frames - before[3],
                sent={t: n - sent_before.get(t, 0) for t, n in self.channels.sent.items()},
                mcap_path=str(self._mcap_path) if self._mcap_path is not None else None,
            )
            self._write_layout(self._mcap_path.parent if self._mcap_path is not None else None)
            stats["layout_path"] = str(self.layout_path) if self.layout_path else None
            self._mcap_path = None
            return stats

        return detach

    def episode_sink(self, context: Any) -> Callable[[Any], dict[str, Any]]:
        """A rollout EpisodeSink (PolicyRunner/SimWorkcell episode_sinks=): attaches this
        long-lived view to each episode's bus (context.bus, .trace_dir, .episode); the
        finisher returns {"live": stats} for the episode's result."""
        detach = self.attach(context.bus, run_dir=context.trace_dir, episode=context.episode)
        return lambda record: {"live": detach()}

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until the sender has handled everything queued so far (False on timeout)."""
        if self._thread is None:
            return True
        done = threading.Event()
        with self._lock:
            self._queue.append((_DRAIN, done))
        self._wake.set()
        return done.wait(timeout_s)

    def stats(self) -> dict[str, Any]:
        with self._listener.lock:
            subscribed = {c: sorted(t) for c, t in self._listener.subscriptions.items()}
            seen = self._listener.clients_seen
        return {
            "url": self.url,
            "port": self.port,
            "events": self.queued,
            "dropped": self.dropped,
            "handled": self.handled,
            "max_queue_depth": self.max_depth,
            "messages": self.channels.messages,
            "frames": self.channels.frames,
            "clients_subscribed": len(subscribed),
            "clients_seen": seen,
            "sent": dict(self.channels.sent),
        }

    # -- the sender -----------------------------------------------------------------------------
    def _send_loop(self) -> None:
        q = self._queue
        publish = self.channels.publish
        while True:
            with self._lock:
                batch = list(q)
                q.clear()
            if batch:
                if len(batch) > self.max_depth:
                    self.max_depth = len(batch)
                for event in batch:
                    if type(event) is tuple:  # (_DRAIN, threading.Event)
                        event[1].set()
                        continue
                    self.handled += 1
                    try:
                        if event.kind == "episode.start":
                            self._open_mcap(event)
                            # the episode clock, anchored at the episode's start on the wall
                            # clock and never before the last stamp sent
                            self._base_ns = max(time.time_ns(), self._last_ns + 1) - round(
                                event.t * 1e9
                            )
                        ns = self._base_ns + round(event.t * 1e9)
                        if ns < self._last_ns:
                            ns = self._last_ns
                        self._last_ns = ns
                        publish(event, ns)
                    except Exception:
                        _log.exception("live view: %s (step %d) not sent", event.kind, event.step)
            elif self._stop:
                return
            # Batches, not a busy drain: the sender takes the GIL once a period (a drain or a
            # close wakes it at once); the queue holds what the loop makes meanwhile.
            self._wake.wait(SEND_PERIOD_S)
            self._wake.clear()

    def _open_mcap(self, event: Event) -> None:
        self._close_mcap()
        if self._mcap_dir is None or not event.run_id:
            return
        path = Path(self._mcap_dir) / event.run_id / MCAP_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._mcap = foxglove.open_mcap(path, allow_overwrite=True, context=self.context)
            self._mcap_path = path
        except Exception:
            _log.exception("live view: cannot write %s; this episode is live only", path)
            self._mcap = None

    def _close_mcap(self) -> None:
        if self._mcap is not None:
            try:
                self._mcap.close()
            except Exception:
                _log.exception("live view: closing %s failed", self._mcap_path)
            self._mcap = None

    def _write_layout(self, folder: Path | None) -> None:
        if folder is None:
            return  # unrecorded: no run directory to write it into
        path = folder / LAYOUT_FILE
        ch = self.channels
        try:
            self.layout_path = write_layout(path, joints=ch.joint_names, action_keys=ch.action_keys,
                                            cameras=tuple(ch.cameras))  # fmt: skip
        except OSError:
            _log.warning("live view: cannot write the layout %s", path)
