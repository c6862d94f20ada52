"""The `lerobot_async` policy provider: LeRobot's async-inference `PolicyServer` (gRPC) as a
policy of this project's runner, through LeRobot's own client calls.

    create_policy("lerobot_async", server_address="127.0.0.1:8080", policy_type="act",
                  pretrained_name_or_path="/ckpt/pretrained_model")

SECURITY: LeRobot's async protocol carries pickles both ways (LeRobot issue #3047,
CVE-2026-25874): its server unpickles what a client sends, and a client unpickles the
chunks the server sends. This provider unpickles the GetActions answers of the one
server the user names, and nothing else; a server that is not on this machine
(`server_address` not a loopback address or `localhost`) is refused unless
`allow_remote_pickle=True` says the user trusts it (a hostile or spoofed server on the
network could run code in this process). This project's own servers (the policy_server
node, its openpi endpoint, the served endpoint) never unpickle anything a client sends.

The calls are LeRobot's (lerobot.transport.services_pb2_grpc.AsyncInferenceStub), as its
RobotClient makes them: `Ready`, then `SendPolicyInstructions` with a pickled
RemotePolicyConfig (at the first observation, which gives the cameras' sizes; the server
loads the checkpoint then), and per chunk `SendObservations` (a pickled TimedObservation,
must_go, so the server never skips it as too similar) followed by `GetActions` (a pickled
list of TimedAction). The robot's observation goes as LeRobot's raw observation: the
joint positions by `state_names`, each camera by name, the instruction as "task".

The chunk's columns are bound to the robot's action keys by `action_names`. A chunk of
another width, an empty answer, an answer that is not a list of TimedAction, a server
that does not answer within `chunk_timeout_s` or is not there: refused with the reason
(the episode ends with a policy error, the robot holds).

policy_config:
  server_address    "host:port" (default "127.0.0.1:8080")
  policy_type       LeRobot's policy type (default "act")
  pretrained_name_or_path  the checkpoint the server loads (a folder on the server's machine);
                    `path` is accepted too
  actions_per_chunk actions per chunk (default: the local checkpoint's n_action_steps, else 10)
  device            the server's device (default "cpu")
  state_names, action_names  the state vector's and the chunk's names in order (default: the
                    local checkpoint's feature_names.json without ".pos", else the robot's
                    action keys)
  cameras           {LeRobot camera: robot camera} (default: every camera, same name)
  allow_remote_pickle  True to talk to a server that is not on this machine (see SECURITY)
  connect_timeout_s, chunk_timeout_s, load_timeout_s  seconds (10, 10, 120)
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robokernel_ros.policies.base import Action, Policy, register_provider

_log = logging.getLogger(__name__)

_CONFIG_KEYS = frozenset(
    {"server_address", "policy_type", "pretrained_name_or_path", "path", "actions_per_chunk",
     "device", "state_names", "action_names", "cameras", "allow_remote_pickle",
     "connect_timeout_s", "chunk_timeout_s", "load_timeout_s"}
)  # fmt: skip


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_address(address: Any) -> tuple[str, int]:
    if not isinstance(address, str) or ":" not in address:
        raise ValueError(f"policy_config['server_address']={address!r}: must be 'host:port'")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(
            f"policy_config['server_address']={address!r}: must be 'host:port' (port 1-65535)"
        )
    return host, int(port)


def _names(config: Mapping[str, Any], key: str) -> None:
    value = config.get(key)
    if value is not None and (
        isinstance(value, str) or not isinstance(value, Sequence)
        or not all(isinstance(v, str) and v for v in value)
    ):  # fmt: skip
        raise ValueError(f"policy_config[{key!r}]={value!r}: must be a list of names")


def _local_checkpoint(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json, feature_names.json) of a local checkpoint folder ({} for what is not there)."""
    folder = Path(path)
    out = []
    for name in ("config.json", "feature_names.json"):
        try:
            out.append(json.loads((folder / name).read_text()))
        except (OSError, ValueError):
            out.append({})
    return out[0], out[1]


def _strip(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(n.removesuffix(".pos") for n in names)


class LerobotAsyncPolicy(Policy):
    """A policy served by LeRobot's async-inference PolicyServer (see the module docstring,
    SECURITY first)."""

    provider = "lerobot_async"

    def __init__(self, **config: Any) -> None:
        super().__init__()
        self.preflight(config)
        import grpc
        from lerobot.transport import services_pb2, services_pb2_grpc
        from lerobot.transport.utils import grpc_channel_options

        self._grpc, self._pb2 = grpc, services_pb2
        self.server_address = config.get("server_address", "127.0.0.1:8080")
        self.policy_type = config.get("policy_type", "act")
        self.checkpoint = str(config.get("pretrained_name_or_path") or config.get("path") or "")
        self.device = config.get("device", "cpu")
        local_cfg, names = _local_checkpoint(self.checkpoint)
        self.actions_per_chunk = int(
            config.get("actions_per_chunk") or local_cfg.get("n_action_steps") or 10
        )
        self.execution_horizon = self.actions_per_chunk
        self._state_names = tuple(
            config.get("state_names") or _strip(names.get("observation.state", ()))
        )
        self._action_names = tuple(config.get("action_names") or _strip(names.get("action", ())))
        self.cameras = dict(config.get("cameras") or {})
        self.connect_timeout_s = float(config.get("connect_timeout_s", 10.0))
        self.chunk_timeout_s = float(config.get("chunk_timeout_s", 10.0))
        self.load_timeout_s = float(config.get("load_timeout_s", 120.0))
        self.last_round_trip_ms = math.nan
        self._instructed = False
        self._timestep = 0
        self._instruction = ""
        self._channel = grpc.insecure_channel(self.server_address, grpc_channel_options())
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.connect_timeout_s)
        except grpc.FutureTimeoutError:
            self._channel.close()
            raise ConnectionError(
                f"no LeRobot PolicyServer at {self.server_address} (not reachable within "
                f"connect_timeout_s={self.connect_timeout_s:g})"
            ) from None
        self._stub = services_pb2_grpc.AsyncInferenceStub(self._channel)
        self._call("Ready", services_pb2.Empty(), self.connect_timeout_s)

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config keys {unknown} are unknown to the lerobot_async provider (known: {sorted(_CONFIG_KEYS)})"
            )
        host, _ = _split_address(config.get("server_address", "127.0.0.1:8080"))
        allow = config.get("allow_remote_pickle", False)
        if not isinstance(allow, bool):
            raise ValueError(
                f"policy_config['allow_remote_pickle']={allow!r}: must be true or false"
            )
        if not is_loopback(host) and not allow:
            raise ValueError(
                f"policy_config['server_address']={config.get('server_address')!r}: not on this machine; "
                "LeRobot's async protocol unpickles the server's answers (CVE-2026-25874), so a remote "
                "server is refused unless policy_config['allow_remote_pickle'] is true"
            )
        if not (config.get("pretrained_name_or_path") or config.get("path")):
            raise ValueError(
                "policy_config['pretrained_name_or_path']: the checkpoint the server loads is required"
            )
        policy_type = config.get("policy_type", "act")
        if not isinstance(policy_type, str) or not policy_type:
            raise ValueError(
                f"policy_config['policy_type']={policy_type!r}: must be LeRobot's policy type"
            )
        n = config.get("actions_per_chunk")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(
                f"policy_config['actions_per_chunk']={n!r}: must be a positive whole number"
            )
        _names(config, "state_names")
        _names(config, "action_names")
        cams = config.get("cameras")
        if cams is not None and (
            not isinstance(cams, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in cams.items())
        ):  # fmt: skip
            raise ValueError(
                f"policy_config['cameras']={cams!r}: must be {{LeRobot camera: robot camera}}"
            )
        for key in ("connect_timeout_s", "chunk_timeout_s", "load_timeout_s"):
            value = config.get(key, 1.0)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(
                    f"policy_config[{key!r}]={value!r}: must be positive finite seconds"
                )
        try:
            import grpc  # noqa: F401
            from lerobot.transport import services_pb2_grpc  # noqa: F401
        except ImportError as exc:
            raise ValueError(
                f"policy_provider='lerobot_async' needs LeRobot and grpcio ({exc}): pip install -r requirements/lerobot.txt"
            ) from None

    def _call(self, name: str, request: Any, timeout: float) -> Any:
        grpc = self._grpc
        try:
            return getattr(self._stub, name)(request, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise TimeoutError(
                    f"LeRobot PolicyServer {self.server_address}: {name} not answered within {timeout:g} s"
                ) from None
            raise ConnectionError(
                f"LeRobot PolicyServer {self.server_address}: {name} failed ({code}: {detail})"
            ) from None

    # Policy API -----------------------------------------------------------------------------

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        self._instruction = instruction or ""
        if self._instructed:
            self._call("Ready", self._pb2.Empty(), self.connect_timeout_s)  # flushes its queue

    def _robot_cameras(self, observation: Mapping[str, Any]) -> dict[str, str]:
        images = observation.get("images") or {}
        cams = self.cameras or {c: c for c in images}
        missing = [robot for robot in cams.values() if robot not in images]
        if missing:
            raise KeyError(f"lerobot_async: the observation has no camera {missing}")
        return cams

    def _instruct(self, observation: Mapping[str, Any]) -> None:
        """SendPolicyInstructions: the server loads the checkpoint for these features."""
        import pickle  # noqa: S403 - LeRobot's protocol (module docstring, SECURITY)

        from lerobot.async_inference.helpers import RemotePolicyConfig

        state = self._state_names or tuple(self.action_keys)
        features: dict[str, Any] = {}
        if state:
            features["observation.state"] = {
                "dtype": "float32",
                "shape": (len(state),),
                "names": list(state),
            }
        images = observation.get("images") or {}
        for cam, robot in self._robot_cameras(observation).items():
            h, w = np.asarray(images[robot]).shape[:2]
            features[f"observation.images.{cam}"] = {
                "dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]
            }  # fmt: skip
        setup = RemotePolicyConfig(
            policy_type=self.policy_type,
            pretrained_name_or_path=self.checkpoint,
            lerobot_features=features,
            actions_per_chunk=self.actions_per_chunk,
            device=self.device,
        )
        request = self._pb2.PolicySetup(data=pickle.dumps(setup))
        self._call("SendPolicyInstructions", request, self.load_timeout_s)
        self._state_used = state
        self._instructed = True

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        import pickle  # noqa: S403 - LeRobot's protocol (module docstring, SECURITY)

        from lerobot.async_inference.helpers import TimedAction, TimedObservation
        from lerobot.transport.utils import send_bytes_in_chunks

        if not self._instructed:
            self._instruct(observation)
        positions = observation.get("joint_positions") or {}
        missing = [n for n in self._state_used if n not in positions]
        if missing:
            raise KeyError(f"lerobot_async: the observation has no joint {missing}")
        raw: dict[str, Any] = {n: float(positions[n]) for n in self._state_used}
        images = observation.get("images") or {}
        for cam, robot in self._robot_cameras(observation).items():
            raw[cam] = np.asarray(images[robot])
        raw["task"] = instruction or self._instruction
        timed = TimedObservation(
            timestamp=time.time(), timestep=self._timestep, observation=raw, must_go=True
        )
        self._timestep += 1
        started = time.monotonic()
        chunks = send_bytes_in_chunks(pickle.dumps(timed), self._pb2.Observation)
        self._call("SendObservations", chunks, self.chunk_timeout_s)
        reply = self._call("GetActions", self._pb2.Empty(), self.chunk_timeout_s)
        self.last_round_trip_ms = 1000.0 * (time.monotonic() - started)
        if not reply.data:
            raise RuntimeError(f"LeRobot PolicyServer {self.server_address} answered no chunk")
        try:
            timed_actions = pickle.loads(reply.data)  # noqa: S301 - the named server only (SECURITY)
        except Exception as exc:  # noqa: BLE001 - anything a bad pickle raises
            raise ValueError(
                f"LeRobot PolicyServer {self.server_address} answered garbage ({type(exc).__name__})"
            ) from None
        if not isinstance(timed_actions, list) or not all(
            isinstance(a, TimedAction) for a in timed_actions
        ):
            raise ValueError(
                f"LeRobot PolicyServer {self.server_address} answered a {type(timed_actions).__name__}, "
                "not a list of TimedAction"
            )
        return self._bind(timed_actions)

    def _bind(self, timed_actions: list[Any]) -> list[Action]:
        names = self._action_names or tuple(self.action_keys)
        if not timed_actions:
            raise RuntimeError(
                f"LeRobot PolicyServer {self.server_address} answered an empty chunk"
            )
        rows = np.stack(
            [
                np.asarray(a.get_action().detach().cpu(), dtype=np.float64).reshape(-1)
                for a in timed_actions
            ]
        )
        if rows.shape[1] != len(names):
            raise ValueError(
                f"LeRobot PolicyServer {self.server_address} sent a chunk of width {rows.shape[1]}; "
                f"the action names are {len(names)} ({list(names)})"
            )
        if self.action_keys:
            unknown = [n for n in names if n not in self.action_keys]
            if unknown:
                raise ValueError(
                    f"lerobot_async action_names {unknown} are not the robot's action keys"
                )
        if not np.isfinite(rows).all():
            raise ValueError(f"LeRobot PolicyServer {self.server_address} sent non-finite actions")
        return [dict(zip(names, row, strict=True)) for row in rows.tolist()]

    def close(self) -> None:
        channel, self._channel = getattr(self, "_channel", None), None
        if channel is not None:
            channel.close()


register_provider("lerobot_async", LerobotAsyncPolicy)

__all__ = ["LerobotAsyncPolicy", "is_loopback"]
