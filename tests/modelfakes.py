"""A fake model API on loopback that speaks what the shipped harnesses' real CLIs speak, for the
tests that run those CLIs in real sessions: Anthropic Messages (JSON and SSE), OpenAI Responses
(SSE, and a WebSocket as codex uses first), OpenAI Chat Completions (SSE), Gemini generateContent
and streamGenerateContent (SSE). Every request is recorded (method, path, headers); a request
without the expected key is answered 401, so a CLI that printed the answer used the real key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.httpfake import send_json, serving

ANSWER = "Hello from the fake model."
_WS_MAGIC = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeModels:
    port: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # header (lower case) -> the value the real key makes
    seen: list[Seen] = field(default_factory=list)

    def key_values(self, header: str) -> set[str]:
        return {s.headers.get(header, "") for s in self.seen if s.method != "GET" or "upgrade" in s.headers}


def _usage() -> dict[str, Any]:
    return {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def responses_events(model: str) -> list[dict[str, Any]]:
    """The OpenAI Responses stream of one short text answer."""
    item = {"id": "msg_fake", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}
    response = {"id": "resp_fake", "object": "response", "model": model, "output": []}
    return [{"type": "response.created", "response": {**response, "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0,
             "item": {**item, "status": "in_progress", "content": []}},
            {"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0, "content_index": 0,
             "delta": ANSWER},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": {**response, "status": "completed", "output": [item],
                                                         "usage": _usage()}}]


def messages_events() -> list[tuple[str, dict[str, Any]]]:
    """The Anthropic Messages stream of one short text answer."""
    return [("message_start", {"type": "message_start", "message": {
                "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake", "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": ANSWER}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 5}}),
            ("message_stop", {"type": "message_stop"})]


def gemini_answer() -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": ANSWER}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8},
            "modelVersion": "gemini-fake"}


def _chat_chunks(model: str) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}
    return [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER},
                                  "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeModels

    def log_message(self, *args: object) -> None:
        pass

    def _record(self) -> bool:
        """Record the request; False (after a 401) when it does not carry the real key."""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.seen.append(Seen(self.command, self.path, headers))
        if any(headers.get(name) == value for name, value in self.fake.keys.items()) or (
                "key=" in self.path and any(f"key={v}" in self.path for v in self.fake.keys.values())):
            return True
        send_json(self, 401, {"error": {"code": 401, "message": "bad key", "type": "authentication_error"}})
        return False

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if not self._record():
            return
        if self.headers.get("Upgrade", "").lower() == "websocket" and self.path.split("?")[0].endswith("/responses"):
            self._websocket()
        elif self.path.split("?")[0].endswith("/models"):
            send_json(self, 200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}],
                                  "models": [{"name": "models/gemini-fake"}]})
        else:
            send_json(self, 404, {"error": {"message": self.path}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if not self._record():
            return
        path = self.path.split("?")[0]
        model = str(body.get("model", "fake-model"))
        if path.endswith("/messages"):
            if body.get("stream"):
                self._sse([(name, data) for name, data in messages_events()])
            else:
                send_json(self, 200, {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                                      "content": [{"type": "text", "text": ANSWER}], "stop_reason": "end_turn",
                                      "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 5}})
        elif path.endswith("/responses"):
            self._sse([(event["type"], event) for event in responses_events(model)])
        elif path.endswith("/chat/completions"):
            self._sse([(None, chunk) for chunk in _chat_chunks(model)] + [(None, "[DONE]")])
        elif path.endswith(":streamGenerateContent"):
            self._sse([(None, gemini_answer())])
        elif path.endswith(":generateContent"):
            send_json(self, 200, gemini_answer())
        elif path.endswith(":countTokens"):
            send_json(self, 200, {"totalTokens": 3})
        else:
            send_json(self, 404, {"error": {"message": f"no such endpoint: {self.path}"}})

    def _sse(self, events: list[tuple[str | None, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for name, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            chunk = (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    # --- a WebSocket, as much of RFC 6455 as the Responses API over it needs -----------------

    def _websocket(self) -> None:
        accept = base64.b64encode(hashlib.sha1(self.headers["Sec-WebSocket-Key"].encode() + _WS_MAGIC).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        while (frame := self._read_frame()) is not None:
            opcode, payload = frame
            if opcode == 0x8:  # close
                self._send_frame(0x8, payload[:2])
                return
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
            elif opcode == 0x1:
                request = json.loads(payload)
                if request.get("type") == "response.create":
                    for event in responses_events(str(request.get("model", "fake-model"))):
                        self._send_frame(0x1, json.dumps(event).encode())
        self.close_connection = True

    def _read_frame(self) -> tuple[int, bytes] | None:
        head = self.rfile.read(2)
        if len(head) < 2:
            return None
        opcode, length = head[0] & 0x0F, head[1] & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self.rfile.read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self.rfile.read(8))
        mask = self.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = self.rfile.read(length)
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        size = len(payload)
        head = bytes([0x80 | opcode]) + (bytes([size]) if size < 126 else
                                         b"\x7e" + struct.pack("!H", size) if size < 65536 else
                                         b"\x7f" + struct.pack("!Q", size))
        self.wfile.write(head + payload)
        self.wfile.flush()


@contextmanager
def fake_models(keys: dict[str, str]) -> Iterator[FakeModels]:
    """Serve the fake on 127.0.0.1 (a port of its own) for the block; ``keys``: header (lower case)
    -> the value a request must carry (``authorization`` -> ``Bearer <key>``, ``x-api-key`` -> key)."""
    fake = FakeModels(keys=keys)
    handler = type("Handler", (_Handler,), {"fake": fake})
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as server:
        fake.port = server.server_address[1]
        yield fake


__all__ = ["ANSWER", "FakeModels", "Seen", "fake_models"]
