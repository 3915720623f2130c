"""The exit summary counts everything recorded for a session: the filter's refusals and grants, and the
credential proxy's refusals, which the proxy writes to the same file from its own thread."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dejima.adapters.session_dirs import ViolationStore, summarize
from dejima.core.ledger import Violation
from dejima.filter import VIOLATION
from dejima.proxy.records import Records


def test_filter_and_proxy_records_are_counted_by_kind() -> None:
    records = [{"kind": "dns"}, {"kind": "dns"}, {"kind": "connection"}, {"kind": "grant"},
               {"source": "proxy", "kind": "foreign-credential"}, {"source": "proxy", "kind": "push-refused"},
               {"source": "proxy", "kind": "decoy-used"}, {"kind": "canary"}]
    assert summarize(records) == ("2 name(s) refused, 1 connection(s) blocked, 1 decoy credential(s) used, "
                                  "2 request(s) refused by the credential proxy, 1 grant(s), 1 other")
    assert summarize([]) is None


def test_the_store_counts_what_the_proxy_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = ViolationStore("s1")
    assert store.append_line(VIOLATION + '{"kind": "dns", "domain": "x.example"}')
    records = Records(tmp_path / "ledger.jsonl", store.path)
    records.violation(Violation(time.time(), "foreign-credential", "anthropic-api-key", "not this session's"))
    records.close()
    assert store.summary() == "1 name(s) refused, 1 request(s) refused by the credential proxy"


def test_a_torn_line_is_counted_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = ViolationStore("s2")
    store.append_line(VIOLATION + '{"kind": "dns"}')
    with store.path.open("a") as stream:
        stream.write('{"kind": "conn')
    assert store.summary() == "1 name(s) refused, 1 other"
