"""A Python environment or install target verified against what uv.lock pinned before the session
(research B07, B10; issue 32), or the requirements files beside it with ``--hash`` pins.

``uv.lock`` as the session's start kept it pins each distribution by the SHA-256 of its wheels (a
hashed requirements file by the SHA-256 of each of its artifacts); a wheel counts only when its
bytes hash to the pin (the adapter, dejima/adapters/wheel_cache.py,
checks), or when it is the host user's own uv cache, which the session cannot write, that records
that hash for the archive it unpacked. An installer writes a wheel's files as the wheel holds them,
so every file the session wrote in a distribution is compared with the wheel's entry for it:

- a file whose content is not the wheel's, a file the wheel does not hold (a RECORD may list it:
  RECORD is written in the tree too), a distribution the lockfile does not pin, an entry-point
  script that is not what pip or uv writes for the entry point the wheel declares, a script whose
  ``#!`` is not the environment's interpreter: each named (high);
- what cannot be verified: no pins at the start, a distribution pinned anew in the session, a
  pin without a hash, a wheel in no cache, the project itself (built from the workspace),
  bytecode that does not recompile to the same bytes here (a seed's: only one the record lacks or
  that cannot be read): said so (medium), with what would verify it.

What an installer generates is treated as such: RECORD, INSTALLER, REQUESTED, direct_url.json and
uv_cache.json are data no start runs (not compared); entry-point scripts are rebuilt from the
wheel's entry_points.txt and compared; ``.data/scripts`` are compared after the ``#!python``
rewrite; a ``__pycache__/*.pyc`` is compiled again from its verified source with this Python and
compared byte for byte (another Python's bytecode cannot be: medium).

An environment's own files are held to the session image's record of what its own tools write
(venv_facts.py, ``View.python``), whatever pins the environment: ``pyvenv.cfg``'s keys (``home``
decides which Python runs: the image's interpreter's directory, or high), each of ``activate*``,
``Activate.ps1``, ``.gitignore`` (uv's too) equal to its template rendered for the environment's
path in the session and its prompt, the interpreter links; the pip and setuptools ``python -m
venv`` installs (ensurepip) held to the seed wheels the record holds, as any pinned distribution,
and the bytecode ensurepip compiled (no ``PIP_`` variable reaches it) to the record's: each ``.pyc``
by its path below site-packages as ``bytecode_form`` reads it (read, not loaded: whatever the host's
Python), equal or high; one the record lacks is compiled again here, one not read is medium.
What differs is high, named; no record, a tool or version the record lacks, a path or prompt a
shell would need quoted, an interpreter copied (``--copies``): medium, saying so. Never accepted by
name alone where a record could say.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import posixpath
import re
import sys
import tomllib
from dataclasses import dataclass, field

from dejima.core.audit.installs import joined, record_entries
from dejima.core.audit.model import Artifact, Finding, View, first_few
from dejima.core.audit.pinned import TreeVerdict, tree_finding
from dejima.core.audit.venv_facts import (
    SessionPython,
    Tool,
    config_problems,
    parse_config,
    prompt_of,
    render,
    seed,
    tool_of,
)
from dejima.core.snapshot import Change

LOCKFILE = "uv.lock"
CLEAN_INSTALL = "uv sync --reinstall"
# Written by the installer beside the wheel's own dist-info files: data no start runs.
_GENERATED = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json"})
# What `python -m venv` installs itself (ensurepip), pinned by no lockfile.
_SEEDS = frozenset({"pip", "setuptools", "wheel"})
_CONTENT = ("added", "modified", "type", "link-target")
_SITE = re.compile(r"(?:^|/)(?:lib/(?:python|pypy)[\d.]+t?|Lib)/site-packages(?=/)")
_SHEBANG = re.compile(r"#!(/[^\s'\"\\$`;|&<>()*?]*/bin/(?:python|pypy)[\d.]*)\n"
                      # the form pip and uv write for a path too long for #! or with a space in it
                      r"|#!/bin/sh\n'''exec' (['\"])(/[^'\"\\$`]*/bin/(?:python|pypy)[\d.]*)"
                      r"\2 \"\$0\" \"\$@\"\n' '''\n")
_PIP_SCRIPT, _EASY_INSTALL_SCRIPT = re.compile(r"pip\d+(?:\.\d+)?"), re.compile(r"easy_install-\d+\.\d+")
_ENTRY = re.compile(r"\s*([\w.]+)\s*:\s*([\w.]+)\s*(?:\[.*\])?\s*")
# The body of an entry-point script after its #! line, as each installer writes it: pip with
# distlib's template (pip < 24.1), pip's own, uv's. Filled with module, import name, function.
_SCRIPTS = (
    "# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom {module} import {name}\nif __name__ == '__main__':\n"
    "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit({func}())\n",
    "import sys\nfrom {module} import {name}\nif __name__ == '__main__':\n"
    "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit({func}())\n",
    "# -*- coding: utf-8 -*-\nimport sys\nfrom {module} import {name}\nif __name__ == \"__main__\":\n"
    "    if sys.argv[0].endswith(\"-script.pyw\"):\n        sys.argv[0] = sys.argv[0][:-11]\n"
    "    elif sys.argv[0].endswith(\".exe\"):\n        sys.argv[0] = sys.argv[0][:-4]\n    sys.exit({func}())\n",
)


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    """One distribution as a lockfile pins it: version and each wheel's (sha256 hex, where it is:
    ``url:...`` or ``path:<mount-relative>``); ``local``: the project itself (editable, virtual,
    a directory), which no hash pins."""

    version: str
    wheels: tuple[tuple[str, str], ...] = ()
    local: bool = False
    unhashed: bool = False  # a wheel or sdist without a hash


# uv.lock texts parsed, by (text, directory): the start's are parsed while the session runs
# (exit_audit.start), so that the end audit, in its forked stages too, finds them parsed (~30 ms each).
_PARSED: dict[tuple[str, str], dict[str, Pin] | None] = {}
_PARSED_MOST = 8
_NOT_PARSED: dict[str, Pin] = {}


def uv_pins(text: str | None, directory: str) -> dict[str, Pin] | None:
    """name -> pin from uv.lock's ``[[package]]`` entries (None when it is not one); ``directory``:
    the lockfile's, mount-relative (a path wheel is relative to its registry, and it to the lockfile)."""
    if text is None:
        return None
    key = (text, directory)
    pins = _PARSED.get(key, _NOT_PARSED)  # one lookup: another thread may clear it meanwhile
    if pins is _NOT_PARSED:
        pins = _uv_pins(text, directory)
        if len(_PARSED) >= _PARSED_MOST:
            _PARSED.clear()
        _PARSED[key] = pins
    return None if pins is None else dict(pins)  # the caller's own: the parsed one is kept unchanged


def _uv_pins(text: str, directory: str) -> dict[str, Pin] | None:
    try:
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    packages = document.get("package") if isinstance(document, dict) else None
    if not isinstance(packages, list):
        return None
    pins: dict[str, Pin] = {}
    for package in packages:
        if not isinstance(package, dict) or not isinstance(package.get("name"), str):
            continue
        source: dict[str, object] = package["source"] if isinstance(package.get("source"), dict) else {}
        local = any(key in source for key in ("editable", "virtual", "directory"))
        wheels, unhashed = [], False
        for wheel in package.get("wheels", []) if isinstance(package.get("wheels"), list) else []:
            digest = str(wheel.get("hash", "")) if isinstance(wheel, dict) else ""
            if not digest.startswith("sha256:"):
                unhashed = True
                continue
            if isinstance(wheel.get("url"), str):
                wheels.append((digest[7:], f"url:{wheel['url']}"))
            elif isinstance(wheel.get("path"), str) and isinstance(registry := source.get("registry"), str):
                where = posixpath.normpath(posixpath.join(directory, registry, wheel["path"]))
                wheels.append((digest[7:], f"path:{where}"))
            elif isinstance(path := source.get("path"), str) and path.endswith(".whl"):  # a wheel in the project
                wheels.append((digest[7:], f"path:{posixpath.normpath(posixpath.join(directory, path))}"))
            else:
                wheels.append((digest[7:], ""))
        _add(pins, normalize(package["name"]), Pin(str(package.get("version", "")), tuple(wheels), local, unhashed))
    return pins


def _add(pins: dict[str, Pin], name: str, pin: Pin) -> None:
    """A pin by ``name==version`` (uv.lock holds one entry per version a resolution fork needs) and by
    ``name`` (the first: what a version that is none of them is told against)."""
    pins[f"{name}=={pin.version}"] = pin
    pins.setdefault(name, pin)


WHEEL_PREFIX = "wheel "  # the start of every request for a wheel (pinned_archives.joined routes by it)


def wheel_key(digest: str, where: str) -> str:
    """What the audit asks the wheel reader for (model.Artifacts): ``wheel <sha256 hex> <where>``."""
    return f"{WHEEL_PREFIX}{digest} {where}".rstrip()


def parse_wheel_key(key: str) -> tuple[str, str] | None:
    """(sha256 hex, where) of a ``wheel_key``; None for any other request (npm's integrities)."""
    kind, _, rest = key.partition(" ")
    digest, _, where = rest.partition(" ")
    return (digest, where) if kind == "wheel" and re.fullmatch(r"[0-9a-f]{64}", digest) else None


def _lockfile(environment: str, view: View) -> str | None:
    """The uv.lock beside the environment (uv's own ``.venv``, a workspace's at its root), at the
    start or the end. One in a directory above pins another environment: tox's and nox's install
    what their own configuration names."""
    directory = environment.rpartition("/")[0]
    path = f"{directory}/{LOCKFILE}" if directory else LOCKFILE
    return path if path in view.before or path in view.after else None


@dataclass
class _Distribution:
    name: str
    version: str
    site: str  # the site-packages (or install target) its dist-info is in
    info: str  # its .dist-info directory
    files: list[tuple[str, str | None]] = field(default_factory=list)  # (path, sha256) the session wrote


def _distributions(environment: str, changes: list[Change], view: View) -> tuple[dict[str, _Distribution],
                                                                                 list[Change]]:
    """The distributions whose files the session wrote (by the RECORDs at the end, or the
    dist-info directory a file is in), and the written files none claims."""
    owners: dict[str, str] = {}  # path -> dist-info directory
    infos: dict[str, _Distribution] = {}
    for record in view.named("RECORD"):
        info = record.rpartition("/")[0]
        if not record.startswith(environment + "/") or not info.endswith(".dist-info"):
            continue
        site = info.rpartition("/")[0]
        name, _, version = info.rpartition("/")[2][:-len(".dist-info")].partition("-")
        infos[info] = _Distribution(normalize(name), version, site, info)
        for path, _ in record_entries(record, site, environment, view):
            owners.setdefault(path, info)
    found: dict[str, _Distribution] = {}
    unclaimed: list[Change] = []
    for change in changes:
        new = change.after
        if new is None or change.what not in _CONTENT or new.kind == "dir":
            continue
        info = owners.get(change.path) or owners.get(_source(change.path)) or \
            next((i for i in infos if change.path.startswith(i + "/")), "")
        if not info:
            unclaimed.append(change)
            continue
        distribution = found.setdefault(info, infos[info])
        distribution.files.append((change.path, new.sha256 if new.kind == "file" else None))
    return found, unclaimed


def _source(path: str) -> str:
    """The source a ``__pycache__/NAME.TAG.pyc`` is compiled from (``NAME.py`` beside the directory)."""
    directory, marker, name = path.rpartition("/__pycache__/")
    return f"{directory}/{name.partition('.')[0]}.py" if marker and name.endswith(".pyc") else ""


# What venv, virtualenv, uv and tox write in an environment outside every distribution, exactly
# (installs.py accepts these names as prefixes; here a bin/python-helper is no interpreter): accepted
# by name only where the session image's record cannot say what they hold (said, medium).
_ENVIRONMENT_FILES = re.compile(
    r"(?:pyvenv\.cfg|\.gitignore|\.lock|CACHEDIR\.TAG|\.tox-info\.json|log/[^/]+|lib64"
    r"|bin/(?:activate(?:\.(?:csh|fish|ps1|bat|nu|xsh))?|Activate\.ps1|activate_this\.py|deactivate(?:\.bat|\.nu)?"
    r"|pydoc(?:\.bat)?|(?:python|pypy)[\d.]*w?)"
    r"|(?:lib/(?:python|pypy)[\d.]+t?|Lib)/site-packages/(?:_virtualenv\.(?:py|pth)|[^/]+\.virtualenv))")
_INTERPRETER = re.compile(r"(?:python|pypy)[\d.]*")


def rewritten_as_made(environment: str, change: Change, view: View) -> bool:
    """Whether a start-up file of an environment that was there (``activate*``, ``pyvenv.cfg``) is,
    after the change, exactly what the session image's tool writes for this environment, as
    ``python3 -m venv .venv`` run again on it rewrites them: judged with the rest of the
    environment then, not as start-up code changed."""
    verdict = TreeVerdict("")
    own = _OwnFiles(environment, verdict, view)
    if own.tool is None or own.why:
        return False
    return own.judge(change) and own.checked == 1 and not verdict.problems and not verdict.unverified


class _OwnFiles:
    """An environment's own files held to what the tool that made it writes, as the session image's
    record has it (venv_facts.py): pyvenv.cfg's keys, each template rendered for this environment,
    the interpreter links; and the seed wheels ensurepip installed."""

    def __init__(self, environment: str, verdict: TreeVerdict, view: View) -> None:
        self.environment, self.verdict, self.view = environment, verdict, view
        self.tool: Tool | None = None
        self.checked, self.unchecked, self.seen = 0, [], set()  # type: int, list[str], set[str]
        python = view.python if isinstance(view.python, SessionPython) else None
        self.config = f"{environment}/pyvenv.cfg"
        self.keys, self.wrong = parse_config(view.text(self.config) or "")
        self.why = ""
        if python is None or python.facts is None:
            self.why = "the session image's record of what its python3 -m venv writes is missing (dejima makes " \
                "it when it builds the image; `dejima images build` makes it for an image built before)"
            return
        tool, self.why = tool_of(python.facts, self.keys)
        if tool is None:
            return
        self.problems, other = config_problems(tool, self.keys, self.wrong)
        self.directory = f"{python.root.rstrip('/')}/{environment}"
        self.prompt = prompt_of(tool, self.keys)
        self.templates = tool.prompted if self.prompt is not None else tool.plain
        if other:
            self.why = f"{other}, whose own files the session image's record does not hold"
        elif render("", self.directory, self.prompt) is None:
            self.why = f"its path ({self.directory}) or prompt needs quoting in a shell, which the session image's " \
                "record does not say how its tools do"
        self.tool = tool  # its pyvenv.cfg is the recorded tool's (what differs is named, high)

    def judge(self, change: Change) -> bool:
        """Whether ``change`` is one of the environment's own files (judged here)."""
        relative = change.path[len(self.environment) + 1:]
        new = change.after
        tool = self.tool
        if change.path in self.seen:
            return True
        self.seen.add(change.path)
        if tool is None or self.why:
            if not _ENVIRONMENT_FILES.fullmatch(relative):
                return False
            if relative == "pyvenv.cfg" and tool is not None:
                self.verdict.problems.extend(f"{change.path}: {problem}" for problem in self.problems)
            self.unchecked.append(change.path)
            return True
        if relative == "pyvenv.cfg":
            self.verdict.problems.extend(f"{change.path}: {problem}" for problem in self.problems)
            self.checked += not self.problems
            return True
        if new is not None and new.kind == "symlink" and relative in tool.links:
            target = new.target or ""
            home = tool.config.get("home", "")
            name = target.removeprefix(f"{home}/") if relative.startswith("bin/") else ""
            if target == tool.links[relative] or _INTERPRETER.fullmatch(name):
                self.checked += 1
            else:
                self.verdict.problems.append(f"{change.path}: a link to {target[:80]}, where {tool.label} links "
                                             f"{tool.links[relative]}")
            return True
        if relative == ".lock" and tool.name == "uv" and new is not None and new.kind == "file" and not new.size:
            self.checked += 1  # uv's lock on the environment while it installs: empty
            return True
        if new is not None and new.kind == "file" and relative in tool.links:
            self.verdict.unverified.append(f"{change.path}: a copy of the interpreter (python -m venv --copies), "
                                           "which the session image's record does not hold")
            return True
        if relative not in self.templates:
            return False
        expected = render(self.templates[relative], self.directory, self.prompt)
        if new is not None and new.kind == "file" and expected is not None and \
                self.view.data(change.path) == expected.encode("utf-8", "surrogateescape"):
            self.checked += 1
        else:
            self.verdict.problems.append(f"{change.path}: not what {tool.label} writes in this environment")
        return True

    def seed(self, distribution: _Distribution) -> tuple[Pin | None, str]:
        """The pin of a distribution ensurepip installs (the record's seed wheel), or why there is none."""
        if self.tool is None or self.why:
            return None, f"{distribution.name} as `python -m venv` installs it (ensurepip), which no lockfile pins " \
                "and the session image's record cannot verify here (its own files say why)"
        wheel = seed(self.tool, distribution.name)
        if wheel is None or wheel.version != distribution.version:
            return None, f"{distribution.name} {distribution.version}, which no lockfile pins and which is not " \
                f"the one {self.tool.label} seeds" + (f" ({wheel.version})" if wheel is not None else "")
        return Pin(wheel.version, ((wheel.sha256, SEED),)), ""

    def seeds(self) -> dict[str, Artifact | str]:
        tool = self.tool
        return {wheel_key(s.sha256, SEED): s.artifact for s in tool.seeds} if tool is not None and not self.why else {}

    def bytecode(self, wheel: Artifact) -> dict[str, str]:
        """The record's bytecode (path below site-packages -> bytecode_form) where ``wheel`` is a seed
        wheel of the record: what the image's Python compiled from that wheel's files; else none."""
        tool = self.tool
        seeded = tool is not None and not self.why and any(s.artifact == wheel for s in tool.seeds)
        return tool.bytecode if tool is not None and seeded else {}

    def close(self) -> str:
        """What is left unverified, said (medium); the lead of a finding that verified them."""
        if self.unchecked:
            self.verdict.unverified.append(f"{len(self.unchecked)} of the environment's own file(s) "
                                           f"({first_few(sorted(self.unchecked), 3)}) not verified: {self.why}")
        if self.checked and self.tool is not None:
            return f"its own files ({self.checked}) are what the session image's {self.tool.label} writes; "
        return ""


SEED = "seed:"  # where a seed wheel is: the session image's record
SEEDED = "the wheels ensurepip seeds in the session image"  # what an environment no lockfile pins is held to


def _unclaimed(kind: str, environment: str, unclaimed: list[Change], verdict: TreeVerdict, view: View,
               own: _OwnFiles | None) -> None:
    """The files no distribution claims: the environment's own (``own``: judged there), bytecode of a
    source here that recompiles to it; a sourceless ``.pyc`` outside ``__pycache__`` (Python imports it
    as a module) and any other file are what no install makes."""
    for change in unclaimed:
        path = change.path
        source = _source(path)
        if own is not None and own.judge(change):
            continue
        if source:
            data, code = view.data(path), view.data(source)
            if data is None or code is None or not recompiles(data, code, source[len(environment):]):
                verdict.unverified.append(f"{path}: bytecode of a file no distribution installs, which does not "
                                          "recompile to the same bytes here: delete it")
        elif path.endswith(".pyc"):
            verdict.problems.append(f"{path}: bytecode no distribution installs (Python imports it as a module)")
        else:
            verdict.problems.append(f"{path}: a file no distribution installs and no environment tool writes")


def requirement_pins(text: str | None) -> dict[str, Pin] | None:
    """name -> pin from a requirements file's ``name==version --hash=sha256:...`` lines (pip's
    hash-checking mode, ``uv export``, ``pip-compile --generate-hashes``); None when none has a hash."""
    pins: dict[str, Pin] = {}
    for line in re.sub(r"\\\r?\n", " ", text or "").splitlines():
        line = re.sub(r"(?:^|\s)#.*", "", line)
        match = _REQUIREMENT.match(line)
        hashes = _HASH.findall(line)
        if match and hashes:
            name = normalize(match.group(1))
            _add(pins, name, Pin(match.group(2), tuple((h.lower(), f"name:{name}") for h in hashes)))
    return pins or None


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;,]+)")
_HASH = re.compile(r"--hash[=\s]+sha256:([0-9a-fA-F]{64})\b")
_REQUIREMENTS = re.compile(r"requirements[\w.-]*\.txt")


def _lockfiles(environment: str, view: View) -> list[str]:
    """What pins the environment: a uv.lock beside it, else the requirements files beside it
    (``requirements*.txt`` in its directory: the project's), at the start or the end."""
    if (lockfile := _lockfile(environment, view)) is not None:
        return [lockfile]
    project = environment.rpartition("/")[0]
    prefix = f"{project}/" if project else ""
    return sorted(f"{prefix}{name}" for name in view.siblings(project) if _REQUIREMENTS.fullmatch(name))


def _pins(lockfiles: list[str], view: View, side: str) -> dict[str, Pin] | None:
    if len(lockfiles) == 1 and lockfiles[0].rpartition("/")[2] == LOCKFILE:
        return uv_pins(view.text(lockfiles[0], side), lockfiles[0].rpartition("/")[0])
    pins: dict[str, Pin] = {}
    for lockfile in lockfiles:
        pins.update(requirement_pins(view.text(lockfile, side)) or {})
    return pins or None


def verify(kind: str, environment: str, changes: list[Change], view: View) -> tuple[TreeVerdict, bool, str] | None:
    """The session's changes in an environment held to the pins at the start (uv.lock, or
    requirements files with hashes), its own files to the session image's record, whether there were
    pins, and what its own files were found to be; None where nothing is verified this way (conda,
    the session's home: its lockfile is the workspace's)."""
    if kind not in ("python", "python-target") or view.kind != "workspace":
        return None
    lockfiles = _lockfiles(environment, view)
    start = _pins(lockfiles, view, "before")
    pinning = [lockfile for lockfile in lockfiles if lockfile in view.before] if start is not None else lockfiles
    verdict = TreeVerdict(" and ".join(pinning) or LOCKFILE)
    distributions, unclaimed = _distributions(environment, changes, view)
    own = _OwnFiles(environment, verdict, view) if kind == "python" else None
    if start is None:
        # The seeds ensurepip installed are held to the record's wheels all the same; the rest to nothing.
        seeded = {info: d for info, d in distributions.items() if own is not None and d.name in _SEEDS}
        if len(seeded) < len(distributions):
            verdict.unverified.append(f"no {LOCKFILE} or requirements file with --hash pins was there at the "
                                      "session's start (one committed before the session would pin every wheel "
                                      "by its hash)")
        if own is None:
            return verdict, False, ""
        _unclaimed(kind, environment, unclaimed, verdict, view, own)
        verdict.lockfile, verdict.pinned = SEEDED, False
        _EnvironmentCheck(verdict, kind, environment, {}, {}, view, own).run(seeded)
        return verdict, False, own.close()
    _unclaimed(kind, environment, unclaimed, verdict, view, own)
    unchanged = all(view.entry(path) == view.entry(path, "before") for path in lockfiles)
    end = start if unchanged else _pins(lockfiles, view, "after")
    check = _EnvironmentCheck(verdict, kind, environment, start, end or {}, view, own)
    check.run(distributions)
    seeds = sorted(distributions[info].name for info in check.seeded if info in verdict.packages)
    if seeds:  # the lockfile pins none of them: say what they were held to
        verdict.also = f" ({', '.join(seeds)} against {SEEDED})"
    return verdict, True, own.close() if own is not None else ""


class _EnvironmentCheck:
    def __init__(self, verdict: TreeVerdict, kind: str, environment: str, start: dict[str, Pin],
                 end: dict[str, Pin], view: View, own: _OwnFiles | None) -> None:
        self.verdict, self.kind, self.environment, self.start, self.end, self.view, self.own = \
            verdict, kind, environment, start, end, view, own
        self.unpinned: dict[str, str] = {}
        self.seeded: list[str] = []  # the distributions held to the seed wheels, no pin naming them

    def run(self, distributions: dict[str, _Distribution]) -> None:
        """Each distribution's files held to the wheel its pin names: the wheels of every pinned one
        asked for at once (one of a distribution's wheels is installed: the first found is)."""
        pinned = [(d, [wheel_key(digest, where) for digest, where in _installable(pin.wheels, self.tags(d))])
                  for d in distributions.values() if (pin := self.pin(d)) is not None]
        seeds = self.own.seeds() if self.own is not None else {}
        keys = sorted({key for _, keys in pinned for key in keys} - seeds.keys())
        artifacts = self.view.artifacts
        got = {**(artifacts(keys) if artifacts is not None and keys else {}), **seeds}
        for distribution, keys in pinned:
            found = [artifact for key in keys if isinstance(artifact := got.get(key), Artifact)]
            if found:
                self.compare(distribution, found[0])
            else:
                reasons = sorted({str(got.get(key, "no wheel cache to read it from")) for key in keys})
                self.unpinned.setdefault(distribution.info, f"{len(distribution.files)} file(s) not verifiable: "
                                         f"{'; '.join(reasons)}")
        self.verdict.unverified.extend(f"{info}: {why}" for info, why in sorted(self.unpinned.items()))

    def tags(self, distribution: _Distribution) -> set[str]:
        """The tags its installed WHEEL file names (``Tag: cp311-cp311-manylinux_2_17_x86_64``)."""
        text = self.view.text(f"{distribution.info}/WHEEL") or ""
        return {line.partition(":")[2].strip() for line in text.splitlines() if line.startswith("Tag:")}

    def pin(self, distribution: _Distribution) -> Pin | None:
        """The pin its files are held to (None: they cannot be, and why is noted)."""
        name, info = distribution.name, distribution.info
        pinned = f"{name}=={distribution.version}"
        start, end = self.start.get(pinned) or self.start.get(name), self.end.get(pinned) or self.end.get(name)
        if start is not None and start.local or end is not None and end.local:
            self.unpinned.setdefault(info, "the project itself, built from the workspace (no hash pins it)")
            return None
        if start is None and end is None:
            if name in _SEEDS and self.own is not None:
                seeded, why = self.own.seed(distribution)
                if seeded is not None:
                    self.seeded.append(info)
                    return seeded
                self.unpinned.setdefault(info, why)
            elif name in _SEEDS:
                self.unpinned.setdefault(info, f"{name}, which no lockfile pins")
            else:
                self.verdict.problems.append(f"{info}: a distribution {self.verdict.lockfile} does not pin")
            return None
        pin = start if end is None or end == start else end
        assert pin is not None
        if pin is end and end != start:
            self.unpinned.setdefault(info, "pinned in the session (its pin is new or changed)")
        if pin.version != distribution.version:
            self.verdict.problems.append(f"{info}: version {distribution.version}, where "
                                         f"{self.verdict.lockfile} pins {pin.version}")
            return None
        if not pin.wheels:
            self.unpinned.setdefault(info, "pinned without a wheel hash (an sdist, built in the session)")
            return None
        return pin

    def compare(self, distribution: _Distribution, wheel: Artifact) -> None:
        expected = _installed(wheel, distribution, self.environment)
        texts = wheel.texts or {}
        scripts = _entry_points(texts.get(f"{distribution.info.rpartition('/')[2]}/entry_points.txt"))
        if distribution.name in ("pip", "setuptools"):  # pip names these after the Python it installs for
            for path, _ in distribution.files:
                name = path.rpartition("/")[2]
                for versioned, entry in ((_PIP_SCRIPT, "pip"), (_EASY_INSTALL_SCRIPT, "easy_install")):
                    if entry in scripts and versioned.fullmatch(name):
                        scripts.setdefault(name, scripts[entry])
        bytecode = []
        info, scripts_dir = distribution.info + "/", f"{self.environment}/bin/"
        same = 0  # files whose content is their wheel's entry's: counted, then told once
        for path, sha256 in distribution.files:
            if path.startswith(info) and path.rpartition("/")[2] in _GENERATED:
                continue
            wheel_entry = expected.get(path)
            if wheel_entry is not None and sha256 is not None and sha256 == wheel_entry[1]:
                same += 1
            elif "/__pycache__/" in path and path.endswith(".pyc") and wheel_entry is None:  # compiled here
                bytecode.append(path)
            elif sha256 is None:
                self.verdict.problems.append(f"{path}: not a file, where an installer writes the wheel's files")
            elif wheel_entry is not None:
                if self.rewritten(path, texts.get(wheel_entry[0])):
                    self.verified(distribution)
                else:
                    self.verdict.problems.append(f"{path}: not the content of its wheel")
            elif path.startswith(scripts_dir) and (name := path.rpartition("/")[2]) in scripts:
                if self.script(path, scripts[name]):
                    self.verified(distribution)
                else:
                    self.verdict.problems.append(f"{path}: not the script pip or uv writes for the entry point "
                                                 f"{name} = {':'.join(scripts[name])}")
            else:
                self.verdict.problems.append(f"{path}: a file its wheel does not hold")
        if same:
            self.verdict.files += same
            self.verdict.packages.add(distribution.info)
        self.bytecode(distribution, bytecode, expected, self.own.bytecode(wheel) if self.own is not None else {})

    def verified(self, distribution: _Distribution) -> None:
        self.verdict.files += 1
        self.verdict.packages.add(distribution.info)

    def shebang(self, text: str) -> str | None:
        """The rest of a script after a #! line naming this environment's interpreter."""
        match = _SHEBANG.match(text)
        if match is None:
            return None
        interpreter = match.group(1) or match.group(3)
        if self.kind == "python" and not posixpath.dirname(interpreter).endswith(f"/{self.environment}/bin") and \
                posixpath.dirname(interpreter) != f"/{self.environment}/bin":
            return None
        return text[match.end():]

    def rewritten(self, path: str, original: str | None) -> bool:
        """A ``.data/scripts`` file whose ``#!python`` the installer rewrote to the interpreter."""
        if original is None or not original.startswith(("#!python\n", "#!pythonw\n")):
            return False
        rest = self.shebang(self.view.text(path) or "")
        return rest is not None and rest == original.partition("\n")[2]

    def script(self, path: str, entry: tuple[str, str]) -> bool:
        rest = self.shebang(self.view.text(path) or "")
        module, attribute = entry
        values = {"module": module, "name": attribute.split(".")[0], "func": attribute}
        return rest is not None and any(rest == template.format(**values) for template in _SCRIPTS)

    def bytecode(self, distribution: _Distribution, paths: list[str], expected: dict[str, tuple[str, str]],
                 recorded: dict[str, str]) -> None:
        """Each .pyc beside a verified source: held to the session image's record where it has one (a
        seed's: ``recorded``), else compiled again here."""
        unproven = []
        for path in paths:
            source = _source(path)
            data, code = self.view.data(path), self.view.data(source)
            inside = path[len(distribution.site) + 1:]
            if source not in expected or code is None or self.view.entry(source) is None or \
                    self.view.entry(source).sha256 != expected[source][1]:  # type: ignore[union-attr]
                self.verdict.problems.append(f"{path}: bytecode whose source is not a file of its wheel")
            elif inside in recorded:
                form = bytecode_form(data, inside) if data is not None else None
                if form == recorded[inside]:
                    self.verified(distribution)
                elif form is None:
                    unproven.append(path)
                else:
                    self.verdict.problems.append(f"{path}: not the bytecode the session image's Python compiled "
                                                 "from its source (the record's)")
            elif data is not None and recompiles(data, code, source[len(self.environment):]):
                self.verified(distribution)
            else:
                unproven.append(path)
        if unproven:
            self.unpinned.setdefault(f"{distribution.info} bytecode", f"{len(unproven)} bytecode file(s) that do not "
                                     f"recompile to the same bytes with this Python ({unproven[0]}; another "
                                     "Python's, or written otherwise): delete the __pycache__ directories")


def _installable(wheels: tuple[tuple[str, str], ...], tags: set[str]) -> list[tuple[str, str]]:
    """The pinned wheels whose file name's tags (``NAME-VERSION[-BUILD]-PY-ABI-PLATFORM.whl``, each
    part a dotted set) include one the installed WHEEL file names: the one installed is among them.
    All of them when that cannot be told (no tags, no file name)."""
    def expanded(where: str) -> set[str] | None:
        parts = where.rpartition("/")[2].removesuffix(".whl").split("-")
        if len(parts) < 5 or not where.endswith(".whl"):
            return None
        python, abi, platform = parts[-3:]
        return {f"{p}-{a}-{f}" for p in python.split(".") for a in abi.split(".") for f in platform.split(".")}

    chosen = [(digest, where) for digest, where in wheels if (named := expanded(where)) is None or named & tags]
    return chosen if tags and chosen else list(wheels)


def _installed(wheel: Artifact, distribution: _Distribution, environment: str) -> dict[str, tuple[str, str]]:
    """Installed path -> (the wheel's entry, its sha256) of every file a wheel installs: the root
    into site-packages, ``.data/purelib``/``platlib`` too, ``.data/scripts`` into bin/, ``.data/data``
    into the environment, ``.data/headers`` into include/site/pythonX.Y/NAME/ (NAME as the
    installer spells it: the dist-info's, or normalized)."""
    stem = distribution.info.rpartition("/")[2][:-len(".dist-info")]
    data = f"{stem}.data/"
    version = re.search(r"/lib/((?:python|pypy)[\d.]+t?)/site-packages\Z", f"/{distribution.site}")
    names = {stem.partition("-")[0], distribution.name}
    headers = [f"{environment}/include/site/{version.group(1)}/{name}" for name in names] if version else []
    found = {}
    inside = environment + "/"
    for entry, digest in wheel.files.items():
        if entry.startswith(data):
            part, _, rest = entry[len(data):].partition("/")
            places = {"purelib": [distribution.site], "platlib": [distribution.site], "headers": headers,
                      "scripts": [f"{environment}/bin"], "data": [environment]}.get(part, [])
            paths = [joined(where, rest) for where in places] if rest else []
        else:
            paths = [joined(distribution.site, entry)]
        for path in paths:
            if path.startswith(inside):
                found[path] = (entry, digest)
    return found


def _entry_points(text: str | None) -> dict[str, tuple[str, str]]:
    """Script name -> (module, attribute) of a wheel's console and GUI scripts."""
    found: dict[str, tuple[str, str]] = {}
    section = ""
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif "=" in line and section in ("console_scripts", "gui_scripts"):
            name, _, value = line.partition("=")
            if match := _ENTRY.fullmatch(value):
                found[name.strip()] = (match.group(1), match.group(2))
    return found


def recompiles(data: bytes, source: bytes, inside: str) -> bool:
    """Whether a .pyc is this Python's compilation of ``source`` (checked-hash or timestamp
    header of this Python's magic, then the marshalled code byte for byte, or but for what the
    writing process's state decides: marshal's reference flags and numbers, interning). The code names the
    source's path where it was compiled (the session's, unknown here): taken from the bytes
    themselves, where it ends with ``inside`` (the path below the environment)."""
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    body = data[16:]
    at = body.find(inside.encode("utf-8", "surrogateescape"))
    if at < 0:
        return False
    end = at + len(inside.encode("utf-8", "surrogateescape"))
    theirs: list[object] | None = None  # the .pyc's tokens, read once when the bytes differ
    # The string's start: its type (short ASCII: a 1-byte length; ASCII, Unicode, interned: 4 bytes),
    # FLAG_REF (0x80) or not, then its length.
    for start in range(at, max(at - 4096, 5) - 1, -1):
        for size, types in ((1, b"zZ"), (4, b"aAut")):
            if body[start - size - 1] & 0x7F not in types or \
                    int.from_bytes(body[start - size:start], "little") != end - start:
                continue
            try:  # the name held in a variable, as py_compile holds it: marshal marks what is referenced twice
                filename = body[start:end].decode("utf-8")
                code = compile(source, filename, "exec", dont_inherit=True)
            except (ValueError, UnicodeDecodeError):  # not a name (a null byte): an earlier start may be
                continue
            except SyntaxError:
                return False
            compiled = marshal.dumps(code)
            if compiled == body:
                return True
            theirs = theirs if theirs is not None else _unreferenced(body) or []
            if theirs and _unreferenced(compiled) == theirs:
                return True
    return False


# marshal's FLAG_REF marks an object that may be referred to again; it is set for an object referred to
# from elsewhere in the writing process too (an identifier another loaded module uses), so two processes
# write one code object with different flags and reference numbers. Compared without them: the type
# bytes, the lengths, the values, and each back-reference by the place of the object it names.
_FLAG_REF = 0x80
_FIXED = {**dict.fromkeys(b"0NFTS.", 0), ord("i"): 4, ord("g"): 8, ord("y"): 16}
_SIZED = {**dict.fromkeys(b"stuaA", 4), **dict.fromkeys(b"zZ", 1)}
_INTERNED = {ord("t"): ord("u"), ord("A"): ord("a"), ord("Z"): ord("z")}
_SEQUENCES = {**dict.fromkeys(b"([<>", 4), ord(")"): 1}
Layout = tuple[int, int, int, int]  # a code object's fields: ints, objects, int, objects
_FILENAME = 5  # co_filename's place among a code object's first objects


def _layout(magic: bytes) -> Layout | None:
    """How the Python whose bytecode starts with ``magic`` marshals a code object: 3.11 to 3.13 (magic
    3495 to 3599) alike; None for any other (nothing is proven of it)."""
    number = int.from_bytes(magic[:2], "little")
    return (5, 8, 1, 2) if len(magic) == 4 and magic[2:] == b"\r\n" and 3495 <= number < 3600 else None


_CODE = _layout(importlib.util.MAGIC_NUMBER) if sys.version_info[:2] <= (3, 13) else None  # this Python's


def bytecode_form(data: bytes, path: str) -> str | None:
    """What a ``.pyc`` holds that neither the environment's path nor the writing process decides, hashed
    (SHA-256 hex): its magic and flags (timestamp, checked or unchecked hash: whether Python looks at the
    source at all), and its code as ``_unreferenced`` reads it, with the source's path (each code
    object's ``co_filename``, which names where the environment was, when it ends with the source's
    path below site-packages; ``path``: the .pyc's there) a marker. The header's mtime and size (or
    source hash) are left out: the source is verified on its own. Read, never loaded, so any Python
    of dejima's computes it for bytecode of any release the reader knows; None for any other or
    anything malformed (nothing is proven)."""
    layout = _layout(data[:4])
    if len(data) < 16 or layout is None:
        return None
    source = _source(f"/{path}")  # one in site-packages' own __pycache__ too
    tokens = _unreferenced(bytes(data[16:]), layout, source.encode("utf-8", "surrogateescape")) if source else None
    return None if tokens is None else hashlib.sha256(repr((bytes(data[:8]), tokens)).encode()).hexdigest()


def _unreferenced(data: bytes, layout: Layout | None = _CODE, filename: bytes | None = None) -> list[object] | None:
    """A marshal stream as tokens with FLAG_REF dropped and each reference made the ordinal of the
    object it names (None: not a stream this reader knows, or malformed: then nothing is proven);
    ``layout``: its code objects' (this Python's by default); ``filename``: a ``co_filename`` that
    ends with it is a marker."""
    tokens: list[object] = []
    flagged: list[int] = []
    count = [0]

    def number(at: int, size: int) -> int:
        if at + size > len(data):
            raise ValueError("past the end")
        return int.from_bytes(data[at:at + size], "little", signed=True)

    def one(at: int, depth: int) -> int:
        if depth > 200 or at >= len(data):
            raise ValueError("too deep or past the end")
        kind, flag = data[at] & ~_FLAG_REF, data[at] & _FLAG_REF
        kind = _INTERNED.get(kind, kind)  # whether a string was interned there: that process's state too
        ordinal, at = count[0], at + 1
        count[0] += 1
        if flag:
            flagged.append(ordinal)
        tokens.append(kind)
        if kind == ord("r"):
            index = number(at, 4)
            if not 0 <= index < len(flagged):
                raise ValueError("a reference to nothing")
            tokens.append(("ref", flagged[index]))
            return at + 4
        if kind in _FIXED:
            tokens.append(data[at:at + _FIXED[kind]])
            return at + _FIXED[kind]
        if kind in _SIZED:
            size = number(at, _SIZED[kind]) & (0xFF if _SIZED[kind] == 1 else 0xFFFFFFFF)
            tokens.append(data[at:at + _SIZED[kind] + size])
            return at + _SIZED[kind] + size
        if kind == ord("l"):
            size = abs(number(at, 4)) * 2
            tokens.append(data[at:at + 4 + size])
            return at + 4 + size
        if kind in _SEQUENCES:
            items = number(at, _SEQUENCES[kind]) & (0xFF if _SEQUENCES[kind] == 1 else 0xFFFFFFFF)
            tokens.append(items)
            at += _SEQUENCES[kind]
            pieces = []
            for _ in range(items):
                start = len(tokens)
                at = one(at, depth + 1)
                pieces.append(tuple(tokens[start:]))
            if kind in b"<>":  # a set's order is its writer's string hashes (PYTHONHASHSEED): any order
                del tokens[len(tokens) - sum(map(len, pieces)):]
                tokens.extend(sorted(pieces, key=repr))
            return at
        if kind == ord("c") and layout is not None:
            ints, objects, more, rest = layout
            tokens.append(data[at:at + 4 * ints])
            at += 4 * ints
            for place in range(objects):
                start = len(tokens)
                at = one(at, depth + 1)
                if place == _FILENAME and filename is not None and len(tokens) == start + 2 and \
                        tokens[start] in _SIZED and isinstance(value := tokens[start + 1], bytes) and \
                        value[_SIZED[tokens[start]]:].endswith(filename):  # type: ignore[index]
                    tokens[start + 1] = "\0filename\0"
            tokens.append(data[at:at + 4 * more])
            at += 4 * more
            for _ in range(rest):
                at = one(at, depth + 1)
            return at
        raise ValueError(f"type {kind:#x} not read here")

    try:
        if one(0, 0) != len(data):
            return None
    except ValueError:
        return None
    return tokens


def reinstaller(tree: str, evidence: str) -> str | None:
    """The clean reinstall command of an environment whose finding ends with uv's (its project has a
    uv.lock), for restore."""
    return CLEAN_INSTALL if re.search(rf"&& {re.escape(CLEAN_INSTALL)}(?: \(in [^)]*\))?\Z", evidence) else None


def python_findings(kind: str, environment: str, changes: list[Change], view: View,
                    tampered: list[str]) -> list[Finding] | None:
    """One finding for an environment: what it verified against uv.lock, or what differs (with
    ``tampered``: what installs.py found), or what it could not verify; None where it does not
    verify (conda, the session's home)."""
    verified = verify(kind, environment, changes, view)
    if verified is None:
        return None
    verdict, pinned, lead = verified
    if tampered and not pinned and not verdict.problems or \
            not (verdict.files or verdict.problems or verdict.unverified or lead):
        return None  # nothing held to a pin: installs.py's own finding says what no installer makes
    project = environment.rpartition("/")[0]
    where = f" (in {project})" if project else ""
    if _lockfile(environment, view) is not None:
        remedy = f"on the host: rm -r {environment} && {CLEAN_INSTALL}{where}"
    elif pinned:
        requirements = " ".join(f"-r {path.rpartition('/')[2]}" for path in verdict.lockfile.split(" and "))
        remedy = f"on the host: python3 -m venv --clear {environment} && {environment}/bin/pip install " \
            f"--require-hashes {requirements}{where}"
    else:
        remedy = f"recreate it on the host: python3 -m venv --clear {environment}, then install{where}"
    named = {line.partition(": ")[0] for line in tampered}  # one line a path: installs.py's, when it has one
    problems = [*tampered, *(line for line in verdict.problems if line.partition(": ")[0] not in named)]
    return [tree_finding(environment, verdict, changes, problems, remedy, "distribution",
                         idle="nothing installed in it", lead=lead, rule="B10")]
