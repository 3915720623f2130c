"""Ledger paths keep query names, drop values, and never hold a secret."""

from dejima.core.ledger import redact_target, scrub
from dejima.core.placeholders import SecretScanner


def test_query_values_go_names_stay() -> None:
    scanner = SecretScanner({}, {})
    assert redact_target("/v1/x?key=abc&beta=true", scanner) == "/v1/x?key&beta"
    assert redact_target("/o/r.git/info/refs?service=git-receive-pack", scanner) == \
        "/o/r.git/info/refs?service=git-receive-pack"
    assert len(redact_target("/" + "a" * 2000, scanner)) <= 513


def test_secrets_are_removed_in_any_case() -> None:
    scanner = SecretScanner({"route": ("sk-ant-api03-placeholderabc",)}, {"AWS": "AKIADECOY"})
    assert "real" not in scrub("/x/REALSECRET", scanner, ["realsecret"]).replace("<real secret>", "")
    assert scrub("/x/sk-ant-api03-placeholderABC", scanner, []) == "<placeholder route removed>"
    assert scrub("akiadecoy", scanner, []) == "<decoy AWS removed>"
