"""openpi's websocket policy protocol, served: what openpi's `WebsocketPolicyServer` speaks,
so an unchanged `openpi_client.WebsocketClientPolicy` gets chunks from a policy hosted here.

    endpoint = OpenpiEndpoint(answer, metadata=lambda: {...}, not_ready=lambda: None,
                              host="0.0.0.0", port=8000, api_key="")
    endpoint.start()            # serves on its own threads; endpoint.port is the bound port
    ...
    endpoint.stop()

The protocol (openpi's src/openpi/serving/websocket_policy_server.py):
  - GET /healthz answers 200 "OK" (here: 503 with the reason while the policy is not
    served), without the API key.
  - The websocket handshake: with an `api_key`, a client whose `Authorization` header is
    not `Api-Key <key>` (what openpi_client sends) is refused with HTTP 401, and while
    the policy is not served with 503 naming why: a refused client never gets a frame.
  - On connect the server sends the metadata frame (a msgpack map).
  - Then, per binary frame: one msgpack-numpy observation in, one map out:
    `answer(observation, episode)`'s map plus "server_timing": {"infer_ms": ...,
    "prev_total_ms": the previous request's whole time}.
  - An error (a frame that does not decode, a text frame, an observation the mapping
    cannot read, a failed inference) is answered as openpi does: one text frame with
    the reason, then a close with code 1011 (internal error).
Every connection is an episode of its own (`episode` is unique per connection: the
host resets its policy on a new one). Decoding is openpi_wire's strict msgpack: nothing
a client sends is unpickled. Each connection is served on its own thread (websockets'
threaded server); `answer` serialises inference itself.
"""

from __future__ import annotations

import hmac
import http
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from robokernel_ros.policies.openpi_wire import packb, unpackb

_log = logging.getLogger(__name__)

#: The largest frame a client may send (openpi sets none; two 224x224 images are ~300 kB).
MAX_FRAME_BYTES = 64 * 1024 * 1024

Answer = Callable[[Mapping[str, Any], str], tuple[dict[str, Any], float]]


class OpenpiEndpoint:
    """openpi's websocket policy server on this process's threads (see the module docstring).

    Args:
        answer: (observation, episode) -> (the response map without server_timing, the
            inference's seconds); raises to refuse the observation (its message is the
            error frame's text).
        metadata: the metadata frame's map, read at each connection.
        not_ready: why the policy is not served now, or None when it is.
        host, port: where to listen (port 0: a free one, then `port` says which).
        api_key: '' for none; else the key a client must send.
    """

    def __init__(
        self,
        answer: Answer,
        *,
        metadata: Callable[[], Mapping[str, Any]],
        not_ready: Callable[[], str | None],
        host: str = "0.0.0.0",
        port: int = 8000,
        api_key: str = "",
    ) -> None:
        self._answer = answer
        self._metadata = metadata
        self._not_ready = not_ready
        self.host = host
        self.port = int(port)
        self._key = f"Api-Key {api_key}".encode() if api_key else None
        self._episodes = itertools.count(1)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.connections = 0  # opened, all time
        self.answered = 0  # observations answered, all time

    def start(self) -> None:
        """Bind and serve on a thread (OSError when the port is taken)."""
        from websockets.sync.server import serve

        self._server = serve(
            self._handle,
            self.host,
            self.port,
            process_request=self._process_request,
            compression=None,
            max_size=MAX_FRAME_BYTES,
            server_header="robokernel_ros openpi endpoint",
        )
        self.port = int(self._server.socket.getsockname()[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="openpi-endpoint", daemon=True
        )
        self._thread.start()
        _log.info("openpi endpoint listening on %s:%d", self.host, self.port)

    def stop(self) -> None:
        """Stop listening, close every connection, join the serving thread (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        for connection in list(getattr(server, "connections", ())):
            connection.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # handshake ------------------------------------------------------------------------------

    def _process_request(self, connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            reason = self._not_ready()
            if reason is None:
                return connection.respond(http.HTTPStatus.OK, "OK\n")
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, f"{reason}\n")
        if self._key is not None:
            sent = (request.headers.get("Authorization") or "").encode()
            if not hmac.compare_digest(sent, self._key):
                _log.warning("openpi endpoint: refused a client without the API key")
                return connection.respond(
                    http.HTTPStatus.UNAUTHORIZED,
                    "missing or wrong API key (send the header Authorization: Api-Key <key>)\n",
                )
        reason = self._not_ready()
        if reason is not None:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, f"{reason}\n")
        return None

    # one connection -------------------------------------------------------------------------

    def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.frames import CloseCode

        episode = f"openpi-{next(self._episodes)}"
        self.connections += 1
        try:
            ws.send(packb(dict(self._metadata())))
        except ConnectionClosed:
            return
        prev_total_s: float | None = None
        while True:
            try:
                data = ws.recv()
            except ConnectionClosed:
                return
            started = time.monotonic()
            try:
                if isinstance(data, str):
                    raise ValueError(
                        "a text frame: an openpi observation is a binary msgpack frame"
                    )
                response, infer_s = self._answer(unpackb(data), episode)
                timing = {"infer_ms": 1000.0 * infer_s}
                if prev_total_s is not None:
                    timing["prev_total_ms"] = 1000.0 * prev_total_s
                response["server_timing"] = timing
                ws.send(packb(response))
            except ConnectionClosed:
                return
            except Exception as exc:  # noqa: BLE001 - answered as openpi does: text, then close
                reason = f"{type(exc).__name__}: {exc}"
                _log.warning("openpi endpoint: %s refused: %s", episode, reason)
                try:
                    ws.send(reason)
                    ws.close(
                        CloseCode.INTERNAL_ERROR,
                        "observation refused; reason in the previous frame",
                    )
                except ConnectionClosed:
                    pass
                return
            self.answered += 1
            prev_total_s = time.monotonic() - started


__all__ = ["MAX_FRAME_BYTES", "OpenpiEndpoint"]
