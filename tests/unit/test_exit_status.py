"""Exit statuses are named in one place (dejima/errors.py's ExitStatus): no other module of dejima writes one as
a bare number, whether it exits with it, puts it on an error or returns it from a command."""

import ast
from pathlib import Path

from dejima.errors import ExitStatus

PACKAGE = Path(__file__).parents[2] / "dejima"
EXITS = {"exit", "_exit"}  # sys.exit, os._exit, exit


def bare_statuses(tree: ast.AST) -> list[int]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            values = [*node.args[:1]] if name in EXITS | {"SystemExit"} else []
            values += [k.value for k in node.keywords if k.arg == "exit_code"]
            found += [v.lineno for v in values if isinstance(v, ast.Constant) and isinstance(v.value, int)]
    return found


def test_no_module_but_errors_writes_a_bare_exit_status() -> None:
    offenders = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
                 if path.name != "errors.py" and (lines := bare_statuses(ast.parse(path.read_text())))}
    assert offenders == {}


def test_the_check_sees_bare_statuses() -> None:  # control
    source = "sys.exit(3)\nos._exit(4)\nraise SystemExit(1)\nE('x', exit_code=2)\n"
    assert bare_statuses(ast.parse(source)) == [1, 2, 3, 4]
    assert bare_statuses(ast.parse("sys.exit(ExitStatus.USAGE)\nE('x', exit_code=ExitStatus.USAGE)\n")) == []


def test_signalled_is_the_shells_128_plus_n() -> None:
    assert ExitStatus.signalled(2) == ExitStatus.INTERRUPTED == 130
