"""The user's settings file: parsed strictly into a frozen ``Settings``.

A settings file that is absent means "defaults". A file that is present must be valid: empty,
unreadable, malformed TOML, unknown keys and wrong types are errors naming the file, the key and
the fix. dejima never falls back to defaults behind the user's back.

Each key is declared once, on its dataclass field: kind, help and default (``key(...)``); the
checks (dejima/core/schema.py) and docs/settings.md (``dejima settings reference``) come from there.
To add a setting, add one field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from dejima.core.kinds import (
    ABSOLUTE_PATH,
    ALLOW_ENTRY,
    BOOL,
    EGRESS_ENTRY,
    HTTP_URL,
    IMAGE_REF,
    IPV4_NETWORK,
    K8S_NAME,
    KEBAB,
    MEMORY,
    PUBLISH,
    RESOLVER,
    STR,
    TEXT,
    checked,
    integer,
    one_of,
    reasons_name_denied,
    seconds,
    size,
)
from dejima.core.limits import MIN_PROXY_MEMORY, MIN_TMP
from dejima.core.schema import (
    Kind,
    check_data,
    declared_default,
    key,
    keys_of,
    list_of,
    parse_toml,
    record,
    shown,
    table,
    table_of,
)
from dejima.core.upstream_proxy import proxy_problem
from dejima.errors import SettingsError

BASE_FALLBACKS = ("debootstrap", "none")
SECONDS = seconds(3600)
PIDS = integer(16, 4194304)
CPU_SHARES = integer(2, 262144)
UPSTREAM_URL = checked("URL", lambda v: None if v.startswith(("https://", "http://127.", "http://localhost")) else
                       f"must be an https:// URL, or plain http:// to this host's loopback, not {shown(v)}")
PEM_PATH = checked("path", lambda v: f"must be an absolute path, not {shown(v)}" if v and not v.startswith("/") else
                   None)
PROXY_URL = checked("proxy URL", lambda v: proxy_problem(v) if v else None,
                    fix="write it as http://HOST:PORT, or \"direct\"")


@dataclass(frozen=True, slots=True)
class ImageSettings:
    base: str = key(TEXT, "Image the filter and session images are built on.", "debian:trixie-slim")
    base_fallback: str = key(
        one_of(*BASE_FALLBACKS), "What to do when `base` cannot be pulled: `debootstrap` builds a Debian minbase on "
        "the host (needs root and debootstrap) and says so; `none` stops with an error.", "debootstrap")
    bootstrap_mirror: str = key(HTTP_URL, "Debian mirror debootstrap downloads from.", "http://deb.debian.org/debian")
    bootstrap_suite: str = key(TEXT, "Debian suite debootstrap installs.", "trixie")
    extra_ca_dir: str = key(
        ABSOLUTE_PATH, "Host directory of extra CA certificates (`*.crt`) that image builds must trust, e.g. a "
        "corporate TLS proxy's. The directory update-ca-certificates reads.", "/usr/local/share/ca-certificates")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    network: str = key(TEXT, "Docker network the filter container joins; the session only ever reaches it through "
                       "the filter.", "bridge")
    stop_timeout: float = key(SECONDS, "Seconds a command gets to exit after dejima forwards a signal, before its "
                              "containers are removed.", 5.0)
    ready_timeout: float = key(SECONDS, "Seconds the filter may take to apply and verify its ruleset.", 30.0)
    protect_git_hooks: bool = key(
        BOOL, "Mount the workspace's .git/hooks read-only in the session, so no hook can be planted there (the exit "
        "audit still checks); false lets the session write hooks.", True)
    notify_denials: bool = key(
        BOOL, "In an interactive session, show each newly refused name in the terminal's title (it never draws over "
        "the agent's screen), with the `dejima-allow` command that grants it.", True)
    publish: tuple[int | str, ...] = key(
        list_of(PUBLISH), "Ports of the session reachable from the host, on 127.0.0.1 only: `3000` (host port 3000 "
        "to the session's 3000), `\"8080:3000\"` (host 8080 to session 3000); `\"0.0.0.0:3000:3000\"` opens it to "
        "every address of the host, said on the boundary card. TCP, session ports from 1024; only these ports are "
        "reachable, egress is unchanged. `--publish` adds one for a run.", ())


@dataclass(frozen=True, slots=True)
class NetworkSettings:
    allow: tuple[str, ...] = key(
        list_of(ALLOW_ENTRY), "Egress entries every session may reach: `example.com`, `*.example.com` (subdomains "
        "only), `example.com:443`, IPv4 addresses and networks. TCP only.", ())
    deny: tuple[str, ...] = key(list_of(EGRESS_ENTRY), "Entries no session may reach; they beat `allow`.", ())
    deny_reasons: dict[str, str] = key(
        table_of(STR), "Reason shown to the agent and to you, per `deny` entry "
        "(`{ \"evil.example\" = \"known exfiltration host\" }`).", {})
    upstream_dns: tuple[str, ...] = key(
        list_of(RESOLVER), "IPv4 resolvers the filter forwards allowed queries to (default: the host's, from "
        "/etc/resolv.conf). Corporate resolvers go here.", ())
    answer_networks: tuple[str, ...] = key(
        list_of(IPV4_NETWORK), "Private IPv4 networks an allowed name's answer may point into (an internal mirror at "
        "10.20.0.0/16, say). Answers in private, loopback or metadata ranges are refused otherwise; the host's and "
        "the engine gateway's addresses always are.", ())
    allow_special: tuple[str, ...] = key(
        list_of(ALLOW_ENTRY), "Overrides for allowed address entries that reach special places: networks shorter "
        "than /8, link-local and cloud metadata addresses, this host's addresses, the engine gateway. Such an "
        "`allow` entry is refused unless this list holds the same entry, written the same way (`allow = "
        "[\"169.254.169.254:80\"]` needs `allow_special = [\"169.254.169.254:80\"]`); the boundary card shows each "
        "one in use. `--allow-special` does the same for one run.", ())
    upstream_proxy: str = key(
        PROXY_URL, "The corporate HTTP proxy every connection out of a session goes through (`\"http://proxy.corp:3128\"`):"
        " the filter sends each allowed TCP connection as `CONNECT name:port`, the credential proxy its upstreams"
        " likewise; names the policy refuses never reach it. Empty: the host's `HTTPS_PROXY` (then `https_proxy`,"
        " `HTTP_PROXY`, `http_proxy`) when set at start, else connections go direct; `\"direct\"`: direct whatever"
        " the host's variables say. The boundary card says which and from where. `NO_PROXY` is not read.", "")
    extra_ca: str = key(
        PEM_PATH, "A PEM file of the CA certificates a corporate TLS-inspecting proxy signs with: trusted in sessions"
        " (the session images' store, and the bundle the session's tools are pointed at), by image builds and by the"
        " credential proxy. Empty: none.", "")


@dataclass(frozen=True, slots=True)
class LimitSettings:
    session_pids: int = key(PIDS, "Most processes and threads the session may run at once (a fork bomb stops "
                            "here).", 4096)
    session_memory: str = key(
        MEMORY, "Memory of the session, /tmp included, with no swap beyond it: a size (`\"4g\"`, `\"512m\"`) or a "
        "share of the engine's memory (`\"75%\"`). Past it the kernel ends a process of the session (the largest, "
        "usually the one allocating).", "75%")
    session_cpu_shares: int = key(
        CPU_SHARES, "CPU weight of the session against other containers and services (the engine's default is "
        "1024): under contention a busy session yields.", 512)
    session_tmp_size: str = key(size(MIN_TMP), "Size of the session's /tmp (a tmpfs in memory).", "1g")
    filter_pids: int = key(PIDS, "Most processes and threads of the filter (its resolver and logger).", 512)
    filter_memory: str = key(MEMORY, "Memory of the filter, as for `session_memory`; it has its own cgroup, so the "
                             "session hitting its limit never takes the filter down.", "256m")
    filter_cpu_shares: int = key(CPU_SHARES, "CPU weight of the filter; above the session's, so DNS keeps answering "
                                 "while the session is busy.", 1024)


@dataclass(frozen=True, slots=True)
class CredentialSettings:
    upstreams: dict[str, str] = key(
        table_of(UPSTREAM_URL, names=KEBAB), "Where a credential route's secret goes instead of the manifest's "
        "upstream, per route name: a corporate gateway, a regional endpoint, a test world "
        "(`{ \"anthropic-api-key\" = \"https://llm-gateway.corp.example/anthropic\" }`); https://, or plain http "
        "to this host's loopback. `dejima manifests show KIND/NAME` shows a manifest's routes.", {})
    extra_ca_file: str = key(STR, "A PEM bundle the credential proxy trusts besides the system's, for upstreams "
                             "behind a corporate TLS proxy (empty: the system store only).", "")
    proxy_memory: str = key(
        size(MIN_PROXY_MEMORY), "Most memory a session's credential proxy holds at once for what it must read "
        "before forwarding: the bodies of SigV4-signed requests (hashed whole) and the commits of a push that must be "
        "proven a fast-forward. Past it such a request gets 413 and a violation; everything else streams and needs "
        "none of it.", "64m")
    proxy_connections: int = key(
        integer(8, 4096), "Most connections a session may hold open to its credential proxy at once; one more is "
        "answered 503 and recorded. With the memory above, this bounds what a session can take of the launcher.", 128)
    decoys: bool = key(
        BOOL, "Plant decoy credentials in sessions (fake AWS keys and the like, in the environment and "
        "~/.aws/credentials): any use of one is refused and recorded as a sign the agent went looking for "
        "secrets.", True)


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """What a Kubernetes render (`dejima PATH --render kubernetes`) needs that a local start finds itself."""

    filter_image: str = key(IMAGE_REF, "The filter image as the cluster pulls it (`dejima images list` names the local "
                            "one; tag and push it to your registry).", "")
    session_image: str = key(IMAGE_REF, "The session image as the cluster pulls it, likewise.", "")
    dns_upstreams: tuple[str, ...] = key(
        list_of(RESOLVER), "The cluster's DNS service, which the filter forwards allowed queries to "
        "(`kubectl -n kube-system get service kube-dns`); --dns-upstream overrides it.", ())
    namespace: str = key(K8S_NAME, "Namespace of the rendered objects (empty: kubectl's current one).", "")
    workspace_claim: str = key(K8S_NAME, "The PersistentVolumeClaim holding the workspace (empty: "
                               "dejima-workspace-<project>).", "")
    runtime_class: str = key(K8S_NAME, "The pod's RuntimeClass, e.g. gvisor or kata (empty: the cluster's default).",
                             "")


def _section(cls: type, title: str, rules: tuple[Any, ...] = ()) -> Any:
    return key(table(record(cls, f"[{title}]", rules)), "settings live in sections; docs/settings.md lists every key",
               factory=cls)


@dataclass(frozen=True, slots=True)
class Settings:
    images: ImageSettings = _section(ImageSettings, "images")
    session: SessionSettings = _section(SessionSettings, "session")
    network: NetworkSettings = _section(NetworkSettings, "network", (reasons_name_denied,))
    limits: LimitSettings = _section(LimitSettings, "limits")
    credentials: CredentialSettings = _section(CredentialSettings, "credentials")
    kubernetes: KubernetesSettings = _section(KubernetesSettings, "kubernetes")


SETTINGS: Kind = table(record(Settings, "the settings file (settings live in sections)"))


def parse_settings(text: str, source: str) -> Settings:
    """Parse the text of a settings file; ``source`` names the file in messages."""
    if not text.strip():
        raise SettingsError(
            f"{source}: the settings file is empty",
            hint="delete the file to use the defaults, or add settings, e.g. "
                 f"[images] base = \"{ImageSettings().base}\" (see `dejima settings reference`)",
            reference="empty-settings",
        )
    data = parse_toml(text, source, SettingsError, "fix the syntax at that line (see docs/settings.md for every key)")
    if not data:
        raise SettingsError(
            f"{source}: the settings file holds only comments",
            hint="delete the file to use the defaults, or add settings",
            reference="empty-settings",
        )
    settings: Settings = check_data(data, SETTINGS, source, SettingsError)
    return settings


def render_settings_reference() -> str:
    """Markdown reference of every settings key, generated from the declarations (docs/settings.md)."""
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    defaults = Settings()
    for section in fields(Settings):
        cls = type(getattr(defaults, section.name))
        for name, spec in keys_of(cls).items():
            lines.append(f"| `{section.name}.{name}` | {spec.kind.name} | {declared_default(cls, name)} | "
                         f"{spec.help} |")
    return "\n".join(lines) + "\n"
