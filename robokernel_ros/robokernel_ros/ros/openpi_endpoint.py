"""The policy_server's openpi endpoint: its policy answering `openpi_client` over openpi's
websocket protocol, beside the ROS topics (policies/openpi_server.py speaks the protocol;
this module joins it to the node's policy).

    hosting = OpenpiHosting.from_parameters(node)   # None when openpi_port is -1
    hosting.start(); ...; hosting.stop()

Parameters (declared on the policy_server node):
  openpi_port      -1: off (default); 0: a free port (logged); else the TCP port
  openpi_host      the address to listen on ("0.0.0.0", openpi's default: every interface)
  openpi_api_key   '' for none; else a client must send `Authorization: Api-Key <key>`
                   (openpi_client's api_key=) or is refused at the handshake (HTTP 401)
  openpi_mapping   the openpi observation keys as this project's observation
                   (policies.openpi_wire.OpenpiMapping): a JSON object, or the path of a
                   .json or .yaml file holding one; '' for openpi's defaults

An openpi observation is answered by the same policy, under the same lock, as an
Observation message: the policy is bound to its action keys (the `action_keys`
parameter, else the mapping's action_names, else the state's joint names), reset when a
new connection (an episode) sends its first observation, and asked for
`get_action_rows` with the mapping's columns. The answer is {"actions": (H, D) float64,
"server_timing": {"infer_ms": ...}}; the ROS path's `inference_time_s` is the same
measure. Inference runs on the connection's thread (the ROS path's runs on the main
thread: a torch policy served both ways keeps two OpenMP teams, see ros.policy_host).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from robokernel_ros.policies.openpi_server import OpenpiEndpoint
from robokernel_ros.policies.openpi_wire import OpenpiMapping
from robokernel_ros.ros.params import ParameterError, declare


def load_mapping(text: str) -> OpenpiMapping:
    """The `openpi_mapping` parameter as an OpenpiMapping (ParameterError naming it)."""
    raw: Any = {}
    try:
        if text.strip().startswith("{"):
            raw = json.loads(text)
        elif text:
            path = Path(text)
            if path.suffix not in (".json", ".yaml", ".yml") or not path.is_file():
                raise ValueError("must be a JSON object or the path of a .json/.yaml file")
            if path.suffix == ".json":
                raw = json.loads(path.read_text())
            else:
                import yaml

                raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, Mapping):
            raise ValueError("must be a JSON object or the path of a .json/.yaml file")
        return OpenpiMapping.from_config(raw)
    except (ValueError, OSError) as exc:  # json's and yaml's errors are ValueErrors or YAMLError
        raise ParameterError("openpi_mapping", text, str(exc)) from exc
    except Exception as exc:  # yaml.YAMLError
        raise ParameterError("openpi_mapping", text, f"unreadable: {exc}") from exc


class OpenpiHosting:
    """One policy_server node's openpi endpoint (see the module docstring)."""

    def __init__(
        self, node: Any, *, port: int, host: str, api_key: str, mapping: OpenpiMapping
    ) -> None:
        self.node = node
        self.mapping = mapping
        self.endpoint = OpenpiEndpoint(
            self.answer,
            metadata=self.metadata,
            not_ready=self.not_ready,
            host=host,
            port=port,
            api_key=api_key,
        )

    @classmethod
    def from_parameters(cls, node: Any) -> OpenpiHosting | None:
        """Declare the openpi_* parameters on `node`; the hosting, or None when off."""
        port = declare(node, "openpi_port", -1, "openpi websocket endpoint's port (-1: off, 0: any free port)",
                       min_value=-1, max_value=65535)  # fmt: skip
        host = declare(node, "openpi_host", "0.0.0.0", "the address the openpi endpoint listens on")
        api_key = declare(
            node, "openpi_api_key", "", "'' for none; else openpi clients must send it"
        )
        text = declare(node, "openpi_mapping", "", "openpi observation keys -> this project's "
                       "observation: a JSON object or a .json/.yaml file ('' for openpi's defaults)")  # fmt: skip
        mapping = load_mapping(text)
        if port < 0:
            return None
        if not host:
            raise ParameterError("openpi_host", host, "must be an address to listen on")
        return cls(node, port=port, host=host, api_key=api_key, mapping=mapping)

    def start(self) -> None:
        try:
            self.endpoint.start()
        except OSError as exc:
            raise ParameterError(
                "openpi_port", self.endpoint.port, f"cannot listen there ({exc.strerror or exc})"
            ) from exc
        self.node.get_logger().info(
            f"openpi endpoint on ws://{self.endpoint.host}:{self.endpoint.port}"
            + (" (API key required)" if self.endpoint._key else "")
        )

    def stop(self) -> None:
        self.endpoint.stop()

    # the endpoint's callbacks -----------------------------------------------------------------

    def not_ready(self) -> str | None:
        node = self.node
        return None if node.ready and node.policy is not None else str(node.detail)

    def _robot_names(self) -> tuple[str, ...]:
        policy = self.node.policy
        return tuple(getattr(policy, "action_keys", ()) or self.node.action_keys)

    def metadata(self) -> dict[str, Any]:
        """The metadata frame: who serves, the chunk's columns and the mapping."""
        names = self._robot_names()
        try:
            state = {k: list(v) for k, v in self.mapping.state_layout(names).items()}
        except ValueError:
            state = {k: list(v) for k, v in self.mapping.state.items()}
        return {
            "server": "robokernel_ros policy_server",
            "provider": self.node.provider,
            "action_names": list(self.mapping.columns(names)),
            "state_names": state,
            "mapping": self.mapping.to_dict(),
        }

    def answer(self, request: Mapping[str, Any], episode: str) -> tuple[dict[str, Any], float]:
        """One openpi observation through the node's policy: ({actions key: (H, D)}, seconds)."""
        node, mapping = self.node, self.mapping
        with node._infer_lock:
            policy = node.policy
            if policy is None or not node.ready:
                raise RuntimeError(f"policy server not active: {node.detail}")
            observation, instruction = mapping.from_openpi(request, robot_names=self._robot_names())
            if not node._bound:
                policy.set_robot_state_keys(
                    list(mapping.action_names or observation["joint_positions"])
                )
                node._bound = True
            if episode != node._episode:
                policy.reset(instruction=instruction)
                node._episode = episode
            columns = mapping.columns(policy.action_keys)
            started = time.perf_counter()
            rows = policy.get_action_rows(observation, instruction, keys=list(columns))
            elapsed = time.perf_counter() - started
            node.chunks_served += 1
        actions = np.asarray(rows.values, dtype=np.float64).reshape(rows.horizon, len(rows.keys))
        return {mapping.actions: actions}, elapsed


__all__ = ["OpenpiHosting", "load_mapping"]
