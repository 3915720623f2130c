"""The escape checks `dejima doctor --session` runs against a live session, as data.

Each check names what it proves, the probe actions it runs inside the session (core/boundary_probe.py's
``PROBE``: nothing is written in the session) and how it judges
what came back, with its control where one exists (a refusal proves something only when the same
probe can succeed where the policy allows). The project's integration tests run these same checks
(tests/integration/test_doctor_session.py), pointed at decoys the test made.

Where the probes aim, by default: TCP to 192.0.2.1:443 and DNS to 198.51.100.1 (documentation
addresses, RFC 5737). The filter refuses them in the session's own namespace, so nothing leaves the
machine; were the boundary open, the packets would go towards addresses nobody answers. The engine's
gateway and the metadata address (169.254.169.254) get no packet at all: the filter's applied
ruleset is read back and walked (core/nft_reach.py), and the live policy's verdict on an answer
pointing there is asked (what the resolver does with such an answer).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dejima.core.boundary_probe import SOCKETS_SECONDS, SOCKETS_TRIED
from dejima.core.egress import EgressPolicy
from dejima.core.nft_reach import reach
from dejima.core.paths import FILTER_RUN_DIR

REFUSED_ADDRESS = "192.0.2.1"  # TEST-NET-1
REFUSED_PORT = 443
FOREIGN_RESOLVER = "198.51.100.1"  # TEST-NET-2
METADATA_ADDRESS = "169.254.169.254"
# Names that point at the metadata address or the engine's host where they resolve (on GCP; through Docker's own
# DNS): asked of dejima's resolver, which refuses them (not allowed, or an answer pointing there).
ANSWER_NAMES = ("metadata.google.internal", "host.docker.internal")
NOT_ALLOWED_NAME = "dejima-doctor.invalid"  # asked when the session denies no name (RFC 6761: never resolves)
OTHER_PORTS = (8443, 8080, 443, 80, 22, 9418)  # a refused port of an allowed name: the first not allowed
REFUSED = 5  # DNS rcode



@dataclass(frozen=True, slots=True)
class Targets:
    """Where the checks aim, and what they learnt of the session's policy."""

    refused_address: str = REFUSED_ADDRESS
    refused_port: int = REFUSED_PORT
    foreign_resolver: str = FOREIGN_RESOLVER
    allowed: tuple[str, int, int] | None = None  # an allowed name, its allowed port, a port it is refused
    refused_name: tuple[str, str] = (NOT_ALLOWED_NAME, "not-allowed")  # a name and its refusal's kind
    credential_env: tuple[str, ...] = ()  # variables holding a placeholder or decoy (sessions with routes)
    gateway: str | None = None
    metadata: str = METADATA_ADDRESS
    control_dir: str = FILTER_RUN_DIR  # the filter's, where its control socket lives
    # Names asked of dejima's resolver, whose answer must not point at the gateway or the metadata address.
    answer_names: tuple[str, ...] = ANSWER_NAMES


DEFAULT_TARGETS = Targets()


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the doctor gathered: the probe's results by action, the filter's listing, the live policy."""

    probe: Mapping[str, Mapping[str, Any]]
    ruleset: Mapping[str, Any] | None
    policy: EgressPolicy | None
    host_reaches_control: bool = False


HOLDS, FAILED, UNPROVEN, SKIPPED = "holds", "FAILED", "unproven", "skipped"


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    status: str  # holds / FAILED (the boundary let it through) / unproven (the control failed) / skipped
    detail: str

    @property
    def ok(self) -> bool:
        return self.status in (HOLDS, SKIPPED)


Actions = dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class BoundaryCheck:
    name: str
    proves: str
    actions: Callable[[Targets], Actions]  # what the probe runs in the session for it (none: judged on the host)
    judge: Callable[[Targets, Evidence], CheckOutcome]


def _tcp(host: str, port: int) -> dict[str, Any]:
    return {"op": "tcp", "host": host, "port": port}


def _dns(name: str, server: str = "127.0.0.1", port: int = 53, tcp: bool = False) -> dict[str, Any]:
    return {"op": "dns", "name": name, "server": server, "port": port, "tcp": tcp}


def _said(result: Mapping[str, Any]) -> str:
    """One probe result in words."""
    words = str(result.get("result", "no result"))
    if result.get("error"):
        words += f" ({result['error']})"
    if "seconds" in result:
        words += f" in {float(result['seconds']):.2f}s"
    return words


def _refused(result: Mapping[str, Any]) -> bool:
    """Refused by the filter: an error at once, never an answer and never silence (a drop that hangs)."""
    return result.get("result") == "blocked"


def _with_control(held: bool, control: bool, proof: str, control_words: str) -> CheckOutcome:
    if not held:
        return CheckOutcome(FAILED, proof)
    if not control:
        return CheckOutcome(UNPROVEN, f"{proof}; but the control failed: {control_words}")
    return CheckOutcome(HOLDS, f"{proof}; control: {control_words}")


# --- the checks -------------------------------------------------------------------------------------


def _policy_allows(e: Evidence, address: str, port: int | None) -> bool:
    """Whether the live policy itself allows ``address`` (on ``port``; None: on some port): a probe aimed
    there proves nothing."""
    if e.policy is None:
        return False
    ip = ipaddress.ip_address(address)
    return any(entry.matches_address(ip) and (port is None or entry.port in (None, port))
               for entry in e.policy.literal_entries())


def _aimed_at_allowed(flag: str, address: str) -> CheckOutcome:
    return CheckOutcome(UNPROVEN, f"the session's policy allows {address}: aim the probe elsewhere ({flag})")


def _refused_address(t: Targets, e: Evidence) -> CheckOutcome:
    probe, control = e.probe["refused"], e.probe["loopback"]
    if _policy_allows(e, t.refused_address, t.refused_port) and probe.get("result") == "connected":
        return _aimed_at_allowed("--refused-address", t.refused_address)
    return _with_control(_refused(probe), control.get("result") == "connected",
                         f"TCP to {t.refused_address}:{t.refused_port}: {_said(probe)}",
                         f"TCP on loopback {_said(control)}")


def _allowed_actions(t: Targets) -> Actions:
    if t.allowed is None:
        return {}
    name, port, other = t.allowed
    return {"allowed_port": _tcp(name, port), "other_port": _tcp(name, other)}


def _allowed_name(t: Targets, e: Evidence) -> CheckOutcome:
    if t.allowed is None:
        return CheckOutcome(SKIPPED, "the session allows no name on some ports only")
    name, port, other = t.allowed
    probe, control = e.probe["other_port"], e.probe["allowed_port"]
    return _with_control(_refused(probe), control.get("result") == "connected",
                         f"TCP to {name}:{other}: {_said(probe)}", f"{name}:{port} {_said(control)}")


def _resolver_actions(t: Targets) -> Actions:
    return {"udp53": _dns(NOT_ALLOWED_NAME, t.foreign_resolver), "tcp53": _dns(NOT_ALLOWED_NAME, t.foreign_resolver,
                                                                                 tcp=True),
            "tcp853": _tcp(t.foreign_resolver, 853), "own_udp": _dns(NOT_ALLOWED_NAME),
            "own_tcp": _dns(NOT_ALLOWED_NAME, tcp=True)}


def _other_resolver(t: Targets, e: Evidence) -> CheckOutcome:
    tried = (("UDP 53", "udp53"), ("TCP 53", "tcp53"), ("TCP 853", "tcp853"))
    proof = "; ".join(f"{label} to {t.foreign_resolver}: {_said(e.probe[key])}" for label, key in tried)
    control = all(e.probe[key].get("result") == "answered" for key in ("own_udp", "own_tcp"))
    if _policy_allows(e, t.foreign_resolver, None) and not all(_refused(e.probe[key]) for _, key in tried):
        return _aimed_at_allowed("--foreign-resolver", t.foreign_resolver)
    return _with_control(all(_refused(e.probe[key]) for _, key in tried), control, proof,
                         "dejima's resolver answers on UDP and TCP 53")


def _refused_name(t: Targets, e: Evidence) -> CheckOutcome:
    name, kind = t.refused_name
    answer = e.probe["refused_name"]
    if answer.get("result") != "answered":
        return CheckOutcome(UNPROVEN, f"{name}: dejima's resolver did not answer ({_said(answer)})")
    said = f"{name}: rcode {answer.get('rcode')}, EDE dejima: {answer.get('kind')}: {answer.get('reason', '')}"
    held = answer.get("rcode") == REFUSED and answer.get("kind") == kind
    return CheckOutcome(HOLDS if held else FAILED, said if held else f"{said} (expected REFUSED, {kind})")


def _answer_actions(t: Targets) -> Actions:
    return {f"answer:{name}": _dns(name) for name in t.answer_names}


def _by_inspection(label: str, address: str | None, t: Targets, e: Evidence) -> CheckOutcome:
    """The ruleset walked for ``address``, the live policy's verdict on an answer pointing there, and what dejima's
    resolver answered for the names that could point there."""
    if address is None:
        return CheckOutcome(UNPROVEN, f"the {label} is not known (the engine named none)")
    answers = {name: e.probe[f"answer:{name}"] for name in t.answer_names}
    passed = [name for name, answer in answers.items() if address in answer.get("addresses", [])]
    if passed:
        return CheckOutcome(FAILED, f"dejima's resolver answered {', '.join(passed)} with {address}")
    if e.ruleset is None or e.policy is None:
        return CheckOutcome(UNPROVEN, f"{address}: the filter's ruleset or the session's policy could not be read "
                                      "(the policy comes from the control socket of the user who started the session)")
    accepted = reach(e.ruleset, address)
    verdict = e.policy.address_verdict(ipaddress.ip_address(address))
    if accepted.accepted:
        return CheckOutcome(FAILED, accepted.detail)
    if verdict.allowed:
        return CheckOutcome(FAILED, f"{address}: an allowed name's answer pointing here would be let through "
                                    f"({verdict.reason})")
    unanswered = [name for name, answer in answers.items() if answer.get("result") != "answered"]
    if unanswered:
        return CheckOutcome(UNPROVEN, f"dejima's resolver did not answer {', '.join(unanswered)}")
    said = "; ".join(f"{name}: rcode {a.get('rcode')} {a.get('kind') or ''}".rstrip() for name, a in answers.items())
    return CheckOutcome(HOLDS, f"{accepted.detail} (no packet sent); an answer pointing there is refused: "
                               f"{verdict.reason}" + (f"; asked of dejima's resolver, {said}" if said else ""))


def _ipv6(t: Targets, e: Evidence) -> CheckOutcome:
    probe = e.probe["ipv6"]
    held = probe.get("switch") == "1" and probe.get("addresses") == 0 and probe.get("result") == "blocked"
    detail = (f"disable_ipv6={probe.get('switch')}, {probe.get('addresses')} IPv6 addresses, "
              f"TCP to [::1]: {_said(probe)}")
    return CheckOutcome(HOLDS if held else FAILED, detail)


def _control(t: Targets, e: Evidence) -> CheckOutcome:
    probe = e.probe["control"]
    answered = [name for name, outcome in probe.get("sockets", []) if outcome == "answered"]
    reached = [name for name, outcome in probe.get("sockets", []) if outcome in ("answered", "connected")]
    if answered or probe.get("run_dir"):
        where = ", ".join(answered) or t.control_dir
        return CheckOutcome(FAILED, f"the session reaches the filter's control channel: {where}")
    if probe.get("untried", 0):
        return CheckOutcome(UNPROVEN, f"{probe['untried']} unix sockets of the namespace were left untried "
                                      f"(at most {SOCKETS_TRIED} are, in {SOCKETS_SECONDS:.0f}s)")
    proof = (f"{t.control_dir} absent in the session; {len(probe.get('sockets', []))} unix sockets of the namespace "
             f"tried, none speaks the control protocol" + (f" ({len(reached)} others accept)" if reached else ""))
    return _with_control(True, e.host_reaches_control, proof, "the host reaches the filter's control socket")


def _credential_actions(t: Targets) -> Actions:
    return {"credential": {"op": "credential", "names": list(t.credential_env)}} if t.credential_env else {}


def _credential(t: Targets, e: Evidence) -> CheckOutcome:
    if not t.credential_env:
        return CheckOutcome(SKIPPED, "the session has no credential routes")
    answer = e.probe["credential"]
    if answer.get("result") == "none":
        return CheckOutcome(UNPROVEN, f"none of {', '.join(t.credential_env)} is set in the session")
    held = answer.get("rcode") == REFUSED and answer.get("kind") == "credential"
    detail = (f"a name under dejima-doctor.invalid carrying the session's placeholder/decoy: {_said(answer)}, "
              f"rcode {answer.get('rcode')}, EDE kind {answer.get('kind')}")
    return CheckOutcome(HOLDS if held else FAILED, detail)


CHECKS: tuple[BoundaryCheck, ...] = (
    BoundaryCheck("refused address", "a connection to an address the policy does not allow is refused at once",
                  lambda t: {"refused": _tcp(t.refused_address, t.refused_port), "loopback": {"op": "loopback"}},
                  _refused_address),
    BoundaryCheck("refused port of an allowed name", "an allowed name is reachable on its allowed ports only",
                  _allowed_actions, _allowed_name),
    BoundaryCheck("DNS to another resolver", "no resolver but dejima's answers: UDP 53, TCP 53, TCP 853",
                  _resolver_actions, _other_resolver),
    BoundaryCheck("refused name", "a denied name (else a name not allowed) is refused, its reason given",
                  lambda t: {"refused_name": _dns(t.refused_name[0])}, _refused_name),
    BoundaryCheck("engine gateway", "the engine's gateway is unreachable (ruleset and resolver policy)",
                  _answer_actions, lambda t, e: _by_inspection("engine gateway", t.gateway, t, e)),
    BoundaryCheck("metadata address", "the cloud metadata address is unreachable (ruleset and resolver policy)",
                  _answer_actions, lambda t, e: _by_inspection("metadata address", t.metadata, t, e)),
    BoundaryCheck("IPv6 disabled", "the session has no IPv6", lambda t: {"ipv6": {"op": "ipv6"}}, _ipv6),
    BoundaryCheck("control socket out of reach", "the session cannot reach the filter's control channel",
                  lambda t: {"control": {"op": "control", "run_dir": t.control_dir, "limit": SOCKETS_TRIED,
                                         "seconds": SOCKETS_SECONDS}}, _control),
    BoundaryCheck("placeholder to a foreign host", "a placeholder or decoy credential carried out in a name is "
                  "refused", _credential_actions, _credential),
)


def probe_actions(targets: Targets, checks: tuple[BoundaryCheck, ...] = CHECKS) -> Actions:
    """Every check's actions, in one probe run."""
    return {key: action for check in checks for key, action in check.actions(targets).items()}


def judge(targets: Targets, evidence: Evidence,
          checks: tuple[BoundaryCheck, ...] = CHECKS) -> list[tuple[BoundaryCheck, CheckOutcome]]:
    """Each check with its outcome; a probe result that is missing is a failed check, never a pass."""
    judged = []
    for check in checks:
        try:
            outcome = check.judge(targets, evidence)
        except (KeyError, TypeError, ValueError) as exc:
            outcome = CheckOutcome(UNPROVEN, f"the probe's result could not be read ({exc!r})")
        judged.append((check, outcome))
    return judged


def targets_for(policy: EgressPolicy | None, environment: Mapping[str, str], gateway: str | None,
                credential_names: tuple[str, ...], base: Targets = Targets()) -> Targets:
    """The targets of ``base`` with what the live policy and the session's environment offer: a name allowed on
    some ports only (and one of its refused ports), a denied name, the credential variables that are set."""
    allowed, refused_name = None, base.refused_name
    if policy is not None:
        for entry in policy.allowed:
            if entry.kind == "name" and entry.port is not None:
                ports = {e.port for e in policy.allowed if e.matches_name(entry.name)}
                other = next((p for p in OTHER_PORTS if p not in ports), None)
                if other is not None and None not in ports:
                    allowed = (entry.name, entry.port, other)
                    break
        for entry, _reason in policy.denied:
            if entry.kind in ("name", "wildcard"):
                refused_name = (entry.name if entry.kind == "name" else f"dejima-doctor.{entry.name}", "denied")
                break
    present = tuple(name for name in credential_names if environment.get(name))
    return replace(base, allowed=allowed, refused_name=refused_name, credential_env=present, gateway=gateway)


def environment_of(config_env: list[str] | None) -> dict[str, str]:
    """The container's ``Config.Env`` (NAME=VALUE strings) as a mapping."""
    return dict(item.split("=", 1) for item in config_env or () if "=" in item)
