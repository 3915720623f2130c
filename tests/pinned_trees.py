"""What the tests of the trees' verification against their lockfiles share (test_npm_verify,
test_cargo_verify, test_yarn_verify): an agent's rename-over rewrite, the findings in short, the
host running node on a tree, and a package registry served on loopback from a directory."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from dejima.core.audit import Finding


def replace_file(path: Path, text: str) -> None:
    """A new file renamed over the old (sed -i, an editor): a new inode, the directory changed."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def severities(found: list[Finding]) -> list[tuple[str, str]]:
    return [(f.path, f.severity) for f in found]


def runs_on_host(workspace: Path, script: str) -> str:
    return subprocess.run(["node", "-e", script], cwd=workspace, check=True, capture_output=True, text=True,
                          timeout=60).stdout


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


@contextmanager
def served(directory: Path) -> Iterator[str]:
    """``directory`` served over HTTP on loopback (a registry's index and archives); yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
