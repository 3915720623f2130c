"""Manifests: one TOML file per forge, workflow, harness or backend, parsed strictly.

The directory names the kind and the file stem the name (``harnesses/claude-code.toml``).
Every file carries ``schema = 1``. Unknown keys, wrong types and bad egress entries are errors
naming the file, the key path and the fix. Manifests hold no secrets: a credential is a *route*
(which header, which upstream, where the host keeps the secret), resolved only by the proxy.

The format is declared below as data (dejima/core/schema.py checks it; docs/manifests.md is
rendered from it): a credential route's keys on ``CredentialRoute``'s fields, every other section
in ``SECTIONS``. To add a key, add one declaration (and read it where the ``Manifest`` is built).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from dejima.core.connect import Connect, check_templates, home_file
from dejima.core.kinds import (
    ABSOLUTE_PATH,
    ALLOW_ENTRY,
    BOOL,
    DOMAIN,
    EGRESS_ENTRY,
    ENV_NAME,
    HTTPS_URL,
    KEBAB,
    STR,
    TEXT,
    WORKSPACE_PATH,
    is_kebab,
    one_of,
    reasons_name_denied,
)
from dejima.core.schema import (
    Invalid,
    Key,
    Kind,
    Table,
    array_of,
    check_data,
    key,
    list_of,
    one_key,
    parse_toml,
    record,
    table,
    table_of,
)
from dejima.errors import InputError

KINDS = ("forges", "workflows", "harnesses", "backends")
API_FAMILIES = ("anthropic", "openai", "gemini", "bedrock", "vertex", "ollama")
SCHEMES = ("Bearer", "token", "Basic", "raw", "aws-sigv4")
SCHEMA_VERSION = 1
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)


class ManifestError(InputError):
    reference = "invalid-manifest"


def singular(kind: str) -> str:
    return "harness" if kind == "harnesses" else kind[:-1]


def _source(where: tuple[str, Any]) -> tuple[str, tuple[str, ...]]:
    how, what = where
    return how, tuple(what) if isinstance(what, tuple) else (what,)


_ONE_SOURCE = one_key({"env": TEXT, "file": TEXT, "command": list_of(STR, non_empty=True), "claude_login": TEXT,
                       "aws": TEXT},
                      'source = { env = "GITHUB_TOKEN" }')
SOURCE = Kind(_ONE_SOURCE.name, _ONE_SOURCE.expect, (dict,), lambda data: _source(_ONE_SOURCE.check(data)))


@dataclass(frozen=True, slots=True)
class CredentialRoute:
    name: str = key(KEBAB, "kebab-case name of the route")
    upstream: str = key(HTTPS_URL, "https:// URL of the only service the real secret may be sent to")
    header: str = key(TEXT, "HTTP header that carries the secret")
    scheme: str = key(one_of(*SCHEMES), f"how the header is formed: one of {', '.join(SCHEMES)} (raw: the header "
                      "value is the secret itself, e.g. x-api-key)")
    # ("env", ("VAR",)) | ("file", ("~/p",)) | ("command", argv) | ("claude_login", ("~/.claude/.credentials.json",))
    # | ("aws", ("profile",))
    source: tuple[str, tuple[str, ...]] = key(
        SOURCE, "where the host keeps the secret: { env = \"VAR\" }, { file = \"~/path\" }, { command = [\"prog\", "
        "\"arg\"] } or { claude_login = \"~/.claude/.credentials.json\" } (the host's Claude Code login, refreshed "
        "by the proxy) or, with scheme aws-sigv4, { aws = \"default\" } (the host's AWS keys: AWS_ACCESS_KEY_ID/"
        "AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, else the profile AWS_PROFILE or this value names in "
        "~/.aws/credentials and ~/.aws/config, static keys or credential_process)")
    placeholder_env: str | None = key(ENV_NAME, "session env var that holds a placeholder instead of the secret", None)
    username: str | None = key(TEXT, "scheme Basic only: the user name the service expects with a token "
                               "(x-access-token, oauth2, x-token-auth…)", None)
    base_url_env: str | None = key(
        ENV_NAME, "session env var that takes the route's base URL through dejima's proxy (e.g. ANTHROPIC_BASE_URL); "
        "the upstream's path is kept, so an SDK that wants /v1 in its base URL gets an upstream ending in /v1", None)
    aws_service: str | None = key(
        KEBAB, "scheme aws-sigv4 only: the service name AWS signatures are made for (\"bedrock\" for "
        "bedrock-runtime); the region comes from the upstream host; the session gets placeholder "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", None)
    intercept: bool = key(
        BOOL, "for tools that take no base URL (gh): the session's connections to the upstream's host end at "
        "dejima's proxy, which shows a certificate from a per-session CA the session trusts; the upstream must be "
        "a bare https://host", False)


def _username_goes_with_basic(values: dict[str, Any]) -> None:
    username = values.get("username")
    if username is not None and (values.get("scheme") != "Basic" or ":" in username):
        raise Invalid("only goes with scheme = \"Basic\", and holds no ':'", "remove it, or set scheme = \"Basic\"",
                      ("username",))


def _intercept_needs_a_bare_host(values: dict[str, Any]) -> None:
    from urllib.parse import urlsplit

    upstream = str(values.get("upstream", ""))
    if values.get("intercept") and urlsplit(upstream).path not in ("", "/"):
        raise Invalid(f"needs an upstream without a path, not {upstream!r}",
                      "an intercepted tool sends its own paths: write upstream = \"https://host\"", ("intercept",))


def _sigv4_goes_together(values: dict[str, Any]) -> None:
    """scheme aws-sigv4, source aws and aws_service go together; the upstream names its region."""
    from urllib.parse import urlsplit

    from dejima.core.sigv4 import region_of

    how = values.get("source", ("", ()))[0]
    if values.get("scheme") != "aws-sigv4":
        for name, present in (("aws_service", values.get("aws_service") is not None), ("source", how == "aws")):
            if present:
                raise Invalid("only goes with scheme = \"aws-sigv4\"", "remove it, or set scheme = \"aws-sigv4\"",
                              (name,))
        return
    if how != "aws":
        raise Invalid("must be { aws = \"profile\" } with scheme aws-sigv4",
                      "e.g. source = { aws = \"default\" }: the host's AWS keys, read by the proxy", ("source",))
    if values.get("aws_service") is None:
        raise Invalid("is missing", "e.g. aws_service = \"bedrock\" (the signing name, not the host's first label)",
                      ("aws_service",))
    if str(values.get("header", "")).lower() != "authorization" or values.get("placeholder_env") is not None:
        raise Invalid("must be \"Authorization\" with scheme aws-sigv4, without placeholder_env",
                      "the session gets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY placeholders", ("header",))
    if region_of(urlsplit(str(values.get("upstream", ""))).hostname or "") is None:
        raise Invalid(f"does not name an AWS region: {values.get('upstream')!r}",
                      "use the regional endpoint, e.g. https://bedrock-runtime.us-east-1.amazonaws.com", ("upstream",))


_ROUTE = record(CredentialRoute, "[[credentials]]", (_username_goes_with_basic, _sigv4_goes_together,
                                                        _intercept_needs_a_bare_host))


@dataclass(frozen=True, slots=True)
class Manifest:
    kind: str
    name: str
    source: str  # where it was read from, for messages and provenance
    description: str
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    deny_reasons: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    credentials: tuple[CredentialRoute, ...] = ()
    packages: tuple[str, ...] = ()
    install: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    audit_watch: tuple[str, ...] = ()
    remote_hosts: tuple[str, ...] = ()  # forges
    marker_files: tuple[str, ...] = ()  # workflows
    command: tuple[str, ...] = ()  # harnesses
    apis: tuple[str, ...] = ()  # harnesses
    default_backend: str | None = None  # harnesses
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # harnesses: "~/x.toml" -> settings
    connect: dict[str, Connect] = field(default_factory=dict)  # harnesses: API family -> how it connects
    api: str | None = None  # backends

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


# --- the format, as data ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Section:
    kinds: tuple[str, ...]  # the manifest kinds it belongs in
    table: Table | None  # None: free-form NAME = "value" ([env])
    kind: Kind
    required_in: tuple[str, ...] = ()


def _section(kinds: tuple[str, ...], title: str, keys: dict[str, Key], required_in: tuple[str, ...] = (),
             rules: tuple[Any, ...] = ()) -> Section:
    body = Table(keys, title, rules=rules)
    kind = array_of(body) if title.startswith("[[") else table(body)
    return Section(kinds, body, kind, required_in)


def _home_file_name(path: str) -> str:
    home_file(path)
    return path


HOME_FILE = Kind("home file", "a string", (str,), _home_file_name)
SETTINGS = Kind("table", "a table of settings", (dict,))
TEMPLATED_SETTINGS = Kind("table", "a table of settings", (dict,), check_templates)
TEMPLATE = Kind("string", "a string", (str,), check_templates)


def _secret_names_hold_placeholders(values: dict[str, Any]) -> None:
    for name, text in values.get("env", {}).items():
        if _SECRETISH.search(name) and text != "{placeholder}":
            raise Invalid("looks like a secret: it may only take the placeholder",
                          'write it as "{placeholder}" (manifests hold no secrets)', ("env", name))


def _connects_to_what_it_speaks(values: dict[str, Any]) -> None:
    for api in values.get("connect", {}):
        if api not in values.get("apis", ()):
            raise Invalid(f"is for API {api}, which the harness does not speak", f"add \"{api}\" to apis, or remove it",
                          ("connect", api))


_CONNECT = Table({
    "env": Key(table_of(TEMPLATE, names=ENV_NAME), "session variables the program reads to reach the backend; "
               "{base_url} is the backend's route through dejima's proxy, {placeholder} its placeholder"),
    "files": Key(table_of(TEMPLATED_SETTINGS, names=HOME_FILE), "settings merged into files of the session's home "
                 "(\"~/.codex/config.toml\" = { openai_base_url = \"{base_url}\" }), JSON or TOML"),
}, "[harness.connect.<api>]", rules=(_secret_names_hold_placeholders,),
    build=lambda values: Connect(values.get("env", {}), values.get("files", {})))

COMMON_TOP = {
    "schema": Key(Kind("integer", "an integer", (int,)), f"the manifest format version; write schema = "
                  f"{SCHEMA_VERSION}", required=True),
    "description": Key(STR, "one line saying what this is", required=True),
}
SECTIONS: dict[str, Section] = {
    "detect": _section(("forges", "workflows"), "[detect]", {
        "remote_hosts": Key(list_of(DOMAIN), "forges: host names in git remote URLs that mean this forge"),
        "files": Key(list_of(TEXT), "workflows: file names (or simple globs) that mean this workflow, at the workspace "
                     "root or, when none is there, one folder below it (dependency, build and hidden folders "
                     "skipped)"),
    }),
    "network": _section(KINDS, "[network]", {
        "allow": Key(list_of(ALLOW_ENTRY), "egress entries the session needs: example.com, *.example.com, host:443"),
        "deny": Key(list_of(EGRESS_ENTRY), "egress entries to refuse even if allowed elsewhere"),
        "deny_reasons": Key(table_of(STR), "reason per deny entry, shown to the agent and the user"),
    }, rules=(reasons_name_denied,)),
    "env": Section(KINDS, None, table_of(STR, names=ENV_NAME)),
    "credentials": Section(KINDS, _ROUTE, array_of(_ROUTE)),
    "image": _section(KINDS, "[image]", {
        "packages": Key(list_of(TEXT), "Debian packages the session image needs"),
        "install": Key(list_of(STR), "shell lines run as root when the session image is built"),
    }),
    "caches": _section(KINDS, "[[caches]]", {
        "path": Key(ABSOLUTE_PATH, "absolute path in the session kept per project", required=True),
    }),
    "audit": _section(KINDS, "[audit]", {
        "watch": Key(list_of(WORKSPACE_PATH), "workspace paths the exit audit watches, a file or with a trailing "
                     "\"/\" a directory (everything under it): the start keeps their bytes, and a change there "
                     "that no rule of the catalogue judges is a finding (X07, docs/audit.md)"),
    }),
    "harness": _section(("harnesses",), "[harness]", {
        "command": Key(list_of(STR, non_empty=True), "argv of the agent program, e.g. [\"claude\"]", required=True),
        "apis": Key(list_of(one_of(*API_FAMILIES)), f"API families it speaks, among {', '.join(API_FAMILIES)}"),
        "default_backend": Key(KEBAB, "backend used when none is named"),
        "files": Key(table_of(SETTINGS, names=HOME_FILE), "settings merged into files of the session's home before "
                     "each session, whatever the backend: update checks off, first-run prompts answered "
                     "(\"~/.gemini/settings.json\" = { general = { enableAutoUpdate = false } }), JSON or TOML"),
        "connect": Key(table_of(table(_CONNECT), names=one_of(*API_FAMILIES)), "per API family, how the program "
                       "reaches a backend of that API when the backend's own variables are not what it reads "
                       "([harness.connect.openai] env = { CODEX_API_KEY = \"{placeholder}\" })"),
    }, required_in=("harnesses",), rules=(_connects_to_what_it_speaks,)),
    "backend": _section(("backends",), "[backend]", {
        "api": Key(one_of(*API_FAMILIES), f"the API family it speaks: one of {', '.join(API_FAMILIES)}",
                   required=True),
    }, required_in=("backends",)),
}


def _env_holds_no_secret(values: dict[str, Any]) -> None:
    placeholders = {route.placeholder_env for route in values.get("credentials", ())}
    for name, value in values.get("env", {}).items():
        if _SECRETISH.search(name) and name not in placeholders and value:
            raise Invalid("looks like a secret, and manifests hold none", "declare a [[credentials]] route with "
                          "source = { env = ... } and placeholder_env instead", ("env", name))


def _route_names_differ(values: dict[str, Any]) -> None:
    seen: dict[str, int] = {}
    for index, route in enumerate(values.get("credentials", ())):
        if route.name in seen:
            raise Invalid(f"repeats the name of credentials[{seen[route.name]}]", "give each route its own name",
                          ("credentials", index, "name"))
        seen[route.name] = index


def manifest_format(kind: str) -> Kind:
    """The top table of a ``kind`` manifest: the common keys and the sections that kind may have."""
    keys = dict(COMMON_TOP)
    elsewhere = {}
    for name, section in SECTIONS.items():
        if kind in section.kinds:
            keys[name] = Key(section.kind, f"a [{name}] section (docs/manifests.md lists its keys)",
                             required=kind in section.required_in)
        else:
            elsewhere[name] = f"[{name}] is for {', '.join(section.kinds)}"
    title = f"a {singular(kind)} manifest"
    return table(Table(keys, title, elsewhere, rules=(_env_holds_no_secret, _route_names_differ)), title)


_FORMATS = {kind: manifest_format(kind) for kind in KINDS}


def _check_version(data: dict[str, Any], source: str) -> None:
    """A manifest written for another format version says so first, whatever else it holds."""
    version = data.get("schema")
    if isinstance(version, int) and not isinstance(version, bool) and version != SCHEMA_VERSION:
        raise ManifestError(f"{source}: 'schema' is {version}, but this dejima reads schema {SCHEMA_VERSION}",
                            hint=f"upgrade dejima, or write the manifest for schema {SCHEMA_VERSION}")


def parse_manifest(text: str, kind: str, name: str, source: str) -> Manifest:
    """Parse one manifest file's text; ``source`` names it in messages."""
    if kind not in KINDS:
        raise ManifestError(f"{source}: unknown manifest kind {kind!r}", hint=f"kinds: {', '.join(KINDS)}")
    if not is_kebab(name):
        raise ManifestError(f"{source}: file name {name!r} is not kebab-case",
                            hint="name manifest files like claude-code.toml")
    data = parse_toml(text, source, ManifestError)
    _check_version(data, source)
    values = check_data(data, _FORMATS[kind], source, ManifestError)
    network, image, detect = values.get("network", {}), values.get("image", {}), values.get("detect", {})
    harness, backend = values.get("harness", {}), values.get("backend", {})
    return Manifest(
        kind=kind, name=name, source=source, description=values["description"], allow=network.get("allow", ()),
        deny=network.get("deny", ()), deny_reasons=network.get("deny_reasons", {}), env=values.get("env", {}),
        credentials=values.get("credentials", ()), packages=image.get("packages", ()),
        install=image.get("install", ()), caches=tuple(c["path"] for c in values.get("caches", ())),
        audit_watch=values.get("audit", {}).get("watch", ()), remote_hosts=detect.get("remote_hosts", ()),
        marker_files=detect.get("files", ()), command=harness.get("command", ()), apis=harness.get("apis", ()),
        default_backend=harness.get("default_backend"), files=harness.get("files", {}),
        connect=harness.get("connect", {}), api=backend.get("api"),
    )


def render_manifest_reference() -> str:
    """Markdown reference of the manifest format, generated from the declarations (docs/manifests.md)."""
    lines = ["| key | type | kinds | meaning |", "| --- | --- | --- | --- |"]
    for name, spec in COMMON_TOP.items():
        lines.append(f"| `{name}` | {spec.kind.name} | all | {spec.help} (required) |")
    for name, section in SECTIONS.items():
        where = "all" if section.kinds == KINDS else ", ".join(section.kinds)
        if section.required_in:
            where += " (section required)"
        if section.table is None:
            lines.append(f"| `[{name}]` NAME = \"value\" | string | {where} | plain, non-secret environment "
                         "variables for the session |")
            continue
        for key_name, spec in section.table.keys.items():
            required = " (required)" if spec.required else ""
            lines.append(f"| `{section.table.title}` `{key_name}` | {spec.kind.name} | {where} | "
                         f"{spec.help}{required} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class BrokenManifest:
    """A manifest file that failed its checks. It is reported when a session would use it (named
    on the command line, a harness's default backend, or detected in the workspace) and listed by
    `dejima manifests`; other sessions go on without it."""

    kind: str
    name: str
    source: str
    error: ManifestError
    # How it would be detected (workflows, forges): its own [detect] when that table is sound,
    # else the shipped manifest's it overrides; None: cannot tell, so it counts as used.
    marker_files: tuple[str, ...] | None = None
    remote_hosts: tuple[str, ...] | None = None

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def needed(self, why: str) -> ManifestError:
        """Its error, saying which session asked for it: raised instead of starting without it."""
        return ManifestError(self.error.message, context=f"this session needs {self.ref} ({why})",
                             hint=self.error.hint, reference=self.error.reference)


def detection_of(text: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(marker files, remote hosts) of a manifest that failed its checks, when its TOML parses
    and its [detect] table is sound on its own; None otherwise."""
    try:
        data = tomllib.loads(text)
        detect = SECTIONS["detect"].kind.check(data.get("detect", {}))
    except (tomllib.TOMLDecodeError, Invalid):
        return None
    return detect.get("files", ()), detect.get("remote_hosts", ())
