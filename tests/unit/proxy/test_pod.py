"""The credential proxy as a pod's container (dejima/proxy/pod.py): a real process started from its pod
document and the Secret's variables, serving on a real unix socket, carrying the secret to a fake
upstream on loopback; the document holds no secret."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dejima.core.manifest import CredentialRoute
from dejima.core.pushrules import PushPolicy
from dejima.proxy.pod import CONFIG_ENV, FAILED, READY, not_carried, pod_document, secret_variable
from tests.unit.proxy.fakes import REAL_KEY, FakeAPI, fake_api
from tests.unit.proxy.prepared import plan
from tests.world import wait_for_line

ANTHROPIC = CredentialRoute("anthropic-api-key", "https://api.anthropic.com", "x-api-key", "raw",
                            ("env", ("ANTHROPIC_API_KEY",)), "ANTHROPIC_API_KEY", None, "ANTHROPIC_BASE_URL")
GITHUB_GIT = CredentialRoute("github-git", "https://github.com", "authorization", "Basic", ("env", ("GH_TOKEN",)),
                             None, "x-access-token")


def planned(tmp_path: Path, api: FakeAPI) -> dict[str, Any]:
    """The document a render makes: sources named, not read; the upstream overridden to the fake."""
    routes = plan([(ANTHROPIC, "backends/anthropic.toml"), (GITHUB_GIT, "forges/github.toml")], tmp_path,
                  overrides={"anthropic-api-key": api.url}, push={"github-git": PushPolicy(("me/repo",))})
    return pod_document(routes)


@contextmanager
def pod_proxy(tmp_path: Path, document: dict[str, Any], secrets: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    socket_path, records, tls, trust = (tmp_path / name for name in ("proxy.sock", "records", "tls.sock", "trust"))
    code = f"import sys; from dejima.proxy.pod import main; sys.exit(main(socket={str(socket_path)!r}, " \
           f"records={str(records)!r}, tls={str(tls)!r}, trust={str(trust)!r}))"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(Path(__file__).parents[3]), CONFIG_ENV: json.dumps(document),
           **secrets}
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def ask(socket_path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        sock.connect(str(socket_path))
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_the_pod_proxy_carries_the_secret_from_its_environment(tmp_path: Path) -> None:
    with fake_api() as api:
        document = planned(tmp_path, api)
        placeholder = document["routes"][0]["placeholder"]
        with pod_proxy(tmp_path, document, {"ANTHROPIC_API_KEY": REAL_KEY, "GH_TOKEN": "ghp_" + "x" * 36}) as proxy:
            assert READY in wait_for_line(proxy.stdout, READY, timeout=30)
            assert (tmp_path / "proxy.sock").stat().st_mode & 0o777 == 0o666  # the filter (root, no DAC) connects
            answer = ask(tmp_path / "proxy.sock", b"GET /r/anthropic-api-key/v1/x HTTP/1.1\r\nHost: h\r\n"
                         b"x-api-key: " + placeholder.encode() + b"\r\nConnection: close\r\n\r\n")
            refused = ask(tmp_path / "proxy.sock", b"GET /r/anthropic-api-key/v1/x HTTP/1.1\r\nHost: h\r\n"
                          b"x-api-key: sk-ant-someone-elses\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200")
        assert [seen.headers.get("x-api-key") for seen in api.seen] == [REAL_KEY]  # the second never left
        assert not refused.startswith(b"HTTP/1.1 200")
    records = "".join((tmp_path / "records" / name).read_text() for name in ("ledger.jsonl", "violations.jsonl"))
    assert REAL_KEY not in records and "anthropic-api-key" in records


def test_the_document_holds_no_secret_and_names_each_secrets_variable(tmp_path: Path) -> None:
    with fake_api() as api:
        document = planned(tmp_path, api)
    text = json.dumps(document)
    assert REAL_KEY not in text
    assert [(r["name"], r["secret"]) for r in document["routes"]] == [("anthropic-api-key", "ANTHROPIC_API_KEY"),
                                                                      ("github-git", "GH_TOKEN")]
    assert document["routes"][1]["push"] == {"repositories": ["me/repo"], "allow_force": False,
                                             "allow_default_branch": False}
    assert set(document["decoys"]) >= {"NPM_TOKEN"}


def test_a_missing_secret_stops_the_pod_proxy_naming_its_variable(tmp_path: Path) -> None:
    with fake_api() as api:
        document = planned(tmp_path, api)
    with pod_proxy(tmp_path, document, {"GH_TOKEN": "ghp_" + "x" * 36}) as proxy:
        line = wait_for_line(proxy.stdout, FAILED, timeout=30)
        assert proxy.wait(timeout=30) != 0
    assert "ANTHROPIC_API_KEY" in line and not (tmp_path / "proxy.sock").exists()


def test_a_route_a_pod_cannot_serve_yet_says_why() -> None:
    claude = CredentialRoute("claude", "https://api.anthropic.com", "authorization", "Bearer",
                             ("claude_login", ("~/.claude/.credentials.json",)))
    reason = not_carried(claude)
    assert reason is not None and "Claude login" in reason
    assert not_carried(ANTHROPIC) is None


GITHUB_API = CredentialRoute("github-api", "https://api.github.com", "authorization", "Bearer", ("env", ("GH_TOKEN",)),
                             "GH_TOKEN", intercept=True)


def test_the_tls_fallback_gets_a_session_ca_made_in_the_pod(tmp_path: Path) -> None:
    """The document names the intercepted hosts only; the pod's proxy makes the CA when it starts, writes
    its certificate where the session reads it, and answers TLS for those hosts on its second socket."""
    import ssl

    document = pod_document(plan([(GITHUB_API, "forges/github.toml")], tmp_path))
    assert document["intercept"] == {"api.github.com": "github-api"}
    assert "PRIVATE KEY" not in json.dumps(document) and "CERTIFICATE" not in json.dumps(document)
    with pod_proxy(tmp_path, document, {"GH_TOKEN": "ghp_" + "y" * 36}) as proxy:
        wait_for_line(proxy.stdout, READY, timeout=30)
        ca = (tmp_path / "trust" / "session-ca.pem").read_text()
        assert ca.startswith("-----BEGIN CERTIFICATE-----")
        assert (tmp_path / "tls.sock").stat().st_mode & 0o777 == 0o666
        context = ssl.create_default_context(cafile=str(tmp_path / "trust" / "session-ca.pem"))
        with socket.socket(socket.AF_UNIX) as raw:
            raw.settimeout(20)
            raw.connect(str(tmp_path / "tls.sock"))
            with context.wrap_socket(raw, server_hostname="api.github.com") as tls:
                assert tls.getpeercert() is not None  # the session CA vouches for the intercepted host


def test_a_secret_read_from_a_file_or_a_command_gets_a_variable_of_its_route() -> None:
    from_file = CredentialRoute("gitlab-api", "https://gitlab.com", "private-token", "raw", ("file", ("~/.gl",)))
    assert secret_variable(from_file.name, from_file.source) == "DEJIMA_SECRET_GITLAB_API"
    assert secret_variable(ANTHROPIC.name, ANTHROPIC.source) == "ANTHROPIC_API_KEY"


def test_a_signing_route_signs_with_the_secrets_aws_keys(tmp_path: Path) -> None:
    """Bedrock in a pod: the session signs with placeholder keys, the pod's proxy signs again with the
    Secret's AWS keys (session token included), and the fake Bedrock's botocore check agrees."""
    import time

    from dejima.proxy.pod import secret_variables
    from tests.awsverify import botocore_signature
    from tests.bedrockfake import fake_bedrock
    from tests.unit.proxy.test_signing import MODEL, REAL_ID, REAL_SECRET, REAL_TOKEN, manifest_routes

    with fake_bedrock(REAL_ID, REAL_SECRET, REAL_TOKEN) as bedrock:
        document = pod_document(plan(manifest_routes("bedrock"), tmp_path, {"aws-sigv4-runtime": bedrock.url}))
        assert secret_variables(document) == (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("AWS_SESSION_TOKEN",))
        runtime = next(r for r in document["routes"] if r["name"] == "aws-sigv4-runtime")
        key_id, secret = runtime["placeholder"], runtime["signing"]["secret_placeholder"]
        secrets = {"AWS_ACCESS_KEY_ID": REAL_ID, "AWS_SECRET_ACCESS_KEY": REAL_SECRET, "AWS_SESSION_TOKEN": REAL_TOKEN}
        with pod_proxy(tmp_path, document, secrets) as proxy:
            wait_for_line(proxy.stdout, READY, timeout=30)
            path = f"/r/aws-sigv4-runtime/model/{MODEL.replace(':', '%3A')}/invoke"
            body = b'{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": []}'
            date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            headers = [("Host", "127.0.0.1:700"), ("Content-Type", "application/json"), ("X-Amz-Date", date)]
            signed = sorted(k.lower() for k, _ in headers)
            signature = botocore_signature("POST", f"http://127.0.0.1:700{path}", headers, body, signed, date, key_id,
                                           secret, None, "us-east-1", "bedrock")
            headers.append(("Authorization", f"AWS4-HMAC-SHA256 Credential={key_id}/{date[:8]}/us-east-1/bedrock/"
                                             f"aws4_request, SignedHeaders={';'.join(signed)}, Signature={signature}"))
            head = "".join(f"{k}: {v}\r\n" for k, v in headers)
            answer = ask(tmp_path / "proxy.sock", f"POST {path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        [seen] = bedrock.seen
        assert seen.verdict == "" and f"Credential={REAL_ID}/" in seen.headers["authorization"]
        assert seen.headers["x-amz-security-token"] == REAL_TOKEN
