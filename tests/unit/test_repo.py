from pathlib import Path

import pytest

from dejima.adapters.repo import read_repo_policy, remote_hosts, workspace_facts


def test_remote_hosts_from_every_url_form() -> None:
    config = """
[core]
\tbare = false
[remote "origin"]
\turl = git@github.com:me/project.git
[remote "mirror"]
\turl = https://user@gitlab.example.org/group/project.git
\tpushurl = ssh://git@codeberg.org/me/project.git
[remote "local"]
\turl = /srv/git/project.git
"""
    assert remote_hosts(config) >= {"github.com", "gitlab.example.org", "codeberg.org"}


def test_workspace_facts_read_markers_and_remotes_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text("")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text('[remote "origin"]\n\turl = https://github.com/a/b\n')
    facts = workspace_facts(tmp_path)
    assert "Cargo.toml" in facts.root_files and facts.remote_hosts == {"github.com"}
    outside = tmp_path.parent / f"{tmp_path.name}-outside.toml"
    outside.write_text('[network]\ndeny = ["x.example"]\n')
    (tmp_path / ".dejima.toml").symlink_to(outside)
    assert read_repo_policy(tmp_path).deny == ()  # a link out of the tree is not read


def test_a_monorepos_markers_one_level_down_are_read_but_not_in_dependency_or_hidden_folders(
        tmp_path: Path) -> None:
    for path in ("backend/pyproject.toml", "frontend/package.json", "node_modules/x/Cargo.toml",
                 "node_modules/go.mod", ".github/go.mod", "target/pom.xml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-linked"
    elsewhere.mkdir()
    (elsewhere / "Gemfile").write_text("")
    (tmp_path / "linked").symlink_to(elsewhere)  # a link to a folder is not followed
    facts = workspace_facts(tmp_path)
    assert facts.sub_files == {"backend/pyproject.toml", "frontend/package.json"}


def test_repository_policy_may_only_narrow(tmp_path: Path) -> None:
    (tmp_path / ".dejima.toml").write_text(
        '[network]\ndeny = ["tracker.example"]\nallow = ["exfil.example"]\n[session]\nnetwork = "host"\n')
    policy = read_repo_policy(tmp_path)
    assert policy.deny == ("tracker.example",)
    assert set(policy.ignored) == {"network.allow", "session"}


@pytest.mark.parametrize(("text", "problem"), [
    ('[network]\ndeny = ["*.com"]\n', "'network.deny[0]' is not a valid egress entry ('*.com')"),
    ('[network]\ndeny = "x.example"\n', "'network.deny' must be a list of egress entries, not str"),
    ('[network]\ndeny = ["x.example"]\ndeny_reasons = { "y.example" = "r" }\n',
     "'network.deny_reasons.\"y.example\"' is a reason for an entry that is not in deny"),
])
def test_a_bad_repository_policy_is_named_with_its_key(tmp_path: Path, text: str, problem: str) -> None:
    from dejima.core.manifest import ManifestError

    (tmp_path / ".dejima.toml").write_text(text + '[session]\nnetwork = "host"\n')
    with pytest.raises(ManifestError) as caught:
        read_repo_policy(tmp_path)
    assert caught.value.message.startswith(f"{tmp_path / '.dejima.toml'}: {problem}")
