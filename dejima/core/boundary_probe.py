"""The probe `dejima doctor --session` runs in a session, and how its output is read.

Standard library Python, given to ``python3 -I -c`` by an engine exec as the session's user: nothing is
written in the session. It runs the actions core/boundary_checks.py's checks name, and prints one JSON
object of their results.
"""

from __future__ import annotations

import json
import re
from typing import Any

PROBE_TIMEOUT = 3.0  # seconds a probe waits for one answer; a refusal comes at once
SOCKETS_TRIED, SOCKETS_SECONDS = 256, 30.0  # unix sockets of the namespace tried, at most, and for how long

# Runs in the session as its user: a JSON object of named actions in argv[1], a JSON object of
# results on stdout; argv[2] is the timeout of each wait. DNS questions and their Extended DNS Errors
# are read with dejima-why's own code (the session image's /usr/local/bin/dejima-why, filter/why.py;
# argv[3] names another copy, for the tests). Values of the environment are used,
# never printed. It makes itself non-dumpable before anything else, so that the session's processes (its
# uid, no capability) cannot attach to it or read its memory from then on.
PROBE = r"""
import ctypes
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0 first: the agent (same uid) may not ptrace the probe
import importlib.machinery, importlib.util, json, os, socket, struct, sys, time
WHY = "/usr/local/bin/dejima-why"
loader = importlib.machinery.SourceFileLoader("why", sys.argv[3] if len(sys.argv) > 3 else WHY)
why = importlib.util.module_from_spec(importlib.util.spec_from_loader("why", loader)); loader.exec_module(why)
T = float(sys.argv[2])
def error(e):
    return {"result": "blocked", "error": e.strerror or str(e)}
def tcp(a):
    t = time.monotonic()
    try:
        s = socket.create_connection((a["host"], a["port"]), timeout=T); s.close()
        return {"result": "connected", "seconds": round(time.monotonic() - t, 3)}
    except socket.timeout:
        return {"result": "timeout", "seconds": round(time.monotonic() - t, 3)}
    except OSError as e:
        return {**error(e), "seconds": round(time.monotonic() - t, 3)}
def loopback(a):
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    return tcp({"host": "127.0.0.1", "port": srv.getsockname()[1]})
def dns(a):
    asked = why.query(a["name"], 0x4444)
    stream = a.get("tcp", False)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if stream else socket.SOCK_DGRAM); s.settimeout(T)
    try:
        s.connect((a["server"], a["port"]))
        if stream:
            s.sendall(struct.pack("!H", len(asked)) + asked)
            size = struct.unpack("!H", s.recv(2))[0]; data = b""
            while len(data) < size:
                piece = s.recv(size - len(data))
                if not piece: break
                data += piece
        else:
            s.send(asked); data = s.recv(4096)
    except socket.timeout:
        return {"result": "timeout"}
    except (OSError, struct.error) as e:
        return error(e) if isinstance(e, OSError) else {"result": "unreadable"}
    finally:
        s.close()
    try:
        reply = why.read_reply(data, asked)
    except ValueError:
        return {"result": "answered", "rcode": None}
    kind, reason = why.read_ede(reply.ede[1]) if reply.ede else (None, "")
    return {"result": "answered", "rcode": reply.rcode, "kind": kind.token if kind else None, "reason": reason,
            "addresses": list(reply.addresses)}
def credential(a):
    values = [os.environ[n] for n in a["names"] if os.environ.get(n)]
    if not values:
        return {"result": "none"}
    squeezed = "".join(c for c in values[0].lower() if c.isalnum() and c.isascii())
    labels = [squeezed[i:i + 60] for i in range(0, len(squeezed), 60)]
    return dns({"name": ".".join(labels + ["dejima-doctor", "invalid"]), "server": "127.0.0.1", "port": 53})
def ipv6(a):
    try:
        switch = open("/proc/sys/net/ipv6/conf/all/disable_ipv6").read().strip()
    except OSError:
        switch = "absent"
    try:
        addresses = open("/proc/net/if_inet6").read().split()
    except OSError:
        addresses = []
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); s.settimeout(T); s.connect(("::1", 9)); s.close()
        connect = {"result": "connected"}
    except OSError as e:
        connect = error(e)
    return {"result": connect["result"], "error": connect.get("error"), "switch": switch,
            "addresses": len(addresses) // 6}
def control(a):
    # Every unix socket of the namespace (/proc/net/unix): one the session can reach must not speak
    # the filter's control protocol.
    found, untried, deadline = [], 0, time.monotonic() + a["seconds"]
    for line in open("/proc/net/unix").read().splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[4] != "0001":  # stream sockets with a name
            continue
        if len(found) >= a["limit"] or time.monotonic() > deadline:  # an agent's thousand sockets: bounded
            untried += 1
            continue
        name = fields[7]
        address = "\0" + name[1:] if name.startswith("@") else name
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(T)
        try:
            s.connect(address)
            s.sendall(b'{"v": 1, "op": "list"}\n')
            answer = s.recv(4096)
            found.append([name, "answered" if b'"grants"' in answer else "connected"])
        except OSError as e:
            found.append([name, e.strerror or str(e)])
        finally:
            s.close()
    return {"result": "listed", "sockets": found, "untried": untried, "run_dir": os.path.exists(a["run_dir"])}
ops = {"tcp": tcp, "loopback": loopback, "dns": dns, "credential": credential, "ipv6": ipv6, "control": control}
print(json.dumps({key: ops[a["op"]](a) for key, a in json.loads(sys.argv[1]).items()}))
"""


def parse_probe(output: str) -> dict[str, dict[str, Any]]:
    """The probe's JSON object (its last line that is one); empty when it printed none."""
    for line in reversed(output.splitlines()):
        if re.match(r"^\s*\{", line):
            try:
                found = json.loads(line)
            except ValueError:
                continue
            return found if isinstance(found, dict) else {}
    return {}
