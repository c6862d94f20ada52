"""Report (and repair) what a bag left by a killed writer still holds.

    python -m robokernel_ros.recording.recover BAG [--repair OUT] [--json]

A writer killed mid-episode leaves the storage file without its index and no
metadata.yaml. Every MCAP chunk flushed before the kill (the mirror flushes at least
every `flush_interval_s`) and every committed sqlite3 row is still readable;
`recover_bag` reads them, says how many messages of which topics it recovered and
where the episode stopped, and with `repair=` writes them to a complete bag that
every rosbag2 tool opens. A bag whose metadata.yaml survived but whose MCAP file was
cut short (copied half-way, disk full) is read the same way: every complete record,
including the complete messages of the chunk the cut went through.

Exit status: 0 when messages were recovered, 1 when nothing was (or the path is not a bag).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import StoragePlugin, Writer

from . import types as T
from .mirror import DEFAULT_PREFIX, FORMAT_KEY, FORMAT_VERSION, QOS_RELIABLE
from .reader import METADATA_FILE, bag_info, iter_raw, scan_storage


@dataclass
class RecoveryReport:
    path: str
    storage: str
    complete: bool  # the bag was closed properly (nothing needed recovering)
    messages: int
    topics: dict[str, int]
    events: int
    first_seq: int | None
    last_seq: int | None
    last_step: int | None
    last_kind: str | None
    last_t: float | None
    episode_ended: bool
    file_bytes: int
    read_bytes: int | None
    stopped: str
    repaired_to: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        state = "complete" if self.complete else "recovered from an unclosed or cut bag"
        lines = [
            f"{self.path}: {state} ({self.storage})",
            f"  messages: {self.messages}",
            *(f"    {topic}: {count}" for topic, count in sorted(self.topics.items())),
        ]
        if self.events:
            lines += [
                f"  kernel events: {self.events} (seq {self.first_seq}..{self.last_seq})",
                f"  last event: {self.last_kind} at step {self.last_step}, t={self.last_t}",
            ]
        else:
            lines.append("  kernel events: none")
        lines.append(f"  episode ended: {'yes' if self.episode_ended else 'no'}")
        if not self.complete:
            lines.append(
                f"  readable: {self.read_bytes} of {self.file_bytes} bytes; reading stopped: {self.stopped}"
            )
        if self.repaired_to:
            lines.append(f"  repaired bag: {self.repaired_to}")
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def recover_bag(
    path: str | Path, *, repair: str | Path | None = None, prefix: str = DEFAULT_PREFIX
) -> RecoveryReport:
    """Read every recoverable message of the bag at `path` and report it.

    repair: a folder (must not exist) to write the recovered messages to as a complete
    bag of the same storage, with metadata.yaml.
    """
    info = bag_info(path)
    if info.complete:
        messages = list(iter_raw(info.path))
        details: dict[str, Any] = {
            "file_bytes": info.storage_file.stat().st_size,
            "read_bytes": None,
            "stopped": "complete",
        }
    else:
        messages, details = scan_storage(info)
    store = T.typestore()
    topics = Counter(m.topic for m in messages)
    events = [
        store.deserialize_cdr(m.data, m.msgtype) for m in messages if m.topic == f"{prefix}/events"
    ]
    events.sort(key=lambda e: e.seq)
    last = events[-1] if events else None
    notes: list[str] = []
    if not info.complete and (info.path / METADATA_FILE).is_file():
        notes.append(f"{METADATA_FILE} is present but {info.storage_file.name} is cut short")
    if not messages:
        notes.append("no complete message in the file: nothing to recover")
    if events:
        seqs = [int(e.seq) for e in events]
        missing = (seqs[-1] - seqs[0] + 1) - len(set(seqs))
        if missing:
            notes.append(f"{missing} event(s) missing between seq {seqs[0]} and {seqs[-1]}")
    report = RecoveryReport(
        path=str(info.path),
        storage=info.storage,
        complete=info.complete,
        messages=len(messages),
        topics=dict(topics),
        events=len(events),
        first_seq=int(events[0].seq) if events else None,
        last_seq=int(last.seq) if last else None,
        last_step=int(last.step) if last else None,
        last_kind=str(last.kind) if last else None,
        last_t=(last.stamp.sec + last.stamp.nanosec * 1e-9) if last else None,
        episode_ended=any(e.kind == "episode.end" for e in events),
        file_bytes=int(details["file_bytes"]),
        read_bytes=details["read_bytes"],
        stopped=str(details["stopped"]),
        notes=notes,
    )
    if repair is not None:
        out = Path(repair)
        if out.exists():
            raise ValueError(f"repair={str(repair)!r}: already exists (a bag is never overwritten)")
        plugin = StoragePlugin.SQLITE3 if info.storage == "sqlite3" else StoragePlugin.MCAP
        writer = Writer(out, version=9, storage_plugin=plugin)
        writer.open()
        writer.set_custom_data(FORMAT_KEY, FORMAT_VERSION)
        for key, value in info.custom_data.items():  # kept from a metadata.yaml that survived
            if key != FORMAT_KEY:
                writer.set_custom_data(key, value)
        writer.set_custom_data("robokernel.recovered_from", str(info.path))
        conns: dict[str, Any] = {}
        for msg in messages:
            conn = conns.get(msg.topic)
            if conn is None:
                conn = conns[msg.topic] = writer.add_connection(
                    msg.topic, msg.msgtype, typestore=store, offered_qos_profiles=[QOS_RELIABLE]
                )
            writer.write(conn, msg.timestamp, msg.data)
        writer.close()
        report.repaired_to = str(out)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="robokernel-bag-recover", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("bag", help="bag folder (or its .mcap / .db3 file)")
    parser.add_argument(
        "--repair", metavar="OUT", help="write the recovered messages to a complete bag at OUT"
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    try:
        report = recover_bag(args.bag, repair=args.repair)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict()) if args.json else report.summary())
    return 0 if report.messages else 1


if __name__ == "__main__":
    sys.exit(main())
