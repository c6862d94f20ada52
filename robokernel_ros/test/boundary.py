"""Import-boundary checks: what importing every module of a package loads, in a fresh interpreter."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

ROS_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def modules_loaded_by(package: str) -> tuple[list[str], list[str]]:
    """(the package's modules, every module a fresh interpreter has loaded after importing
    each of them)."""
    names = [m.name for m in pkgutil.iter_modules(importlib.import_module(package).__path__)]
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        f"    importlib.import_module({package!r} + '.' + name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return names, json.loads(out.stdout.strip().splitlines()[-1])


def import_cycles(package: str) -> list[list[str]]:
    """The import cycles among a package's own modules (every import counts: at module top,
    inside a function or under TYPE_CHECKING), each as a strongly connected set of names."""
    import ast
    from pathlib import Path

    root = Path(importlib.import_module(package).__path__[0])
    modules = {p.stem: p for p in root.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level == 1:
                    targets = [base] if base else [a.name for a in node.names]
                elif node.level == 0 and base.startswith(package + "."):
                    targets = [base[len(package) + 1 :]]
                elif node.level == 0 and base == package:
                    targets = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name[len(package) + 1 :]
                    for a in node.names
                    if a.name.startswith(package + ".")
                ]
            graph[name] |= {t.split(".")[0] for t in targets if t.split(".")[0] in modules} - {name}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles
