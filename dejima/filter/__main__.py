"""Filter entrypoint: apply and verify the ruleset, start and check the resolver, report ready,
then hold the namespaces until told to stop.

Any failure exits non-zero before "ready" is printed, so no session ever starts behind an
unverified filter. After ready, the filter is init of the session's PID namespace: when it exits
for any reason, the kernel kills the whole session. The resolver and the nflog reader share one
asyncio loop; a query that trips a bug is reported and the others go on, while anything that
stops the loop itself ends the filter (and so the session's network).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from dejima.errors import ExitStatus
from dejima.filter import FAILED, READY
from dejima.filter.nft import NftError, SetWriter, apply_ruleset, read_listing, read_table, verify_listing, verify_table

CONFIG_ENV = "DEJIMA_FILTER_CONFIG"  # the launcher's names: dejima/core/paths.py
CONFIG_FIFO_ENV = "DEJIMA_FILTER_CONFIG_FIFO"
IPV6_SWITCH = Path("/proc/sys/net/ipv6/conf/all/disable_ipv6")
PORT_FLOOR = Path("/proc/sys/net/ipv4/ip_unprivileged_port_start")
PRIVILEGED_BELOW = 1024
PRUNE_SECONDS = 5.0


def _fail(message: str) -> NoReturn:
    print(f"{FAILED} {message}", flush=True)
    sys.exit(ExitStatus.FILTER_NOT_READY)


def _check_namespace() -> None:
    if IPV6_SWITCH.exists() and IPV6_SWITCH.read_text().strip() != "1":
        _fail("IPv6 is enabled in the namespace (net.ipv6.conf.all.disable_ipv6 != 1)")
    # The filter's listeners (resolver, bridge, control) sit below this floor so that the session,
    # which shares the namespace but has no CAP_NET_BIND_SERVICE, cannot take their ports.
    floor = PORT_FLOOR.read_text().strip() if PORT_FLOOR.exists() else "missing"
    if floor != str(PRIVILEGED_BELOW):
        _fail(f"ports below {PRIVILEGED_BELOW} are not privileged in the namespace "
              f"(net.ipv4.ip_unprivileged_port_start = {floor})")


async def _start_resolver(config: dict[str, Any], spawn: Any) -> Any:
    """The resolver, its nflog reader and (when configured) the control channel; returns the reader."""
    from dejima.core.egress import policy_from_document
    from dejima.filter.dns_upstream import Forwarder
    from dejima.filter.dnsserver import self_check, start_servers
    from dejima.filter.nflog import NflogReader
    from dejima.filter.resolver import PolicyResolver
    from dejima.filter.setbatch import BatchedSets
    from dejima.filter.violations import ViolationLog

    policy = policy_from_document(config["policy"], "filter configuration")
    expect = config["expect"]
    writer = SetWriter(expect["family"], expect["table"])
    log = ViolationLog()
    resolver = PolicyResolver(policy, Forwarder(config["upstreams"], config["resolver_mark"]), BatchedSets(writer),
                              log, canaries=tuple(config.get("canaries", ())),
                              intercepted=frozenset(config.get("intercept", {}).get("names", ())))
    spawn(_prune(resolver, writer))
    reader = NflogReader(config["nflog_group"], log, resolver.domain_of)
    reader.attach(asyncio.get_running_loop())
    await start_servers(resolver, spawn)
    await self_check()
    if "control" in config:
        from dejima.filter.control import Grants, start_control

        await start_control(Grants(resolver, writer, log), config["control"]["socket"], config["control"]["owner"])
    return reader


async def _prune(resolver: Any, writer: SetWriter) -> None:
    """Expired answers, learned addresses and set elements leave memory on a timer, so the
    filter shrinks back after a burst of queries (memory.py gives the freed heap back)."""
    from dejima.filter.memory import HeapReturn

    heap = HeapReturn()
    while True:
        await asyncio.sleep(PRUNE_SECONDS)
        heap.pruned(resolver.prune() + writer.prune())


async def _serve(config: dict[str, Any], digest: str) -> None:
    """Start the resolver, the bridge and the control channel, say ready, serve until told to stop."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    async with asyncio.TaskGroup() as tasks:
        reader = await _start_resolver(config, tasks.create_task) if "policy" in config else None
        if "bridge" in config:
            from dejima.filter.bridge import start_bridge

            await start_bridge(config["bridge"]["socket"], config["bridge"]["port"])
            if "intercept" in config:  # the proxy's TLS fallback: intercepted names resolve to 127.0.0.1
                await start_bridge(config["intercept"]["socket"], config["intercept"]["port"])
        if "ready_file" in config:  # a cluster's probe reads it (filter/probe.py): the ruleset is verified
            from dejima.filter.probe import ready_text

            with open(config["ready_file"], "w") as ready:
                ready.write(ready_text())
        print(f"{READY} ruleset={digest}", flush=True)
        _STATE["ready"] = True
        await stop.wait()
        if reader is not None:
            reader.drain()  # the last records reach stdout before we go
        sys.stdout.flush()
        os._exit(ExitStatus.SUCCESS)  # told to stop: queries still in flight have no one left to answer


def _read_config() -> str:
    """The configuration, from the environment or, when the filter was started before its plan
    existed, from the launcher's FIFO (one line; this waits for it)."""
    raw = os.environ.get(CONFIG_ENV)
    if raw:
        return raw
    fifo = os.environ.get(CONFIG_FIFO_ENV)
    if not fifo:
        _fail(f"no configuration in ${CONFIG_ENV} or ${CONFIG_FIFO_ENV}")
    try:
        with open(fifo, "rb") as channel:
            return _config_line(channel)
    except OSError as exc:
        _fail(f"cannot read the configuration from {fifo}: {exc}")


def _config_line(channel: BinaryIO) -> str:
    line = channel.readline()
    if not line.endswith(b"\n"):
        _fail("the launcher went away before sending the configuration")
    return line.decode()


def main() -> None:
    raw = _read_config()
    try:
        config = json.loads(raw)
        ruleset, expect = config["ruleset"], config["expect"]
    except (ValueError, KeyError, TypeError) as exc:
        _fail(f"unreadable configuration: {exc!r}")
    try:
        apply_ruleset(ruleset)
        verify_table(read_table(expect["family"], expect["table"]), expect)
        verify_listing(ruleset, read_listing(expect["family"], expect["table"]))
        _check_namespace()
    except NftError as exc:
        _fail(str(exc))
    except OSError as exc:  # netlink refused
        _fail(f"{type(exc).__name__}: {exc}")
    # As init of the session's PID namespace, adopted orphans must not pile up as zombies:
    # ignoring SIGCHLD lets the kernel reap them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    digest = hashlib.sha256(ruleset.encode()).hexdigest()[:16]
    try:
        asyncio.run(_serve(config, digest))
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the session must not start or go on
        if not _STATE["ready"]:
            _fail(f"{type(exc).__name__}: {_describe(exc)}")
        print(f"{FAILED} the filter stopped: {type(exc).__name__}: {_describe(exc)}", flush=True)
        os._exit(ExitStatus.FILTER_STOPPED)  # fail closed: the session's processes die with us


_STATE = {"ready": False}


def _describe(exc: BaseException) -> str:
    """The message of an exception, or of the first one inside a TaskGroup's group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{exc}" if not isinstance(exc, BaseExceptionGroup) else repr(exc)


if __name__ == "__main__":
    main()
