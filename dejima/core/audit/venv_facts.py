"""What a Python environment's own files are, as the session image's own tools write them (issue 32):
facts in, verdicts out.

The session image's python3 (``python3 -m venv``) and uv (``uv venv``), run once when the image is
built (dejima/adapters/venv_record.py, with dejima/adapters/venv_probe_script.py), made environments
at a path and with a prompt of their own: what they wrote, with that path, its last component and
the prompt turned back into markers, is each tool's template of an environment's own files; the
keys of its ``pyvenv.cfg``; its interpreter links; the wheels ensurepip seeded. The templates come
from the very interpreter and uv the session ran (quoting and wording differ between releases),
never from a table or from dejima's own Python.

An environment's own files are compared with the template rendered for it: its path as the session
saw it, its prompt from its ``pyvenv.cfg`` (its last component when there is none). The values are
put in as they are, which is what every tool writes for a value no shell needs quoted
(``[A-Za-z0-9_@%+=:,./-]``); a path or prompt that needs quoting is not rendered (said, medium).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dejima.core.audit.model import Artifact

FORMAT = 2  # 2: the seeds' bytecode (a record of format 1 is made again)
_MARKERS = ("\0dir\0", "\0name\0", "\0prompt\0")
_PROBE = "dejimavenv"  # every value the probe chose starts with it: one left over was not turned back
_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # what shlex.quote leaves as it is
# Keys a tool writes whatever the environment: where its value is free (the command that made it,
# which nothing reads), or checked on its own (a prompt; whether the system's site-packages count).
_FREE = frozenset({"command", "prompt", "include-system-site-packages"})
_CHOICES = {"include-system-site-packages": ("true", "false")}


@dataclass(frozen=True)
class Seed:
    """A wheel ensurepip installs in every environment venv makes: its version, SHA-256, contents."""

    name: str
    version: str
    sha256: str
    artifact: Artifact


@dataclass(frozen=True)
class Tool:
    """One tool's environments: ``name`` (``venv``, ``uv``); ``config``: the fixed keys of its
    ``pyvenv.cfg`` (home, version, its own version); ``plain``/``prompted``: path inside the
    environment -> template, without and with a ``prompt`` in pyvenv.cfg; ``links``: the links it
    makes; ``quoted_prompt``: pyvenv.cfg holds the prompt as a Python literal (venv's repr);
    ``bytecode``: each ``.pyc`` ensurepip compiled, by its path below site-packages, as
    python_verify.bytecode_form reads it (the record of the bytes the image's Python wrote)."""

    name: str
    config: dict[str, str]
    plain: dict[str, str]
    prompted: dict[str, str]
    links: dict[str, str]
    quoted_prompt: bool
    seeds: tuple[Seed, ...] = ()
    bytecode: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        own = self.config.get("uv") or self.config.get("version") or "?"
        return f"uv {own} (Python {self.config.get('version_info', '?')})" if self.name == "uv" else \
            f"python3 -m venv (Python {own})"


@dataclass(frozen=True)
class VenvFacts:
    """What the session image's tools write in an environment (``tools``), and why a tool it has is
    missing (``missing``: its name -> the reason)."""

    image: str
    tools: tuple[Tool, ...]
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionPython:
    """What the audit of one mount knows of the session's Python: the session image's record (None:
    none could be had) and where the mount was in the session (an environment's path there is
    what its activate scripts name)."""

    facts: VenvFacts | None
    root: str


def parse_config(text: str) -> tuple[dict[str, str], list[str]]:
    """``pyvenv.cfg``'s keys as Python's site.py reads them (``key = value``, the last one wins), and
    what is wrong with it: a line that is not one, a key given twice."""
    keys: dict[str, str] = {}
    wrong = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if not equals or not key:
            wrong.append(f"a line that is no key: {line[:60]!r}")
        elif key in keys:
            wrong.append(f"{key} given twice")
        keys[key] = value.strip()
    return keys, wrong


def _turned_back(text: str, directory: str, name: str, prompt: str) -> str | None:
    """``text`` with the probe's values made markers again (None: one is left, in a form not known)."""
    text = text.replace(directory, _MARKERS[0]).replace(prompt, _MARKERS[2]).replace(name, _MARKERS[1])
    return None if _PROBE in text.lower() else text


def from_probe(image: str, document: object, seeds: dict[str, tuple[str, Artifact]]) -> VenvFacts:
    """The facts in what the probe script printed (``seeds``: each seed wheel's file name -> what it
    holds, read by the adapter from the bytes the probe sent, whose SHA-256 is the file name's key
    ``NAME sha256``). A tool whose files cannot all be turned back is missing, with why."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError("not the probe's output")
    name, prompt, tools = str(document["name"]), str(document["prompt"]), document["tools"]
    found, missing = [], {}
    for tool, made in sorted(tools.items()):
        try:
            found.append(_tool(tool, made, name, prompt, seeds))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            missing[tool] = str(error)
    return VenvFacts(image, tuple(found), missing)


def _tool(tool: str, made: dict[str, object], name: str, prompt: str, seeds: dict[str, tuple[str, Artifact]]) -> Tool:
    templates: list[dict[str, str]] = []
    links: dict[str, str] = {}
    config: dict[str, str] = {}
    quoted = False
    for kind in ("plain", "prompted"):
        listing = made[kind]
        assert isinstance(listing, dict)
        directory, files = str(listing["dir"]), listing["files"]
        keys, wrong = parse_config(str(files.pop("pyvenv.cfg")))
        if wrong:
            raise ValueError(f"its pyvenv.cfg: {wrong[0]}")
        if kind == "plain":
            config = {k: v for k, v in keys.items() if k not in _FREE}
        else:
            quoted = keys.get("prompt") != prompt
        turned = {}
        for path, text in files.items():
            back = _turned_back(text, directory, name, prompt) if isinstance(text, str) else None
            if back is None:
                raise ValueError(f"its {path} holds the environment's path or prompt in a form not known here")
            turned[path] = back
        templates.append(turned)
        links.update({path: target for path, target in listing["links"].items() if _PROBE not in target})
    found = []
    for seed in made.get("seeds", []):  # type: ignore[attr-defined]
        file = str(seed["file"])
        parts = file.removesuffix(".whl").split("-")
        digest, artifact = seeds[file]
        found.append(Seed(parts[0].lower(), parts[1], digest, artifact))
    bytecode = _strings(made.get("bytecode", {}))
    return Tool(tool, config, templates[0], templates[1], links, quoted, tuple(found), bytecode)


def tool_of(facts: VenvFacts, keys: dict[str, str]) -> tuple[Tool | None, str]:
    """The recorded tool that made an environment with these pyvenv.cfg keys (uv's names itself,
    virtualenv's too, venv's does not), or None and why."""
    kind = "uv" if "uv" in keys else "virtualenv" if "virtualenv" in keys else "venv"
    tool = next((t for t in facts.tools if t.name == kind), None)
    if tool is None:
        why = facts.missing.get(kind, "the session image has no such tool, or its record predates it")
        return None, f"made by {kind}, whose own files the session image's record does not hold ({why})"
    return tool, ""


def config_problems(tool: Tool, keys: dict[str, str], wrong: list[str]) -> tuple[list[str], str]:
    """What in pyvenv.cfg the tool does not write (each high: ``home`` decides which Python runs),
    and why its own files cannot be told apart from another version's (medium: another uv)."""
    problems = list(wrong)
    for key, value in keys.items():
        if key in _CHOICES and value not in _CHOICES[key]:
            problems.append(f"{key} = {value[:60]}, where {tool.name} writes {' or '.join(_CHOICES[key])}")
        elif key not in _FREE and key not in tool.config:
            problems.append(f"{key}, a key {tool.label} does not write")
    other = ""
    for key, value in tool.config.items():
        if keys.get(key) == value:
            continue
        if tool.name == "uv" and key == "uv":
            other = f"made by uv {keys.get(key, '?')[:40]}, where the session image's is {value}"
        else:
            problems.append(f"{key} = {keys.get(key, '(none)')[:80]}, where the session image's {tool.label} "
                            f"writes {value}" + (" (home decides which Python runs)" if key == "home" else ""))
    return problems, other


def prompt_of(tool: Tool, keys: dict[str, str]) -> str | None:
    """The prompt as the tool put it in the templates (None: none in pyvenv.cfg)."""
    value = keys.get("prompt")
    if value is None:
        return None
    if tool.quoted_prompt and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def render(template: str, directory: str, prompt: str | None) -> str | None:
    """The template for an environment at ``directory`` (as the session saw it) with ``prompt``;
    None when a value would need quoting (no tool's quoting is recorded)."""
    name = directory.rpartition("/")[2]
    values = (directory, name, prompt if prompt is not None else name)
    if not all(_SAFE.fullmatch(value) for value in values):
        return None
    for marker, value in zip(_MARKERS, values, strict=True):
        template = template.replace(marker, value)
    return template


def seed(tool: Tool, name: str) -> Seed | None:
    return next((s for s in tool.seeds if s.name == name), None)


def to_document(facts: VenvFacts) -> dict[str, object]:
    """The facts as JSON keeps them (venv_record.py's file)."""
    return {"format": FORMAT, "image": facts.image, "missing": facts.missing, "tools": [
        {"name": t.name, "config": t.config, "plain": t.plain, "prompted": t.prompted, "links": t.links,
         "quoted_prompt": t.quoted_prompt,
         "seeds": [{"name": s.name, "version": s.version, "sha256": s.sha256, "files": s.artifact.files,
                    "texts": s.artifact.texts or {}} for s in t.seeds], "bytecode": t.bytecode} for t in facts.tools]}


def from_document(document: object) -> VenvFacts:
    """The facts from JSON (ValueError when it is not what to_document wrote)."""
    try:
        assert isinstance(document, dict) and document["format"] == FORMAT
        tools = tuple(Tool(str(t["name"]), _strings(t["config"]), _strings(t["plain"]), _strings(t["prompted"]),
                           _strings(t["links"]), bool(t["quoted_prompt"]),
                           tuple(Seed(str(s["name"]), str(s["version"]), str(s["sha256"]),
                                      Artifact(_strings(s["files"]), _strings(s["texts"]))) for s in t["seeds"]),
                           _strings(t["bytecode"]))
                      for t in document["tools"])
        return VenvFacts(str(document["image"]), tools, _strings(document["missing"]))
    except (AssertionError, KeyError, TypeError) as error:
        raise ValueError(f"not a record of an image's environments ({type(error).__name__})") from error


def _strings(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError("not a table of strings")
    return value
