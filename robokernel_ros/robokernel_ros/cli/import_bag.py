"""`robokernel import-bag BAG... --contract FILE --out DIR`, `robokernel contract check
FILE [BAG | --live]`, and `--contract FILE` on `robokernel export-lerobot`.

    robokernel contract check contract.yaml teleop_bag     # what the import will read
    robokernel import-bag teleop_bag --contract contract.yaml --out runs/
    robokernel export-lerobot teleop_bag --contract contract.yaml --repo-id me/teleop --root ds/

Importing this module registers the subcommands (and wraps export-lerobot's). Exit
status: import-bag 0, 1 when refused (every contract mistake on its own line, naming the
key, topic or joint; nothing is written); contract check 0, 2 when the contract has a
mistake or the bag lacks a topic or carries another type.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from robokernel_ros.contract import (
    Contract,
    ContractError,
    load_contract,
    stream_names,
)
from robokernel_ros.contract.fields import JOINT_STATE


def _print_contract_error(command: str, exc: ContractError) -> None:
    print(f"robokernel {command}: error: contract {exc.origin}:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  {problem}", file=sys.stderr)


# ------------------------------------------------------------------ import-bag


def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("bags", nargs="+", metavar="BAG", help="rosbag2 folders (or .mcap/.db3 files)")
    p.add_argument("--contract", required=True, metavar="FILE", help="the topic contract (YAML)")
    p.add_argument("--out", required=True, metavar="DIR", help="run directories go here")
    p.add_argument(
        "--slack",
        type=float,
        default=1.0,
        metavar="S",
        help="how long after a frame's time a message may still be logged (header alignment; "
        "default 1.0 s)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def _run_import(args: argparse.Namespace) -> int:
    from robokernel_ros.recording.importer import import_bags, iter_imports

    try:
        results = import_bags(args.bags, args.contract, args.out, slack_s=args.slack)
    except ContractError as exc:
        _print_contract_error("import-bag", exc)
        return 1
    except (ValueError, OSError) as exc:
        message = str(exc).replace("bags=", "BAG=").replace("out=", "--out=")
        print(
            f"robokernel import-bag: error: {message.replace('slack_s=', '--slack=')}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps({"runs": [asdict(r) for r in results]}))
        return 0
    for line in iter_imports(results):
        print(line)
    dropped = sum(r.dropped_leading for r in results)
    frames = sum(r.frames for r in results)
    print(
        f"imported {len(results)} episode(s), {frames} frames; {dropped} frames dropped "
        "before every stream had started"
    )
    return 0


# ------------------------------------------------------------------ contract check


def _check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("check",), help="check: what the contract resolves to")
    p.add_argument("file", metavar="FILE", help="the topic contract (YAML)")
    p.add_argument("bag", nargs="?", default=None, metavar="BAG", help="a bag to check it against")
    p.add_argument("--live", action="store_true", help="check it against the live ROS graph")
    p.add_argument(
        "--duration",
        type=float,
        default=3.0,
        metavar="S",
        help="--live: how long to listen (default 3 s)",
    )


def _stamp(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def bag_streams(contract: Contract, bag: Path) -> tuple[Contract, list[dict[str, Any]]]:
    """The contract resolved against `bag` and, per stream, what the bag holds: messages,
    rate (Hz over the alignment stamps), first and last stamp. ContractError: a missing
    topic or a type mismatch, by name."""
    from robokernel_ros.recording.importer import (
        has_header,
        open_bag,
        resolve_against_bag,
        stamp_of,
    )
    from robokernel_ros.recording.reader import bag_info

    info = bag_info(bag)
    with open_bag(info.path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        resolved = resolve_against_bag(contract, types, info.path)
        topics = resolved.topics()
        stats: dict[str, list[Any]] = {t: [0, None, None] for t in topics}
        stampers = {t: stamp_of(resolved.align, has_header(types[t])) for t in topics}
        conns = [c for c in reader.connections if c.topic in stats]
        for conn, log_ns, raw in reader.messages(connections=conns):
            s = stats[conn.topic]
            stamp = stampers[conn.topic](raw, log_ns)
            s[0] += 1
            s[1] = stamp if s[1] is None else min(s[1], stamp)
            s[2] = stamp if s[2] is None else max(s[2], stamp)
    rows = []
    for key, stream in resolved.streams():
        n, first, last = stats[stream.topic]
        span = (last - first) / 1e9 if n > 1 else 0.0
        rows.append(
            {
                "key": key,
                "topic": stream.topic,
                "type": stream.type or types.get(stream.topic),
                "field": getattr(stream, "field", None),
                "names": list(stream_names(stream)) if hasattr(stream, "names") else [],
                "messages": n,
                "rate_hz": (n - 1) / span if span > 0 else None,
                "first_ns": first,
                "last_ns": last,
                "header": has_header(types[stream.topic]),
            }
        )
    return resolved, rows


def _print_rows(contract: Contract, rows: list[dict[str, Any]]) -> None:
    print(
        f"contract {contract.origin}: fps {contract.fps:g}, align {contract.align}"
        + (f", robot {contract.robot}" if contract.robot else "")
        + f", episodes split {contract.episodes.rule}"
    )
    for r in rows:
        what = r["type"] or "(type read from the bag or the graph)"
        if r.get("field"):
            what += f".{r['field']}"
        line = f"  {r['key']:<16} {r['topic']}  {what}"
        if r["names"]:
            line += f"  [{', '.join(r['names'])}]"
        print(line)
        if "messages" in r:
            rate = f"{r['rate_hz']:.1f} Hz" if r["rate_hz"] else "-"
            clock = "" if r["header"] or contract.align == "receive" else " (no header: log time)"
            print(
                f"  {'':<16} {r['messages']} messages, {rate}, "
                f"{_stamp(r['first_ns'])} .. {_stamp(r['last_ns'])}{clock}"
            )
    for c in contract.commands:
        print(f"  command {c.name:<8} {c.topic}  {c.kind}  [{', '.join(c.joints)}]")


def _run_check(args: argparse.Namespace) -> int:
    try:
        contract = load_contract(args.file)
    except ContractError as exc:
        _print_contract_error("contract check", exc)
        return 2
    if args.live and args.bag:
        print("robokernel contract check: error: BAG and --live: give one", file=sys.stderr)
        return 2
    if args.live:
        try:
            from robokernel_ros.ros.contract_live import check_live
        except ImportError as exc:
            print(
                f"robokernel contract check: error: --live: not available ({exc})", file=sys.stderr
            )
            return 1
        return int(check_live(contract, args.duration))
    if args.bag is None:
        rows = [
            {
                "key": key,
                "topic": s.topic,
                "type": s.type,
                "field": getattr(s, "field", None),
                "names": list(stream_names(s)) if hasattr(s, "names") else [],
            }
            for key, s in contract.streams()
        ]
        _print_rows(contract, rows)
        return 0
    try:
        resolved, rows = bag_streams(contract, Path(args.bag))
    except ContractError as exc:
        _print_contract_error("contract check", exc)
        return 2
    except ValueError as exc:
        print(f"robokernel contract check: error: BAG: {exc}", file=sys.stderr)
        return 2
    _print_rows(resolved, rows)
    silent = [r for r in rows if r["messages"] == 0]
    for r in silent:
        print(
            f"robokernel contract check: error: {r['key']}: topic {r['topic']} has no message",
            file=sys.stderr,
        )
    return 2 if silent else 0


# ------------------------------------------------------------------ export-lerobot --contract


def _wrap_export() -> None:
    """Add `--contract FILE` to export-lerobot: BAG... are imported (into a temporary
    folder, removed afterwards) and the run directories exported, in one step."""
    from robokernel_ros.cli import export  # noqa: F401 - registers export-lerobot first
    from robokernel_ros.cli.registry import SUBCOMMANDS, register_subcommand

    base = SUBCOMMANDS.get("export-lerobot")
    if base is None or getattr(base.run, "_with_contract", False):
        return

    def add_arguments(p: argparse.ArgumentParser) -> None:
        base.add_arguments(p)
        p.add_argument(
            "--contract",
            default=None,
            metavar="FILE",
            help="the paths are bags anyone recorded: import them through this topic contract "
            "first (see import-bag)",
        )

    def run(args: argparse.Namespace) -> int:
        if not getattr(args, "contract", None):
            return base.run(args)
        from robokernel_ros.recording.importer import CONTRACT_FILE, import_bags

        root = Path(args.root)
        if root.exists() and any(root.iterdir()):
            print(
                f"robokernel export-lerobot: error: --root={str(root)!r}: already exists and "
                "is not empty (a dataset is never overwritten)",
                file=sys.stderr,
            )
            return 1
        with tempfile.TemporaryDirectory(prefix="robokernel-import-") as tmp:
            try:
                results = import_bags(args.paths, args.contract, Path(tmp) / "runs")
            except ContractError as exc:
                _print_contract_error("export-lerobot", exc)
                return 1
            except (ValueError, OSError) as exc:
                print(f"robokernel export-lerobot: error: {exc}", file=sys.stderr)
                return 1
            if results and not args.env_state:
                # sources that are not joint states are top-level numbers of the
                # observation (importer.py): they become observation.environment_state
                imported = load_contract(Path(results[0].run_dir) / CONTRACT_FILE)
                others: list[str] = []
                for st in imported.state:
                    fld = st.field or "position"
                    if st.type == JOINT_STATE and fld == "position":
                        continue  # observation.state
                    suffix = ".vel" if st.type == JOINT_STATE and fld == "velocity" else ""
                    others += [n + suffix for n in stream_names(st)]
                args.env_state = ",".join(others) or None
            args.paths = [r.run_dir for r in results]
            return base.run(args)

    run._with_contract = True  # type: ignore[attr-defined]
    register_subcommand("export-lerobot", base.help, add_arguments, run, replace=True)


def _register() -> None:
    from robokernel_ros.cli.registry import register_subcommand

    register_subcommand(
        "import-bag",
        "bags anyone recorded -> run directories, through a topic contract",
        _import_arguments,
        _run_import,
        replace=True,
    )
    register_subcommand(
        "contract",
        "contract check FILE [BAG|--live]: the streams a topic contract resolves to",
        _check_arguments,
        _run_check,
        replace=True,
    )
    _wrap_export()


_register()
