"""Live grants: how soon a grant lets the agent's next connection through, and `dejima-allow` end to end.

A decoy the bench starts (on its own network, answering TCP 8080) is refused to a running session;
inside the session a loop connects to it every millisecond and writes the wall time of its first
success. Once the loop says its first connect was refused, the bench notes the wall time just
before it sends the grant (the same kernel clock on both sides), grants the decoy's address, and
reads the loop's time: grant-to-first-connect, whose anchor is one refused connect attempt of the
same loop (the loop's own resolution). Then `dejima-allow` as a user runs it, alternated with
`python -c pass`. Both goals are absolute.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from bench.common import DEJIMA, PYTHON, Env, Row, alternate, docker, load, median, timed
from dejima.adapters import control_client
from dejima.core import grants

GRANT_GOAL_MS = 50.0
ALLOW_GOAL_MS = 300.0
LOOP = r"""
import json, socket, sys, time
host, out = sys.argv[1], sys.argv[2]
attempts, first_try = 0, None
deadline = time.monotonic() + 120
print("looping", flush=True)
while time.monotonic() < deadline:
    began = time.time()
    try:
        socket.create_connection((host, 8080), timeout=1).close()
        json.dump({"connected": time.time(), "attempt_ms": first_try}, open(out, "w")); break
    except OSError:
        attempts += 1
        if first_try is None:
            first_try = (time.time() - began) * 1000
            print("refused", flush=True)
    time.sleep(0.001)
"""


def _decoy(env: Env, network: str, image: str) -> str:
    from dejima.orchestration.selftest import DECOY_SERVER

    container = docker("run", "-d", "--network", network, "--label", f"dejima.scope={env.scope}",
                       "--entrypoint", "python3", image, "-c", DECOY_SERVER)
    deadline = time.monotonic() + 30
    while "listening" not in docker("logs", container, check=False):  # the decoy says when its sockets are bound
        if time.monotonic() > deadline:
            raise RuntimeError(f"the decoy {container} did not say it was listening within 30 s")
        time.sleep(0.05)  # a poll's interval
    return docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container)


def _session(env: Env) -> "control_client.RunningSession":
    with env.applied():
        running = control_client.running_sessions()
    if len(running) != 1:
        raise RuntimeError(f"expected one running bench session, found {len(running)}")
    return running[0]


def run(env: Env, runs: int) -> list[Row]:
    from bench.common import dejima_images

    workspace = env.workspace("grants")
    _, image = dejima_images(env, workspace)
    network = f"dejima-bench-grants-{env.scope}"
    docker("network", "create", "--subnet", "10.214.77.0/24", "--label", f"dejima.scope={env.scope}", network)
    address = _decoy(env, network, image)
    env.settings.write_text(f'[session]\nnetwork = "{network}"\n\n[network]\nanswer_networks = ["10.214.77.0/24"]\n')
    grant_ms, attempt_ms = [], []
    for round_ in range(runs):
        out = workspace / f"connected-{round_}.json"
        session = subprocess.Popen([*DEJIMA, "-q", str(workspace), "--", "python3", "-c", LOOP, address, str(out)],
                                   env=env.vars, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert session.stdout is not None and "looping" in session.stdout.readline()
            if session.stdout.readline().strip() != "refused":  # it is retrying, as an agent would
                raise RuntimeError("the session's first connect to the decoy was not refused")
            target = _session(env)
            sent = time.time()
            answer = control_client.send(target, grants.grant_message([address], None, "bench"))
            if not answer.get("ok"):
                raise RuntimeError(f"the filter refused the grant: {answer}")
            session.wait(timeout=60)
            result = json.loads(Path(out).read_text())
            grant_ms.append((result["connected"] - sent) * 1000)
            attempt_ms.append(result["attempt_ms"])
        finally:
            if session.poll() is None:
                session.kill()
                session.wait()
    allow_samples = _allow_end_to_end(env, workspace, address, runs)
    return [
        Row("live grant: control message to the agent's first connect", "ms", median(grant_ms), median(attempt_ms),
            "one refused connect of the same loop", GRANT_GOAL_MS, absolute=True,
            samples={"dejima": grant_ms, "anchor": attempt_ms}, load=[load()],
            note="from the control message to the agent's first successful connect"),
        Row("dejima-allow end to end", "ms", median(allow_samples["dejima"]), median(allow_samples["anchor"]),
            "python -c pass", ALLOW_GOAL_MS, absolute=True, samples=allow_samples, load=[load()]),
    ]


def _allow_end_to_end(env: Env, workspace: Path, address: str, runs: int) -> dict[str, list[float]]:
    session = subprocess.Popen([*DEJIMA, "-q", str(workspace), "--", "sh", "-c", "echo up; exec sleep 300"],
                               env=env.vars, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert session.stdout is not None and "up" in session.stdout.readline()
        allow = [str(Path(PYTHON).parent / "dejima-allow"), address, "--session", _session(env).session_id]
        return alternate({"dejima": lambda: timed(allow, env.vars) * 1000,
                          "anchor": lambda: timed([PYTHON, "-c", "pass"]) * 1000}, runs)
    finally:
        session.kill()
        session.wait()
