"""The architecture is enforced: the core is pure, the filter imports only what its image has."""

import ast
from pathlib import Path

import pytest

from dejima.packaged import FILTER_SHARED as SHIPPED_WITH_THE_FILTER

PACKAGE = Path(__file__).parents[2] / "dejima"

CORE_FORBIDDEN = {"docker", "requests", "nftables", "dnslib", "socket", "subprocess", "asyncio", "rich",
                  "threading", "dejima.runtime", "dejima.host", "dejima.session", "dejima.ui",
                  # standard-library I/O: files of state, processes, the network, the terminal
                  "sqlite3", "ssl", "multiprocessing", "fcntl", "select", "selectors", "signal", "pty", "shutil",
                  "tempfile", "urllib.request", "http.client", "http.server", "ftplib", "smtplib"}
FILTER_ALLOWED_THIRD_PARTY = {"nftables", "dnslib"}
# What the filter image ships besides dejima/filter: the same list the image build uses.
FILTER_SHARED = {"dejima", *("dejima." + name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                             for name in SHIPPED_WITH_THE_FILTER if name != "__init__.py")}
ADAPTER_OWNERS = {"docker": {"runtime.py"}, "nftables": {"filter/nft.py"}}


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module.split(".")[0] == "dejima":  # from dejima import runtime: the module is dejima.runtime
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


# The core's allowlist: the standard library (minus the I/O modules above), its own modules, the
# errors, and one library each for the two modules that need one.
CORE_LIBRARIES = {"jinja2": {"render.py"}, "yaml": {"configfiles.py"}}


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_imports_only_its_allowlist(path: Path) -> None:
    import sys

    for name in imports_of(path):
        root = top(name)
        if root in sys.stdlib_module_names or name.startswith(("dejima.core", "dejima.errors")) or name == "dejima":
            continue
        assert path.name in CORE_LIBRARIES.get(root, set()), f"{path.relative_to(PACKAGE)} imports {name}"


@pytest.mark.parametrize("path", modules("core"), ids=lambda p: p.name)
def test_core_is_pure(path: Path) -> None:
    bad = {name for name in imports_of(path) if name in CORE_FORBIDDEN or top(name) in CORE_FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules("filter"), ids=lambda p: p.name)
def test_filter_imports_only_what_its_image_has(path: Path) -> None:
    import sys

    for name in imports_of(path):
        root = top(name)
        if root in sys.stdlib_module_names or root in FILTER_ALLOWED_THIRD_PARTY:
            continue
        assert name.startswith("dejima.filter") or name in FILTER_SHARED, f"{path.name} imports {name}"


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
    """Control: `from dejima import runtime` names dejima.runtime, which the core may not import."""
    probe = tmp_path / "probe.py"
    probe.write_text("from dejima import runtime\nimport sqlite3\n")
    found = imports_of(probe)
    assert "dejima.runtime" in found and "sqlite3" in found
    assert top("dejima.runtime") == "dejima" and not "dejima.runtime".startswith(("dejima.core", "dejima.errors"))
