"""A Foxglove WebSocket client for the tests: the protocol the SDK's server speaks.

Subprotocol `foxglove.sdk.v1` (foxglove-sdk 0.30's name for the ws-protocol v1 messages:
serverInfo / advertise / status as JSON text, message data as binary frames
[0x01][u32 subscription id][u64 log time ns][payload]). The WebSocket framing is
`websockets`' sans-I/O ClientProtocol over a plain socket, so a test decides when (and
whether) the client reads: `StalledClient` subscribes and then never reads again.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

SUBPROTOCOL = "foxglove.sdk.v1"


def connect_socket(port: int, deadline_s: float, rcvbuf: int | None = None) -> socket.socket:
    """Connect to 127.0.0.1:port, retrying until the server listens (bounded by deadline_s)."""
    end = time.monotonic() + deadline_s
    while True:
        sock = socket.socket()
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            sock.connect(("127.0.0.1", port))
            return sock
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


class FoxgloveClient:
    """Handshake, read the advertisements, subscribe; then recv() message data."""

    def __init__(self, port: int, *, deadline_s: float = 30.0, rcvbuf: int | None = None) -> None:
        self.sock = connect_socket(port, deadline_s, rcvbuf)
        self.proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/"), subprotocols=[SUBPROTOCOL],
                                    max_size=None)  # fmt: skip
        self.proto.send_request(self.proto.connect())
        self._flush()
        self.channels: dict[int, dict[str, Any]] = {}  # channel id -> advertised channel
        self.subscriptions: dict[int, int] = {}  # subscription id -> channel id
        self.server_info: dict[str, Any] | None = None
        self.messages: list[tuple[int, int, bytes]] = []  # (channel id, log time, payload)
        self.closed = False
        self._pending: list[Any] = []

    def _flush(self) -> None:
        for chunk in self.proto.data_to_send():
            if chunk:
                self.sock.sendall(chunk)

    def _read(self, timeout_s: float) -> bool:
        """One socket read fed to the protocol; False on timeout or close."""
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        if data:
            self.proto.receive_data(data)
        else:
            self.proto.receive_eof()
            self.closed = True
        self._flush()
        for frame in self.proto.events_received():
            self._handle(frame)
        return bool(data)

    def _handle(self, frame: Any) -> None:
        if not isinstance(frame, Frame):
            return  # the handshake's response
        if frame.opcode is Opcode.TEXT:
            msg = json.loads(frame.data)
            if msg["op"] == "serverInfo":
                self.server_info = msg
            elif msg["op"] == "advertise":
                for channel in msg["channels"]:
                    self.channels[channel["id"]] = channel
        elif frame.opcode is Opcode.BINARY and frame.data[:1] == b"\x01":
            sub, log_time = struct.unpack_from("<IQ", frame.data, 1)
            self.messages.append(
                (self.subscriptions.get(sub, -1), log_time, bytes(frame.data[13:]))
            )
        elif frame.opcode is Opcode.CLOSE:
            self.closed = True

    def wait_for(self, topics: set[str], deadline_s: float = 30.0) -> dict[str, dict[str, Any]]:
        """Read until every topic is advertised; returns topic -> channel."""
        end = time.monotonic() + deadline_s
        while not topics <= self.topics() and time.monotonic() < end and not self.closed:
            self._read(0.2)
        return {c["topic"]: c for c in self.channels.values()}

    def topics(self) -> set[str]:
        return {c["topic"] for c in self.channels.values()}

    def subscribe(self, channel_ids: list[int]) -> None:
        subs = []
        for cid in channel_ids:
            sub = len(self.subscriptions) + 1
            self.subscriptions[sub] = cid
            subs.append({"id": sub, "channelId": cid})
        self.proto.send_text(json.dumps({"op": "subscribe", "subscriptions": subs}).encode())
        self._flush()

    def read_until_closed(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while not self.closed and time.monotonic() < end:
            self._read(0.2)

    def close(self) -> None:
        self.sock.close()


def proto_decoder(channel: dict[str, Any]) -> Any:
    """A decoder for a protobuf channel built from its advertised FileDescriptorSet."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"]))
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"]))
    return cls.FromString
