"""The bridge to the host: a loopback port in the session's namespace, relayed to a unix socket.

The credential proxy runs on the host and listens on a unix socket in a private host directory
that is mounted into the filter alone. The session reaches it only here: the filter listens on a
port below 1024 (the namespace keeps those privileged, so the session cannot squat it) and
relays each connection's bytes both ways, unchanged. Another session, another host user or a
process on the host network has no path to that socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

CHUNK = 64 * 1024
MAX_CLIENTS = 256


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class Bridge:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.clients = 0

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.clients >= MAX_CLIENTS:
            writer.close()
            return
        self.clients += 1
        try:
            try:
                host_reader, host_writer = await asyncio.open_unix_connection(self.socket_path)
            except OSError as exc:
                print(f"dejima-filter: bridge to {self.socket_path}: {exc}", file=sys.stderr, flush=True)
                return
            try:
                await asyncio.gather(pipe(reader, host_writer), pipe(host_reader, writer))
            finally:
                host_writer.close()
        finally:
            self.clients -= 1
            with contextlib.suppress(Exception):
                writer.close()


async def start_bridge(socket_path: str, port: int, address: str = "127.0.0.1") -> asyncio.Server:
    """Listen on ``address:port`` and relay every connection to ``socket_path``."""
    return await asyncio.start_server(Bridge(socket_path), address, port, reuse_address=True)
