"""Filter entrypoint: apply and verify the ruleset, start and check the resolver, report ready,
then hold the namespaces until told to stop.

Any failure exits non-zero before "ready" is printed, so no session ever starts behind an
unverified filter. After ready, the filter is init of the session's PID namespace: when it exits
for any reason (a resolver thread dying included), the kernel kills the whole session.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from dejima.filter import FAILED, READY
from dejima.filter.nft import NftError, SetWriter, apply_ruleset, read_table, verify_table

CONFIG_ENV = "DEJIMA_FILTER_CONFIG"
IPV6_SWITCH = Path("/proc/sys/net/ipv6/conf/all/disable_ipv6")


def _fail(message: str) -> NoReturn:
    print(f"{FAILED} {message}", flush=True)
    sys.exit(3)


_DRAIN: list[Any] = []  # called before exiting, so that the last records reach stdout


def _stop(signum: int, _frame: object) -> NoReturn:
    for drain in _DRAIN:
        drain()
    sys.exit(0)


def _die_with_thread(args: threading.ExceptHookArgs) -> None:
    print(f"{FAILED} thread {args.thread.name if args.thread else '?'} died: {args.exc_value!r}", flush=True)
    os._exit(4)  # fail closed: the session's processes die with us


def _check_ipv6_disabled() -> None:
    if IPV6_SWITCH.exists() and IPV6_SWITCH.read_text().strip() != "1":
        _fail("IPv6 is enabled in the namespace (net.ipv6.conf.all.disable_ipv6 != 1)")


def _start_resolver(config: dict[str, Any]) -> None:
    from dejima.core.egress import parse_policy
    from dejima.filter.nflog import NflogReader
    from dejima.filter.resolver import Forwarder, PolicyResolver, ViolationLog, self_check, start_servers

    policy_config = config["policy"]
    policy = parse_policy(
        policy_config["allow"], [tuple(pair) for pair in policy_config["deny"]], "filter configuration",
        tuple(ipaddress.ip_network(n) for n in policy_config["denied_addresses"]),
        tuple(ipaddress.ip_network(n) for n in policy_config.get("answer_networks", [])),
    )
    expect = config["expect"]
    writer = SetWriter(expect["family"], expect["table"])
    log = ViolationLog()
    resolver = PolicyResolver(policy, Forwarder(config["upstreams"], config["resolver_mark"]), writer.add, log)
    reader = NflogReader(config["nflog_group"], log, resolver.domain_of)
    reader.start()
    _DRAIN.append(reader.drain)
    start_servers(resolver)
    self_check()


def main() -> None:
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        _fail(f"no configuration in ${CONFIG_ENV}")
    try:
        config = json.loads(raw)
        ruleset, expect = config["ruleset"], config["expect"]
    except (ValueError, KeyError, TypeError) as exc:
        _fail(f"unreadable configuration: {exc!r}")
    threading.excepthook = _die_with_thread
    try:
        apply_ruleset(ruleset)
        verify_table(read_table(expect["family"], expect["table"]), expect)
        _check_ipv6_disabled()
        if "policy" in config:
            _start_resolver(config)
    except NftError as exc:
        _fail(str(exc))
    except OSError as exc:  # netlink refused, port 53 not bindable, resolver not answering
        _fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - anything unexpected must also keep the session from starting
        _fail(f"unexpected {type(exc).__name__}: {exc}")
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    # As init of the session's PID namespace, adopted orphans must not pile up as zombies:
    # ignoring SIGCHLD lets the kernel reap them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    digest = hashlib.sha256(ruleset.encode()).hexdigest()[:16]
    print(f"{READY} ruleset={digest}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
