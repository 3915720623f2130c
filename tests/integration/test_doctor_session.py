"""`dejima doctor --session` against a real session of the egress world: green while the boundary holds, red on
exactly the check whose hole a test opens in the live filter (an accept rule inserted with nft, as a hostile
admin or a broken build would). The checks are the product's own (core/boundary_checks.CHECKS), aimed at the
world's decoys: nothing is sent outside the test's network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.boundary_checks import CHECKS
from tests.networld import World, queries_seen
from tests.world import User, containers_of, docker, run_dejima, spawn_dejima, wait_for_line

ALLOWED = "web.dejima.test:8080"
# Allowed names of the world whose answers point at the metadata address and the engine's gateway: the resolver
# must refuse those answers (answer-denied), as doctor asks it.
POINTING = ("meta.dejima.test", "gateway.dejima.test")


def doctor(user: User, scope: str, world: World, session: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    """`dejima doctor --session` aimed at the world's decoys: (status, each check's line by name, stderr)."""
    result = run_dejima(user, scope, "doctor", "--session", session, "--json",
                        "--refused-address", f"{world.other}:8080", "--foreign-resolver", world.web,
                        *(arg for name in POINTING for arg in ("--resolve", name)))
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result.returncode, {line["check"]: line for line in lines}, result.stderr


def plant(filter_container: str, rule: str) -> None:
    """A hole in the live filter: a rule inserted at the head of its output chain, as root in its container."""
    planted = docker("exec", filter_container, "nft", "insert", "rule", "inet", "dejima", "output", *rule.split())
    assert planted.returncode == 0, planted.stdout


def failed(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, line in checks.items() if not line["ok"]}


def test_doctor_session_is_green_on_a_live_session_and_red_on_each_planted_hole(
        runtime: Runtime, user: User, scope: str, workspace: Path, world: World) -> None:
    # The agent's workspace is the session's working directory: modules planted there must not run in the probe
    # (it would print what the agent likes, or nothing).
    for module in ("json", "socket", "importlib"):
        (workspace / f"{module}.py").write_text(f"raise SystemExit('planted {module} ran')\n")
    with spawn_dejima(user, scope, "-q", "--allow", ALLOWED, *(arg for name in POINTING for arg in ("--allow", name)),
                      str(workspace), "--", "sh", "-c",
                      "echo started; exec sleep 300", DEJIMA_SETTINGS=str(world.settings)) as proc:
        wait_for_line(proc.stdout, "started")
        listed = run_dejima(user, scope, "sessions", "--json")
        (session,) = [s["session"] for s in map(json.loads, listed.stdout.splitlines())
                      if s["workspace"] == str(workspace)]
        (filter_container,) = containers_of(runtime, scope, session=session, role=labels.ROLE_FILTER)

        status, checks, stderr = doctor(user, scope, world, session[:5])  # a prefix names it
        assert status == 0, (checks, stderr)
        assert list(checks) == [check.name for check in CHECKS]  # the product's checks, in order
        assert {line["session"] for line in checks.values()} == {session}
        assert {name: line["status"] for name, line in checks.items()} == {
            **{check.name: "holds" for check in CHECKS}, "placeholder to a foreign host": "skipped"}
        assert f"TCP to {world.other}:8080: blocked" in checks["refused address"]["detail"]
        assert "web.dejima.test:8443: blocked" in checks["refused port of an allowed name"]["detail"]
        assert "web.dejima.test:8080 connected" in checks["refused port of an allowed name"]["detail"]
        assert "EDE dejima: denied: a test says this host exfiltrates" in checks["refused name"]["detail"]
        assert "no packet sent" in checks["engine gateway"]["detail"]
        assert world.gateway in checks["engine gateway"]["detail"]
        for check in ("engine gateway", "metadata address"):  # the resolver refused the answers pointing there
            assert "meta.dejima.test: rcode 5 answer-denied; gateway.dejima.test: rcode 5 answer-denied" in \
                checks[check]["detail"]
        assert "bad.wild.dejima.test" not in queries_seen(runtime, world)  # the refused name never left

        # Hole 1: the refused address accepted. Exactly that check goes red, the decoy's answer its proof.
        plant(filter_container, f"ip daddr {world.other} accept")
        status, checks, _ = doctor(user, scope, world, session)
        assert status == 1
        assert failed(checks) == {"refused address"}
        assert checks["refused address"]["status"] == "FAILED"
        assert f"TCP to {world.other}:8080: connected" in checks["refused address"]["detail"]

        # Hole 2: the engine's gateway accepted: found in the ruleset, without a packet sent to it.
        plant(filter_container, f"ip daddr {world.gateway} accept")
        status, checks, _ = doctor(user, scope, world, session)
        assert status == 1
        assert failed(checks) == {"refused address", "engine gateway"}
        assert f"may accept a new connection to {world.gateway}" in checks["engine gateway"]["detail"]

        # Hole 3: DNS to another resolver over UDP: the decoy resolver answers the session.
        plant(filter_container, f"ip daddr {world.web} udp dport 53 accept")
        status, checks, _ = doctor(user, scope, world, session)
        assert failed(checks) == {"refused address", "engine gateway", "DNS to another resolver"}
        assert f"UDP 53 to {world.web}: answered" in checks["DNS to another resolver"]["detail"]
        proc.terminate()
        proc.wait(timeout=60)  # the launcher cleans up (its run directory, the socket in it) before the next test


def test_doctor_session_sees_a_placeholder_in_a_name_refused_in_a_session_with_routes(
        user: User, scope: str, workspace: Path, world: World) -> None:
    """A session with credential routes (codeberg's, from a token on the host): its placeholder or decoy, carried
    in a name under a foreign domain, is refused by the resolver as a credential (not merely as a name not
    allowed). The proxy is never asked; the forge's own name resolves nowhere in the test world."""
    with spawn_dejima(user, scope, "-q", "--forge", "codeberg", str(workspace), "--", "sh", "-c",
                      "echo started; exec sleep 300", DEJIMA_SETTINGS=str(world.settings),
                      CODEBERG_TOKEN="a-real-token-the-session-never-sees") as proc:
        wait_for_line(proc.stdout, "started")
        listed = run_dejima(user, scope, "sessions", "--json")
        (session,) = [s["session"] for s in map(json.loads, listed.stdout.splitlines())
                      if s["workspace"] == str(workspace)]
        _, checks, stderr = doctor(user, scope, world, session)
        found = checks["placeholder to a foreign host"]
        assert found["status"] == "holds", (found, stderr)
        assert "rcode 5, EDE kind credential" in found["detail"]
        assert "a-real-token" not in json.dumps(checks)
        table = run_dejima(user, scope, "doctor", "--session", session, "--refused-address", f"{world.other}:8080",
                           "--foreign-resolver", world.web, COLUMNS="200")
        assert f"session {session}" in table.stdout  # the summary table is the command's output: stdout
        assert [line for line in table.stdout.splitlines() if "placeholder to a foreign host" in line and
                "holds" in line], table.stdout
        proc.terminate()
        proc.wait(timeout=60)  # the launcher cleans up (its run directory, the socket in it) before the next test


def test_doctor_session_is_red_when_the_settings_let_the_resolver_answer_with_the_metadata_address(
        user: User, scope: str, workspace: Path, world: World) -> None:
    """A hole made by settings, not by nft: link-local among the answer networks. The resolver passes an answer
    pointing at the metadata address, and doctor says so (no packet goes there: the name is only resolved)."""
    lax = world.settings.with_name("lax-answers.toml")
    lax.write_text(world.settings.read_text().replace(f'answer_networks = ["{world.subnet}"]',
                                                      f'answer_networks = ["{world.subnet}", "169.254.0.0/16"]'))
    lax.chmod(0o644)
    assert "169.254.0.0/16" in lax.read_text()
    with spawn_dejima(user, scope, "-q", "--allow", ALLOWED, *(arg for name in POINTING for arg in ("--allow", name)),
                      str(workspace), "--", "sh", "-c", "echo started; exec sleep 300",
                      DEJIMA_SETTINGS=str(lax)) as proc:
        wait_for_line(proc.stdout, "started")
        listed = run_dejima(user, scope, "sessions", "--json")
        (session,) = [s["session"] for s in map(json.loads, listed.stdout.splitlines())
                      if s["workspace"] == str(workspace)]
        status, checks, _ = doctor(user, scope, world, session)
        assert status == 1
        assert failed(checks) == {"metadata address"}
        assert checks["metadata address"]["detail"] == \
            "dejima's resolver answered meta.dejima.test with 169.254.169.254"
        proc.terminate()
        proc.wait(timeout=60)


def test_doctor_session_names_no_session_it_cannot_find(user: User, scope: str) -> None:
    result = run_dejima(user, scope, "doctor", "--session", "nosuchsession")
    assert result.returncode == 2
    assert "no session 'nosuchsession'" in result.stderr and "dejima sessions" in result.stderr
