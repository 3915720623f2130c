"""Docs that are generated from code stay in sync with it."""

from pathlib import Path

from dejima.core.settings import render_settings_reference

DOCS = Path(__file__).parents[2] / "docs"


def test_settings_reference_is_current() -> None:
    assert render_settings_reference() in (DOCS / "settings.md").read_text(), (
        "regenerate docs/settings.md with `dejima settings reference`"
    )


def test_readme_starts_with_the_two_commands() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    block = readme.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split()[0] for line in block] == ["./scripts/quickstart", "./scripts/test"]
    assert "./scripts/test" in (DOCS.parent / ".ci" / "run").read_text()


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
