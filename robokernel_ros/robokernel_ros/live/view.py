"""LiveView: a Foxglove WebSocket server fed by one more subscriber of the episode's bus.

    view = LiveView(LiveOptions(port=8765)).start()     # binds the port, starts the sender
    detach = view.attach(bus, run_dir=run_dir, n_steps=300, n_episodes=5, episode=0)
    ...                                                 # the episode runs
    stats = detach()                                    # drains; waits for the episode's MCAP
    view.close()                                        # stops the server, frees the port

The loop never waits for the viewer, and its process does no per-step work it will not
show. The bus subscriber (for the kinds the channels show) runs under a lock held for a
few attribute operations (well under a microsecond):
- a step of a sampled channel (observations: joints and progress; actions; the scene)
  while the loop outruns real time (its episode clock since the episode's start is more
  than PACED x its wall time plus PACE_SLACK_S: a fast, virtual-clock eval runs thousands
  of steps per second) replaces the step before it in that channel's slot (`coalesced`);
  plain chunk merges are counted there too (the log shows only late ones);
- everything else is appended to a bounded queue; when it is full the oldest entry is
  dropped and counted (`dropped`): every step of a paced (wall-clock) loop, at its
  control rate whatever that is; frames; hold runs' first and last actions; log events.
A sender thread wakes every max(SEND_PERIOD_S, 1 / options.display_hz), takes the queue
and the slots' latest samples (in episode order), stamps them and translates them into
channel messages (live.channels); foxglove-sdk serialises and sends them from its own
(Rust) threads. So a fast eval's client sees its joint, action and scene channels at the
display rate (60 Hz by default), always the latest step, and the episode's last one;
options.display_hz None queues every step instead (the loop's process then pays for
every step: bench/live_view.py). After a drain, events = handled + coalesced + dropped.
The episode's MCAP is not the sender's: live.recorder's pooled child process writes it
from the run directory (events.jsonl, streamed by the trace writer), every event at the
full rate, with the same translation and stamps, on another core.
A client that stops reading never blocks the sender either: the SDK keeps a bounded
backlog per client (message_backlog_size, 1024 messages) and drops that client's oldest
messages. The SDK exposes no count of those, so the view reports what a client's losses
are measured against: `messages` sent per episode and `sent` per topic (a client that
got fewer lost the difference), `recorded` per topic (the MCAP's), and the clients
subscribed. The SDK's own log records are not forwarded into Python's logging on
purpose: with the forwarding on, stopping a server that has a stalled client blocks
until that client reads or disconnects.

Recording. When the episode is recorded (a run directory) and `mcap` is on, the same
channels go to <run_dir>/foxglove.mcap: the server's messages for every event (a client
of a real-time run got the same messages; a client of a fast eval got the sampled
channels at the display rate, each message one of the file's). It is a sibling of the episode's rosbag2
(<run_dir>/bag), not channels inside it: the bag is written by rosbags' Writer in a
pooled writer process (recording.writer_process) and read back by load_trace, scoring and
export, which expect ROS 2 message types only; Foxglove-schema channels (protobuf, JSON)
inside it would be unreadable to rosbags and ros2 bag. The layout file is written next
to it (<run_dir>/foxglove_layout.json, see live.layout); `live.layout.write_layout`
writes one anywhere.

Imports no rclpy: the rollout API and the runner node both use it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import foxglove

from ..kernel.events import (
    ACTION,
    CHUNK_MERGE,
    CHUNK_REQUEST,
    EPISODE_END,
    EPISODE_START,
    EVENT_KINDS,
    OBSERVATION,
    PRIVILEGED,
    Event,
    EventBus,
)
from .channels import LiveChannels
from .layout import LAYOUT_FILE, write_layout
from .options import LiveOptions
from .recorder import MCAP_FILE, McapRecording

_log = logging.getLogger(__name__)

# What the channels show: the bus filters the rest (chunk requests) before the loop pays for
# queueing them. The privileged state (the scene) comes every privileged_every-th step.
SHOWN_KINDS = tuple(k for k in EVENT_KINDS if k != CHUNK_REQUEST)
# The sender drains the queue at least this often (and the slots at the display rate): the
# view's latency, never the loop's. Each wake takes the GIL from the loop once.
SEND_PERIOD_S = 0.02
# A step goes to the clients at once when the loop is paced: the episode clock since the
# episode's start is at most PACED x its wall time plus PACE_SLACK_S (a real-time loop's
# jitter and catch-up steps pass; a fast eval runs ~100x faster than real time and is
# sampled after its first few steps).
PACED = 2.0
PACE_SLACK_S = 0.1
_SAMPLED = (OBSERVATION, ACTION, PRIVILEGED)  # joints (and progress), action, the scene
_DRAIN = "drain"  # (_DRAIN, threading.Event) in the queue: the sender sets it when it gets there
_MERGED = "merged"  # (_MERGED, count) in the queue: plain chunk merges counted, not queued


def _seq(event: Event) -> int:
    return event.seq


def _merge(batch: list[Any], samples: list[Event]) -> list[Any]:
    """The queued events with the slots' latest samples in episode order: the samples
    belong to the episode that started last (a slot is emptied into the queue at its
    episode's end), after that start and before the first later queued event."""
    drains = [e for e in batch if type(e) is tuple and e[0] is _DRAIN]  # after all taken
    events = [e for e in batch if type(e) is not tuple or e[0] is not _DRAIN]
    start = 0
    for i, event in enumerate(events):
        if type(event) is not tuple and event.kind == EPISODE_START:
            start = i + 1
    out, k = events[:start], 0
    for event in events[start:]:
        while type(event) is not tuple and k < len(samples) and samples[k].seq < event.seq:
            out.append(samples[k])
            k += 1
        out.append(event)
    return out + samples[k:] + drains


class _Listener:
    """foxglove ServerListener: counts subscriptions per client (on the SDK's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.subscriptions: dict[int, set[str]] = {}
        self.clients_seen = 0
        self.subscribed = threading.Event()  # set by the first subscription

    def on_subscribe(self, client: Any, channel: Any) -> None:
        with self.lock:
            if client.id not in self.subscriptions:
                self.clients_seen += 1
            self.subscriptions.setdefault(client.id, set()).add(channel.topic)
        self.subscribed.set()

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
    PORT_RELEASE_S = 5.0  # how long close() waits for the listener to let the port go

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
        self.handled = 0  # of those, translated by the sender (events = handled + coalesced
        # + dropped once drained)
        self.max_depth = 0
        self.layout_path: Path | None = None
        self._base_ns = time.time_ns()  # stamp of t = 0 of the current episode
        self._last_ns = 0
        hz = self.options.display_hz
        self._sampling = hz is not None
        self._sampled = frozenset(_SAMPLED) if self._sampling else frozenset()
        # the sender's period: also the display rate of the sampled channels
        self._period = SEND_PERIOD_S if hz is None else max(SEND_PERIOD_S, 1.0 / hz)
        self._slots: dict[str, Event] = {}  # kind -> the latest step not yet taken (sampling)
        self._t0 = 0.0  # the episode clock at the episode's start (the loop's thread)
        self._holding = False  # the last action's hold flag (the loop's thread)
        self._merged = 0  # plain chunk merges of the episode (the loop's thread)
        self.coalesced = 0  # of the events, replaced in their slot by a newer one (by design)
        self._recording: Any = None  # live.recorder.McapRecording, once an episode is recorded
        self._finishing: list[dict[str, Any]] = []  # stats of the episodes whose file finishes
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

    def wait_for_viewer(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` seconds for a client to subscribe to a channel (True) or
        go on without one (False, logged); the server must have been started."""
        if self._listener.subscribed.is_set():
            return True
        _log.info("live view: waiting up to %.0f s for a viewer at %s", timeout_s, self.url)
        if self._listener.subscribed.wait(timeout_s):
            _log.info("live view: a viewer is connected; starting")
            return True
        _log.warning(
            "live view: no viewer at %s after %.0f s; starting without one", self.url, timeout_s
        )
        return False

    def close(self) -> None:
        """Drain, stop the sender, close an open MCAP, stop the server (frees the port)."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join(timeout=10.0)
            self._thread = None
        if self._recording is not None:
            if self._recording.finish():  # an episode not detached: its file is closed all the same
                self._finishing.append({"mcap_path": str(self._mcap_path)})
            self._collect()
            self._recording.release()
            self._recording = None
        if self.server is not None:
            server, self.server = self.server, None
            port = server.port
            # stop() waits for every client's graceful close; the listener closes (the port
            # is free) at once, so a client that never reads costs no more than this bound.
            stopper = threading.Thread(target=server.stop, name="live-view-stop", daemon=True)
            stopper.start()
            stopper.join(self.STOP_WAIT_S)
            if stopper.is_alive():
                _log.warning("live view: a client is still closing; its connection ends when it "
                             "reads or disconnects (the port is free)")  # fmt: skip
            # The SDK closes its listener on its own runtime's thread: a full run found the
            # port still bound right after close() returned. Returned, it is free.
            if not _await_port_released(self.options.host, port, self.PORT_RELEASE_S):
                _log.warning("live view: port %s still bound %.0f s after stop", port,
                             self.PORT_RELEASE_S)  # fmt: skip

    def __enter__(self) -> LiveView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's side ------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        """The bus callback (the loop's thread): a step of a sampled channel while the loop
        outruns real time replaces the one before it in its slot (the sender takes the
        latest each period: the loop's process keeps no backlog of steps it will not
        show); everything else is queued, the oldest dropped (and counted) when full."""
        kind = event.kind
        with self._lock:
            self.queued += 1
            if kind in self._sampled:  # empty when display_hz is None
                data = event.data
                if kind == ACTION:
                    hold = bool(data.get("hold", False))
                    edge = hold is not self._holding  # a hold run starts or ends: queued
                    self._holding = hold
                else:
                    edge = kind == OBSERVATION and "images" in data  # frames: queued
                if not edge and event.t - self._t0 > PACED * event.wall + PACE_SLACK_S:
                    slots = self._slots
                    if kind in slots:
                        self.coalesced += 1
                    slots[kind] = event
                    return
            elif (
                kind == CHUNK_MERGE
                and self._sampling
                and (event.data.get("arrival_step") or 0) <= (event.data.get("obs_step") or 0)
            ):
                self._merged += 1  # a plain merge is only counted (live.channels): no queueing
                self.coalesced += 1
                return
            elif kind == EPISODE_START:
                self._t0, self._holding, self._merged = event.t, False, 0
            elif kind == EPISODE_END:
                if self._slots:  # the episode's latest samples first
                    self._queue.extend(sorted(self._slots.values(), key=_seq))
                    self._slots.clear()
                if self._merged:
                    self._queue.append((_MERGED, self._merged))
            q = self._queue
            if len(q) >= self._max:
                q.popleft()
                self.dropped += 1
            q.append(event)

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
        if self._mcap_dir is not None and self._recording is None:
            self._recording = McapRecording()  # a child from the pool, before the loop runs
        state = self.channels.progress_state
        state.update(n_steps=n_steps, n_episodes=n_episodes, episode=episode)
        before = (self.queued, self.dropped, self.channels.messages, self.channels.frames,
                  self.handled, self.coalesced)  # fmt: skip
        sent_before = dict(self.channels.sent)
        unsubscribe = bus.subscribe(self._on_event, SHOWN_KINDS)

        def detach(wait: bool = True) -> dict[str, Any]:
            """wait=False: the episode's MCAP is finished by the child while the caller goes
            on (the next episode); its counts (recorded, recorder_cpu_s) and the layout are
            filled into the returned dict by close(), which waits for them."""
            unsubscribe()
            self.drain()
            stats = self.stats()
            stats.update(
                events=self.queued - before[0],
                dropped=self.dropped - before[1],
                handled=self.handled - before[4],
                coalesced=self.coalesced - before[5],
                messages=self.channels.messages - before[2],
                frames=self.channels.frames - before[3],
                sent={t: n - sent_before.get(t, 0) for t, n in self.channels.sent.items()},
                mcap_path=str(self._mcap_path) if self._mcap_path is not None else None,
                recorded=None,
                recorder_cpu_s=None,
                layout_path=None,
            )
            if self._recording is not None and self._recording.finish():
                self._finishing.append(stats)
                if wait:
                    self._collect()
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
            "coalesced": self.coalesced,
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
        while True:
            with self._lock:
                batch = list(q)
                q.clear()
                samples = sorted(self._slots.values(), key=_seq) if self._slots else ()
                self._slots.clear()
            if batch or samples:
                if len(batch) > self.max_depth:
                    self.max_depth = len(batch)
                self._handle(_merge(batch, samples) if samples else batch)
            elif self._stop:
                return
            # Batches, not a busy drain: the sender takes the GIL once a period (a drain or a
            # close wakes it at once); the queue holds what the loop makes meanwhile.
            self._wake.wait(self._period)
            self._wake.clear()

    def _handle(self, batch: list[Any]) -> None:
        publish = self.channels.publish
        for event in batch:
            if type(event) is tuple:  # (_DRAIN, threading.Event) or (_MERGED, count)
                if event[0] is _DRAIN:
                    event[1].set()
                else:  # the plain merges the loop's side counted, before the episode's end
                    self.channels.merges += event[1]
                continue
            self.handled += 1
            try:
                if event.kind == EPISODE_START:
                    self._begin(event)
                # the episode clock, anchored at the episode's start (see _begin)
                ns = self._base_ns + round(event.t * 1e9)
                if ns < self._last_ns:
                    ns = self._last_ns
                self._last_ns = ns
                publish(event, ns)
            except Exception:
                _log.exception("live view: %s (step %d) not sent", event.kind, event.step)

    def _begin(self, event: Event) -> None:
        """episode.start: anchor the episode clock at the episode's start on the wall clock,
        never before the last stamp sent (Event.wall restarts: so does the sampling), and
        open the episode's MCAP."""
        self._base_ns = max(time.time_ns(), self._last_ns + 1) - round(event.t * 1e9)
        self._mcap_path = None
        rec = self._recording
        if rec is None or self._mcap_dir is None or not event.run_id:
            return
        rec.open(Path(self._mcap_dir) / event.run_id, image_hz=self.options.image_hz,
                 base_ns=self._base_ns, progress=dict(self.channels.progress_state))  # fmt: skip
        self._mcap_path = Path(self._mcap_dir) / event.run_id / MCAP_FILE

    def _collect(self) -> None:
        """Wait for the files finishing; complete their episodes' stats and write their layouts."""
        while self._finishing:
            stats = self._finishing.pop(0)
            recorded = self._recording.result()
            stats.update(recorded=recorded.get("sent"), recorder_cpu_s=recorded.get("cpu_s"))
            if recorded.get("error"):
                stats["mcap_error"] = recorded["error"]
            self._write_layout(Path(stats["mcap_path"]).parent, recorded)
            stats["layout_path"] = str(self.layout_path) if self.layout_path else None

    def _write_layout(self, folder: Path | None, recorded: dict[str, Any]) -> None:
        """The layout of the channels seen, by the clients or in the MCAP (which sees every
        step even when no client is subscribed)."""
        if folder is None:
            return  # unrecorded: no run directory to write it into
        path = folder / LAYOUT_FILE
        ch = self.channels
        joints = ch.joint_names or tuple(recorded.get("joint_names", ()))
        keys = ch.action_keys or tuple(recorded.get("action_keys", ()))
        cameras = tuple(dict.fromkeys([*ch.cameras, *recorded.get("cameras", ())]))
        try:
            self.layout_path = write_layout(path, joints=joints, action_keys=keys, cameras=cameras)
        except OSError:
            _log.warning("live view: cannot write the layout %s", path)


def _await_port_released(host: str, port: int, timeout_s: float) -> bool:
    """Whether nothing listens on host:port any more (a bind with SO_REUSEADDR, as a new
    server's, succeeds), waiting up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
        time.sleep(0.01)
