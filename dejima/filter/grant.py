"""Live grants inside a pod (docs/kubernetes.md): `kubectl exec POD -c filter -- python3 -m dejima.filter.grant`.

Locally `dejima-allow` reaches a session's filter through its control socket on the host. In a pod the
socket is in a volume only the filter's container mounts, so the way in is `kubectl exec` into that
container (as its root, the socket's owner); this sends the same messages (core/grants.py) and prints
the filter's answer. The filter checks every entry itself: what it refuses comes back with its reason.

    python3 -m dejima.filter.grant crates.io '*.crates.io:443'     # until the pod ends
    python3 -m dejima.filter.grant --seconds 1800 pypi.org          # for half an hour
    python3 -m dejima.filter.grant --revoke crates.io               # new connections fail, open ones are cut
    python3 -m dejima.filter.grant --list                           # what is granted now
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

from dejima.core.grants import grant_message, list_message, revoke_message

SOCKET = "/run/dejima-control/control.sock"  # core/kubernetes.py mounts it in the filter's container only
TIMEOUT_SECONDS = 5.0


def send(message: dict[str, object], path: str = SOCKET) -> dict[str, object]:
    data = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_SECONDS)
        sock.connect(path)
        sock.sendall(json.dumps(message).encode() + b"\n")
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    answer = json.loads(data) if data else {"ok": False, "error": "the filter closed the connection"}
    return answer if isinstance(answer, dict) else {"ok": False, "error": "the filter's answer is not an object"}


def main(argv: list[str] | None = None, path: str = SOCKET) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m dejima.filter.grant", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("entries", nargs="*", metavar="ENTRY", help="a name, *.name or IPv4 address, [:PORT]")
    parser.add_argument("--seconds", type=int, help="the grant lasts this long (default: until the pod ends)")
    parser.add_argument("--revoke", action="store_true", help="take the entries back")
    parser.add_argument("--list", action="store_true", help="print what is granted now")
    parser.add_argument("--reason", default="granted with kubectl exec", help="recorded with the grant")
    parser.add_argument("--allow-special", action="append", default=[], metavar="ENTRY",
                        help="grant ENTRY (one of the entries) although it reaches a special place (docs/egress.md)")
    args = parser.parse_args(argv)
    if args.list:
        message = list_message()
    elif not args.entries:
        parser.error("give at least one ENTRY (or --list)")
    elif args.revoke:
        message = revoke_message(args.entries, args.reason)
    else:
        message = grant_message(args.entries, args.seconds, args.reason, args.allow_special)
    try:
        answer = send(message, path)
    except OSError as exc:
        print(f"dejima: error: cannot reach the filter's control socket {path}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    print(json.dumps(answer, sort_keys=True))
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
