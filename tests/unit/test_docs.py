"""Docs that are generated from code stay in sync with it, and cite only files that exist."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

import pytest

from dejima.core.settings import render_settings_reference

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"


def test_settings_reference_is_current() -> None:
    assert render_settings_reference() in (DOCS / "settings.md").read_text(), (
        "regenerate docs/settings.md with `dejima settings reference`"
    )


def test_readme_starts_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[0] for line in block] == ["./scripts/quickstart", "./scripts/test"]
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_manifest_reference_is_current() -> None:
    from dejima.core.manifest import render_manifest_reference

    assert render_manifest_reference() in (DOCS / "manifests.md").read_text(), (
        "regenerate docs/manifests.md with `dejima manifests reference`"
    )


def test_audit_rule_reference_is_current() -> None:
    from dejima.ui.audit_views import rules_reference

    assert rules_reference() in (DOCS / "audit.md").read_text(), (
        "regenerate the table at the end of docs/audit.md with `dejima-audit rules`"
    )


# Docs cite only what exists. In every Markdown file of the repository (README.md, docs/, docker/README.md, ...),
# these are citations, each checked:
# - a link's target, `[text](target)`, relative to the document (a URL, scheme:..., is not checked), and its
#   #anchor, which must be a heading of the target (GitHub's slugs);
# - a path, in code or in prose: a word with a slash, not preceded by `/`, `~`, `$`, `.` or a letter (so
#   `~/.config/dejima/x`, `$XDG_STATE_HOME/dejima/x`, `/workspace/x` and URLs, the user's or the web's, are not),
#   whose first folder is
#     a folder at the top of the repository (`dejima/core/plan.py`, `bench/run`, `tests/unit/`, `./scripts/test`),
#     a folder beside the document (docker/README.md's `filter/Dockerfile.j2`), or
#     a package of dejima/, the short form docs use (`core/plan.py`, `ui/text.py`): always in code, and in prose
#     only when it names a file with a suffix (prose writes "filter/diff/merge" for "or");
#   and any `folder/name.md`, a document of the repository whatever its folder.
#   Not paths: a word followed by `<`, or by `:` and anything but a line number (`dejima/<role>:<hash>`, the image
#   `dejima/base:<suite>-minbase`); a path under a folder that its parent's .gitignore names is an output the docs
#   describe (`bench/results/results.json`), not a file of the repository;
# - a test module named alone in code, `test_bedrock.py`: some tests/**/test_bedrock.py;
# - a dotted module, `dejima.x.y` where x is a module or package of dejima/ (`dejima.core.gitpath`; the container
#   labels `dejima.scope` and `dejima.session` are not modules): each part a module, and what follows the module a
#   name it defines;
# - in a table cell that names a package (`dejima/adapters/`), every lowercase identifier in code after it
#   (`runtime`, `tree_walk`): a module or package of it.
# A trailing slash asks for a folder; a `*`, for at least one match.

PACKAGE = ROOT / "dejima"
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"\]\(([^()\s]+)\)")
PATH = re.compile(r"(?<![\w./~$%-])(?:\./)?(?P<path>[\w.-]+/[\w.*/-]*)")
MODULE = re.compile(r"(?<![\w./-])dejima(?P<parts>(?:\.\w+)+)")
TABLE_TOKEN = re.compile(r"`[^`\n]+`|\|")
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
TEST_MODULE = re.compile(r"(?<![\w./-])test_\w+\.py(?![\w/-])")


@dataclass(frozen=True)
class Citation:
    line: int
    written: str
    target: Path  # the file or folder it names
    folder: bool = False  # written with a trailing slash
    anchor: str = ""  # a link's #fragment
    name: str = ""  # a dotted reference's name in its module
    what: str = "file"  # what is missing when the target is: a file, or a module


def documents() -> list[Path]:
    found: list[Path] = []
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = [s for s in subfolders if s not in (".git", "node_modules")
                         and not any(fnmatch(s, pattern) for pattern in gitignored(ROOT))]
        found += [Path(folder, name) for name in files if name.endswith(".md")]
    return sorted(found)


@cache
def gitignored(folder: Path) -> tuple[str, ...]:
    """The names folder's own .gitignore gives (patterns, without a trailing slash)."""
    path = folder / ".gitignore"
    lines = path.read_text().splitlines() if path.is_file() else []
    return tuple(line.strip().strip("/") for line in lines if line.strip() and not line.startswith(("#", "!")))


@cache
def top_folders() -> frozenset[str]:
    """The repository's folders at its top: every one but .git and what the top .gitignore names."""
    return frozenset(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != ".git"
                     and not any(fnmatch(p.name, pattern) for pattern in gitignored(ROOT)))


@cache
def packages() -> frozenset[str]:
    return frozenset(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def blank(text: str, start: int, end: int) -> str:
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def pieces(text: str) -> Iterator[tuple[str, int, str]]:
    """(kind, offset, text): the document as code (fenced blocks, code spans), link targets and prose."""
    rest = text
    for match in FENCE.finditer(text):
        yield "code", match.start(2), match.group(2)
        rest = blank(rest, match.start(), match.end())
    for match in CODE_SPAN.finditer(rest):
        if "\n\n" not in match.group(2):
            yield "code", match.start(2), match.group(2).replace("\n", " ")
            rest = blank(rest, match.start(), match.end())
    for match in LINK.finditer(rest):
        yield "link", match.start(1), match.group(1)
        rest = blank(rest, match.start(), match.end())
    yield "prose", 0, rest


def path_citation(doc: Path, kind: str, line: int, written: str, after: str) -> Citation | None:
    path = written.rstrip(".")
    if after.startswith("<") or (after.startswith(":") and not after[1:2].isdigit() and after[1:2].strip()):
        return None  # a name: dejima/<role>:<hash>, an image tag
    first = path.split("/", 1)[0]
    if first in top_folders():
        base = ROOT
    elif doc.parent != ROOT and (doc.parent / first).is_dir():
        base = doc.parent
    elif first in packages() and (kind == "code" or re.search(r"\.\w+$", path)):
        base = PACKAGE
    elif path.endswith(".md") and first[:1].isalnum():
        base = ROOT
    else:
        return None
    return Citation(line, path, base / path, folder=path.endswith("/"))


def module_citation(line: int, written: str) -> Citation | None:
    parts = written.split(".")[1:]
    if not ((PACKAGE / parts[0] / "__init__.py").is_file() or (PACKAGE / f"{parts[0]}.py").is_file()):
        return None  # dejima.scope, dejima.session: container labels
    here = PACKAGE
    for index, part in enumerate(parts):
        if (here / part / "__init__.py").is_file():
            here = here / part
        elif (here / f"{part}.py").is_file():
            return Citation(line, written, here / f"{part}.py", name=".".join(parts[index + 1:index + 2]))
        else:  # a name the package defines, or a module that is not there
            return Citation(line, written, here / "__init__.py", name=part, what="module")
    return Citation(line, written, here / "__init__.py")


def table_citations(text: str) -> Iterator[Citation]:
    """In a table cell that names a package of dejima/, the modules it lists by their short names."""
    for number, row in enumerate(text.splitlines(), 1):
        if not row.startswith("|"):
            continue
        package: Path | None = None
        for token in TABLE_TOKEN.findall(row):
            code = token.strip("`")
            if token == "|":
                package = None
            elif re.fullmatch(r"dejima/[\w/]+/", code) and (ROOT / code / "__init__.py").is_file():
                package = ROOT / code
            elif package and IDENTIFIER.fullmatch(code):
                module = package / code
                yield Citation(number, code, module if module.is_dir() else module.with_suffix(".py"), what="module")


def citations(doc: Path, text: str) -> list[Citation]:
    found: list[Citation] = []
    def line_of(at: int) -> int:
        return text.count("\n", 0, at) + 1

    for kind, offset, piece in pieces(text):
        if kind == "link":
            target, _, anchor = piece.partition("#")
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                found.append(Citation(line_of(offset), piece, doc.parent / target if target else doc,
                                      folder=target.endswith("/"), anchor=anchor))
            continue
        for match in PATH.finditer(piece):
            after = piece[match.end():match.end() + 2]
            if cited := path_citation(doc, kind, line_of(offset + match.start()), match.group("path"), after):
                found.append(cited)
        for match in TEST_MODULE.finditer(piece) if kind == "code" else ():
            named = sorted((ROOT / "tests").rglob(match.group(0))) or [ROOT / "tests" / match.group(0)]
            found.append(Citation(line_of(offset + match.start()), match.group(0), named[0]))
        for match in MODULE.finditer(piece):
            if cited := module_citation(line_of(offset + match.start()), match.group(0)):
                found.append(cited)
    return sorted([*found, *table_citations(text)], key=lambda c: c.line)


def anchors(doc: Path) -> set[str]:
    """The #fragments GitHub gives a document's headings (and its explicit ids)."""
    text = FENCE.sub("", doc.read_text())
    slugs: set[str] = set(re.findall(r"""<a (?:id|name)=["']([^"']+)""", text))
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in slugs:
            n += 1
            unique = f"{slug}-{n}"
        slugs.add(unique)
    return slugs


def defined_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def problem(cited: Citation) -> str | None:
    target = Path(os.path.normpath(cited.target))
    if not target.is_relative_to(ROOT):
        return "outside the repository"
    relative = target.relative_to(ROOT)
    for depth in range(len(relative.parts) - 1):
        parent, name = ROOT.joinpath(*relative.parts[:depth]), relative.parts[depth]
        if any(fnmatch(name, pattern) for pattern in gitignored(parent)):
            return None  # an output the docs describe, not a file of the repository
    if "*" in str(relative):
        return None if any(ROOT.glob(str(relative))) else "matches nothing"
    if cited.folder and not target.is_dir():
        return "no such folder"
    if not target.exists():
        return f"no such {cited.what}"
    if cited.anchor and target.suffix == ".md" and cited.anchor not in anchors(target):
        return f"{target.relative_to(ROOT)} has no heading #{cited.anchor}"
    if cited.name and target.suffix == ".py" and cited.name not in defined_names(target):
        if target.name == "__init__.py":
            return f"no such module, nor a name {target.parent.relative_to(ROOT)} defines"
        return f"{target.relative_to(ROOT)} defines no {cited.name}"
    return None


def broken(doc: Path, text: str) -> list[str]:
    return [f"{doc.relative_to(ROOT)}:{c.line}: {c.written}: {why}"
            for c in citations(doc, text) if (why := problem(c))]


@pytest.mark.parametrize("doc", documents(), ids=lambda doc: str(doc.relative_to(ROOT)))
def test_every_path_a_document_cites_exists(doc: Path) -> None:
    assert broken(doc, doc.read_text()) == []


def test_the_citation_check_reads_the_docs() -> None:
    """The rule finds what the docs do cite (so a change to it cannot quietly find nothing)."""
    design = citations(DOCS / "design.md", (DOCS / "design.md").read_text())
    written = {c.written for c in design}
    assert "test_real_installs.py" in {c.written for c in citations(DOCS / "manifests.md",
                                                                    (DOCS / "manifests.md").read_text())}
    assert {"tests/unit/test_layering.py", "dejima/core/schema.py", "orchestration/prestart.py", "ui/text.py",
            "docs/manifests.md", "tree_walk", "exit_audit"} <= written
    assert not written & {"dejima.scope", "dejima.session", "sessions/.lock"}
    assert "tree_walk" in {c.target.stem for c in design if c.target.parent.name == "adapters"}
    assert len({c.written for doc in documents() for c in citations(doc, doc.read_text())}) > 100


def test_the_citation_check_flags_what_is_missing_and_only_that() -> None:
    doc = DOCS / "example.md"
    text = "\n".join([
        "See [the design](design.md#layers) and [a gone page](gone.md), [a gone heading](egress.md#nowhere).",
        "The plan is `dejima/core/plan.py`; the missing one `dejima/core/nowhere.py`, prose tests/unit/nowhere.py.",
        "Short forms: `core/plan.py`, `core/nowhere.py`, prose adapters/nowhere.py, prose filter/diff/merge.",
        "Folders: `bench/` and `bench/run/`; a document elsewhere: research/nowhere.md.",
        "Modules: `dejima.core.gitpath`, `dejima.core.audit.watched`, `dejima.core.nowhere`, "
        "dejima.proxy.routes.Nothing; labels: `dejima.scope`.",
        "The user's: `~/.config/dejima/settings.toml`, `$XDG_STATE_HOME/dejima/sessions/`, `/workspace/dejima/x`,",
        "https://example.com/dejima/nowhere, `dejima/base:<suite>-minbase`, `dejima/<role>:<hash>`, sessions/x/y.",
        "Outputs: `bench/results/results.json`. Line numbers: `dejima/core/plan.py:1`, `dejima/core/nowhere.py:9`.",
        "Tests by name: `test_bedrock.py`, `test_nowhere.py`, prose test_gone.py.",
        "",
        "| layer | package |",
        "| --- | --- |",
        "| adapters | `dejima/adapters/`: `runtime`, `nowhere_module` (`Reporter`) | `gone_too` |",
        "",
        "```bash",
        "./scripts/test tests/unit/nowhere -q",
        "```",
    ])
    assert [line.split(":", 1)[1] for line in broken(doc, text)] == [
        "1: gone.md: no such file",
        "1: egress.md#nowhere: docs/egress.md has no heading #nowhere",
        "2: dejima/core/nowhere.py: no such file",
        "2: tests/unit/nowhere.py: no such file",
        "3: core/nowhere.py: no such file",
        "3: adapters/nowhere.py: no such file",
        "4: bench/run/: no such folder",
        "4: research/nowhere.md: no such file",
        "5: dejima.core.nowhere: no such module, nor a name dejima/core defines",
        "5: dejima.proxy.routes.Nothing: dejima/proxy/routes.py defines no Nothing",
        "8: dejima/core/nowhere.py: no such file",
        "9: test_nowhere.py: no such file",
        "13: nowhere_module: no such module",
        "16: tests/unit/nowhere: no such file",
    ]


# docs/testing.md: no sleep in tests/ or bench/ stands in for a condition. Each one there is of a kind the doc
# names, and is listed here (file, the sleep as written) -> (kind, how many times), so a new one fails until
# someone says which kind it is.
POLL = "a poll's interval"  # between two checks of a condition that has a deadline
SCENARIO = "the scenario"  # what the test is about is slow: a stalling upstream, a retrying agent
HELD = "a process held"  # kept alive until the test ends it
CLOCK = "the clock"  # time passing is what is measured or tested
TURN = "a loop turn"  # asyncio.sleep(0): the event loop runs what is ready; no time passes
SLEEPS: dict[tuple[str, str], tuple[str, int]] = {
    ("bench/dns.py", '"sleep"'): (HELD, 2),  # the anchor's container, the session's command
    ("bench/dns.py", "time.sleep(0.2)"): (POLL, 1),  # until the session's container runs
    ("bench/dns.py", "time.sleep(AFTER_SECONDS)"): (CLOCK, 1),  # until every answer's TTL has run out
    ("bench/grants.py", "sleep 300"): (HELD, 1),
    ("bench/pair.py", "sleep 120"): (HELD, 1),  # the measured pair's session, ended by the bench
    ("bench/pair.py", '"sleep"'): (HELD, 1),  # the anchor: a bare container of the session image
    ("bench/grants.py", "time.sleep(0.001)"): (SCENARIO, 1),  # the agent's loop retrying its connect
    ("bench/grants.py", "time.sleep(0.05)"): (POLL, 1),  # until the decoy says it listens
    ("bench/proxywire.py", "asyncio.sleep(0.02)"): (SCENARIO, 1),  # an upstream whose stream takes its time
    ("bench/proxywire.py", "time.sleep(0.05)"): (POLL, 1),  # until a port accepts
    ("tests/bedrockfake.py", "time.sleep(DRIP_SECONDS)"): (SCENARIO, 1),  # a model producing tokens
    ("tests/integration/conftest.py", "sleep 120"): (HELD, 1),
    ("tests/kubelet.py", '"sleep"'): (HELD, 1),  # the pod's infra container, which holds its network namespace
    ("tests/integration/test_audit.py", "sleep 300"): (HELD, 1),
    ("tests/integration/test_boundary_limits.py", '"sleep"'): (HELD, 2),  # os.execvp("sleep", ["sleep", "120"])
    ("tests/integration/test_concurrent.py", "sleep 300"): (HELD, 1),
    ("tests/integration/test_credential_isolation.py", "sleep 300"): (HELD, 1),
    ("tests/integration/test_doctor_session.py", "sleep 300"): (HELD, 3),  # the session doctor checks
    ("tests/integration/test_credentials.py", "time.sleep(DRIP_SECONDS)"): (SCENARIO, 1),  # a streaming model
    ("tests/integration/test_documented_examples.py", "sleep 300"): (HELD, 1),
    ("tests/integration/test_egress.py", "sleep 120"): (HELD, 1),
    ("tests/integration/test_egress.py", "sleep 300"): (HELD, 1),
    ("tests/integration/test_egress.py", "time.sleep(0.05)"): (POLL, 1),  # until the resolver lets a port go
    ("tests/integration/test_grants.py", "sleep 120"): (HELD, 3),
    ("tests/integration/test_grants.py", "time.sleep(0.05)"): (SCENARIO, 2),  # an agent retrying, pinging
    ("tests/integration/test_grants.py", "time.sleep(0.1)"): (SCENARIO, 1),  # an agent resolving again
    ("tests/integration/test_launcher_io.py", "sleep 0.1"): (HELD, 1),  # a loop that can run its TERM trap
    ("tests/integration/test_lifecycle.py", "sleep 0.1"): (HELD, 1),  # a loop that can run its TERM trap
    ("tests/integration/test_lifecycle.py", "sleep 300"): (HELD, 5),
    ("tests/integration/test_no_egress.py", "sleep 300"): (HELD, 1),
    ("tests/networld.py", "time.sleep(1.5)"): (SCENARIO, 1),  # a slow DNS answer
    ("tests/networld.py", "time.sleep(3600)"): (HELD, 1),  # the fake DNS server's main thread
    ("tests/unit/filter/test_set_batch.py", "asyncio.sleep(0)"): (TURN, 1),
    ("tests/unit/proxy/fakes.py", "time.sleep(0.15)"): (SCENARIO, 1),  # an upstream dripping its stream
    ("tests/unit/proxy/fakes.py", "time.sleep(3)"): (SCENARIO, 1),  # an upstream that does not answer
    ("tests/unit/proxy/test_proxy_memory.py", "time.sleep(0.05)"): (POLL, 1),  # until the proxy let go of a client
    ("tests/unit/proxy/test_signing.py", "asyncio.sleep(0)"): (POLL, 1),  # a check between the proxy's steps
    ("tests/unit/proxy/test_sources.py", "time.sleep(5)"): (SCENARIO, 1),  # a credential helper that hangs
    ("tests/unit/racy.py", "time.sleep(0.05)"): (CLOCK, 1),  # past the walk's racy window
    ("tests/unit/test_snapshot.py", "time.sleep(0.02)"): (CLOCK, 1),  # ctime's coarse tick before Linux 6.13
}
SLEEP = re.compile(r"(?:\b\w+\.)?\bsleep\([^)]*\)|\bsleep\s+(?:[\d.]+|\$\w+|infinity)\b|[\"']sleep[\"']")


def sleeps(root: Path) -> dict[tuple[str, str], int]:
    """Every sleep in tests/ and bench/ (Python, shell in strings, scripts): (file, as written) -> how many."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted([*(root / "tests").rglob("*"), *(root / "bench").rglob("*")]):
        if not path.is_file() or "__pycache__" in path.parts or path == Path(__file__) \
                or path.parent == root / "tests" / "data" / "kubernetes":  # vendored schemas (probe `sleep` actions)
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in SLEEP.finditer(text):
            key = (str(path.relative_to(root)), match.group(0))
            found[key] = found.get(key, 0) + 1
    return found


def test_every_sleep_in_the_tests_and_the_bench_is_of_a_kind_docs_testing_names() -> None:
    listed = {key: count for key, (_, count) in SLEEPS.items()}
    assert sleeps(ROOT) == listed, "a sleep is new, gone or moved: list it in SLEEPS with its kind, or wait for " \
                                   "a condition instead (docs/testing.md)"
    testing = " ".join((DOCS / "testing.md").read_text().split())
    assert all(f"**{kind}**" in testing for kind, _ in SLEEPS.values())
    assert "`SLEEPS` in tests/unit/test_docs.py" in testing


def test_the_sleep_inventory_sees_a_new_sleep(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text('import time\ntime.sleep(0.5)  # wait for the server\n'
                                                  'run(["sh", "-c", "sleep 2; echo go"])\n# sleep is not a call\n')
    (tmp_path / "bench" / "run").write_text("#!/bin/sh\nsleep $DELAY\n")
    assert sleeps(tmp_path) == {("tests/test_x.py", "time.sleep(0.5)"): 1, ("tests/test_x.py", "sleep 2"): 1,
                                ("bench/run", "sleep $DELAY"): 1}


def test_no_file_holds_a_merge_conflicts_markers() -> None:
    """A conflict left in a docstring or a document passes every other check: this one does not."""
    markers = re.compile(r"^(?:<{7}|>{7}) ", re.M)
    found = [str(path.relative_to(ROOT)) for pattern in ("dejima/**/*", "tests/**/*.py", "bench/**/*", "docs/*.md",
                                                         "*.md", "*.toml", "docker/**/*", "scripts/*")
             for path in ROOT.glob(pattern)
             if path.is_file() and path.suffix not in (".pyc",) and markers.search(path.read_text(errors="replace"))]
    assert found == []
