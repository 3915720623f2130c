"""The catalogue's glob index agrees with trying every glob on every path."""

import pytest

from dejima.core.audit.catalogue import PATH_RULES
from dejima.core.audit.globs import GlobIndex, _expand, matches

PATHS = [
    ".vscode/tasks.json", "a/b/.eslintrc.cjs", "web/eslint.config.mjs", "requirements/dev.txt", "requirements-dev.txt",
    "notes.txt", ".github/workflows/ci.yml", ".github/workflows/x/ci.yml", "docker-compose.override.yaml",
    "svc/compose.yml", "gradle/wrapper/gradle-wrapper.properties", "lib/gradle/deps.gradle.kts", "buildSrc/a/B.kt",
    ".mvn/wrapper/maven-wrapper.jar", "x/.terraform/providers/p", "main.tf", ".env", "app/.env.local", "prod.env",
    "cursor-mcp.json", ".cursor/mcp.json", "tools/bazel", "a/tools/bazel", ".storybook/main.js", "src/app.py",
    "Makefile", "sub/Makefile", ".claude/commands/x.md", "x/.claude/commands/x.md", "tsconfig.build.json",
    ".golangci.yaml", "project/plugins.sbt", "deep/project/build.properties", "a/b/c/CLAUDE.md", "README.md",
]


@pytest.mark.parametrize("path", PATHS)
def test_the_index_finds_exactly_the_matching_rules(path: str) -> None:
    index = GlobIndex((glob, rule) for rule in PATH_RULES for glob in rule.paths)
    brute = {id(rule) for rule in PATH_RULES for glob in rule.paths
             if any(matches(g, path) for g in _expand(glob))}
    assert {id(rule) for rule in index.lookup(path)} == brute
    assert index.may_match(path) or not brute


@pytest.mark.parametrize(("glob", "path", "expected"), [
    ("**/x.json", "x.json", True), ("**/x.json", "a/b/x.json", True), ("*.json", "a/x.json", False),
    (".idea/**", ".idea/a/b", True), (".idea/**", ".idea", False), ("a/{b,c}.txt", "a/c.txt", True),
    ("a/?.txt", "a/bb.txt", False),
])
def test_glob_syntax(glob: str, path: str, expected: bool) -> None:
    assert matches(glob, path) is expected
