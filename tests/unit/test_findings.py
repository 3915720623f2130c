from pathlib import Path

from dejima.core.audit import Finding
from dejima.findings import FindingStore


def finding(value: str) -> Finding:
    return Finding("G-config", "high", ".git/config", "core.pager", f"core.pager = {value}", f"fp-{value}")


def test_findings_survive_a_reopen_and_acks_bind_to_content(tmp_path: Path) -> None:
    db = tmp_path / "audit.sqlite3"
    store = FindingStore(db)
    assert store.record("s1", "/w", [finding("less")]) == 1
    assert store.record("s1", "/w", [finding("less")]) == 0  # the same content is one finding
    store.close()
    store = FindingStore(db)
    (stored,) = store.findings("/w")
    assert store.ack([stored.id], "reviewed: my pager") == 1
    assert store.findings("/w") == []
    store.record("s2", "/w", [finding("less")])
    assert store.findings("/w") == []  # same content: still reviewed
    store.record("s3", "/w", [finding("more")])
    assert [s.finding.evidence for s in store.findings("/w")] == ["core.pager = more"]  # changed: open again
    assert len(store.findings("/w", include_acked=True)) == 2


def test_an_ack_covers_its_own_workspace_only(tmp_path: Path) -> None:
    store = FindingStore(tmp_path / "audit.sqlite3")
    store.record("s1", "/a", [finding("less")])
    store.record("s2", "/b", [finding("less")])
    store.ack([store.findings("/a")[0].id], "fine here")
    assert store.findings("/a") == [] and len(store.findings("/b")) == 1
