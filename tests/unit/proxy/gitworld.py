"""A fake forge for git over smart HTTP: real `git http-backend` behind a tiny CGI server on loopback,
recording the Authorization header and the (decoded) path of each request. Like a real CGI server,
it decodes the path into PATH_INFO: a push rule that judged the path as sent could be walked around."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dejima.core.pushrules import PushPolicy
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.routes import RouteSpec
from tests.httpfake import serving
from tests.unit.proxy.fakes import RunningProxy, fixed, route, running_proxy

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_TERMINAL_PROMPT": "0"}


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ["PATH"], "HOME": str(cwd or "/nonexistent"), **GIT_ENV, **(env or {})}
    return subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True, check=check,
                          timeout=60)


@dataclass
class Forge:
    root: Path
    url: str
    auth_seen: list[str] = field(default_factory=list)
    paths_seen: list[str] = field(default_factory=list)  # PATH_INFO as http-backend got it (decoded)
    protocol_v2: bool = True  # False: a forge that ignores Git-Protocol and speaks v0 only
    in_flight: int = 0  # requests whose head was read and whose answer is not written yet
    changed: threading.Condition = field(default_factory=threading.Condition)

    def settled(self, timeout: float = 30) -> None:
        """Wait (bounded) until no request is being handled: what reached the forge has been acted on."""
        with self.changed:
            if not self.changed.wait_for(lambda: self.in_flight == 0, timeout):
                raise AssertionError(f"the fake forge still handles {self.in_flight} request(s) after {timeout} s")


def _handler(forge: Forge) -> type[BaseHTTPRequestHandler]:
    class CGI(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def handle_one_request(self) -> None:
            """Counted from its head read (parse_request) to its answer written, or its failure."""
            self.counted = False
            try:
                super().handle_one_request()
            finally:
                if self.counted:
                    with forge.changed:
                        forge.in_flight -= 1
                        forge.changed.notify_all()

        def parse_request(self) -> bool:
            parsed = super().parse_request()
            if parsed:
                with forge.changed:
                    forge.in_flight += 1
                self.counted = True
            return parsed

        def do_GET(self) -> None:  # noqa: N802
            self._run(b"")

        def do_POST(self) -> None:  # noqa: N802
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self._run(body)

        def _run(self, body: bytes) -> None:
            forge.auth_seen.append(self.headers.get("Authorization", ""))
            raw_path, _, query = self.path.partition("?")
            path = urllib.parse.unquote(raw_path)
            forge.paths_seen.append(path)
            env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(forge.root), "GIT_HTTP_EXPORT_ALL": "1",
                   "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                   "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                   "GIT_PROTOCOL": self.headers.get("Git-Protocol", "") if forge.protocol_v2 else "",
                   "REMOTE_USER": "forge-user",
                   "REMOTE_ADDR": "127.0.0.1", "GIT_CONFIG_NOSYSTEM": "1"}
            out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                                 timeout=60).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.split(b"\r\n"):
                name, _, value = line.decode().partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return CGI


@contextmanager
def fake_forge(tmp: Path, repository: str = "owner/repo", protocol_v2: bool = True) -> Iterator[Forge]:
    root = tmp / "forge"
    bare = root / f"{repository}.git"
    bare.parent.mkdir(parents=True)
    git("init", "--bare", "-q", "-b", "main", str(bare))
    git("config", "http.receivepack", "true", cwd=bare)
    seed = tmp / "seed"
    git("init", "-q", "-b", "main", str(seed))
    (seed / "README").write_text("hello\n")
    git("add", "README", cwd=seed)
    git("commit", "-q", "-m", "first", cwd=seed)
    git("push", "-q", str(bare), "main", cwd=seed)
    (root / "other").mkdir()
    git("init", "--bare", "-q", "-b", "main", str(root / "other" / "repo.git"))
    forge = Forge(root, "", protocol_v2=protocol_v2)
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _handler(forge))) as server:
        forge.url = f"http://127.0.0.1:{server.server_port}"
        yield forge


def session_git_env(proxy_port: int, route: str, placeholder: str, username: str, forge_url: str) -> dict[str, str]:
    """What a session's environment holds for git: an insteadOf rewrite and the placeholder, by GIT_CONFIG_*."""
    base = f"http://127.0.0.1:{proxy_port}/r/{route}/"
    auth = base64.b64encode(f"{username}:{placeholder}".encode()).decode()
    return {"GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": f"url.{base}.insteadOf", "GIT_CONFIG_VALUE_0": forge_url,
            "GIT_CONFIG_KEY_1": f"http.{base}.extraHeader", "GIT_CONFIG_VALUE_1": f"Authorization: Basic {auth}"}


TOKEN = "ghp_FORGEtokenFORGEtokenFORGEtokenFORGE1"
REMOTE = "https://github.example/owner/repo.git"


@dataclass
class World:
    """The fake forge, the proxy with a git route to it (pushes to owner/repo only), and a clone made
    through the proxy with a session's git environment."""

    forge: Forge
    proxy: RunningProxy
    env: dict[str, str]
    clone: Path


@contextmanager
def git_world(tmp: Path, protocol_v2: bool = True, **options: Any) -> Iterator[World]:
    """The world, its proxy configured with ``options`` (ProxyConfig fields)."""
    with fake_forge(tmp, protocol_v2=protocol_v2) as forge:
        git_route = route("github-git", forge.url, "authorization", "Basic", "x-access-token", "github.com")
        spec = RouteSpec(git_route, fixed(TOKEN), GitPushGuard(PushPolicy(("owner/repo",))))
        with running_proxy(tmp, [spec], **options) as proxy:
            env = session_git_env(proxy.port, "github-git", git_route.placeholder, "x-access-token",
                                  "https://github.example/")
            clone = tmp / "work"
            git("clone", "-q", REMOTE, str(clone), env=env)
            yield World(forge, proxy, env, clone)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with git_world(tmp_path) as built:
        yield built


def commit(world: World, name: str) -> None:
    (world.clone / name).write_text(name)
    git("add", name, cwd=world.clone)
    git("commit", "-q", "-m", name, cwd=world.clone)


def forge_refs(forge: Forge) -> dict[str, str]:
    """Every ref of every repository on the forge: what a push would move."""
    refs = {}
    for bare in sorted(forge.root.glob("*/*.git")):
        for line in git("for-each-ref", "--format=%(objectname) %(refname)", cwd=bare).stdout.splitlines():
            oid, name = line.split(" ", 1)
            refs[f"{bare.relative_to(forge.root)}:{name}"] = oid
    return refs
