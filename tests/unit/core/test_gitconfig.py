import pytest

from dejima.core.gitconfig import GitConfigError, parse_git_config


def test_names_case_and_subsections_follow_git() -> None:
    text = '[Core]\n\tHooksPath = .hooks\n[remote "Origin"]\n\turl = x\n[Alias]\n\tst = "!sh -c \\"id\\"" # c\n'
    assert parse_git_config(text) == [("core.hookspath", ".hooks"), ("remote.Origin.url", "x"),
                                       ("alias.st", '!sh -c "id"')]


def test_continued_lines_and_bare_booleans() -> None:
    text = "[core]\n\tfsmonitor = ./run\\\n.sh\n\tbare\n[section.Sub]\n\tkey = v ; comment\n"
    assert parse_git_config(text) == [("core.fsmonitor", "./run.sh"), ("core.bare", "true"),
                                       ("section.sub.key", "v")]


@pytest.mark.parametrize("text", ['[core]\n\tpager = "less\n', "key = outside\n", "[core]\n\t= x\n"])
def test_what_git_would_refuse_is_an_error(text: str) -> None:
    with pytest.raises(GitConfigError):
        parse_git_config(text)
