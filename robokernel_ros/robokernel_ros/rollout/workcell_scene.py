"""The workcell's scene and benchmark calls: what a robot expects, what the scene holds, the
scene's mutations (refused while a rollout drives it: SceneBusyError) and the benchmark
registry, each answered with the envelope of every workcell call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from robokernel_ros.envs import MujocoScene
from robokernel_ros.tasks.benchmarks import BenchmarkRegistry, builtin_benchmark_specs

from . import validation as v
from .results import envelope, error_envelope

SCENE_MUTATIONS = (
    "add_robot",
    "remove_robot",
    "add_object",
    "remove_object",
    "move_object",
    "add_camera",
    "remove_camera",
    "load_scene",
    "set_gravity",
    "set_timestep",
    "reset",
)


class SceneBusyError(RuntimeError):
    """A scene mutation refused because a rollout is driving the scene."""


class SceneCalls:
    """SimWorkcell's scene and benchmark calls, on its scene and benchmark registry."""

    scene: MujocoScene
    benchmarks: BenchmarkRegistry

    # -- benchmarks

    def list_benchmarks(self) -> dict[str, Any]:
        items = self.benchmarks.describe()
        if not items:
            text = "no benchmarks registered (register_builtin_benchmarks() adds the shipped ones)"
        else:
            text = "benchmarks: " + ", ".join(i["name"] for i in items)
        return envelope("success", text, {"benchmarks": items})

    def register_benchmark(self, spec: Mapping[str, Any], replace: bool = False) -> dict[str, Any]:
        try:
            v.check_flag("replace", replace)
            name = self.benchmarks.register(spec, replace=replace)
        except ValueError as exc:
            return error_envelope(str(exc))
        return envelope("success", f"registered benchmark {name!r}", {"name": name})

    def register_builtin_benchmarks(self) -> dict[str, Any]:
        names = self.benchmarks.register_builtins()
        return envelope("success", f"registered {', '.join(names)}", {"registered": names})

    @staticmethod
    def builtin_benchmark_specs() -> dict[str, dict[str, Any]]:
        """The shipped benchmark specs (copies, to fork)."""
        return builtin_benchmark_specs()

    # -- the scene

    def get_features(self, robot_name: str) -> dict[str, Any]:
        """The keys a robot expects (action keys = actuator names) and what it observes."""
        try:
            entry = self.scene.robot(robot_name)
        except ValueError as exc:
            return error_envelope(str(exc))
        del entry
        payload = {
            "robot_name": robot_name,
            "action_keys": list(self.scene.robot_action_keys(robot_name)),
            "joint_names": list(self.scene.robot_joint_names(robot_name)),
            "actuator_kinds": self.scene.robot_actuator_kinds(robot_name),
            "cameras": list(self.scene.cameras()),
        }
        return envelope(
            "success", f"{robot_name}: {len(payload['action_keys'])} action keys", payload
        )

    def scene_info(self) -> dict[str, Any]:
        payload = {
            "robots": self.scene.robots(),
            "objects": self.scene.objects(),
            "cameras": self.scene.cameras(),
        }
        return envelope(
            "success", f"robots {payload['robots']}, objects {payload['objects']}", payload
        )

    def _mutate(self, operation: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            getattr(self.scene, operation)(*args, **kwargs)
        except (ValueError, TypeError, SceneBusyError) as exc:
            return error_envelope(str(exc))
        info = self.scene_info()
        info["content"][0]["text"] = f"{operation} done; " + info["content"][0]["text"]
        return info

    def add_robot(self, name: str, model: str, **kwargs: Any) -> dict[str, Any]:
        return self._mutate("add_robot", name, model, **kwargs)

    def remove_robot(self, name: str) -> dict[str, Any]:
        return self._mutate("remove_robot", name)

    def add_object(self, name: str, **kwargs: Any) -> dict[str, Any]:
        return self._mutate("add_object", name, **kwargs)

    def remove_object(self, name: str) -> dict[str, Any]:
        return self._mutate("remove_object", name)

    def move_object(
        self, name: str, pos: Sequence[float], quat: Sequence[float] | None = None
    ) -> dict[str, Any]:
        return self._mutate("move_object", name, pos, quat)

    def add_camera(self, name: str, **kwargs: Any) -> dict[str, Any]:
        return self._mutate("add_camera", name, **kwargs)

    def remove_camera(self, name: str) -> dict[str, Any]:
        return self._mutate("remove_camera", name)

    def load_scene(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._mutate("load_scene", path, **kwargs)

    def set_gravity(self, gravity: Sequence[float]) -> dict[str, Any]:
        return self._mutate("set_gravity", gravity)

    def set_timestep(self, timestep: float) -> dict[str, Any]:
        return self._mutate("set_timestep", timestep)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        return self._mutate("reset", seed)
