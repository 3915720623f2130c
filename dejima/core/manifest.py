"""Manifests: one TOML file per forge, workflow, harness or backend, parsed strictly.

The directory names the kind and the file stem the name (``harnesses/claude-code.toml``).
Every file carries ``schema = 1``. Unknown keys, wrong types and bad egress entries are errors
naming the file, the key path and the fix. Manifests hold no secrets: a credential is a *route*
(which header, which upstream, where the host keeps the secret), resolved only by the proxy.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dejima.core.egress import PolicyError, parse_entry
from dejima.errors import InputError

KINDS = ("forges", "workflows", "harnesses", "backends")
API_FAMILIES = ("anthropic", "openai", "gemini", "bedrock", "vertex", "ollama")
SCHEMES = ("Bearer", "token", "Basic", "raw")
SCHEMA_VERSION = 1
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRETISH = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)


class ManifestError(InputError):
    reference = "invalid-manifest"


@dataclass(frozen=True, slots=True)
class CredentialRoute:
    name: str
    upstream: str
    header: str
    scheme: str
    # ("env", ("VAR",)) | ("file", ("~/p",)) | ("command", argv) | ("claude_login", ("~/.claude/.credentials.json",))
    source: tuple[str, tuple[str, ...]]
    placeholder_env: str | None = None
    username: str | None = None  # Basic only: the user name sent with the token
    base_url_env: str | None = None  # session env var that takes the route's base URL (through the proxy)
    intercept: bool = False  # the upstream's host is served by the proxy's TLS fallback (tools without a base URL)


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
    api: str | None = None  # backends

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"


# --- the schema, as data ------------------------------------------------------------------------
# Each key: (type, help). Sections allowed per kind; "*" means every kind.

_STR, _INT, _STRS, _TABLE, _ARRAY_OF_TABLES = "a string", "an integer", "a list of strings", "a table", "tables"
_BOOL = "true or false"
COMMON_TOP = {"schema": (_INT, "the manifest format version; write schema = 1"),
              "description": (_STR, "one line saying what this is")}
SECTIONS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, str]]]] = {
    "detect": (("forges", "workflows"), {
        "remote_hosts": (_STRS, "forges: host names in git remote URLs that mean this forge"),
        "files": (_STRS, "workflows: file names (or simple globs) at the workspace root that mean this workflow"),
    }),
    "network": (KINDS, {
        "allow": (_STRS, "egress entries the session needs: example.com, *.example.com, host:443"),
        "deny": (_STRS, "egress entries to refuse even if allowed elsewhere"),
        "deny_reasons": (_TABLE, "reason per deny entry, shown to the agent and the user"),
    }),
    "env": (KINDS, {}),  # free-form: NAME = "value"
    "credentials": (KINDS, {
        "name": (_STR, "kebab-case name of the route"),
        "upstream": (_STR, "https:// URL of the only service the real secret may be sent to"),
        "header": (_STR, "HTTP header that carries the secret"),
        "scheme": (_STR, f"how the header is formed: one of {', '.join(SCHEMES)}"),
        "source": (_TABLE, "where the host keeps the secret: { env = \"VAR\" }, { file = \"~/path\" }, "
                   "{ command = [\"prog\", \"arg\"] } or { claude_login = \"~/.claude/.credentials.json\" } "
                   "(the host's Claude Code login, refreshed by the proxy)"),
        "placeholder_env": (_STR, "session env var that holds a placeholder instead of the secret"),
        "username": (_STR, "scheme Basic only: the user name the service expects with a token "
                     "(x-access-token, oauth2, x-token-auth…)"),
        "base_url_env": (_STR, "session env var that takes the route's base URL through dejima's proxy "
                         "(e.g. ANTHROPIC_BASE_URL); the upstream's path is kept, so an SDK that wants /v1 "
                         "in its base URL gets an upstream ending in /v1"),
        "intercept": (_BOOL, "for tools that take no base URL (gh): the session's connections to the upstream's "
                      "host end at dejima's proxy, which shows a certificate from a per-session CA the session "
                      "trusts; the upstream must be a bare https://host"),
    }),
    "image": (KINDS, {
        "packages": (_STRS, "Debian packages the session image needs"),
        "install": (_STRS, "shell lines run as root when the session image is built"),
    }),
    "caches": (KINDS, {"path": (_STR, "absolute path in the session kept per project")}),
    "audit": (KINDS, {"watch": (_STRS, "workspace-relative files the exit audit must watch")}),
    "harness": (("harnesses",), {
        "command": (_STRS, "argv of the agent program"),
        "apis": (_STRS, f"API families it speaks, among {', '.join(API_FAMILIES)}"),
        "default_backend": (_STR, "backend used when none is named"),
    }),
    "backend": (("backends",), {"api": (_STR, f"the API family it speaks: one of {', '.join(API_FAMILIES)}")}),
}
REQUIRED_SECTIONS = {"harnesses": ("harness",), "backends": ("backend",)}
ARRAY_SECTIONS = ("credentials", "caches")


def _error(source: str, key: str, problem: str, fix: str) -> ManifestError:
    return ManifestError(f"{source}: '{key}' {problem}", hint=fix)


def _type_ok(value: object, kind: str) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, dict)


def _check_table(source: str, path: str, table: dict[str, Any], keys: dict[str, tuple[str, str]]) -> None:
    for key, value in table.items():
        if key not in keys:
            close = difflib.get_close_matches(key, list(keys), n=1)
            suggestion = f"did you mean '{close[0]}'? " if close else ""
            raise _error(source, f"{path}.{key}", "is not a known key",
                         f"{suggestion}known keys in [{path}]: {', '.join(keys)}")
        kind, help_text = keys[key]
        if not _type_ok(value, kind):
            raise _error(source, f"{path}.{key}", f"must be {kind}, not {type(value).__name__} {value!r}",
                         f"{path}.{key}: {help_text}")


def _entries(source: str, path: str, values: list[str]) -> tuple[str, ...]:
    for index, text in enumerate(values):
        try:
            parse_entry(text, f"{source}: '{path}[{index}]'")
        except PolicyError as exc:
            raise ManifestError(exc.message, hint=exc.hint) from exc
    return tuple(values)


def _credential(source: str, index: int, table: dict[str, Any]) -> CredentialRoute:
    path = f"credentials[{index}]"
    _check_table(source, path, table, SECTIONS["credentials"][1])
    for key in ("name", "upstream", "header", "scheme", "source"):
        if key not in table:
            raise _error(source, f"{path}.{key}", "is missing", f"{path}.{key}: {SECTIONS['credentials'][1][key][1]}")
    if not _NAME.match(table["name"]):
        raise _error(source, f"{path}.name", f"must be kebab-case, not {table['name']!r}",
                     "e.g. name = \"github-token\"")
    if not table["upstream"].startswith("https://"):
        raise _error(source, f"{path}.upstream", f"must be an https:// URL, not {table['upstream']!r}",
                     "secrets only travel to their service over TLS")
    if table["scheme"] not in SCHEMES:
        raise _error(source, f"{path}.scheme", f"must be one of {', '.join(SCHEMES)}, not {table['scheme']!r}",
                     "raw means the header value is the secret itself (e.g. x-api-key)")
    where = table["source"]
    if len(where) != 1 or next(iter(where)) not in ("env", "file", "command", "claude_login"):
        raise _error(source, f"{path}.source",
                     f"must name exactly one of env, file, command or claude_login, not {where!r}",
                     "e.g. source = { env = \"GITHUB_TOKEN\" }")
    (how, what), = where.items()
    if how == "command":
        if not (isinstance(what, list) and what and all(isinstance(w, str) for w in what)):
            raise _error(source, f"{path}.source.command", "must be a non-empty list of strings",
                         "e.g. command = [\"gh\", \"auth\", \"token\"]")
        value: tuple[str, ...] = tuple(what)
    else:
        if not isinstance(what, str) or not what:
            raise _error(source, f"{path}.source.{how}", "must be a non-empty string", f"the host {how} to read")
        value = (what,)
    placeholder, base_url_env = table.get("placeholder_env"), table.get("base_url_env")
    for key, name in (("placeholder_env", placeholder), ("base_url_env", base_url_env)):
        if name is not None and not _ENV.match(name):
            raise _error(source, f"{path}.{key}", f"is not an environment variable name: {name!r}",
                         "letters, digits and '_', not starting with a digit")
    username = table.get("username")
    if username is not None and (table["scheme"] != "Basic" or not username or ":" in username):
        raise _error(source, f"{path}.username", "only goes with scheme = \"Basic\", non-empty and without ':'",
                     "remove it, or set scheme = \"Basic\"")
    intercept = table.get("intercept", False)
    if intercept and urlsplit(table["upstream"]).path not in ("", "/"):
        raise _error(source, f"{path}.intercept", f"needs an upstream without a path, not {table['upstream']!r}",
                     "an intercepted tool sends its own paths: write upstream = \"https://host\"")
    return CredentialRoute(table["name"], table["upstream"], table["header"], table["scheme"], (how, value),
                           placeholder, username, base_url_env, intercept)


def _env(source: str, table: dict[str, Any], credentials: tuple[CredentialRoute, ...]) -> dict[str, str]:
    placeholders = {c.placeholder_env for c in credentials}
    env: dict[str, str] = {}
    for key, value in table.items():
        if not _ENV.match(key):
            raise _error(source, f"env.{key}", "is not an environment variable name",
                         "letters, digits and '_', not starting with a digit")
        if not isinstance(value, str):
            raise _error(source, f"env.{key}", f"must be a string, not {type(value).__name__} {value!r}",
                         f'write {key} = "{value}"')
        if _SECRETISH.search(key) and key not in placeholders and value:
            raise _error(source, f"env.{key}", "looks like a secret, and manifests hold none",
                         "declare a [[credentials]] route with source = { env = ... } and placeholder_env instead")
        env[key] = value
    return env


def parse_manifest(text: str, kind: str, name: str, source: str) -> Manifest:
    """Parse one manifest file's text; ``source`` names it in messages."""
    if kind not in KINDS:
        raise ManifestError(f"{source}: unknown manifest kind {kind!r}", hint=f"kinds: {', '.join(KINDS)}")
    if not _NAME.match(name):
        raise ManifestError(f"{source}: file name {name!r} is not kebab-case",
                            hint="name manifest files like claude-code.toml")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML: {exc}", hint="fix the syntax at that line") from exc
    for key, value in data.items():
        if key in COMMON_TOP:
            continue
        if key not in SECTIONS:
            known = list(COMMON_TOP) + [s for s, (kinds, _) in SECTIONS.items() if kind in kinds]
            close = difflib.get_close_matches(key, known, n=1)
            raise _error(source, key, "is not a known key or section",
                         (f"did you mean '{close[0]}'? " if close else "") + f"known: {', '.join(known)}")
        kinds, _keys = SECTIONS[key]
        if kind not in kinds:
            raise _error(source, key, f"does not belong in a {kind[:-1] if kind != 'harnesses' else 'harness'} "
                         "manifest", f"[{key}] is for {', '.join(kinds)}")
        is_array = key in ARRAY_SECTIONS
        if is_array != isinstance(value, list):
            raise _error(source, key, "must be written " + ("[[%s]] (an array of tables)" % key if is_array
                                                            else f"[{key}] (a table)"), "see docs/manifests.md")
    for key, (expected, help_text) in COMMON_TOP.items():
        if key not in data:
            raise _error(source, key, "is missing", f"add {key}: {help_text}")
        if not _type_ok(data[key], expected):
            raise _error(source, key, f"must be {expected}", help_text)
    if data["schema"] != SCHEMA_VERSION:
        raise _error(source, "schema", f"is {data['schema']}, but this dejima reads schema {SCHEMA_VERSION}",
                     "upgrade dejima, or write the manifest for schema 1")
    for section in REQUIRED_SECTIONS.get(kind, ()):
        if section not in data:
            raise _error(source, section, "is missing", f"a {kind} manifest needs a [{section}] section")
    for section in ("detect", "network", "image", "audit", "harness", "backend"):
        if section in data:
            _check_table(source, section, data[section], SECTIONS[section][1])
    network = data.get("network", {})
    allow = _entries(source, "network.allow", network.get("allow", []))
    deny = _entries(source, "network.deny", network.get("deny", []))
    reasons = network.get("deny_reasons", {})
    for entry, reason in reasons.items():
        if entry not in deny or not isinstance(reason, str):
            raise _error(source, f"network.deny_reasons.{entry}", "must be a reason (string) for an entry in "
                         "network.deny", "add the entry to network.deny, or remove the reason")
    credentials = tuple(_credential(source, i, t) for i, t in enumerate(data.get("credentials", [])))
    names = [c.name for c in credentials]
    if len(set(names)) != len(names):
        raise _error(source, "credentials", "has two routes with the same name", "give each route its own name")
    caches = []
    for index, table in enumerate(data.get("caches", [])):
        _check_table(source, f"caches[{index}]", table, SECTIONS["caches"][1])
        path = table.get("path", "")
        if not path.startswith("/"):
            raise _error(source, f"caches[{index}].path", f"must be an absolute path, not {path!r}",
                         "e.g. path = \"/home/dejima/.cache/pip\"")
        caches.append(path)
    watch = data.get("audit", {}).get("watch", [])
    for index, path in enumerate(watch):
        if path.startswith("/") or ".." in path.split("/"):
            raise _error(source, f"audit.watch[{index}]", f"must be a path inside the workspace, not {path!r}",
                         "write it relative to the workspace root")
    harness = data.get("harness", {})
    backend = data.get("backend", {})
    for api in (*harness.get("apis", []), *([backend["api"]] if "api" in backend else [])):
        if api not in API_FAMILIES:
            raise _error(source, "harness.apis" if kind == "harnesses" else "backend.api",
                         f"names an unknown API family {api!r}", f"known: {', '.join(API_FAMILIES)}")
    if kind == "harnesses" and not harness.get("command"):
        raise _error(source, "harness.command", "is missing or empty", "the argv of the agent, e.g. [\"claude\"]")
    if kind == "backends" and "api" not in backend:
        raise _error(source, "backend.api", "is missing", f"one of {', '.join(API_FAMILIES)}")
    detect = data.get("detect", {})
    return Manifest(
        kind=kind, name=name, source=source, description=data["description"], allow=allow, deny=deny,
        deny_reasons=dict(reasons), env=_env(source, data.get("env", {}), credentials), credentials=credentials,
        packages=tuple(data.get("image", {}).get("packages", [])),
        install=tuple(data.get("image", {}).get("install", [])), caches=tuple(caches), audit_watch=tuple(watch),
        remote_hosts=tuple(h.lower() for h in detect.get("remote_hosts", [])),
        marker_files=tuple(detect.get("files", [])), command=tuple(harness.get("command", [])),
        apis=tuple(harness.get("apis", [])), default_backend=harness.get("default_backend"),
        api=backend.get("api"),
    )


def render_manifest_reference() -> str:
    """Markdown reference of the manifest format, generated from the schema above (docs/manifests.md)."""
    lines = ["| key | type | kinds | meaning |", "| --- | --- | --- | --- |"]
    for key, (kind, help_text) in COMMON_TOP.items():
        lines.append(f"| `{key}` | {kind} | all | {help_text} (required) |")
    for section, (kinds, keys) in SECTIONS.items():
        where = "all" if kinds == KINDS else ", ".join(kinds)
        header = f"[[{section}]]" if section in ARRAY_SECTIONS else f"[{section}]"
        if not keys:
            lines.append(f"| `{header}` NAME = \"value\" | string | {where} | plain, non-secret environment "
                         "variables for the session |")
        for key, (kind, help_text) in keys.items():
            lines.append(f"| `{header}` `{key}` | {kind} | {where} | {help_text} |")
    return "\n".join(lines) + "\n"
