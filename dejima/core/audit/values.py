"""Named tests on a config value, used by the catalogue's KeyRules (``when=``): they say whether a
changed key is dangerous as set (a path instead of a version, a registry other than the default,
an auto-run trigger), so ordinary edits stay quiet."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

from dejima.core.audit.model import View, resolve

_FALSE = {"false", "0", "off", "no", "", "[]", "{}", "null", "never"}
_REGISTRY_SPEC = re.compile(r"^(?:git\+|git:|github:|gitlab:|bitbucket:|gist:|file:|link:|portal:|patch:|https?:|"
                            r"npm:|[\w.-]+/[\w.-]+(?:#|$))", re.IGNORECASE)
_NPM_REGISTRIES = {"registry.npmjs.org", "registry.yarnpkg.com", "registry.npmjs.com"}
_JVM_HOOKS = re.compile(r"-javaagent|-agentpath|-agentlib|OnOutOfMemoryError|-XX:OnError", re.IGNORECASE)
_PLUGIN_OPTION = re.compile(r"(?:^|\s)(?:-p\s*\S|--plugins?\b|-p\s*\Z)")
_INSTALL_OPTION = re.compile(r"^\s*(?:-i\b|--index-url|--extra-index-url|--trusted-host|--find-links|-f\b|-e\b|"
                             r"--editable|-r\b|--requirement|-c\b|--constraint|--pre\b|--no-binary|"
                             r"\S*(?:://|@\s*(?:git\+|https?:|file:))|\.{0,2}/)")


def _host(value: str) -> str:
    try:
        return (urlsplit(value.strip()).hostname or "").lower()
    except ValueError:
        return "?"


def _path_like(value: str, view: View, where: str) -> bool:
    return "/" in value or "\\" in value or ".." in value or value.strip().startswith("~")


def _changed_file(value: str, view: View, where: str) -> bool:
    """The value names a file that the session created or changed (research C4)."""
    return bool(referenced_changes(value, view, where))


_PATH_CHARS = re.compile(r"[\w${}.~/+-]+")


def path_tokens(text: str) -> list[str]:
    r"""The runs of path characters in ``text`` that hold a '.' or '/' before their last character
    (what ``[\w${}.~/+-]*[./][\w${}.~/+-]+`` finds, without its backtracking: that pattern tries every
    split of a long run, which costs the square of the run's length)."""
    return [run for run in _PATH_CHARS.findall(text) if "." in run[:-1] or "/" in run[:-1]]


def referenced_changes(value: str, view: View, base_dir: str) -> list[str]:
    """Paths this session created or changed that a config value points at, resolved from the
    config file's directory or the mount root (`${workspaceFolder}`, `./x`, `x/y`)."""
    found = []
    for token in dict.fromkeys(path_tokens(value)):  # each once: a text of one token repeated is one lookup
        token = token.replace("${workspaceFolder}", "").replace("${workspaceRoot}", "").lstrip("/")
        for base in dict.fromkeys((base_dir, "")):
            target = resolve(base, token)
            if target and target in view.changed and target not in found:
                found.append(target)
    return found


VALUE_TESTS: dict[str, Callable[[str, View, str], bool]] = {
    "not-default": lambda v, view, where: v.strip().lower() not in ("default", ""),
    "not-false": lambda v, view, where: v.strip().lower() not in _FALSE,
    "path-like": _path_like,
    "changed-file": _changed_file,
    "non-registry": lambda v, view, where: bool(_REGISTRY_SPEC.match(v.strip())),
    "foreign-registry": lambda v, view, where: _host(v) not in _NPM_REGISTRIES,
    "foreign-gradle": lambda v, view, where: _host(v.replace("\\:", ":")) != "services.gradle.org",
    "foreign-model-url": lambda v, view, where: v.strip().lower().startswith(("http://", "https://")) and not
    re.search(r"(^|\.)(anthropic\.com|amazonaws\.com|googleapis\.com|openai\.com)\Z|^(localhost|127\.0\.0\.1)\Z",
              _host(v)),
    "remote-url": lambda v, view, where: v.strip().lower().startswith(("http://", "https://")),
    "jvm-hook": lambda v, view, where: bool(_JVM_HOOKS.search(v)),
    "plugin-option": lambda v, view, where: bool(_PLUGIN_OPTION.search(v)),
    "install-option": lambda v, view, where: bool(_INSTALL_OPTION.match(v)),
    "exec-spec": lambda v, view, where: any(w.startswith(("path:", "ref:")) for w in v.split()),
    "host-path": lambda v, view, where: bool(re.match(r"^\s*(/|~|\$HOME|\$\{HOME\}|[^:]*docker\.sock)", v)),
}
