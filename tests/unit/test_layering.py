"""The architecture is enforced: each layer imports only its allowlist (docs/design.md's table), does only the
standard-library I/O its allowlist names (modules and names: ``open``, ``os.listdir``, ``Path.read_text``...), the
core is pure, the filter imports only what its image has, each library has one adapter, nothing imports
dynamically and no import closes a cycle."""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from dejima.adapters.packaged import FILTER_SHARED as SHIPPED_WITH_THE_FILTER

PACKAGE = Path(__file__).parents[2] / "dejima"

# The standard library's I/O modules: files of state, processes, the network, threads, the terminal. A layer
# imports only those its allowlist names.
STDLIB_IO = frozenset({
    "asyncio", "concurrent.futures", "ctypes", "dbm", "fcntl", "fileinput", "ftplib", "glob", "http.client",
    "http.server", "imaplib", "mmap", "multiprocessing", "poplib", "pty", "select", "selectors", "shelve", "shutil",
    "signal", "smtplib", "socket", "socketserver", "sqlite3", "ssl", "subprocess", "tempfile", "termios",
    "threading", "tty", "urllib.request", "webbrowser", "xmlrpc.client", "xmlrpc.server", "zipimport"})
# ``os`` names that touch no system state (the rest of os reads or changes the host: files, processes, env).
OS_PURE = frozenset({"os.sep", "os.linesep", "os.fspath", "os.fsencode", "os.fsdecode", "os.PathLike", "os.name",
                     "os.path", "os.path.join", "os.path.basename", "os.path.dirname", "os.path.split",
                     "os.path.splitext", "os.path.normpath", "os.path.isabs", "os.path.commonpath", "os.path.sep",
                     "os.path.normcase", "os.path.relpath"})
# Methods of pathlib's Path that reach the file system (re's match.group is why "group" is not one).
PATH_IO = frozenset({"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "exists", "is_file", "is_dir",
                     "is_symlink", "is_mount", "stat", "lstat", "glob", "rglob", "mkdir", "rmdir", "unlink", "touch",
                     "chmod", "lchmod", "resolve", "expanduser", "home", "cwd", "readlink", "symlink_to",
                     "hardlink_to", "samefile"})
# Imports the reader above cannot follow: refused in every layer.
DYNAMIC = frozenset({"__import__", "exec", "eval", "importlib.import_module", "importlib.__import__",
                     "importlib.reload", "importlib.util.module_from_spec", "runpy.run_module", "runpy.run_path"})
# What the filter image ships besides dejima/filter: the same list the image build uses.
FILTER_SHARED = {"dejima", *("dejima." + name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                             for name in SHIPPED_WITH_THE_FILTER if name != "__init__.py")}


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module.split(".")[0] != "dejima":  # from urllib import request: urllib.request
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:  # from dejima.adapters import runtime: dejima.adapters.runtime
                found.update(f"{node.module}.{alias.name}" for alias in node.names
                             if (PACKAGE.parent / node.module.replace(".", "/") / f"{alias.name}.py").exists()
                             or (PACKAGE.parent / node.module.replace(".", "/") / alias.name).is_dir())
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; dejima uses absolute imports only")
    return found


def modules(sub: str) -> list[Path]:
    return sorted((PACKAGE / sub).rglob("*.py"))


def top(name: str) -> str:
    return name.split(".")[0]


def dotted(node: ast.expr) -> str | None:
    """``os.path.exists`` for the expression os.path.exists; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def io_names_of(path: Path) -> set[str]:
    """The I/O a module does by name: builtin open, os's system names, Path's file-system methods, dynamic imports."""
    found = {name for name in imports_of(path) if name in DYNAMIC or (name.startswith("os.") and name not in OS_PURE)}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"open", *DYNAMIC}:
            found.add(node.func.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PATH_IO:
            name = dotted(node.func)
            found.add(name if name is not None and (name in DYNAMIC or name.startswith("os."))
                      else f"Path.{node.func.attr}")
        elif isinstance(node, ast.Attribute) and (name := dotted(node)) is not None:
            parts = name.split(".")
            if parts[0] == "os":  # os.environ.get is os.environ; os.path.exists stays whole
                name = ".".join(parts[:3] if parts[1:2] == ["path"] else parts[:2])
            if name in DYNAMIC or (parts[0] == "os" and name not in OS_PURE):
                found.add(name)
    return found


@dataclass(frozen=True)
class Layer:
    """What a layer's modules may import: dejima packages (a trailing '=' means the package's own
    __init__ only, e.g. the filter's protocol markers) and libraries (each for the modules named); and the
    standard library's I/O it may do: modules (of STDLIB_IO) and names (``open``, ``os.*``, ``Path.*``; ANY: all)."""

    packages: frozenset[str]
    libraries: dict[str, frozenset[str]]
    stdlib_io: frozenset[str] = frozenset()
    io_names: frozenset[str] = frozenset()


ANY = frozenset({"*"})
# docs/design.md's table, enforced: each layer imports the ones above it in this list, never below.
LAYERS = {
    "core": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.templates"}),
                  {"jinja2": frozenset({"core/render.py"}),
                   "yaml": frozenset({"core/configfiles.py", "core/kubernetes.py"}),
                   "re2": frozenset({"core/audit/linear.py"})}),
    # exactly the shipped modules ("=": no prefix), so nothing else of dejima reaches the image
    "filter": Layer(frozenset({"dejima.filter", *(name + "=" for name in FILTER_SHARED)}),
                    {"nftables": frozenset({"filter/nft.py"}), "dnslib": ANY},
                    frozenset({"asyncio", "ctypes", "signal", "socket", "threading"}), ANY),
    "adapters": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.filter="}),
                      {"tomlkit": frozenset({"adapters/tomledit.py"}),
                       "isal": frozenset({"adapters/pinned_archives.py"})},
                      frozenset({"fcntl", "shutil", "signal", "socket", "sqlite3", "ssl", "subprocess", "tempfile",
                                 "threading"}), ANY),
    "proxy": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.proxy", "dejima.adapters"}),
                   {"cryptography": frozenset({"proxy/authority.py"})},
                   frozenset({"asyncio", "signal", "ssl", "subprocess", "tempfile", "threading",
                              "urllib.request"}), ANY),
    # the session's processes and records; the workspace's files go through adapters (what is left is named)
    "orchestration": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.proxy",
                                      "dejima.orchestration", "dejima.filter="}), {},
                           frozenset({"shutil", "signal", "subprocess", "threading"}),
                           frozenset({"os.getuid", "os.link", "os.listdir", "Path.expanduser", "Path.resolve",
                                      "Path.exists", "Path.is_dir", "Path.unlink", "Path.home", "Path.is_symlink",
                                      "Path.mkdir", "Path.write_text", "Path.read_text", "Path.read_bytes",
                                      "Path.iterdir", "Path.rmdir"})),
    "ui": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.ui"}), {"rich": ANY}),
    # the public API (dejima/api/): the layers below, and of the terminal UI only the render's text
    "api": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.proxy", "dejima.orchestration",
                            "dejima.ui.views", "dejima.api"}), {}, frozenset(),
                 frozenset({"os.path.abspath", "os.path.expanduser"})),
    "cli": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.proxy", "dejima.orchestration",
                            "dejima.ui", "dejima.api", "dejima.cli", "dejima.filter="}), {"rich": ANY},
                 frozenset({"threading"}),
                 frozenset({"os.environ", "os.path.abspath", "os.path.expanduser", "Path.cwd", "Path.exists"})),
}
# Each library with named owners is imported by those modules and no other (one adapter per library).
ADAPTER_OWNERS = {library: set(owners) for layer in LAYERS.values() for library, owners in layer.libraries.items()
                  if owners != ANY}
TOP_LEVEL = {"__init__.py": Layer(frozenset(), {}), "__main__.py": Layer(frozenset({"dejima.cli"}), {}),
             "errors.py": Layer(frozenset(), {})}


def layer_of(path: Path) -> Layer:
    relative = path.relative_to(PACKAGE)
    if len(relative.parts) == 1:
        return TOP_LEVEL[relative.name]
    return LAYERS["core" if relative.parts[0] == "templates" else relative.parts[0]]


def may_import(layer: Layer, path: str, name: str) -> bool:
    import sys

    if name in DYNAMIC:
        return False
    if top(name) in sys.stdlib_module_names:
        io = next((m for m in STDLIB_IO if name == m or name.startswith(m + ".")), None)
        return io is None or io in layer.stdlib_io
    if name == "dejima":
        return True
    if top(name) == "dejima":
        return any(name == allowed[:-1] if allowed.endswith("=") else name == allowed or name.startswith(allowed + ".")
                   for allowed in layer.packages)
    owners = layer.libraries.get(top(name), frozenset())
    return owners == ANY or path in owners


def test_every_module_belongs_to_a_layer() -> None:
    outside = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if len(p.relative_to(PACKAGE).parts) == 1 and p.name not in TOP_LEVEL]
    assert not outside, "a module at the top of dejima/: put it in its layer's package"


def test_no_two_classes_or_type_aliases_share_a_name() -> None:
    """A name means one thing across dejima/: two ``Request``s (a session's and a DNS client's) read alike in a
    traceback and a search."""
    def type_names(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.ClassDef):
            return [node.name]
        if isinstance(node, ast.Assign):  # a type alias: CapWords (a CONSTANT is no type)
            return [t.id for t in node.targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()]
        return []

    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            for name in type_names(node):
                where.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_every_package_is_installed() -> None:
    """pyproject.toml names the packages a wheel holds: one left out installs nothing of it (an editable install
    hides that)."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(PACKAGE.parent).parts) for init in PACKAGE.rglob("__init__.py")}
    assert found - listed == set(), "add them to [tool.setuptools] packages"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_layer_allows(path: Path) -> None:
    relative = str(path.relative_to(PACKAGE))
    layer = layer_of(path)
    refused = sorted(name for name in imports_of(path) if not may_import(layer, relative, name))
    assert not refused, f"{relative} imports {refused}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_does_only_the_io_its_layer_allows(path: Path) -> None:
    layer = layer_of(path)
    refused = sorted(name for name in io_names_of(path) if name in DYNAMIC or (
        layer.io_names != ANY and name not in layer.io_names))
    assert not refused, f"{path.relative_to(PACKAGE)} does I/O its layer does not allow: {refused}"


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_no_allowance_goes_unused(name: str) -> None:
    """Each I/O module and name a layer is allowed is used there: the allowlist says what the layer does."""
    layer = LAYERS[name]
    paths = modules(name) + (modules("templates") if name == "core" else [])
    used_modules = {io for path in paths for imported in imports_of(path) for io in STDLIB_IO
                    if imported == io or imported.startswith(io + ".")}
    assert layer.stdlib_io - used_modules == set()
    if layer.io_names != ANY:
        assert layer.io_names - {n for path in paths for n in io_names_of(path)} == set()


HOLES = {  # each was let through before this test read names as well as modules
    "core listing a folder": ("core/probe.py", "import os\nnames = os.listdir('.')\n"),
    "core opening a file": ("core/probe.py", "text = open('x').read()\n"),
    "core reading a Path": ("core/probe.py", "from pathlib import Path\ntext = Path('x').read_text()\n"),
    "core importing os's listdir": ("core/probe.py", "from os import listdir\n"),
    "core reading the environment": ("core/probe.py", "import os\nhome = os.environ['HOME']\n"),
    "a dynamic import": ("adapters/probe.py", "import importlib\nm = importlib.import_module('dejima.ui.console')\n"),
    "a dynamic import by name": ("adapters/probe.py", "from importlib import import_module\n"),
    "__import__": ("proxy/probe.py", "m = __import__('dejima.ui.console')\n"),
    "the filter's urllib.request": ("filter/probe.py", "from urllib import request\n"),
    "http.client in the core": ("core/probe.py", "from http import client\n"),
    "a socket in the terminal UI": ("ui/probe.py", "import socket\n"),
    "a subprocess in the CLI": ("cli/probe.py", "import subprocess\n"),
    "sqlite in orchestration": ("orchestration/probe.py", "import sqlite3\n"),
    "a socket in the API": ("api/probe.py", "import socket\n"),
    "the API opening a file": ("api/probe.py", "text = open('x').read()\n"),
}


@pytest.mark.parametrize("hole", sorted(HOLES))
def test_each_hole_is_refused(hole: str, tmp_path: Path) -> None:
    """Control: a probe module doing each of these in its layer fails the checks above."""
    where, text = HOLES[hole]
    probe = tmp_path / "probe.py"
    probe.write_text(text)
    layer = LAYERS[where.split("/")[0]]
    refused = [name for name in imports_of(probe) if not may_import(layer, where, name)]
    refused += [name for name in io_names_of(probe)
                if name in DYNAMIC or (layer.io_names != ANY and name not in layer.io_names)]
    assert refused, f"{hole}: not refused"


def test_the_allowlist_refuses_a_layer_reaching_down(tmp_path: Path) -> None:
    """Control: orchestration importing the terminal UI, or an adapter importing docker outside its one module."""
    assert not may_import(LAYERS["orchestration"], "orchestration/start.py", "dejima.ui.console")
    assert not may_import(LAYERS["adapters"], "adapters/host.py", "tomlkit.items")
    assert not may_import(LAYERS["adapters"], "adapters/host.py", "dejima.filter.resolver")
    assert may_import(LAYERS["adapters"], "adapters/session_dirs.py", "dejima.filter")
    assert not may_import(LAYERS["core"], "core/plan.py", "dejima.adapters.runtime")
    # the filter image holds dejima/filter and the shipped core modules, nothing else of dejima
    assert not may_import(LAYERS["filter"], "filter/resolver.py", "dejima.orchestration.start")
    assert not may_import(LAYERS["filter"], "filter/resolver.py", "dejima.core.plan")
    assert may_import(LAYERS["filter"], "filter/resolver.py", "dejima.core.egress")
    # the public API sits between the CLI and the layers below: only the CLI imports it, and it shows nothing itself
    assert may_import(LAYERS["cli"], "cli/launch.py", "dejima.api")
    assert may_import(LAYERS["api"], "api/plans.py", "dejima.ui.views")
    for layer in ("core", "filter", "adapters", "proxy", "orchestration", "ui"):
        assert not may_import(LAYERS[layer], f"{layer}/probe.py", "dejima.api"), layer
    assert not may_import(LAYERS["api"], "api/plans.py", "dejima.ui.console")
    assert not may_import(LAYERS["api"], "api/plans.py", "dejima.cli.launch")
    assert not may_import(LAYERS["api"], "api/plans.py", "rich.console")
    assert not may_import(LAYERS["api"], "api/plans.py", "subprocess")


def test_core_is_pure() -> None:
    """The core (and its templates) imports no I/O module and does no I/O by name: its allowlists are empty."""
    assert LAYERS["core"].stdlib_io == frozenset() and LAYERS["core"].io_names == frozenset()
    assert layer_of(PACKAGE / "templates" / "nft_ruleset.py") is LAYERS["core"]


@pytest.mark.parametrize("module", sorted(FILTER_SHARED - {"dejima"}))
def test_modules_shared_with_the_filter_are_stdlib_only(module: str) -> None:
    import sys

    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    for name in imports_of(path):
        assert top(name) in sys.stdlib_module_names or name in FILTER_SHARED, f"{module} imports {name}"


@pytest.mark.parametrize("library", sorted(ADAPTER_OWNERS))
def test_each_library_has_one_adapter(library: str) -> None:
    importers = {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
        if any(top(name) == library for name in imports_of(p))
    }
    assert importers == ADAPTER_OWNERS[library]


def test_the_import_reader_sees_modules_imported_from_a_package(tmp_path: Path) -> None:
    """Control: `from dejima.adapters import runtime` names dejima.adapters.runtime, which the core may not import."""
    probe = tmp_path / "probe.py"
    probe.write_text("from dejima.adapters import runtime\nimport sqlite3\n")
    found = imports_of(probe)
    assert "dejima.adapters.runtime" in found and "sqlite3" in found
    assert not may_import(LAYERS["core"], "core/probe.py", "dejima.adapters.runtime")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                other = stack.pop()
                part.append(other)
                if other == node:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Every import counts, a deferred one inside a function or one under TYPE_CHECKING too."""
    names = {module_name(path): path for path in paths}
    return {name: {other for other in imports_of(path) if other in names and other != name}
            for name, path in names.items()}


def test_no_import_cycles() -> None:
    assert import_cycles(import_graph(sorted(PACKAGE.rglob("*.py")))) == []


def test_the_cycle_finder_sees_a_deferred_import_cycle(tmp_path: Path) -> None:
    """Control: a cycle closed by an import inside a function, or under TYPE_CHECKING, is a cycle."""
    package = tmp_path / "dejima"
    package.mkdir()
    (package / "a.py").write_text("from dejima.b import x\n")
    (package / "b.py").write_text("def x():\n    from dejima.c import y\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dejima.a import z\n")
    (package / "d.py").write_text("from dejima.a import x\n")
    graph = {f"dejima.{p.stem}": {i for i in imports_of(p) if i.count(".") == 1} for p in package.glob("*.py")}
    assert import_cycles(graph) == [["dejima.a", "dejima.b", "dejima.c"]]


def design_rows() -> dict[str, list[str]]:
    """docs/design.md's layer table: layer package (core, filter, ...) -> its cells."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text()
    section = text[text.index("## Layers"):].split("\n## ")[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        found = re.search(r"`dejima/(\w+)(?:/|\.py`)", cells[1]) if len(cells) == 5 else None
        if found:
            rows[found.group(1)] = cells
    return rows


def names_in(cell: str) -> frozenset[str]:
    """The I/O names of a table cell: `os.x` items, and `Path`: `a`, `b` (Path.a, Path.b)."""
    if cell == "all":
        return ANY
    if cell == "none":
        return frozenset()
    names: set[str] = set()
    for part in cell.split(";"):
        items = re.findall(r"`([\w.]+)`", part)
        if items and items[0] == "Path":
            names.update(f"Path.{item}" for item in items[1:])
        else:
            names.update(items)
    return frozenset(names)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_design_table_says_what_the_test_enforces(name: str) -> None:
    _, _, may_import_cell, io_modules, io_names = design_rows()[name]
    layer = LAYERS[name]
    for library, owners in layer.libraries.items():
        assert re.search(rf"\b{library}\b", may_import_cell), f"{name}: the table does not name {library}"
        if owners != ANY:  # core/audit/linear.py: audit/linear; two owners: "yaml (configfiles, kubernetes only"
            shown = ", ".join(sorted(owner.split("/", 1)[1].removesuffix(".py") for owner in owners))
            assert f"{library} ({shown} only" in may_import_cell, f"{name}: {library}'s owners {sorted(owners)}"
    listed = frozenset() if io_modules == "none" else frozenset(m.strip() for m in io_modules.split(","))
    assert listed == layer.stdlib_io
    assert names_in(io_names) == layer.io_names


def test_the_design_table_has_a_row_per_layer() -> None:
    assert set(design_rows()) == set(LAYERS)
