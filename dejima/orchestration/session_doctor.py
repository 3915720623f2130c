"""`dejima doctor --session SESSION`: the escape checks (core/boundary_checks.py) run against a live session.

The probe runs in the session container as the session's own user (an engine exec of ``python3 -c``:
nothing is written in the session); the filter's applied table is read back in the filter container
(``nft -j list table``, read only); the live policy (grants included) comes from the filter's control
socket on the host, which is also the control of the check that the session cannot reach it. The
probes' refusals are recorded in the session's violations like any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dejima.adapters import control_client, host
from dejima.adapters.runtime import Runtime
from dejima.adapters.session_dirs import run_dir
from dejima.core import labels
from dejima.core.boundary_checks import (
    CHECKS,
    DEFAULT_TARGETS,
    BoundaryCheck,
    CheckOutcome,
    Evidence,
    Targets,
    environment_of,
    judge,
    probe_actions,
    targets_for,
)
from dejima.core.boundary_probe import PROBE, PROBE_TIMEOUT, parse_probe
from dejima.core.egress import EgressPolicy, policy_from_document
from dejima.core.placeholders import AWS_PLACEHOLDER_ENV, DECOY_ENV_NAMES, placeholder_shaped
from dejima.core.plan import CONTROL_SOCKET
from dejima.core.ruleset import TABLE
from dejima.errors import DejimaError, SessionError, UsageError
from dejima.orchestration.manage_sessions import list_sessions

PROBE_SECONDS = 120.0  # the whole probe: every action answers in PROBE_TIMEOUT at most


@dataclass(frozen=True, slots=True)
class SessionCheck:
    name: str
    status: str  # holds / FAILED / unproven / skipped
    detail: str

    @property
    def ok(self) -> bool:
        return CheckOutcome(self.status, self.detail).ok


@dataclass(frozen=True, slots=True)
class LiveSession:
    session_id: str
    filter: str
    session: str
    user: str
    environment: dict[str, str]
    gateway: str | None


def find_session(runtime: Runtime, scope: str, wanted: str) -> LiveSession:
    """The running session named ``wanted`` (its id, or a prefix of one id only). UsageError otherwise."""
    sessions = list_sessions(runtime, scope)
    matching = [s for s in sessions if s.session_id == wanted] or [s for s in sessions
                                                                   if s.session_id.startswith(wanted)]
    if not wanted or not matching:
        raise UsageError(f"no session {wanted!r}", hint="`dejima sessions` lists the running ones")
    if len(matching) > 1:
        raise UsageError(f"{wanted!r} names {len(matching)} sessions: "
                         f"{', '.join(s.session_id for s in matching)}", hint="give more of the session id")
    found = matching[0]
    if found.status != "running":
        raise UsageError(f"session {found.session_id} is {found.status}, not running",
                         hint="`dejima doctor --session` checks a running session")
    members = {c.labels.get(labels.ROLE): c.id
               for c in runtime.containers({labels.SCOPE: scope, labels.SESSION: found.session_id})}
    inspected = runtime.inspect(members[labels.ROLE_SESSION]) or {}
    filter_info = runtime.inspect(members[labels.ROLE_FILTER]) or {}
    networks = (filter_info.get("NetworkSettings") or {}).get("Networks") or {}
    gateway = next((str(n["Gateway"]) for n in networks.values() if n.get("Gateway")), None)
    config = inspected.get("Config") or {}
    return LiveSession(found.session_id, members[labels.ROLE_FILTER], members[labels.ROLE_SESSION],
                       str(config.get("User") or "0:0"), environment_of(config.get("Env")), gateway)


def _live_policy(session_id: str) -> tuple[EgressPolicy | None, bool]:
    """The policy the filter holds now, from its control socket, and whether the socket answered."""
    socket = run_dir(session_id) / CONTROL_SOCKET
    try:
        listing = control_client.send(control_client.RunningSession(session_id, "", socket), {"v": 1, "op": "list"})
    except DejimaError:
        return None, False
    try:
        return policy_from_document(listing["policy"], f"session {session_id}'s filter"), True
    except (DejimaError, KeyError, TypeError, ValueError):
        return None, bool(listing.get("ok"))


def _ruleset(runtime: Runtime, filter_container: str) -> dict[str, Any] | None:
    status, out, _ = runtime.exec(filter_container, ("nft", "-j", "list", "table", "inet", TABLE), "0:0")
    try:
        return json.loads(out) if status == 0 else None
    except ValueError:
        return None


def credential_names(environment: dict[str, str]) -> tuple[str, ...]:
    """The session's variables that hold a placeholder or decoy (set only in sessions with routes)."""
    shaped = tuple(name for name, value in sorted(environment.items()) if placeholder_shaped(value))
    return shaped + tuple(n for n in (*AWS_PLACEHOLDER_ENV, *DECOY_ENV_NAMES) if n in environment and n not in shaped)


def check_session(runtime: Runtime, wanted: str, base: Targets = DEFAULT_TARGETS,
                  checks: tuple[BoundaryCheck, ...] = CHECKS) -> tuple[str, list[SessionCheck]]:
    """Run ``checks`` against the running session ``wanted``: its id and each check's outcome."""
    live = find_session(runtime, host.scope(), wanted)
    policy, reached = _live_policy(live.session_id)
    targets = targets_for(policy, live.environment, live.gateway, credential_names(live.environment), base)
    command = ("python3", "-I", "-c", PROBE, json.dumps(probe_actions(targets, checks)), str(PROBE_TIMEOUT))
    status, out, err = runtime.exec(live.session, command, live.user, timeout=PROBE_SECONDS)
    probe = parse_probe(out)
    if not probe:
        raise SessionError(f"the probe in session {live.session_id} printed no result (status {status})",
                           context=err.strip()[-500:] or None)
    evidence = Evidence(probe, _ruleset(runtime, live.filter), policy, reached)
    return live.session_id, [SessionCheck(check.name, outcome.status, outcome.detail)
                             for check, outcome in judge(targets, evidence, checks)]
