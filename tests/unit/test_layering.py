"""The architecture is enforced: each layer imports only its allowlist (docs/design.md's table), the core is
pure, the filter imports only what its image has, each library has one adapter."""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from dejima.adapters.packaged import FILTER_SHARED as SHIPPED_WITH_THE_FILTER

PACKAGE = Path(__file__).parents[2] / "dejima"

CORE_FORBIDDEN = {"docker", "requests", "nftables", "dnslib", "socket", "subprocess", "asyncio", "rich",
                  "threading", "dejima.adapters", "dejima.orchestration", "dejima.proxy", "dejima.ui",
                  # standard-library I/O: files of state, processes, the network, the terminal
                  "sqlite3", "ssl", "multiprocessing", "fcntl", "select", "selectors", "signal", "pty", "shutil",
                  "tempfile", "urllib.request", "http.client", "http.server", "ftplib", "smtplib"}
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
            if node.module.split(".")[0] == "dejima":  # from dejima.adapters import runtime: dejima.adapters.runtime
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


@dataclass(frozen=True)
class Layer:
    """What a layer's modules may import: dejima packages (a trailing '=' means the package's own
    __init__ only, e.g. the filter's protocol markers) and libraries (each for the modules named)."""

    packages: frozenset[str]
    libraries: dict[str, frozenset[str]]


ANY = frozenset({"*"})
# docs/design.md's table, enforced: each layer imports the ones above it in this list, never below.
LAYERS = {
    "core": Layer(frozenset({"dejima.core", "dejima.errors"}),
                  {"jinja2": frozenset({"core/render.py"}), "yaml": frozenset({"core/configfiles.py"}),
                   "re2": frozenset({"core/audit/linear.py"})}),
    # exactly the shipped modules ("=": no prefix), so nothing else of dejima reaches the image
    "filter": Layer(frozenset({"dejima.filter", *(name + "=" for name in FILTER_SHARED)}),
                    {"nftables": frozenset({"filter/nft.py"}), "dnslib": ANY}),
    "adapters": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.filter="}),
                      {"docker": frozenset({"adapters/runtime.py"}),
                       "tomlkit": frozenset({"adapters/tomledit.py"})}),
    "proxy": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.proxy", "dejima.adapters"}),
                   {"cryptography": frozenset({"proxy/authority.py"})}),
    "orchestration": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.proxy",
                                      "dejima.orchestration", "dejima.filter="}), {}),
    "ui": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.ui"}), {"rich": ANY}),
    "cli": Layer(frozenset({"dejima.core", "dejima.errors", "dejima.adapters", "dejima.proxy", "dejima.orchestration",
                            "dejima.ui", "dejima.cli", "dejima.filter="}), {"rich": ANY}),
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

    if top(name) in sys.stdlib_module_names or name == "dejima":
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


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_module_imports_only_what_its_layer_allows(path: Path) -> None:
    relative = str(path.relative_to(PACKAGE))
    layer = layer_of(path)
    refused = sorted(name for name in imports_of(path) if not may_import(layer, relative, name))
    assert not refused, f"{relative} imports {refused}"


def test_the_allowlist_refuses_a_layer_reaching_down(tmp_path: Path) -> None:
    """Control: orchestration importing the terminal UI, or an adapter importing docker outside its one module."""
    assert not may_import(LAYERS["orchestration"], "orchestration/app.py", "dejima.ui.console")
    assert not may_import(LAYERS["adapters"], "adapters/host.py", "docker.errors")
    assert not may_import(LAYERS["adapters"], "adapters/host.py", "dejima.filter.resolver")
    assert may_import(LAYERS["adapters"], "adapters/violations.py", "dejima.filter")
    assert not may_import(LAYERS["core"], "core/plan.py", "dejima.adapters.runtime")
    # the filter image holds dejima/filter and the shipped core modules, nothing else of dejima
    assert not may_import(LAYERS["filter"], "filter/resolver.py", "dejima.orchestration.start")
    assert not may_import(LAYERS["filter"], "filter/resolver.py", "dejima.core.plan")
    assert may_import(LAYERS["filter"], "filter/resolver.py", "dejima.core.egress")


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: p.name)
def test_core_is_pure(path: Path) -> None:
    bad = {name for name in imports_of(path) if name in CORE_FORBIDDEN or top(name) in CORE_FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


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
