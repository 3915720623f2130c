"""The credential proxy alone in a process of its own, as it runs in a launcher, so that a test can read
what it takes of memory (/proc/PID/status) under a hostile load.

    python -m tests.unit.proxy.proxyprocess FORGE_URL API_URL DIRECTORY MEMORY_BUDGET MAX_CONNECTIONS

serves a git route (``forge-git``, Basic, pushes to owner/repo only) toward FORGE_URL and a plain one
(``api``, x-api-key) toward API_URL on a loopback port, prints ``PORT GIT_PLACEHOLDER API_PLACEHOLDER``
on one line once it listens, and stops when its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from dejima.core.pushrules import PushPolicy
from dejima.proxy.gitpush import GitPushGuard
from dejima.proxy.routes import RouteSpec
from dejima.proxy.server import ProxyConfig, ProxyServer
from tests.unit.proxy.fakes import fixed, route

TOKEN = "ghp_FORGEtokenFORGEtokenFORGEtokenFORGE1"


async def main(forge: str, api: str, directory: Path, budget: int, connections: int) -> None:
    git_route = route("forge-git", forge, "authorization", "Basic", "x-access-token", "github.com")
    api_route = route("api", api)
    config = ProxyConfig((RouteSpec(git_route, fixed(TOKEN), GitPushGuard(PushPolicy(("owner/repo",)))),
                          RouteSpec(api_route, fixed())), directory / "ledger.jsonl", directory / "violations.jsonl",
                         memory_budget=budget, max_connections=connections)
    server = ProxyServer(config)
    await server.start(tcp_host="127.0.0.1")
    print(server.tcp_port, git_route.placeholder, api_route.placeholder, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
