"""Bags anyone recorded -> run directories, through a topic contract (`import-bag`).

    from robokernel_ros.recording.importer import import_bags
    results = import_bags(["teleop_bag"], "contract.yaml", "runs/")   # one run dir per episode

Every bag (or every episode of a long bag, split as the contract's `episodes:` says)
becomes a run directory that `score`, `report`, `replay`, `shadow_replay` and
`export-lerobot` read as they read the project's own (kernel/trace/store.py's layout):
meta.json, events.jsonl (episode.start, then per frame an observation, the recorded
action as a one-row chunk.merge (what shadow_replay compares a policy with) and the
action event, then episode.end), plus `contract.yaml` (the contract it was read with) and
`import.json` (the bag, the topics, the frames' source). Camera frames are not copied:
an observation's `images` names the bag message it holds (`bag/<camera>/<log ns>`); the
run directory loader of `importer_trace` reads them from the bag (keep the bag where it
was imported from).

An observation holds the contract's state as the live workcell's ROS env does: a
JointState source's positions under `joint_positions`, its velocities under
`joint_velocities`, every other source's values as top-level numbers named by the
contract's state names; an action holds the contract's action names.

Frames: the contract's `fps` clock; each frame holds the latest message of every stream
at or before its time (`recording.alignment`), on header stamps (`align: header`; a
message without a header counts at its log time) or on log (receive) times
(`align: receive`). Frames before every stream has started are dropped and counted.
Topics the contract does not name are not read. The bag is streamed (rosbags'
AnyReader, in log-time order): memory does not grow with the bag.

Everything that can be refused is checked before anything is written: the contract,
every bag's topics and types (`resolve_types`), the first message of every numeric
stream (a joint missing from it), the output run directories (never overwritten).
A failure while importing removes the run directories this call made.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..contract import Contract, ContractError, extract, load_contract, resolve_types
from ..contract.fields import JOINT_STATE, JOINT_TRAJECTORY, TYPES
from ..contract.spec import contract_mapping, stream_names
from ..kernel.events import ACTION, CHUNK_MERGE, EPISODE_END, EPISODE_START, OBSERVATION
from ..kernel.trace import EVENTS_FILE, META_FILE, dumps_pretty
from ..kernel.trace.jsonl import line_of
from . import types as T
from .alignment import Frame, HoldAligner

_log = logging.getLogger(__name__)

CONTRACT_FILE = "contract.yaml"
IMPORT_FILE = "import.json"
DEFAULT_SLACK_S = 1.0


@dataclass
class EpisodeImport:
    """One run directory written: where, how many frames, what was dropped."""

    run_dir: str
    bag: str
    episode: int
    frames: int
    dropped_leading: int  # frames before every stream had a message
    late_messages: int  # messages whose stamp came after their frame was final
    start_ns: int | None
    end_ns: int | None
    messages: dict[str, int] = field(default_factory=dict)  # topic -> messages read


@dataclass
class _Bag:
    path: Path
    contract: Contract  # types resolved against this bag
    types: dict[str, str]
    counts: dict[str, int]
    # episodes' [start, end] stamps; None: split at gaps while importing
    bounds: list[tuple[int | None, int | None]] | None
    outside: int = 0  # messages outside every episode


def header_stamp(raw: bytes | memoryview) -> int | None:
    """The header stamp (ns) of a CDR message whose first field is a std_msgs/Header,
    read from its first bytes without deserialising it (None when zero)."""
    little = raw[1] == 1
    sec, nsec = struct.unpack_from("<iI" if little else ">iI", raw, 4)
    ns = sec * 1_000_000_000 + nsec
    return ns or None


class _JointStateReader:
    """A JointState source's vector straight from the CDR bytes (little endian): the names
    section is parsed once per distinct layout, the values are one frombuffer. Anything
    else (big endian, a short message, a missing joint) goes through the deserialised
    message and `extract`, which names what is wrong."""

    _FIELDS = ("position", "velocity", "effort")

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.which = self._FIELDS.index(stream.field or "position")
        self._layouts: dict[bytes, tuple[np.ndarray, int]] = {}

    def __call__(self, raw: bytes | memoryview, decode: Callable[[], Any]) -> np.ndarray:
        try:
            if raw[1] != 1:
                raise ValueError("big endian")
            buf = memoryview(raw)[4:]
            (flen,) = struct.unpack_from("<I", buf, 8)
            names_at = (12 + flen + 3) & ~3
            (count,) = struct.unpack_from("<I", buf, names_at)
            pos = names_at + 4
            for _ in range(count):
                pos = (pos + 3) & ~3
                (slen,) = struct.unpack_from("<I", buf, pos)
                pos += 4 + slen
            key = bytes(buf[names_at:pos])
            layout = self._layouts.get(key)
            if layout is None:
                layout = self._layout(key, count, decode)
            index, width = layout
            for _ in range(self.which):  # skip the arrays before the field
                pos = (pos + 3) & ~3
                (n,) = struct.unpack_from("<I", buf, pos)
                pos = ((pos + 4 + 7) & ~7) + 8 * n if n else pos + 4
            pos = (pos + 3) & ~3
            (n,) = struct.unpack_from("<I", buf, pos)
            if n != width:
                raise ValueError("not one value per name")
            start = (pos + 4 + 7) & ~7
            values = np.frombuffer(buf, dtype="<f8", count=n, offset=start)
            return values[index]
        except (ValueError, struct.error, IndexError):
            return extract(self.stream, decode())

    def _layout(self, key: bytes, count: int, decode: Callable[[], Any]) -> tuple[np.ndarray, int]:
        msg = decode()
        names = [str(n) for n in msg.name]
        extract(self.stream, msg)  # a missing joint or value: FieldError, named
        index = np.array([names.index(n) for n in self.stream.names], dtype=np.intp)
        self._layouts[key] = (index, count)
        return self._layouts[key]


def resolve_against_bag(contract: Contract, types: dict[str, str], bag: Path) -> Contract:
    """The contract resolved against a bag's {topic: message type}; ContractError naming
    the contract and the bag with every problem (a missing topic, a type mismatch)."""
    try:
        return resolve_types(contract, types)
    except ContractError as exc:
        raise ContractError(f"{contract.origin} against bag {bag}", exc.problems) from None


def has_header(msgtype: str) -> bool:
    """Whether messages of `msgtype` start with a std_msgs/Header (their stamp can align)."""
    fields = T.typestore().fielddefs.get(msgtype)
    return bool(fields and fields[1] and fields[1][0][0] == "header")


def open_bag(path: Path) -> Any:
    """rosbags' AnyReader of the bag at `path`, with the package's typestore (a context
    manager: `with open_bag(path) as reader`)."""
    from rosbags.highlevel import AnyReader

    return AnyReader([path], default_typestore=T.typestore())


def stamp_of(align: str, with_header: bool) -> Callable[[bytes, int], int]:
    """(raw message, log time) -> the stamp a stream is aligned by: the header's stamp
    under `align: header` (the log time when the message has no header or a zero stamp),
    else the log time."""
    if align == "header" and with_header:

        def stamp(raw: bytes, log_ns: int) -> int:
            return header_stamp(raw) or log_ns

        return stamp
    return lambda raw, log_ns: log_ns


def _episode_bounds(reader: Any, contract: Contract) -> list[tuple[int | None, int | None]] | None:
    """[(start, end)] stamps of the bag's episodes (None: open). `split: marker`: one pass
    over the marker topic only; `split: gap`: None (found while importing, in one pass)."""
    rule = contract.episodes
    if rule.rule == "none":
        return [(None, None)]
    if rule.rule == "gap":
        return None
    conns = [c for c in reader.connections if c.topic == rule.topic]
    stamp = stamp_of(contract.align, has_header(conns[0].msgtype))
    stamps = sorted(stamp(raw, ns) for _, ns, raw in reader.messages(connections=conns))
    return [(s, (stamps[i + 1] - 1) if i + 1 < len(stamps) else None) for i, s in enumerate(stamps)]


def _check_first_messages(reader: Any, contract: Contract, bag: Path) -> list[str]:
    """Extract the first message of every numeric stream: a missing joint, a short array."""
    problems: list[str] = []
    for role, streams in (("state", contract.state), ("action", contract.action)):
        for s in streams:
            conns = [c for c in reader.connections if c.topic == s.topic]
            for conn, _, raw in reader.messages(connections=conns):
                try:
                    extract(s, reader.deserialize(raw, conn.msgtype))
                except ValueError as exc:
                    problems.append(f"{role}: {exc} (bag {bag})")
                break
            else:
                problems.append(f"{role}: topic {s.topic} has no message in bag {bag}")
    return problems


def _open_bag(path: Path, contract: Contract) -> _Bag:
    from .reader import bag_info

    try:
        info = bag_info(path)
    except ValueError as exc:
        raise ValueError(f"bag={str(path)!r}: {exc}") from None
    with open_bag(info.path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        counts: dict[str, int] = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
        resolved = resolve_against_bag(contract, types, info.path)
        problems = _check_first_messages(reader, resolved, info.path)
        if problems:
            raise ContractError(f"{contract.origin} against bag {info.path}", problems)
        bounds = _episode_bounds(reader, resolved)
    return _Bag(path=info.path, contract=resolved, types=types, counts=counts, bounds=bounds)


class _RunDir:
    """One imported episode's run directory, written line by line."""

    def __init__(self, path: Path, bag: _Bag, episode: int, contract_text: str) -> None:
        self.path = path
        self.bag = bag
        self.contract = bag.contract
        self.episode = episode
        self.split = bag.contract.episodes.rule != "none"
        path.mkdir(parents=True)
        (path / CONTRACT_FILE).write_text(contract_text)
        self._file = open(path / EVENTS_FILE, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close()
        self.seq = 0
        self.start_data: dict[str, Any] | None = None
        c = self.contract
        # the live ROS env's layout (ros/env_config.py): JointState positions under
        # joint_positions, velocities under joint_velocities, every other source's values
        # as top-level numbers named by the contract's state names
        self.layout: list[tuple[str | None, list[str]]] = []
        for st in c.state:
            fld = st.field or (TYPES[st.type].default_field if st.type in TYPES else None)
            group = None
            if st.type == JOINT_STATE and fld in ("position", "velocity"):
                group = "joint_positions" if fld == "position" else "joint_velocities"
            self.layout.append((group, list(stream_names(st))))
        self.state_names = list(c.state_names)
        self.action_names = list(c.action_names)
        self.cameras = list(c.images)

    def _line(self, kind: str, step: int, t: float, data: dict[str, Any]) -> None:
        self._file.write(line_of(self.seq, kind, step, t, t, data))
        self.seq += 1

    def start(self, first_ns: int) -> None:
        c = self.contract
        self.start_data = {
            "run_id": self.path.name,
            "env": {
                "action_keys": self.action_names,
                "state_keys": self.state_names,
                "control": "absolute",
                "control_hz": c.fps,
            },
            "timing": {"mode": "recorded", "align": c.align},
            "instruction": "",
            "seed": None,
            "agent": "recorded",
            "started_at": datetime.fromtimestamp(first_ns / 1e9, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "robots": [c.robot] if c.robot else [],
            "call": "import_bag",
            "source": {"bag": str(self.bag.path), "episode": self.episode},
            "cameras": self.cameras,
        }
        self._line(EPISODE_START, 0, 0.0, self.start_data)

    def frame(
        self, frame: Frame, state: np.ndarray, action: np.ndarray, images: dict[str, str]
    ) -> None:
        if self.start_data is None:
            self.start(frame.stamp_ns)
        step = frame.index
        t = step / self.contract.fps
        obs: dict[str, Any] = {}
        values = state.tolist()
        at = 0
        for group, names in self.layout:
            part = dict(zip(names, values[at : at + len(names)], strict=True))
            at += len(names)
            if group is None:
                obs.update(part)
            else:
                obs.setdefault(group, {}).update(part)
        data: dict[str, Any] = {"obs": obs, "stamp_ns": frame.stamp_ns}
        if images:
            data["images"] = images
        self._line(OBSERVATION, step, t, data)
        values = action.tolist()
        # the recorded action as a one-row chunk merged at its own step: shadow_replay
        # asks a policy for a chunk on every frame's observation and compares its first
        # row with what was recorded (no inference time: nobody inferred it)
        self._line(
            CHUNK_MERGE,
            step,
            t,
            {"obs_step": step, "arrival_step": step, "dropped": 0, "kept": 1,
             "inference_s": None, "request_id": step, "keys": self.action_names,
             "actions": [values], "source": "recorded"},
        )  # fmt: skip
        self._line(
            ACTION,
            step,
            t,
            {
                "step": step,
                "action": dict(zip(self.action_names, values, strict=True)),
                "hold": False,
                "reward": 0.0,
                "terminated": False,
                "truncated": False,
            },
        )

    def close(self, result: EpisodeImport, import_info: dict[str, Any]) -> None:
        steps = result.frames
        end = {
            "outcome": "unknown",
            "status": f"imported: {steps} frames from {self.bag.path.name}"
            + (f" episode {self.episode}" if self.split else ""),
            "steps": steps,
            "holds": 0,
            "chunks": steps,
            "safety_interventions": 0,
            "import": {
                "dropped_leading_frames": result.dropped_leading,
                "late_messages": result.late_messages,
            },
            "events": self.seq + 1,
        }
        if self.start_data is None:
            self.start(result.start_ns or 0)
        self._line(EPISODE_END, steps, steps / self.contract.fps, end)
        self._file.close()
        meta = {**(self.start_data or {}), **end}
        (self.path / META_FILE).write_bytes(dumps_pretty(meta))
        (self.path / IMPORT_FILE).write_bytes(dumps_pretty(import_info))


def _contract_text(contract: Contract, path: Path | None) -> str:
    header = "# the contract this run directory was imported with (types read from the bag)\n"
    return header + yaml.safe_dump(contract_mapping(contract), sort_keys=False)


def run_id_for(bag: Path, episode: int | None) -> str:
    """The run directory's name: the bag's, with `-ep000`... for an episode of a split bag."""
    name = bag.name if bag.is_dir() else bag.stem
    return name if episode is None else f"{name}-ep{episode:03d}"


def import_bags(
    bags: Sequence[str | Path],
    contract: str | Path | Contract,
    out: str | Path,
    *,
    slack_s: float = DEFAULT_SLACK_S,
    progress: bool | None = None,
) -> list[EpisodeImport]:
    """Import every bag into run directories under `out` (see the module docstring).

    `contract`: a path or a parsed Contract. `progress`: a tqdm bar on stderr (None: when
    stderr is a terminal). Raises ContractError (every mistake, naming the bag) or
    ValueError (naming `bags=` or `out=`) before writing anything."""
    if isinstance(contract, str | Path):
        contract = load_contract(contract)
    if not bags:
        raise ValueError("bags=[]: give at least one bag")
    if not (isinstance(slack_s, int | float) and not isinstance(slack_s, bool) and slack_s >= 0):
        raise ValueError(f"slack_s={slack_s!r}: must be a number of seconds >= 0")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={str(out)!r}: exists and is not a folder")
    opened = [_open_bag(Path(b), contract) for b in bags]
    seen: set[str] = set()
    for bag in opened:
        split = bag.contract.episodes.rule != "none"
        name = run_id_for(bag.path, 0 if split else None)
        prefix = name[: -len("000")] if split else name
        clash = [p.name for p in out.iterdir() if p.name.startswith(prefix)] if out.is_dir() else []
        clash = [c for c in clash if c == name or (split and c[len(prefix) :].isdigit())]
        if clash or prefix in seen:
            raise ValueError(
                f"out={str(out)!r}: {(clash or [name])[0]} already exists (an import never "
                "overwrites; choose another --out or remove it)"
            )
        seen.add(prefix)
        if bag.bounds == []:
            raise ValueError(
                f"bags={str(bag.path)!r}: no message on the marker topic "
                f"{bag.contract.episodes.topic}: no episode to import"
            )
    made: list[Path] = []
    results: list[EpisodeImport] = []
    out_existed = out.exists()
    try:
        for bag in opened:
            results.extend(_import_one(bag, out, made, slack_s, progress))
    except BaseException:
        for run in made:
            shutil.rmtree(run, ignore_errors=True)
        if not out_existed:
            shutil.rmtree(out, ignore_errors=True)
        raise
    return results


def _progress(total: int, label: str, enabled: bool | None) -> Any:
    from tqdm import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=label, unit="msg", disable=not enabled, leave=False)


class _Episodes:
    """The episodes of one bag as it is read: their aligners and run directories, made as
    each episode begins. Known bounds (none, marker) route a message by its stamp; with
    `split: gap` an episode ends when the first state topic pauses for more than gap_s,
    and messages stamped past the last state message + gap_s wait until the next state
    message says whether they open a new episode."""

    def __init__(self, bag: _Bag, out: Path, made: list[Path], n_streams: int, slack_ns: int,
                 emit: Callable[[int, list[Frame]], None]) -> None:  # fmt: skip
        self.bag, self.out, self.made = bag, out, made
        self.n_streams, self.slack_ns, self.emit = n_streams, slack_ns, emit
        self.contract = bag.contract
        self.text = _contract_text(bag.contract, None)
        self.split = bag.contract.episodes.rule != "none"
        self.aligners: list[HoldAligner] = []
        self.runs: list[_RunDir] = []
        self.bounds: list[list[int | None]] = []
        self.outside = 0
        self.gap_ns = (
            round((bag.contract.episodes.gap_s or 0.0) * 1e9) if bag.bounds is None else None
        )
        self.primary = bag.contract.state[0].topic
        self.last_primary: int | None = None
        self.pending: list[tuple[int, int, Any, int]] = []
        if bag.bounds is not None:
            for start, end in bag.bounds:
                self._open(start, end)
            self.starts = [b[0] if b[0] is not None else -(1 << 62) for b in bag.bounds]

    def _open(self, start: int | None, end: int | None) -> None:
        i = len(self.runs)
        run = _RunDir(self.out / run_id_for(self.bag.path, i if self.split else None), self.bag,
                      i, self.text)  # fmt: skip
        self.made.append(run.path)
        self.runs.append(run)
        self.aligners.append(
            HoldAligner(
                self.n_streams,
                self.contract.fps,
                slack_ns=self.slack_ns,
                start_ns=start,
                end_ns=end,
            )  # fmt: skip
        )
        self.bounds.append([start, end])

    def push(self, topic: str, k: int, stamp: int, payload: Any, log_ns: int) -> None:
        if self.gap_ns is None:
            e = bisect.bisect_right(self.starts, stamp) - 1
            end = self.bag.bounds[e][1] if e >= 0 and self.bag.bounds else None
            if e < 0 or (end is not None and stamp > end):
                self.outside += 1
            else:
                self.emit(e, self.aligners[e].push(k, stamp, payload, log_ns))
            return
        if topic == self.primary and k == 0:
            self._primary(stamp)
        if self.last_primary is not None and stamp <= self.last_primary + self.gap_ns:
            self._route(k, stamp, payload, log_ns)
        else:
            self.pending.append((k, stamp, payload, log_ns))

    def _route(self, k: int, stamp: int, payload: Any, log_ns: int) -> None:
        e = len(self.aligners) - 1
        start = self.bounds[e][0]
        if start is not None and stamp < start:
            self.outside += 1  # before this episode (in the gap before it)
            return
        self.emit(e, self.aligners[e].push(k, stamp, payload, log_ns))

    def _primary(self, stamp: int) -> None:
        assert self.gap_ns is not None
        if self.last_primary is None or stamp - self.last_primary > self.gap_ns:
            if self.aligners:  # the episode before ends: its frames are final now
                self.aligners[-1].end_ns = self.last_primary
                self.bounds[-1][1] = self.last_primary
                self.emit(len(self.aligners) - 1, self.aligners[-1].finish())
            self._open(stamp, None)
            self.last_primary = stamp
            waiting, self.pending = self.pending, []
            for entry in waiting:
                if entry[1] <= stamp + self.gap_ns:
                    self._route(*entry)
                else:
                    self.pending.append(entry)
        self.last_primary = max(stamp, self.last_primary)

    def finish(self) -> None:
        if self.gap_ns is not None:
            self.outside += len(self.pending)
            self.pending = []
            if self.aligners:
                self.aligners[-1].end_ns = self.last_primary
                self.bounds[-1][1] = self.last_primary
        for i, aligner in enumerate(self.aligners):
            self.emit(i, aligner.finish())


def _import_one(
    bag: _Bag, out: Path, made: list[Path], slack_s: float, progress: bool | None
) -> list[EpisodeImport]:
    c = bag.contract
    numeric = [*c.state, *c.action]
    n_state = len(c.state)
    cameras = list(c.images.items())
    topics: dict[str, list[int]] = {}  # topic -> its stream indices (a topic may serve twice)
    for i, s in enumerate(numeric):
        topics.setdefault(s.topic, []).append(i)
    for j, (_, img) in enumerate(cameras):
        topics.setdefault(img.topic, []).append(len(numeric) + j)
    fast = {k: _JointStateReader(s) for k, s in enumerate(numeric) if s.type == JOINT_STATE}
    stampers = {t: stamp_of(c.align, has_header(bag.types[t])) for t in topics}
    runs: list[_RunDir] = []

    def emit(episode: int, frames: list[Frame]) -> None:
        run = runs[episode]
        for frame in frames:
            state = np.concatenate([_vector(numeric[k], frame, k) for k in range(n_state)])
            action = np.concatenate(
                [_vector(numeric[k], frame, k) for k in range(n_state, len(numeric))]
            )
            images = {
                cam: f"bag/{cam}/{frame.payloads[len(numeric) + j]}"
                for j, (cam, _) in enumerate(cameras)
            }
            run.frame(frame, state, action, images)

    episodes = _Episodes(bag, out, made, len(numeric) + len(cameras), round(slack_s * 1e9), emit)
    runs = episodes.runs  # the same list: episodes add their run directories to it
    msgs: dict[str, int] = dict.fromkeys(topics, 0)
    total = sum(bag.counts.get(t, 0) for t in topics)
    n_numeric = len(numeric)
    with open_bag(bag.path) as reader, _progress(total, bag.path.name, progress) as bar:
        conns = [x for x in reader.connections if x.topic in topics]
        for conn, log_ns, raw in reader.messages(connections=conns):
            bar.update(1)
            topic = conn.topic
            msgs[topic] += 1
            stamp = stampers[topic](raw, log_ns)
            decoded: list[Any] = []

            def decode(raw: Any = raw, msgtype: str = conn.msgtype, box: list = decoded) -> Any:
                if not box:
                    box.append(reader.deserialize(raw, msgtype))
                return box[0]

            for k in topics[topic]:
                if k >= n_numeric:
                    payload: Any = log_ns  # a camera: the frame stays in the bag
                elif k in fast:
                    payload = fast[k](raw, decode)
                elif numeric[k].type == JOINT_TRAJECTORY:
                    payload = decode()
                else:
                    payload = extract(numeric[k], decode())
                episodes.push(topic, k, stamp, payload, log_ns)
        episodes.finish()
    results = []
    for i, (aligner, run) in enumerate(zip(episodes.aligners, runs, strict=True)):
        result = EpisodeImport(
            run_dir=str(run.path),
            bag=str(bag.path),
            episode=i,
            frames=aligner.kept,
            dropped_leading=aligner.dropped_leading,
            late_messages=aligner.late,
            start_ns=aligner.start_ns,
            end_ns=aligner.frame_time(aligner.kept + aligner.dropped_leading - 1)
            if aligner.start_ns is not None and (aligner.kept + aligner.dropped_leading)
            else None,
            messages=dict(msgs),
        )
        run.close(
            result,
            {
                "bag": str(bag.path.resolve()),
                "episode": i,
                "episodes": len(runs),
                "bounds_ns": list(episodes.bounds[i]),
                "fps": c.fps,
                "align": c.align,
                "cameras": {cam: {"topic": s.topic, "type": s.type} for cam, s in cameras},
                "frames": result.frames,
                "dropped_leading_frames": result.dropped_leading,
                "late_messages": result.late_messages,
                "messages_outside_episodes": episodes.outside,
            },
        )
        results.append(result)
    bag.outside = episodes.outside
    return results


def _vector(stream: Any, frame: Frame, k: int) -> np.ndarray:
    payload = frame.payloads[k]
    if isinstance(payload, np.ndarray):
        return payload
    # a JointTrajectory: the point in force at the frame's time
    return extract(stream, payload, time_s=(frame.stamp_ns - frame.stamps[k]) / 1e9)


def iter_imports(results: Sequence[EpisodeImport]) -> Iterator[str]:
    """One summary line per run directory (what the CLI prints)."""
    for r in results:
        yield (
            f"{r.run_dir}: {r.frames} frames"
            f" ({r.dropped_leading} dropped before every stream had started"
            + (f", {r.late_messages} late messages" if r.late_messages else "")
            + ")"
        )
