"""Names that are another file's on a case-insensitive or normalising filesystem (F08)."""

import pytest

from dejima.core.audit.rules import audit
from dejima.core.snapshot import SnapshotEntry


def entry(path: str) -> SnapshotEntry:
    return SnapshotEntry(path, "file", 0o644, 1000, 1000, 3, 1, abs(hash(path)) % 10**9, 1, 1, sha256="0" * 64)


@pytest.mark.parametrize(("added", "evidence"), [
    ("docs/readme.md", "differs only in case from 'README.md'"),
    ("docs/RE\u1e00DME.md", None),  # another letter: no collision
    ("docs/cafe\u0301.md", "is the same text as 'caf\u00e9.md' in another Unicode normal form"),
    ("docs/notes.md", None),
])
def test_a_name_colliding_with_a_sibling_is_named(added: str, evidence: str | None) -> None:
    before = {p: entry(p) for p in ("docs/README.md", "docs/caf\u00e9.md", "docs/other.md")}
    after = {**before, added: entry(added)}
    found = [f for f in audit(before, after, lambda side, path: None) if f.rule == "F08"]
    assert [f.evidence for f in found] == ([f"the name {evidence}"] if evidence else [])
