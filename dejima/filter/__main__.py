"""Filter entrypoint: apply, verify, report ready, then hold the namespaces until told to stop.

Any failure exits non-zero before "ready" is printed, so no session ever starts behind an
unverified filter.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from typing import NoReturn

from dejima.filter import FAILED, READY
from dejima.filter.nft import NftError, apply_ruleset, read_table, verify_table

CONFIG_ENV = "DEJIMA_FILTER_CONFIG"


def _fail(message: str) -> NoReturn:
    print(f"{FAILED} {message}", flush=True)
    sys.exit(3)


def _stop(signum: int, _frame: object) -> NoReturn:
    sys.exit(0)


def main() -> None:
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        _fail(f"no configuration in ${CONFIG_ENV}")
    try:
        config = json.loads(raw)
        ruleset = config["ruleset"]
        expect = config["expect"]
    except (ValueError, KeyError, TypeError) as exc:
        _fail(f"unreadable configuration: {exc!r}")
    try:
        apply_ruleset(ruleset)
        verify_table(read_table(expect["family"], expect["table"]), expect)
    except NftError as exc:
        _fail(str(exc))
    except OSError as exc:  # e.g. the bindings cannot open a netlink socket
        _fail(f"nftables unusable: {exc}")
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
