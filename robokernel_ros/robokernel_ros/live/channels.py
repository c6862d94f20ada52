"""The live view's channels: kernel events as messages of Foxglove's well-known schemas.

    channels = LiveChannels(foxglove.Context(), image_hz=10.0)
    channels.publish(event, wall_ns)          # the sender thread only; never the loop

Topics (the rosbag mirror's prefix, /robokernel; schemas from foxglove-sdk):

    /robokernel/joint_states         foxglove.JointStates     observed joints of every step
                                                              (obs "joint_positions", velocities
                                                              and efforts when the env gives them)
    /robokernel/action               foxglove.JointStates     the executed action of every step:
                                                              one entry per action key, position =
                                                              the commanded value
    /robokernel/camera/<name>        foxglove.CompressedImage camera frames as JPEG, at most
                                                              image_hz per camera
    /robokernel/log                  foxglove.Log             episode start/end (with the count
                                                              of chunk merges), late merges that
                                                              dropped actions, hold runs, shield
                                                              interventions, operator actions,
                                                              errors
    /robokernel/scene                foxglove.SceneUpdate     the robot's bodies (a sphere each and
                                                              a line through them) in frame
                                                              "world", when the env's privileged
                                                              state has "bodies" {name: {pos,
                                                              quat}} (the MuJoCo envs), <= 20 Hz
    /robokernel/progress             JSON (jsonschema)        episode, step, n_steps, n_episodes,
                                                              successes, t (the episode clock);
                                                              at most 10 Hz, and at every end

Every message is stamped (timestamp and log time) with the episode clock (Event.t: sim
time or robot time) anchored at the wall-clock moment the episode started (and never
before the previous episode's last stamp): a wall-clock run plots in real time, a fast
evaluation at sim-time speed, a sender that runs behind still plots each step where it
happened, and the MCAP replays in step like the rosbag. A channel nobody subscribes to (no client, no MCAP) costs no encoding:
`has_sinks()` is asked first.
"""

from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any

import foxglove
from foxglove.channels import CompressedImageChannel, LogChannel, SceneUpdateChannel
from foxglove.messages import (
    Color,
    CompressedImage,
    JointState,
    JointStates,
    LinePrimitive,
    Log,
    LogLevel,
    Point3,
    Pose,
    SceneEntity,
    SceneUpdate,
    SpherePrimitive,
    Timestamp,
    Vector3,
)

from ..kernel import events as ev
from ..kernel.events import Event
from .proto import JointStatesEncoder

_log = logging.getLogger(__name__)

PREFIX = "/robokernel"
JOINTS_TOPIC = f"{PREFIX}/joint_states"
ACTION_TOPIC = f"{PREFIX}/action"
LOG_TOPIC = f"{PREFIX}/log"
PROGRESS_TOPIC = f"{PREFIX}/progress"
SCENE_TOPIC = f"{PREFIX}/scene"
SCENE_FRAME = "world"

PROGRESS_SCHEMA: dict[str, Any] = {
    "title": "robokernel.Progress",
    "type": "object",
    "properties": {
        "run_id": {"type": "string"},
        "episode": {"type": "integer"},
        "n_episodes": {"type": ["integer", "null"]},
        "step": {"type": "integer"},
        "n_steps": {"type": ["integer", "null"]},
        "fraction": {"type": ["number", "null"]},
        "episodes_done": {"type": "integer"},
        "successes": {"type": "integer"},
        "t": {"type": "number"},
        "outcome": {"type": ["string", "null"]},
    },
}


def camera_topic(camera: str) -> str:
    return f"{PREFIX}/camera/{camera}"


def _stamp(ns: int) -> Timestamp:
    sec, nsec = divmod(ns, 1_000_000_000)
    return Timestamp(sec, nsec)


def _floats(column: Any, names: tuple[str, ...]) -> list[float | None]:
    if isinstance(column, Mapping):
        return [None if column.get(n) is None else float(column[n]) for n in names]
    values = list(column)
    return [float(values[i]) if i < len(values) else None for i in range(len(names))]


def _column(column: Any, names: tuple[str, ...]) -> Any:
    """A column in the order of `names` (a dict by name; a sequence as it is)."""
    if type(column) is dict or isinstance(column, Mapping):
        return [column[n] for n in names]
    return column


def jpeg(image: Any, quality: int = 80) -> bytes | None:
    """An HxW(x1|x3) uint8 frame as JPEG bytes (None for anything else)."""
    import numpy as np
    from PIL import Image

    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim not in (2, 3):
        return None
    if array.ndim == 3:
        if array.shape[2] == 1:
            array = array[:, :, 0]
        elif array.shape[2] != 3:
            return None
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array)).save(out, format="JPEG", quality=quality)
    return out.getvalue()


class LiveChannels:
    """The channel set on one foxglove Context, and the event -> message translation.

    Not thread-safe: one thread (the live view's sender) calls publish. Counters:
    messages (logged), frames (JPEG-encoded), frames_skipped (over image_hz).
    """

    def __init__(self, context: foxglove.Context, *, image_hz: float = 10.0,
                 load_frame: Callable[[str], Any] | None = None) -> None:  # fmt: skip
        """load_frame: reads a frame a loaded run gives as a path (the run directory's
        images/...; live.recorder); without it such frames are not shown."""
        self.context = context
        self.load_frame = load_frame
        # JointStates channels of raw bytes with the SDK's own schema: packed by proto.py
        self.joints = foxglove.Channel(JOINTS_TOPIC, schema=JointStates.get_schema(),
                                       message_encoding="protobuf", context=context)  # fmt: skip
        self.action = foxglove.Channel(ACTION_TOPIC, schema=JointStates.get_schema(),
                                       message_encoding="protobuf", context=context)  # fmt: skip
        self._encoders: dict[tuple[Any, ...], JointStatesEncoder] = {}
        self.log = LogChannel(LOG_TOPIC, context=context)
        self.progress = foxglove.Channel(PROGRESS_TOPIC, schema=PROGRESS_SCHEMA, context=context)
        self.scene = SceneUpdateChannel(SCENE_TOPIC, context=context)
        self.scene_period_ns = 50_000_000
        self._last_scene_ns = -(1 << 62)
        self._sphere_size = Vector3(x=0.025, y=0.025, z=0.025)
        self._sphere_color = Color(r=0.9, g=0.5, b=0.1, a=1.0)
        self._line_color = Color(r=0.3, g=0.6, b=1.0, a=1.0)
        self.cameras: dict[str, CompressedImageChannel] = {}
        self.image_period_ns = int(1e9 / image_hz)
        self._last_frame_ns: dict[str, int] = {}
        self.messages = 0
        self.sent: dict[str, int] = {}  # topic -> messages logged
        self.merges = 0
        self.progress_period_ns = 100_000_000  # progress at most 10 Hz: a gauge, not a plot
        self._last_progress_ns = 0
        self.frames = 0
        self.frames_skipped = 0
        self.joint_names: tuple[str, ...] = ()
        self.action_keys: tuple[str, ...] = ()
        self._holding = False
        self._hold_start = 0
        self.progress_state: dict[str, Any] = {
            "run_id": "", "episode": 0, "n_episodes": None, "step": 0, "n_steps": None,
            "fraction": None, "episodes_done": 0, "successes": 0, "t": 0.0, "outcome": None,
        }  # fmt: skip

    def camera(self, name: str) -> CompressedImageChannel:
        channel = self.cameras.get(name)
        if channel is None:
            channel = self.cameras[name] = CompressedImageChannel(
                camera_topic(name), context=self.context
            )
        return channel

    def topics(self) -> list[str]:
        return [JOINTS_TOPIC, ACTION_TOPIC, LOG_TOPIC, PROGRESS_TOPIC, SCENE_TOPIC] + [
            camera_topic(c) for c in self.cameras
        ]

    def _count(self, topic: str) -> None:
        self.messages += 1
        self.sent[topic] = self.sent.get(topic, 0) + 1

    # -- translation ----------------------------------------------------------------------------
    def publish(self, event: Event, ns: int) -> None:
        """Log the messages of one event, stamped `ns` (ns since the epoch)."""
        kind = event.kind
        if kind == ev.OBSERVATION:
            self._observation(event, ns)
        elif kind == ev.ACTION:
            self._action(event, ns)
        elif kind == ev.PRIVILEGED:
            self._scene(event, ns)
        elif kind == ev.CHUNK_MERGE:
            d = event.data
            self.merges += 1
            # a late chunk (realtime: it came after its observation's step): news; a plain
            # merge is counted only (`dropped` is no sign of it: 0 after holding)
            if (d.get("arrival_step") or 0) > (d.get("obs_step") or 0):
                self._line(ns, LogLevel.Info, f"step {event.step}: chunk merged (obs step {d.get('obs_step')}, "
                       f"kept {d.get('kept')}, dropped {d.get('dropped')}, "
                       f"inference {1e3 * float(d.get('inference_s') or 0.0):.1f} ms)")  # fmt: skip
        elif kind == ev.SAFETY_INTERVENTION:
            d = event.data
            self._line(ns, LogLevel.Warning, f"step {event.step}: shield {d.get('guard')} on {d.get('key')}: "
                       f"{d.get('value')} -> limit {d.get('limit')}")  # fmt: skip
        elif kind.startswith("operator."):
            extra = {k: v for k, v in event.data.items() if k != "step"}
            level = LogLevel.Error if kind == ev.OPERATOR_ESTOP else LogLevel.Warning
            self._line(ns, level, f"step {event.step}: {kind}" + (f" {extra}" if extra else ""))
        elif kind == ev.ERROR:
            d = event.data
            self._line(ns, LogLevel.Error, f"step {event.step}: error {d.get('category')}: "
                       f"{d.get('type')}: {d.get('message')}")  # fmt: skip
        elif kind == ev.EPISODE_START:
            self._start(event, ns)
        elif kind == ev.EPISODE_END:
            self._end(event, ns)

    def _line(self, ns: int, level: LogLevel, text: str) -> None:
        if self.log.has_sinks():
            self.log.log(Log(timestamp=_stamp(ns), level=level, message=text, name="robokernel"),
                         log_time=ns)  # fmt: skip
            self._count(LOG_TOPIC)

    def _observation(self, event: Event, ns: int) -> None:
        data = event.data
        obs = data.get("obs")
        if type(obs) is dict or isinstance(obs, Mapping):  # dict first: the ABC check is slow
            positions = obs.get("joint_positions")
            if (
                (type(positions) is dict or isinstance(positions, Mapping))
                and positions
                and self.joints.has_sinks()
            ):
                names = tuple(positions)
                self.joint_names = names
                vel = obs.get("joint_velocities")
                eff = obs.get("joint_efforts")
                self.joints.base.log(self._joint_states(ns, names, positions, vel, eff), ns)
                self._count(JOINTS_TOPIC)
        if ns - self._last_progress_ns >= self.progress_period_ns and self.progress.has_sinks():
            self._last_progress_ns = ns
            state = self.progress_state
            state["step"] = event.step
            state["t"] = float(event.t)
            n = state["n_steps"]
            state["fraction"] = (event.step / n) if n else None
            self.progress.log(state, log_time=ns)
            self._count(PROGRESS_TOPIC)
        images = data.get("images")
        if images:
            for camera, image in images.items():
                self._frame(str(camera), image, ns)

    def _scene(self, event: Event, ns: int) -> None:
        state = event.data.get("state")
        bodies = state.get("bodies") if isinstance(state, Mapping) else None
        if (
            not bodies
            or ns - self._last_scene_ns < self.scene_period_ns
            or not self.scene.has_sinks()
        ):
            return
        self._last_scene_ns = ns
        spheres, points = [], []
        size, color = self._sphere_size, self._sphere_color
        try:
            for body in bodies.values():  # spheres: the orientation (body["quat"]) shows nothing
                x, y, z = (float(v) for v in body["pos"])
                position = Vector3(x=x, y=y, z=z)
                spheres.append(
                    SpherePrimitive(pose=Pose(position=position), size=size, color=color)
                )
                points.append(Point3(x=x, y=y, z=z))
        except (KeyError, TypeError, ValueError):
            return  # not the {name: {pos, quat}} this draws
        line = LinePrimitive(thickness=0.01, points=points, color=self._line_color)
        entity = SceneEntity(timestamp=_stamp(ns), frame_id=SCENE_FRAME, id="robot", spheres=spheres,
                             lines=[line])  # fmt: skip
        self.scene.log(SceneUpdate(entities=[entity]), log_time=ns)
        self._count(SCENE_TOPIC)

    def _frame(self, camera: str, image: Any, ns: int) -> None:
        channel = self.camera(camera)
        if not channel.has_sinks():
            return
        if ns - self._last_frame_ns.get(camera, -(1 << 62)) < self.image_period_ns:
            self.frames_skipped += 1
            return
        if isinstance(image, str):  # a relative path of a loaded run
            if self.load_frame is None:
                return
            try:
                image = self.load_frame(image)
            except (OSError, ValueError):
                _log.warning("live view: frame %s unreadable; not shown", image)
                return
        data = jpeg(image)
        if data is None:
            return
        self._last_frame_ns[camera] = ns
        channel.log(CompressedImage(timestamp=_stamp(ns), frame_id=camera, data=data, format="jpeg"),
                    log_time=ns)  # fmt: skip
        self.frames += 1
        self._count(camera_topic(camera))

    def hold(self, event: Event, ns: int) -> None:
        """The hold runs of action events: a log line where one starts and where it ends.
        Called for every action event, also those the display rate leaves out (live.view);
        calling it again for the same event logs nothing."""
        hold = event.data.get("hold", False)
        if hold and not self._holding:
            self._holding, self._hold_start = True, event.step
            self._line(ns, LogLevel.Warning, f"step {event.step}: hold (no action queued)")
        elif not hold and self._holding:
            self._holding = False
            self._line(ns, LogLevel.Info, f"step {event.step}: resumed after "
                       f"{event.step - self._hold_start} hold step(s)")  # fmt: skip

    def _action(self, event: Event, ns: int) -> None:
        self.hold(event, ns)
        action = event.data.get("action")
        if (
            (type(action) is dict or isinstance(action, Mapping))
            and action
            and self.action.has_sinks()
        ):
            keys = self.action_keys = tuple(action)
            self.action.base.log(self._joint_states(ns, keys, action, None, None), ns)
            self._count(ACTION_TOPIC)

    def _joint_states(self, ns: int, names: tuple[str, ...], positions: Mapping[str, Any],
                      vel: Any, eff: Any) -> bytes:  # fmt: skip
        """JointStates bytes: the packed layout of these names, or (a value that is not a
        plain number, a missing column entry) the SDK's message classes, None left out."""
        key = (names, vel is not None, eff is not None)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = JointStatesEncoder(
                [str(n) for n in names], velocity=key[1], effort=key[2]
            )
        try:
            return encoder(ns, positions.values(),
                           _column(vel, names) if key[1] else (), _column(eff, names) if key[2] else ())  # fmt: skip
        except (struct.error, ValueError, TypeError, KeyError, IndexError):
            vel = _floats(vel, names) if vel is not None else [None] * len(names)
            eff = _floats(eff, names) if eff is not None else [None] * len(names)
            joints = [
                JointState(
                    name=str(n), position=None if p is None else float(p), velocity=v, effort=e
                )
                for n, p, v, e in zip(names, positions.values(), vel, eff, strict=True)
            ]
            return JointStates(timestamp=_stamp(ns), joints=joints).encode()

    def _start(self, event: Event, ns: int) -> None:
        d = event.data
        state = self.progress_state
        state.update(run_id=event.run_id or str(d.get("run_id", "")), episode=int(d.get("episode", 0) or 0),
                     step=0, fraction=0.0 if state["n_steps"] else None, t=0.0, outcome=None)  # fmt: skip
        self._holding = False
        self.merges = 0
        self._line(ns, LogLevel.Info, f"episode {state['episode']} started: run {state['run_id'] or '-'}, "
                   f"instruction {d.get('instruction')!r}, seed {d.get('seed')}")  # fmt: skip

    def _end(self, event: Event, ns: int) -> None:
        d = event.data
        state = self.progress_state
        state["episodes_done"] += 1
        state["successes"] += int(d.get("outcome") == "success")
        state["outcome"] = d.get("outcome")
        state["step"] = int(d.get("steps", event.step) or 0)
        n = state["n_steps"]
        state["fraction"] = (state["step"] / n) if n else None
        if self.progress.has_sinks():
            self.progress.log(state, log_time=ns)
            self._count(PROGRESS_TOPIC)
        level = LogLevel.Info if d.get("outcome") in ("success", "truncated") else LogLevel.Warning
        self._line(ns, level, f"episode {state['episode']} ended: {d.get('status')} ({d.get('steps')} steps, "
                   f"{d.get('holds')} holds, {self.merges} chunks merged, {d.get('safety_interventions')} interventions)")  # fmt: skip
