"""Bedrock through the proxy on real loopback sockets: a request the session signed with its
placeholder AWS keys reaches a fake Bedrock signed by the host's real keys (checked by botocore),
and its event stream comes back frame by frame. Decoy and placeholder keys elsewhere are refused."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dejima.core.manifest import CredentialRoute, parse_manifest
from dejima.proxy.records import read_records
from dejima.proxy.server import ProxyServer
from tests.awsverify import botocore_signature
from tests.bedrockfake import DRIP_SECONDS, WORDS, FakeBedrock, decode_frames, fake_bedrock
from tests.unit.proxy.fakes import FakeAPI, LoopThread, fake_api, raw_exchange
from tests.unit.proxy.prepared import Prepared, prepare

ROOT = Path(__file__).resolve().parents[3]
REAL_ID, REAL_SECRET, REAL_TOKEN = "ASIAHOSTREALKEY00001", "hostSecretKeyThatMustNeverLeaveTheProxy01", "hostToken//+="
MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"
ORIGIN = "http://127.0.0.1:700"


def manifest_routes(name: str) -> list[tuple[CredentialRoute, str]]:
    path = ROOT / "backends" / f"{name}.toml"
    manifest = parse_manifest(path.read_text(), "backends", name, f"backends/{name}.toml")
    return [(route, manifest.source) for route in manifest.credentials]


class World:
    def __init__(self, prepared: Prepared, bedrock: FakeBedrock, api: FakeAPI, loop: LoopThread,
                 server: ProxyServer) -> None:
        self.prepared, self.bedrock, self.api, self.loop, self.server = prepared, bedrock, api, loop, server
        self.port = server.tcp_port or 0
        self.env = prepared.env  # as the session gets it, through the filter's bridge at ORIGIN

    def send(self, method: str, path: str, body: bytes, key_id: str, secret: str,
             extra: dict[str, str] | None = None) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        """What the session's AWS SDK does: sign for the URL it was given (the proxy), with its keys."""
        url = f"http://127.0.0.1:{self.port}{path}"
        headers = [("Host", f"127.0.0.1:{self.port}"), ("Content-Type", "application/json"),
                   ("X-Amz-Date", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())), *(extra or {}).items()]
        signed = sorted(k.lower() for k, _ in headers)
        signature = botocore_signature(method, url, headers, body, signed, headers[2][1], key_id, secret, None,
                                       "us-east-1", "bedrock")
        date = headers[2][1][:8]
        headers.append(("Authorization", f"AWS4-HMAC-SHA256 Credential={key_id}/{date}/us-east-1/bedrock/aws4_request, "
                                         f"SignedHeaders={';'.join(signed)}, Signature={signature}"))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for key, value in headers:
            conn.putheader(key, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        return conn.getresponse(), conn

    def close(self) -> None:
        """Stop the proxy (its exchanges finish, their ledger entries are written)."""
        if self.loop.thread.is_alive():
            self.loop.run(self.server.close())
            self.loop.stop()

    def placeholders(self) -> tuple[str, str]:
        return self.env["AWS_ACCESS_KEY_ID"], self.env["AWS_SECRET_ACCESS_KEY"]

    def violations(self) -> list[dict[str, object]]:
        return read_records(self.prepared.config.violations_path)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    env = {"AWS_ACCESS_KEY_ID": REAL_ID, "AWS_SECRET_ACCESS_KEY": REAL_SECRET, "AWS_SESSION_TOKEN": REAL_TOKEN,
           "ANTHROPIC_API_KEY": "sk-ant-api03-" + "R" * 40}
    with fake_bedrock(REAL_ID, REAL_SECRET, REAL_TOKEN) as bedrock, fake_api() as api:
        prepared = prepare([*manifest_routes("bedrock"), *manifest_routes("anthropic")], tmp_path,
                           {"aws-sigv4-runtime": bedrock.url, "anthropic-api-key": api.url}, environ=env,
                           home=tmp_path)
        prepared = dataclasses.replace(prepared, config=dataclasses.replace(prepared.config, max_signed_body=4096,
                                                                            memory_budget=6000))
        loop = LoopThread()
        server = ProxyServer(prepared.config)
        loop.run(server.start(None, "127.0.0.1", 0))
        built = World(prepared, bedrock, api, loop, server)
        try:
            yield built
        finally:
            built.close()


def stream_path() -> str:
    return f"/r/aws-sigv4-runtime/model/{MODEL.replace(':', '%3A')}/invoke-with-response-stream"


def test_the_session_gets_placeholder_aws_keys_and_the_bridge(world: World) -> None:
    key_id, secret = world.placeholders()
    assert key_id.startswith("AKIA") and len(key_id) == 20 and key_id != REAL_ID and len(secret) == 40
    assert world.env["ANTHROPIC_BEDROCK_BASE_URL"] == f"{ORIGIN}/r/aws-sigv4-runtime"
    assert REAL_SECRET not in json.dumps(world.env) and REAL_ID not in json.dumps(world.env)
    assert "aws_secret_access_key" in world.prepared.decoys.aws_credentials_file  # the file decoy stays


def test_a_placeholder_signed_request_arrives_signed_by_the_host_keys_and_streams(world: World) -> None:
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    response, conn = world.send("POST", stream_path(), body, *world.placeholders())
    assert response.status == 200, response.read()
    arrivals, data = [], b""
    while chunk := response.read1(65536):
        arrivals.append(time.monotonic())
        data += chunk
    conn.close()
    events = decode_frames(data)
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")  # type: ignore[index]
    assert text == "".join(WORDS)
    assert arrivals[-1] - arrivals[0] >= DRIP_SECONDS * (len(events) - 3)  # frame by frame, not at the end
    [seen] = world.bedrock.seen
    assert seen.verdict == "", seen.verdict  # botocore, with the real secret, agrees with the signature
    assert seen.path == f"/model/{MODEL.replace(':', '%3A')}/invoke-with-response-stream"
    assert f"Credential={REAL_ID}/" in seen.headers["authorization"]
    assert seen.headers["x-amz-security-token"] == REAL_TOKEN
    placeholder_id, placeholder_secret = world.placeholders()
    assert not any(placeholder_id in v or placeholder_secret in v for v in seen.headers.values())
    world.close()
    ledger = read_records(world.prepared.config.ledger_path)
    assert [(e["route"], e["status"]) for e in ledger] == [("aws-sigv4-runtime", 200)]
    assert REAL_SECRET not in world.prepared.config.ledger_path.read_text()


def test_the_verifier_can_fail(world: World) -> None:
    world.bedrock.secret = "not-the-key-the-proxy-holds"
    response, conn = world.send("POST", stream_path(), b"{}", *world.placeholders())
    assert response.status == 403 and b"signature mismatch" in response.read()
    conn.close()


def test_decoy_keys_are_refused_and_recorded(world: World) -> None:
    decoys = world.prepared.decoys.file_values
    key_id, secret = (decoys[f"~/.aws/credentials {k}"] for k in ("aws_access_key_id", "aws_secret_access_key"))
    response, conn = world.send("POST", stream_path(), b"{}", key_id, secret)
    assert response.status == 403 and b"decoy" in response.read()
    conn.close()
    assert world.bedrock.seen == []
    assert [v["kind"] for v in world.violations()] == ["decoy-used"]


def test_placeholder_aws_keys_toward_another_route_are_refused_and_recorded(world: World) -> None:
    key_id, secret = world.placeholders()
    response, conn = world.send("POST", "/r/anthropic-api-key/v1/messages", b"{}", key_id, secret,
                                {"x-api-key": world.prepared.config.routes[-1].route.placeholder})
    assert response.status == 403, response.read()
    conn.close()
    assert world.api.seen == []
    assert [v["kind"] for v in world.violations()] == ["placeholder-cross-route"]
    # The placeholder secret key itself, anywhere in a request, is refused too.
    response, conn = world.send("POST", stream_path(), b"{}", key_id, secret, {"X-Leak": secret})
    assert response.status == 403
    conn.close()
    assert world.violations()[-1]["kind"] == "placeholder-misplaced" and world.bedrock.seen == []


def test_a_body_past_the_bound_is_refused_with_413(world: World) -> None:
    response, conn = world.send("POST", stream_path(), b"x" * 5000, *world.placeholders())
    message = response.read().decode()
    assert response.status == 413 and "signs each request body whole" in message and "4096" in message
    conn.close()
    assert world.bedrock.seen == []


def test_what_the_session_adds_to_its_signature_is_dropped_and_a_chunked_body_is_signed(world: World) -> None:
    """A session that sends its own token, payload hash, Host and a chunked body: the upstream gets
    the host's token, a fresh signature over the de-chunked body, and its own Host."""
    key_id, secret = world.placeholders()
    body = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}'
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    head = (f"POST /r/aws-sigv4-runtime/model/m/invoke HTTP/1.1\r\nHost: bedrock-runtime.attacker.example\r\n"
            f"Content-Type: application/json\r\nX-Amz-Date: {date}\r\nX-Amz-Security-Token: session-made-up\r\n"
            f"X-Amz-Content-SHA256: {'f' * 64}\r\nTransfer-Encoding: chunked\r\n"
            f"Authorization: AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=host;x-amz-date, Signature={'0' * 64}\r\n\r\n").encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:])) + b"0\r\n\r\n"
    reply = raw_exchange(world.port, head + chunked)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]
    [seen] = world.bedrock.seen
    assert seen.verdict == "", seen.verdict
    assert seen.headers["x-amz-security-token"] == REAL_TOKEN and "x-amz-content-sha256" not in seen.headers
    assert seen.headers["host"] == f"127.0.0.1:{world.bedrock.port}" and secret not in json.dumps(seen.headers)


def test_a_chunked_body_past_the_bound_is_refused_and_the_connection_closed(world: World) -> None:
    key_id, _ = world.placeholders()
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    head = (f"POST /r/aws-sigv4-runtime/model/m/invoke HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"Authorization: AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=host, Signature={'0' * 64}\r\n\r\n").encode()
    reply = raw_exchange(world.port, head + b"1000\r\n" + b"x" * 4096 + b"\r\n1000\r\n" + b"x" * 4096 + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 413") and b"Connection: close" in reply
    assert world.bedrock.seen == []


def signed_head(world: World, length: int) -> bytes:
    key_id, _ = world.placeholders()
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return (f"POST /r/aws-sigv4-runtime/model/m/invoke HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
            f"Authorization: AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=host, Signature={'0' * 64}\r\n\r\n").encode()


def test_signed_bodies_share_the_sessions_memory_budget(world: World) -> None:
    """A request the proxy is holding takes its part of the budget (6000 bytes here): another one that
    would go past it is refused with 413 and recorded; once the first is done, the room is back."""
    async def until(held: Callable[[int], bool]) -> None:  # on the proxy's loop, between its steps
        while not held(world.server.budget.used):
            await asyncio.sleep(0)

    with socket.create_connection(("127.0.0.1", world.port), timeout=10) as slow:
        slow.sendall(signed_head(world, 4000) + b"{" + b" " * 3499)  # 3500 of its 4000 bytes, then nothing yet
        world.loop.run(until(lambda used: used >= 3500), timeout=10)
        reply = raw_exchange(world.port, signed_head(world, 3000) + b" " * 3000)
        assert reply.startswith(b"HTTP/1.1 413") and b"already holds 3500 of the 6000 bytes" in reply, reply[:400]
        assert world.violations()[-1]["kind"] == "budget-exceeded"
        slow.sendall(b" " * 499 + b"}")
        assert slow.recv(65536).startswith(b"HTTP/1.1 200")
    world.loop.run(until(lambda used: used == 0), timeout=10)
    assert world.server.budget.peak == 4000  # the first body whole; the second never got its part
    reply = raw_exchange(world.port, signed_head(world, 3000) + b"{" + b" " * 2998 + b"}")
    assert reply.startswith(b"HTTP/1.1 200"), reply[:300]


def test_a_request_without_a_signature_gets_401(world: World) -> None:
    reply = raw_exchange(world.port, b"POST /r/aws-sigv4-runtime/model/m/invoke HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: 2\r\n\r\n{}")
    assert reply.startswith(b"HTTP/1.1 401") and world.bedrock.seen == []


TRAILERS = {"escape": (b"X-A: a\x1bb\r\n", 400), "obs-fold": (b"X-A: b\r\n c\r\n", 400),
            "huge": (b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(200)), 400),
            "well-formed": (b"X-Checksum: v\r\n", 200)}


@pytest.mark.parametrize("trailer,verdict", TRAILERS.values(), ids=list(TRAILERS))
def test_a_signed_chunked_body_with_a_malformed_or_huge_trailer_is_refused_and_recorded(
        world: World, trailer: bytes, verdict: int) -> None:
    """The route that reads the body whole reads its trailers the same way: a malformed or huge section
    is 400 and a malformed-request record, nothing signed; a well-formed one is dropped."""
    key_id, _ = world.placeholders()
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    head = (f"POST /r/aws-sigv4-runtime/model/m/invoke HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            f"X-Amz-Date: {date}\r\nContent-Type: application/json\r\n"
            f"Authorization: AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/aws4_request, "
            f"SignedHeaders=host, Signature={'0' * 64}\r\n\r\n").encode()
    body = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}'
    reply = raw_exchange(world.port, head + b"%x\r\n%s\r\n0\r\n" % (len(body), body) + trailer + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 %d" % verdict), reply[:300]
    if verdict == 400:
        assert b"trailer" in reply and world.bedrock.seen == []
        assert [v["kind"] for v in world.violations()] == ["malformed-request"]
    else:
        assert [seen.verdict for seen in world.bedrock.seen] == [""] and world.violations() == []
