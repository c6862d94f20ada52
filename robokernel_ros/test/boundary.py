"""Import-boundary checks: what importing every module of a package loads, in a fresh
interpreter, and what its source imports anywhere (lazy imports inside functions too)."""

from __future__ import annotations

import ast
import functools
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


def _module_files(package: str) -> dict[str, tuple[Path, bool]]:
    """{module: (its file, whether it is a package's __init__)} for a package and every
    subpackage, the package itself included."""
    root = Path(importlib.import_module(package).__path__[0])
    files: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        files[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return files


def _ancestors(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


@functools.cache
def import_graph(package: str) -> dict[str, dict[str, int]]:
    """{module: {module of the package it imports: the line of the first such import}},
    built from the AST of every module of the package and its subpackages. Every import
    counts: at module top, inside a function or under TYPE_CHECKING.

    `import a.b.c` and `from a.b import c` import a.b.c (when c is a module) and the
    packages above it (their __init__ runs first); a name read from a package (`from a.b
    import name`) imports a.b. A module's own packages are no edge (Python imports them
    before the module), unless it reads a name from one: `from robokernel_ros.rollout import
    X` inside rollout/ reads a package that is not done importing, a circle."""
    files = _module_files(package)
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for module, (path, is_package) in files.items():
        here = module.split(".") if is_package else module.split(".")[:-1]
        own = _ancestors(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            read: list[str] = []  # packages a name is read from
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                subs = [f"{target}.{a.name}" for a in node.names]
                targets = [s for s in subs if s in files]
                if len(targets) < len(subs):
                    targets.append(target)
                    read.append(target)
            for name in targets:
                for imported in {name} | _ancestors(name):
                    if (
                        imported in files
                        and imported != module
                        and (imported not in own or imported in read)
                    ):
                        line = graph[module].get(imported, node.lineno)
                        graph[module][imported] = min(line, node.lineno)
    return graph


@functools.cache
def modules_named(package: str) -> dict[str, dict[str, int]]:
    """{module: {module of the package whose full name it holds as a string: line}}: a
    module imported by name at run time (importlib.import_module, an entry in a registry of
    module names, `python -m`). Docstrings do not count. A layer that names a module is as
    bound to it as one that imports it (upward_imports), but a name is no import-time circle
    (import_cycles): the `robokernel` command loads its subcommand modules so."""
    files = _module_files(package)
    named: dict[str, dict[str, int]] = {m: {} for m in files}
    for module, (path, _) in files.items():
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
            ):
                name = node.value.partition(":")[0]  # an entry point's module:attribute
                if name in files and name != module:
                    line = named[module].get(name, node.lineno)
                    named[module][name] = min(line, node.lineno)
    return named


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_cycles(package: str) -> list[list[str]]:
    """The import cycles among a package's modules, its subpackages' included (every
    import counts, as `import_graph` has them), each a strongly connected set of module
    names relative to the package ("__init__" for the package itself)."""
    return [[_short(package, m) for m in c] for c in _strongly_connected(import_graph(package))]


def cycle_imports(package: str) -> list[str]:
    """The imports that close the package's cycles, as "module:line imports module"
    (relative names, as import_cycles): what a failing no-cycle test prints."""
    graph = import_graph(package)
    return [
        f"{_short(package, m)}:{line} imports {_short(package, t)}"
        for component in _strongly_connected(graph)
        for m in component
        for t, line in sorted(graph[m].items())
        if t in component
    ]


def _short(package: str, module: str) -> str:
    return "__init__" if module == package else module.removeprefix(package + ".")


#: The layers of robokernel_ros, bottom up, and the layers each may import besides its own
#: (DESIGN.md's import rule as the tree keeps it). A module's layer is its subpackage
#: (`robokernel_ros.recording.mirror`: recording), or its own name for a top-level module
#: (memory, process); the `robokernel` command's modules are the `cli` layer wherever they
#: sit (see `CLI_MODULES`). Nothing imports `cli` or `nodes` but the cli layer and nodes.
LAYER_IMPORTS: dict[str, frozenset[str]] = {
    name: frozenset(below.split())
    for name, below in {
        "kernel": "",
        "memory": "",
        "process": "",
        "safety": "kernel",
        "tasks": "kernel",
        "envs": "kernel",
        "policies": "kernel envs",
        "contract": "kernel envs safety",
        "recording": "kernel memory safety tasks envs policies contract",
        "scoring": "kernel memory safety tasks recording",
        "live": "kernel memory recording",
        "rollout": "kernel memory safety tasks envs policies contract recording live",
        "flywheel": "kernel memory safety tasks envs policies contract recording live rollout"
        " scoring",
        "ros": "kernel memory process safety tasks envs policies contract recording live"
        " rollout scoring",
        "nodes": "kernel memory process safety tasks envs policies contract recording live"
        " rollout scoring ros",
        "cli": "kernel memory process safety tasks envs policies contract recording live"
        " rollout scoring flywheel ros",
    }.items()
}

#: The `robokernel` command's modules: the cli/ package and demo.py (`make demo`), and a
#: layer's `python -m` entry (its __main__.py, which only calls a cli/ module).
CLI_MODULES = ("cli", "demo")


def layer_of(module: str, package: str = "robokernel_ros") -> str:
    """The layer of one of the package's modules ("" for the package itself)."""
    if module == package:
        return ""
    parts = module.removeprefix(package + ".").split(".")
    last = parts[-1]
    if parts[0] in CLI_MODULES or last == "__main__":
        return "cli"
    return parts[0]


def upward_imports(layer: str, package: str = "robokernel_ros") -> list[str]:
    """Every import by a module of `layer` of a module whose layer it may not import
    (LAYER_IMPORTS), and every such module it names as a string (modules_named), as
    "recording.export:152 imports scoring.report (recording may import kernel, ...)": what a
    failing boundary test prints. A layer without a row is refused (KeyError)."""
    allowed = LAYER_IMPORTS[layer] | {layer, ""}
    rule = f"({layer} may import {', '.join(sorted(LAYER_IMPORTS[layer])) or 'nothing'})"
    out = []
    for verb, graph in (("imports", import_graph(package)), ("names", modules_named(package))):
        for module, targets in sorted(graph.items()):
            if layer_of(module, package) != layer:
                continue
            for target, line in sorted(targets.items()):
                if layer_of(target, package) not in allowed:
                    short = _short(package, module)
                    out.append(f"{short}:{line} {verb} {_short(package, target)} {rule}")
    return out


def private_imports(package: str) -> list[str]:
    """Every `from module import _name` of another module's private name (not a private
    module), as "module:line imports target._name": what is shared is public where it lives."""
    files = _module_files(package)
    out = []
    for module, (path, is_package) in files.items():
        here = module.split(".") if is_package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])])
            if target not in files or target == module:
                continue
            out += [
                f"{_short(package, module)}:{node.lineno} imports {_short(package, target)}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and f"{target}.{a.name}" not in files
            ]
    return sorted(out)
