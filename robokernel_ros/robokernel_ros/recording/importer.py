"""Bags anyone recorded -> run directories, through a topic contract (`import-bag`).

    from robokernel_ros.recording.importer import import_bags
    results = import_bags(["teleop_bag"], "contract.yaml", "runs/")   # one run dir per episode

Every bag (or every episode of a long bag, split as the contract's `episodes:` says)
becomes a run directory that `score`, `report`, `replay`, `shadow_replay` and
`export-lerobot` read as they read the project's own (kernel/trace/store.py's layout):
meta.json, events.jsonl (episode.start, then per frame an observation and an action
event, then episode.end), plus `contract.yaml` (the contract it was read with) and
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
from ..kernel.events import ACTION, EPISODE_END, EPISODE_START, OBSERVATION
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
    bounds: list[tuple[int | None, int | None]]  # episodes: [start, end] stamps
    outside: int = 0  # messages outside every episode


def header_stamp(raw: bytes | memoryview) -> int | None:
    """The header stamp (ns) of a CDR message whose first field is a std_msgs/Header,
    read from its first bytes without deserialising it (None when zero)."""
    little = raw[1] == 1
    sec, nsec = struct.unpack_from("<iI" if little else ">iI", raw, 4)
    ns = sec * 1_000_000_000 + nsec
    return ns or None


def _has_header(msgtype: str) -> bool:
    fields = T.typestore().fielddefs.get(msgtype)
    return bool(fields and fields[1] and fields[1][0][0] == "header")


def _reader(path: Path) -> Any:
    from rosbags.highlevel import AnyReader

    return AnyReader([path], default_typestore=T.typestore())


def _stamp_of(align: str, with_header: bool) -> Callable[[bytes, int], int]:
    if align == "header" and with_header:

        def stamp(raw: bytes, log_ns: int) -> int:
            return header_stamp(raw) or log_ns

        return stamp
    return lambda raw, log_ns: log_ns


def _episode_bounds(reader: Any, contract: Contract) -> list[tuple[int | None, int | None]]:
    """[(start, end)] stamps of the bag's episodes (None: open), from one pass over the
    first state topic (split: gap) or the marker topic (split: marker) only."""
    rule = contract.episodes
    if rule.rule == "none":
        return [(None, None)]
    topic = contract.state[0].topic if rule.rule == "gap" else rule.topic
    conns = [c for c in reader.connections if c.topic == topic]
    stamp = _stamp_of(contract.align, _has_header(conns[0].msgtype))
    stamps = [stamp(raw, ns) for _, ns, raw in reader.messages(connections=conns)]
    stamps.sort()
    if rule.rule == "marker":
        return [
            (s, (stamps[i + 1] - 1) if i + 1 < len(stamps) else None) for i, s in enumerate(stamps)
        ]
    gap_ns = round((rule.gap_s or 0.0) * 1e9)
    bounds: list[tuple[int | None, int | None]] = []
    start = prev = None
    for s in stamps:
        if start is None:
            start = s
        elif s - prev > gap_ns:
            bounds.append((start, prev))
            start = s
        prev = s
    if start is not None:
        bounds.append((start, prev))
    return bounds


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
    with _reader(info.path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        counts: dict[str, int] = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
        try:
            resolved = resolve_types(contract, types)
        except ContractError as exc:
            raise ContractError(
                f"{contract.origin} against bag {info.path}", exc.problems
            ) from None
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
        self._line(
            ACTION,
            step,
            t,
            {
                "step": step,
                "action": dict(zip(self.action_names, action.tolist(), strict=True)),
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
            + (f" episode {self.episode}" if len(self.bag.bounds) > 1 else ""),
            "steps": steps,
            "holds": 0,
            "chunks": 0,
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


def run_id_for(bag: Path, episode: int, n_episodes: int) -> str:
    name = bag.name if bag.is_dir() else bag.stem
    return name if n_episodes == 1 else f"{name}-ep{episode:03d}"


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
    planned: list[tuple[_Bag, int, Path]] = []
    for bag in opened:
        for i in range(len(bag.bounds)):
            planned.append((bag, i, out / run_id_for(bag.path, i, len(bag.bounds))))
    seen: set[Path] = set()
    for _, _, run in planned:
        if run.exists() or run in seen:
            raise ValueError(
                f"out={str(out)!r}: {run.name} already exists (an import never overwrites; "
                "choose another --out or remove it)"
            )
        seen.add(run)
    if not planned:
        raise ValueError(f"bags={[str(b) for b in bags]!r}: no episode found")
    made: list[Path] = []
    results: list[EpisodeImport] = []
    try:
        for bag in opened:
            results.extend(_import_one(bag, out, made, slack_s, progress))
    except BaseException:
        for run in made:
            shutil.rmtree(run, ignore_errors=True)
        raise
    return results


def _progress(total: int, label: str, enabled: bool | None) -> Any:
    from tqdm import tqdm

    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=label, unit="msg", disable=not enabled, leave=False)


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
    n_streams = len(numeric) + len(cameras)
    stampers = {t: _stamp_of(c.align, _has_header(bag.types[t])) for t in topics}
    starts = [b[0] if b[0] is not None else -(1 << 62) for b in bag.bounds]
    slack_ns = round(slack_s * 1e9)
    aligners = [
        HoldAligner(n_streams, c.fps, slack_ns=slack_ns, start_ns=b[0], end_ns=b[1])
        for b in bag.bounds
    ]
    text = _contract_text(c, None)
    runs: list[_RunDir] = []
    for i in range(len(bag.bounds)):
        run = _RunDir(out / run_id_for(bag.path, i, len(bag.bounds)), bag, i, text)
        made.append(run.path)
        runs.append(run)
    msgs: dict[str, int] = dict.fromkeys(topics, 0)

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

    outside = 0
    total = sum(bag.counts.get(t, 0) for t in topics)
    with _reader(bag.path) as reader, _progress(total, bag.path.name, progress) as bar:
        conns = [x for x in reader.connections if x.topic in topics]
        for conn, log_ns, raw in reader.messages(connections=conns):
            bar.update(1)
            topic = conn.topic
            msgs[topic] += 1
            stamp = stampers[topic](raw, log_ns)
            e = bisect.bisect_right(starts, stamp) - 1
            end = bag.bounds[e][1] if e >= 0 else None
            if e < 0 or (end is not None and stamp > end):
                outside += 1
            else:
                payload: Any = None
                for k in topics[topic]:
                    if k >= len(numeric):
                        payload = log_ns  # a camera: the frame stays in the bag
                    else:
                        s = numeric[k]
                        if payload is None:
                            msg = reader.deserialize(raw, conn.msgtype)
                        payload = msg if s.type == JOINT_TRAJECTORY else extract(s, msg)
                    emit(e, aligners[e].push(k, stamp, payload, log_ns))
    results = []
    for i, (aligner, run) in enumerate(zip(aligners, runs, strict=True)):
        emit(i, aligner.finish())
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
            messages={t: n for t, n in msgs.items()},
        )
        run.close(
            result,
            {
                "bag": str(bag.path.resolve()),
                "episode": i,
                "episodes": len(bag.bounds),
                "bounds_ns": list(bag.bounds[i]),
                "fps": c.fps,
                "align": c.align,
                "cameras": {cam: {"topic": s.topic, "type": s.type} for cam, s in cameras},
                "frames": result.frames,
                "dropped_leading_frames": result.dropped_leading,
                "late_messages": result.late_messages,
                "messages_outside_episodes": outside,
            },
        )
        results.append(result)
    bag.outside = outside
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
