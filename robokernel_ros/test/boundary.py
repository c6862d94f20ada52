"""Import-boundary checks: what importing every module of a package loads, in a fresh
interpreter, and what its source imports anywhere (lazy imports inside functions too)."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

ROS_PREFIXES = ("rclpy", "rosidl", "robokernel_interfaces", "robokernel_ros.nodes")


def modules_loaded_by(package: str) -> tuple[list[str], list[str]]:
    """(the package's modules, its subpackages' as "sub.module", every module a fresh
    interpreter has loaded after importing each of them)."""
    root = importlib.import_module(package)
    prefix = package + "."
    names = [
        m.name[len(prefix) :]
        for m in pkgutil.walk_packages(root.__path__, prefix)
        if not m.name.endswith(".__main__")  # runs the package's command when imported
    ]
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


def imports_in_source(package: str) -> dict[str, set[str]]:
    """{module: the absolute names its source imports}, for every module of the package and
    its subpackages, imports inside functions included (a lazy import is an import).
    `from a.b import c` counts as importing both a.b and a.b.c (c may be a module)."""
    root = Path(importlib.import_module(package).__path__[0])
    out: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        here = module.split(".") if is_package else module.split(".")[:-1]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                names.add(target)
                names.update(f"{target}.{a.name}" for a in node.names)
        out[module] = names
    return out


def imports_of(package: str, packages: tuple[str, ...]) -> dict[str, list[str]]:
    """{module: the names it imports from any of `packages` (a package or one of its
    modules)}, for the modules of `package` that import any."""
    found = {
        module: sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in packages))
        for module, names in imports_in_source(package).items()
    }
    return {module: names for module, names in found.items() if names}


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
