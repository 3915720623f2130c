"""Every kind of violation the proxy records is described in core/ledger.py's VIOLATION_KINDS (what
`dejima violations` readers go by), and every described kind is one the proxy can record."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dejima.core.ledger import VIOLATION_KINDS

PACKAGE = Path(__file__).parents[2] / "dejima"
KIND = re.compile(r"[a-z]+(-[a-z]+)+\Z")
# Where a kind is written: violation(kind, ...), the git guard's _refuse(server, exchange, kind, ...),
# Refusal(status, reason, route, kind).
KIND_ARGUMENT = {"violation": 0, "_refuse": 2, "Refusal": 3}


def recorded_kinds(paths: list[Path]) -> set[str]:
    kinds: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            values = [k.value for k in node.keywords if k.arg == "violation"]
            if name in KIND_ARGUMENT and len(node.args) > KIND_ARGUMENT[name]:
                values.append(node.args[KIND_ARGUMENT[name]])
            kinds.update(v.value for v in values
                         if isinstance(v, ast.Constant) and isinstance(v.value, str) and KIND.match(v.value))
    return kinds


def test_recorded_and_described_kinds_are_the_same() -> None:
    paths = sorted((PACKAGE / "proxy").glob("*.py")) + [PACKAGE / "core" / "admission.py"]
    assert recorded_kinds(paths) == set(VIOLATION_KINDS)


def test_the_reader_finds_each_way_of_writing_a_kind(tmp_path: Path) -> None:
    """Control: a new kind written any of the three ways is seen (and would fail the test above)."""
    probe = tmp_path / "probe.py"
    probe.write_text('server.violation("new-kind", route, "x")\n_refuse(s, e, "other-kind", r, "m")\n'
                     'Refusal(403, "why", route, "third-kind")\nRefusal(403, "why", violation="fourth-kind")\n')
    assert recorded_kinds([probe]) == {"new-kind", "other-kind", "third-kind", "fourth-kind"}
