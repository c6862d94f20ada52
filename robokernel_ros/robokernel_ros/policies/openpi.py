"""The `openpi` policy provider: a policy served over openpi's websocket protocol (openpi's
`WebsocketPolicyServer`, pi0 / pi0.5 on a GPU box, or this project's policy_server with
`openpi_port`), as a policy of this project's runner, behind its shield like any other.

    create_policy("openpi", host="gpu-box", port=8000, api_key="", mapping={...})

Each get_actions sends the robot's observation as the mapping lays it out
(policies.openpi_wire: state vectors by joint name, images by camera, the prompt),
receives the server's map and binds the columns of its "actions" array (H, D) to the
robot's action keys by the mapping's `action_names` (else the server's metadata
`action_names`, else the robot's action keys, in their order). A chunk whose width is
not the number of names is refused (ValueError naming both), and so is an answer that
is not an openpi map, a text frame (the server's error, quoted) or a closed connection:
the episode ends with a policy error and the robot holds. A server that does not answer
within `chunk_timeout_s` raises TimeoutError, as the `remote` provider does.

Figures: `chunk_log` keeps (server infer_ms, round trip ms) of the recent chunks;
`timing_report()` gives their medians (the server's own `server_timing.infer_ms` next to
the round trip this process measured).

policy_config:
  host             "host", "ws://host" or "wss://host" (default "127.0.0.1")
  port             TCP port (default 8000; None when host carries it)
  api_key          '' (default) or the key the server wants (Authorization: Api-Key <key>)
  mapping          the openpi key mapping (policies.openpi_wire.OpenpiMapping's config)
  connect_timeout_s  seconds to open the connection and get the metadata (default 10)
  chunk_timeout_s  seconds to wait for a chunk (default 10)
  execution_horizon  the chunk's actions to run (default: all of them)

Nothing the server sends is unpickled (openpi's msgpack, decoded strictly).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from robokernel_ros.policies.base import Action, Policy, register_provider
from robokernel_ros.policies.openpi_wire import OpenpiMapping, packb, unpackb

_log = logging.getLogger(__name__)

_CONFIG_KEYS = frozenset(
    {"host", "port", "api_key", "mapping", "connect_timeout_s", "chunk_timeout_s", "execution_horizon"}
)  # fmt: skip


def _seconds(config: Mapping[str, Any], key: str) -> None:
    if key in config:
        value = config[key]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            raise ValueError(f"policy_config[{key!r}]={value!r}: must be positive finite seconds")


class OpenpiPolicy(Policy):
    """A policy behind an openpi websocket server (see the module docstring)."""

    provider = "openpi"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = 8000,
        api_key: str = "",
        mapping: Mapping[str, Any] | None = None,
        connect_timeout_s: float = 10.0,
        chunk_timeout_s: float = 10.0,
        execution_horizon: int | None = None,
    ) -> None:
        super().__init__()
        config = {"host": host, "port": port, "api_key": api_key, "mapping": mapping or {},
                  "connect_timeout_s": connect_timeout_s, "chunk_timeout_s": chunk_timeout_s}  # fmt: skip
        if execution_horizon is not None:
            config["execution_horizon"] = execution_horizon
        self.preflight(config)
        self.mapping = OpenpiMapping.from_config(mapping)
        uri = host if host.startswith(("ws://", "wss://")) else f"ws://{host}"
        self.uri = f"{uri}:{port}" if port is not None else uri
        self.api_key = api_key
        self.connect_timeout_s = float(connect_timeout_s)
        self.chunk_timeout_s = float(chunk_timeout_s)
        self.horizon_limit = execution_horizon
        self.execution_horizon = execution_horizon or 2  # chunk-emitting until the first chunk
        self.chunk_log: deque[tuple[float, float]] = deque(maxlen=256)
        self.last_server_infer_ms = math.nan
        self.last_round_trip_ms = math.nan
        self._ws: Any = None
        self._used = False  # the connection has carried an observation (reset reconnects)
        self.server_metadata: dict[str, Any] = {}
        self._connect()

    @classmethod
    def preflight(cls, config: Mapping[str, Any]) -> None:
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise ValueError(
                f"policy_config keys {unknown} are unknown to the openpi provider (known: {sorted(_CONFIG_KEYS)})"
            )
        host = config.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise ValueError(
                f"policy_config['host']={host!r}: must be a host name, address or ws:// URI"
            )
        port = config.get("port", 8000)
        if port is not None and (
            isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
        ):
            raise ValueError(f"policy_config['port']={port!r}: must be a TCP port in [1, 65535]")
        key = config.get("api_key", "")
        if not isinstance(key, str):
            raise ValueError(f"policy_config['api_key']={key!r}: must be a string ('' for none)")
        for name in ("connect_timeout_s", "chunk_timeout_s"):
            _seconds(config, name)
        h = config.get("execution_horizon")
        if h is not None and (isinstance(h, bool) or not isinstance(h, int) or h < 1):
            raise ValueError(
                f"policy_config['execution_horizon']={h!r}: must be a positive whole number"
            )
        try:
            OpenpiMapping.from_config(config.get("mapping") or {})
        except ValueError as exc:
            raise ValueError(f"policy_config['mapping']: {exc}") from None

    # connection -------------------------------------------------------------------------------

    def _connect(self) -> None:
        """Open the websocket and read the metadata frame; ConnectionError naming why not."""
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        self._disconnect()
        headers = {"Authorization": f"Api-Key {self.api_key}"} if self.api_key else None
        try:
            ws = connect(self.uri, compression=None, max_size=None, additional_headers=headers,
                         open_timeout=self.connect_timeout_s)  # fmt: skip
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body.decode(errors="replace").strip() if exc.response.body else ""
            why = (
                "refused the API key"
                if status == 401
                else f"refused the connection (HTTP {status})"
            )
            raise ConnectionError(f"openpi server {self.uri} {why}: {body}") from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectionError(
                f"no openpi server at {self.uri} ({type(exc).__name__}: {exc})"
            ) from None
        try:
            frame = ws.recv(timeout=self.connect_timeout_s)
        except TimeoutError:
            ws.close()
            raise ConnectionError(
                f"openpi server {self.uri} sent no metadata frame within {self.connect_timeout_s:g} s"
            ) from None
        except WebSocketException as exc:
            raise ConnectionError(
                f"openpi server {self.uri} closed the connection: {exc}"
            ) from None
        try:
            metadata = unpackb(frame) if isinstance(frame, bytes) else None
        except ValueError:
            metadata = None
        if not isinstance(metadata, dict):
            ws.close()
            raise ConnectionError(
                f"openpi server {self.uri} answered something that is not openpi's metadata frame"
            )
        self._ws, self.server_metadata, self._used = ws, metadata, False

    def _disconnect(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001 - already gone
                pass

    # Policy API ---------------------------------------------------------------------------------

    def reset(self, *, instruction: str = "", seed: int | None = None) -> None:
        """A new episode: a new connection (openpi servers, this project's among them,
        treat a connection as a task), unless the current one has not been used yet."""
        self._report()
        self.chunk_log.clear()
        if self._ws is None or self._used:
            self._connect()

    def _columns(self) -> tuple[str, ...]:
        named = self.mapping.action_names or tuple(self.server_metadata.get("action_names") or ())
        return named or tuple(self.action_keys)

    def get_actions(
        self, observation: Mapping[str, Any], instruction: str = "", **kwargs: Any
    ) -> list[Action]:
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            self._connect()
        request = self.mapping.to_openpi(observation, instruction, robot_names=self.action_keys)
        started = time.monotonic()
        try:
            self._ws.send(packb(request))
            self._used = True
            reply = self._ws.recv(timeout=self.chunk_timeout_s)
        except TimeoutError:
            self._disconnect()  # a late answer must not be read as the next one's
            raise TimeoutError(
                f"no action chunk from the openpi server {self.uri} within chunk_timeout_s="
                f"{self.chunk_timeout_s:g}"
            ) from None
        except ConnectionClosed as exc:
            self._ws = None
            raise ConnectionError(
                f"openpi server {self.uri} closed the connection ({exc})"
            ) from None
        round_trip_ms = 1000.0 * (time.monotonic() - started)
        if isinstance(reply, str):
            self._disconnect()
            raise RuntimeError(
                f"openpi server {self.uri} refused the observation: {reply.strip()[:2000]}"
            )
        try:
            answer = unpackb(reply)
        except ValueError as exc:
            self._disconnect()
            raise ValueError(f"openpi server {self.uri} answered garbage: {exc}") from None
        chunk = self._bind(answer)
        timing = (
            answer.get("server_timing") if isinstance(answer.get("server_timing"), dict) else {}
        )
        infer_ms = timing.get("infer_ms")
        self.last_server_infer_ms = (
            float(infer_ms) if isinstance(infer_ms, int | float) else math.nan
        )
        self.last_round_trip_ms = round_trip_ms
        self.chunk_log.append((self.last_server_infer_ms, round_trip_ms))
        return chunk

    def _bind(self, answer: Any) -> list[Action]:
        """The answer's chunk as actions named by the mapping's columns (ValueError naming
        what is wrong: no chunk, not numbers, the wrong width, a name the robot lacks)."""
        key = self.mapping.actions
        if not isinstance(answer, dict) or key not in answer:
            raise ValueError(f"openpi server {self.uri} answered no {key!r} array")
        actions = np.asarray(answer[key])
        if actions.dtype.kind not in "biuf":
            raise ValueError(f"openpi server {self.uri}: {key!r} is not numbers ({actions.dtype})")
        if actions.ndim == 1:
            actions = actions[None, :]
        if actions.ndim != 2:
            raise ValueError(
                f"openpi server {self.uri}: {key!r} has shape {actions.shape}, not (H, D)"
            )
        columns = self._columns()
        if actions.shape[1] != len(columns):
            raise ValueError(
                f"openpi server {self.uri} sent a chunk of width {actions.shape[1]}; the mapping's "
                f"action names are {len(columns)} ({list(columns)})"
            )
        if self.action_keys:
            unknown = [c for c in columns if c not in self.action_keys]
            if unknown:
                raise ValueError(
                    f"openpi mapping action_names {unknown} are not the robot's action keys"
                )
        if not np.isfinite(actions).all():
            raise ValueError(f"openpi server {self.uri} sent a chunk with non-finite values")
        if self.horizon_limit is None:
            self.execution_horizon = max(2, int(actions.shape[0]))
        rows = actions.astype(np.float64).tolist()
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def timing_report(self) -> dict[str, Any]:
        """The recent chunks' medians: the server's infer_ms next to the round trip (ms)."""
        infer = [i for i, _ in self.chunk_log if not math.isnan(i)]
        trips = [t for _, t in self.chunk_log]
        return {
            "chunks": len(trips),
            "server_infer_ms_p50": statistics.median(infer) if infer else None,
            "round_trip_ms_p50": statistics.median(trips) if trips else None,
        }

    def _report(self) -> None:
        if self.chunk_log:
            r = self.timing_report()
            infer = r["server_infer_ms_p50"]
            _log.info(
                "openpi policy %s: %d chunks, round trip p50 %.2f ms, server infer_ms p50 %s",
                self.uri, r["chunks"], r["round_trip_ms_p50"],
                "not sent" if infer is None else f"{infer:.2f} ms",
            )  # fmt: skip

    def close(self) -> None:
        self._report()
        self._disconnect()


register_provider("openpi", OpenpiPolicy)

__all__ = ["OpenpiPolicy"]
