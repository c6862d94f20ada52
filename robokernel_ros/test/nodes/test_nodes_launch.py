"""The launch files, checked statically (no `launch` package here): every Node names a
console script of setup.py, every parameter file exists, every LaunchConfiguration is
declared; and the demo/test graph starts the same executables from the same files."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from robokernel_ros.demo import NodeProcess, config_dir, workcell_graph

PACKAGE = Path(__file__).resolve().parents[2]
LAUNCH = PACKAGE / "launch"
CONFIG = PACKAGE / "config"
LAUNCH_FILES = ["sim_workcell.launch.py", "workcell.launch.py", "served_policy.launch.py"]


def served_graph(trace_dir: str) -> list[NodeProcess]:
    """The nodes of served_policy.launch.py with its defaults, as test_nodes_served starts them."""
    params = {"limits_file": str(config_dir() / "joint_limits_so101.yaml"), "trace_dir": trace_dir}
    return [NodeProcess("policy_server", "served_endpoint", ["served.yaml"], params)]


def _console_scripts() -> set[str]:
    tree = ast.parse((PACKAGE / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    return {ast.literal_eval(item).split("=")[0].strip() for item in value.elts}
    raise AssertionError("setup.py declares no console_scripts")


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
    ]  # fmt: skip


def _nodes(tree: ast.AST) -> list[ast.Call]:
    """Every launch_ros Node and LifecycleNode action."""
    return _calls(tree, "Node") + _calls(tree, "LifecycleNode")


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _parse(name: str) -> ast.Module:
    return ast.parse((LAUNCH / name).read_text(), filename=name)


def test_every_launch_file_is_checked_and_installed() -> None:
    assert sorted(p.name for p in LAUNCH.glob("*.launch.py")) == sorted(LAUNCH_FILES)
    setup = (PACKAGE / "setup.py").read_text()
    assert 'glob("launch/*.launch.py")' in setup and 'glob("config/*.yaml")' in setup


@pytest.mark.parametrize("launch_file", LAUNCH_FILES)
def test_launch_file_is_consistent(launch_file: str) -> None:
    tree = _parse(launch_file)
    scripts = _console_scripts()
    nodes = _nodes(tree)
    assert nodes, "no Node in the launch file"
    for node in nodes:
        executable = ast.literal_eval(_kw(node, "executable"))
        assert executable in scripts, f"{executable} is not a console script of setup.py"
        assert ast.literal_eval(_kw(node, "package")) == "robokernel_ros"
    yaml_names = {
        c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)
        and c.value.endswith(".yaml")
    }  # fmt: skip
    assert yaml_names, "no parameter file named"
    for name in yaml_names:
        assert (CONFIG / name).is_file(), f"config/{name} does not exist"
    declared = {ast.literal_eval(c.args[0]) for c in _calls(tree, "DeclareLaunchArgument")}
    used = {ast.literal_eval(c.args[0]) for c in _calls(tree, "LaunchConfiguration")}
    assert used <= declared, f"launch arguments used but not declared: {used - declared}"
    assert "namespace" in declared
    assert "generate_launch_description" in {
        f.name for f in tree.body if isinstance(f, ast.FunctionDef)
    }


@pytest.mark.parametrize(
    ("launch_file", "sim"), [("sim_workcell.launch.py", True), ("workcell.launch.py", False)]
)
def test_the_process_graph_is_the_launch_graph(launch_file: str, sim: bool) -> None:
    tree = _parse(launch_file)
    launched = sorted(ast.literal_eval(_kw(n, "executable")) for n in _nodes(tree))
    # sim_workcell.launch.py's nodes with its sim_operator:=true option
    graph = workcell_graph(trace_dir="runs", sim=sim, sim_operator=sim)
    assert sorted(n.executable for n in graph) == launched
    yaml_names = {
        c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)
        and c.value.endswith(".yaml")
    }  # fmt: skip
    graph_files = {f for n in graph for f in n.params_files} | {
        Path(v).name for n in graph for v in n.params.values() if v.endswith(".yaml")
    }
    assert graph_files == yaml_names
    for node in graph:
        argv = node.argv()
        assert f"__node:={node.name}" in argv and "__ns:=/robokernel" in argv
        for f in node.params_files:
            assert (CONFIG / f).is_file()
    # Every shield hears the workcell's <ns>/estop by its default estop_topic: no remap of
    # its e-stop in either graph (a remap of ~/estop would also move each shield's own
    # ~/estop service, both to one <ns>/estop), and no config file points it elsewhere.
    shields = [n for n in graph if n.executable == "safety_shield"]
    assert len(shields) == 2
    for shield in shields:
        assert not [r for r in shield.remaps if "estop" in r[0]], shield.remaps
        for f in shield.params_files:
            assert re.search(r"^\s*estop_topic:\s*estop\b", (CONFIG / f).read_text(), re.M) or (
                "estop_topic" not in (CONFIG / f).read_text()
            ), f"config/{f} points the shield's e-stop away from <ns>/estop"
    assert '("~/estop",' not in (LAUNCH / launch_file).read_text()


def test_the_served_process_graph_is_the_launch_graph() -> None:
    launch_file = "served_policy.launch.py"
    tree = _parse(launch_file)
    (node,) = _calls(tree, "Node")
    (graph_node,) = served_graph(trace_dir="runs")
    assert ast.literal_eval(_kw(node, "executable")) == graph_node.executable
    assert ast.literal_eval(_kw(node, "name")) == graph_node.name
    yaml_names = {
        c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)
        and c.value.endswith(".yaml")
    }  # fmt: skip
    # The parameter file and the limits file are the launch arguments' defaults.
    assert yaml_names == {"served.yaml", "joint_limits_so101.yaml"}
    assert graph_node.params_files == ["served.yaml"]
    assert Path(graph_node.params["limits_file"]).name == "joint_limits_so101.yaml"
    # The parameters the launch file sets besides the file are the graph's.
    (overrides,) = [d for d in ast.walk(_kw(node, "parameters")) if isinstance(d, ast.Dict)]
    assert {ast.literal_eval(k) for k in overrides.keys} == set(graph_node.params)
    argv = graph_node.argv()
    assert "__node:=policy_server" in argv and "__ns:=/robokernel" in argv
    import yaml

    params = yaml.safe_load((CONFIG / "served.yaml").read_text())["/**"]["ros__parameters"]
    assert params["served"] is True and params["action_keys"], params


def test_config_files_are_ros_parameter_files() -> None:
    import json

    import yaml

    for path in sorted(CONFIG.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if path.name.startswith(("runner", "policy_server", "workcell", "served")):
            params = data["/**"]["ros__parameters"]
            assert params, path.name
            if "policy_config_json" in params:
                assert isinstance(json.loads(params["policy_config_json"]), dict), path.name


@pytest.mark.parametrize("launch_file", ["sim_workcell.launch.py", "workcell.launch.py"])
def test_the_lifecycle_nodes_are_brought_up_in_order(launch_file: str) -> None:
    """policy_server then runner, as launch_ros LifecycleNodes with their autostart off
    (the launch file drives their transitions), handed to bring_up_in_order
    (ros.launch_steps) in that order; the config files autostart them for the process
    graph (demo, tests)."""
    import yaml

    tree = _parse(launch_file)
    lifecycle = {ast.literal_eval(_kw(n, "executable")): n for n in _calls(tree, "LifecycleNode")}
    assert set(lifecycle) == {"policy_server", "runner"}
    for node in lifecycle.values():
        overrides = [d for d in ast.walk(_kw(node, "parameters")) if isinstance(d, ast.Dict)]
        assert any(
            ast.literal_eval(k) == "autostart" and ast.literal_eval(v) is False
            for d in overrides
            for k, v in zip(d.keys, d.values, strict=True)
        ), ast.dump(node)
    (order,) = _calls(tree, "bring_up_in_order")
    assert [e.id for e in order.args[0].elts] == ["policy_server", "runner"]
    assert "from robokernel_ros.ros.launch_steps import" in (LAUNCH / launch_file).read_text()
    from robokernel_ros.ros import launch_steps

    text = Path(launch_steps.__file__).read_text()  # what the launch files share
    for needle in ("OnStateTransition", 'start_state="configuring"', 'start_state="activating"',
                   "TRANSITION_CONFIGURE", "TRANSITION_ACTIVATE"):  # fmt: skip
        assert needle in text, needle
    for node in workcell_graph(trace_dir="runs", sim=launch_file.startswith("sim")):
        if node.executable in ("policy_server", "runner", "safety_shield"):
            for name in node.params_files:
                params = yaml.safe_load((CONFIG / name).read_text())["/**"]["ros__parameters"]
                assert params.get("autostart") is True, name
