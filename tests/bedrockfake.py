"""A fake Amazon Bedrock runtime on this host's loopback, for the proxy's SigV4 routes.

It checks every request's signature with the real AWS keys it is given, recomputed by botocore
(tests/awsverify.py), records the verdict, refuses a bad signature as AWS does (403), and answers
InvokeModelWithResponseStream with a real AWS event stream (binary frames with CRCs, each a
Claude streaming event), sent frame by frame with a pause between them.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.awsverify import verify
from tests.httpfake import send_json, serving

REGION, SERVICE = "us-east-1", "bedrock"
WORDS = ("Hello ", "from ", "fake ", "Bedrock.")
DRIP_SECONDS = 0.2


def _claude_events() -> list[dict[str, object]]:
    return [{"type": "message_start", "message": {
                "id": "msg_bedrock", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            *[{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}} for w in WORDS],
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
             "usage": {"output_tokens": len(WORDS)}},
            {"type": "message_stop", "amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 3, "outputTokenCount": len(WORDS), "invocationLatency": 1,
                "firstByteLatency": 1}}]


def _header(name: str, value: str) -> bytes:
    raw = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw


def event_frame(payload: dict[str, object]) -> bytes:
    """One AWS event-stream message: prelude (lengths, CRC), headers, payload, message CRC."""
    headers = _header(":event-type", "chunk") + _header(":content-type", "application/json") + \
        _header(":message-type", "event")
    body = json.dumps({"bytes": base64.b64encode(json.dumps(payload).encode()).decode()}).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    verdict: str  # "" when the signature was valid


@dataclass
class FakeBedrock:
    key_id: str
    secret: str
    token: str | None = None
    port: int = 0
    seen: list[Seen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _handler(fake: FakeBedrock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.do_POST()

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = list(self.headers.items())
            verdict = verify(self.command, fake.url + self.path, headers, body, fake.key_id, fake.secret,
                             fake.token, REGION, SERVICE)
            fake.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in headers}, verdict))
            if verdict:
                return self._json(403, {"message": f"fake Bedrock: {verdict}"})
            if self.path.endswith("/invoke-with-response-stream"):
                return self._stream()
            if self.path.endswith("/invoke"):
                return self._json(200, {"id": "msg_bedrock", "type": "message", "role": "assistant",
                                        "model": "claude-fake", "content": [{"type": "text", "text": "".join(WORDS)}],
                                        "stop_reason": "end_turn", "stop_sequence": None,
                                        "usage": {"input_tokens": 3, "output_tokens": len(WORDS)}})
            return self._json(404, {"message": f"fake Bedrock has no {self.path}"})

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.amazon.eventstream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in _claude_events():
                frame = event_frame(event)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
                time.sleep(DRIP_SECONDS)  # a model producing tokens: the scenario, not synchronisation
            self.wfile.write(b"0\r\n\r\n")

        def _json(self, status: int, payload: dict[str, object]) -> None:
            send_json(self, status, payload)

    return Handler


@contextmanager
def fake_bedrock(key_id: str, secret: str, token: str | None = None, host: str = "127.0.0.1") -> Iterator[FakeBedrock]:
    fake = FakeBedrock(key_id, secret, token)
    with serving(ThreadingHTTPServer((host, 0), _handler(fake))) as server:
        fake.port = server.server_address[1]
        yield fake


def decode_frames(data: bytes) -> list[dict[str, object]]:
    """The Claude events in an event stream (what a client gets out of the frames)."""
    events = []
    while data:
        total, headers_len = struct.unpack(">II", data[:8])
        payload = data[12 + headers_len:total - 4]
        events.append(json.loads(base64.b64decode(json.loads(payload)["bytes"])))
        data = data[total:]
    return events
