"""The catalogue's path rules applied to a session's changes: a changed file at a listed place is a
finding; a parsed one is diffed key by key, so only the keys that make it run something count."""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from dejima.core.audit.catalogue import CONTEXT, KEY_RULE_TITLES, PATH_RULES, KeyRule, PathRule
from dejima.core.audit.globs import GlobIndex
from dejima.core.audit.isolation import judged
from dejima.core.audit.linear import PatternSet, encoded
from dejima.core.audit.model import MOUNT_KINDS, Finding, View, finding, in_dependency_tree
from dejima.core.audit.treeroots import changed_in_tree, judged_by_tree
from dejima.core.audit.values import VALUE_TESTS
from dejima.core.configfiles import ConfigParseError, parse_config
from dejima.core.snapshot import Change

_VALUE_LIMIT = 160
_CONTEXT_SHOWN = 6
_UNIT = re.compile(r"(.*?\.\d+)\.")  # a key's list item: "tasks.0" of "tasks.0.command"
_NARROWING = re.compile(r"(?i)(?:^|\.)(?:deny|disabled\w*|exclude\w*|block\w*|ask|ignore-scripts)(?:\.|$)")


@lru_cache(maxsize=None)
def _index(kind: str, folded: bool = False) -> GlobIndex:
    """The path rules of one mount kind, indexed when first asked (not at import: commands that
    show findings never match paths)."""
    if kind not in MOUNT_KINDS:
        raise KeyError(kind)
    return GlobIndex((glob.casefold() if folded else glob, rule)
                     for rule in PATH_RULES if kind in rule.mounts for glob in rule.paths)


def has_own_rules(path: str) -> bool:
    """Where a session's start keeps no bytes: git directories (git.py's rules read them) and the
    names dependency trees usually have, thousands of files. A cost bound only: which trees are
    trees is decided at the end, by what their tools leave (treeroots.py), and a file the start did
    not keep is judged with every key new."""
    return in_dependency_tree(path) or _in_git_dir(path)


def _in_git_dir(path: str) -> bool:
    return ".git" in path.split("/")


def rules_for(path: str, kind: str = "workspace") -> list[PathRule]:
    index = _index(kind)
    if not index.may_match(path) or (kind == "workspace" and _in_git_dir(path)):
        return []
    return [rule for rule in index.lookup(path) if isinstance(rule, PathRule)]


def rules_for_folded(path: str, kind: str = "workspace") -> list[PathRule]:
    """Rules a case-folded path matches once the globs are case-folded too (name tricks)."""
    if kind == "workspace" and _in_git_dir(path):
        return []
    return [rule for rule in _index(kind, True).lookup(path.casefold()) if isinstance(rule, PathRule)]


def kept_by_rules(path: str, kind: str = "workspace") -> bool:
    """Whether the start snapshot keeps this file's bytes: the rules diff them, restore puts them
    back. Rules over a whole language's files (*.go) keep nothing: too many files to read at start."""
    return not (kind == "workspace" and has_own_rules(path)) and any(rule.keep for rule in rules_for(path, kind))


def _lines(data: bytes, fmt: str) -> dict[str, str]:
    text = data.decode("utf-8", "surrogateescape")
    if fmt == "version":
        return {"version": text.strip()}
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if fmt == "tool-versions":
            tool, _, spec = line.partition(" ")
            pairs[tool] = spec.strip()
        else:  # requirements: each line is its own key
            pairs[line] = line
    return pairs


def parse(fmt: str, data: bytes) -> dict[str, str]:
    if fmt in ("version", "tool-versions", "requirements"):
        return _lines(data, fmt)
    return parse_config(fmt, data)


@lru_cache(maxsize=None)
def _key_patterns(patterns: tuple[str, ...]) -> PatternSet:
    """A rule's key globs ('*' crosses dots), matched together against a whole key in one pass."""
    return PatternSet(["(?s)" + re.escape(p.lower()).replace(r"\*", ".*") for p in patterns], anchored=True)


def _match_key(rule: PathRule, key: str, value: str, view: View, base_dir: str) -> KeyRule | None:
    # VS Code language blocks ("[python]": {...}) hold the same settings as the top level.
    lowered = re.sub(r"^\[[^\]]*\]\.", "", key.lower())
    for index in _key_patterns(tuple(k.pattern for k in rule.keys)).matching(encoded(lowered)):
        key_rule = rule.keys[index]
        if not key_rule.when or VALUE_TESTS[key_rule.when](value, view, base_dir):
            return key_rule
    return None


def _short(value: str) -> str:
    return value if len(value) <= _VALUE_LIMIT else value[:_VALUE_LIMIT] + "..."


def _key_findings(rule: PathRule, path: str, view: View) -> tuple[list[Finding], list[str]] | None:
    """Findings for the keys that changed, and the changed keys that run nothing (context); None
    when the file no longer parses."""
    assert rule.fmt is not None
    data = view.data(path)
    if data is None and view.entry(path) is not None:
        return None  # too big or unreadable: as good as unparseable
    try:
        after = parse(rule.fmt, data) if data is not None else {}  # a removed file has no keys left
    except ConfigParseError:
        return None
    before_data = view.data(path, "before")
    try:
        before = parse(rule.fmt, before_data) if before_data is not None else {}
    except ConfigParseError:
        before = {}
    base_dir = path.rpartition("/")[0]
    found, context = [], []
    for key, value in after.items():
        if before.get(key) == value:
            continue
        key_rule = _match_key(rule, key, value, view, base_dir)
        severity = key_rule.severity if key_rule else rule.other_keys
        if severity == CONTEXT:
            context.append(f"{key} = {_short(value)!r}")
            continue
        if severity is None:
            continue
        was = f" (was {_short(before[key])!r})" if key in before else ""
        rule_id = key_rule.rule if key_rule and key_rule.rule else rule.id
        title = KEY_RULE_TITLES.get(rule_id, rule.title)
        found.append(finding(rule_id, severity, path, f"{title}: {key} = {_short(value)!r}{was}", value, key,
                             rule.remedy))
    found = _in_running_units(rule, found, after, view, base_dir)
    for key in before.keys() - after.keys():
        # A deny list that loses an entry widens what runs (an index shift shows as a change above).
        key_rule = _match_key(rule, key, before[key], view, base_dir) if _NARROWING.search(key) else None
        if key_rule is not None and key_rule.severity != CONTEXT:
            rule_id = key_rule.rule or rule.id
            found.append(finding(rule_id, key_rule.severity, path, f"{rule.title}: {key} removed (was "
                                 f"{_short(before[key])!r})", f"removed:{before[key]}", key, rule.remedy))
    return found, context


def _in_running_units(rule: PathRule, found: list[Finding], after: dict[str, str], view: View,
                      base_dir: str) -> list[Finding]:
    """A changed key of a list item (one task) that already held a critical key (it runs on folder open) is
    as critical as a new such item: pointing the user's own auto-run task, or a reviewed one, at a new
    command is no mere "command changed"."""
    if not found or not any(k.severity == "critical" for k in rule.keys):
        return found
    units: dict[str, tuple[str, str]] = {}  # unit -> the critical key and its value
    for key, value in after.items():
        unit = _UNIT.match(key)
        if unit is not None and unit[1] not in units:
            key_rule = _match_key(rule, key, value, view, base_dir)
            if key_rule is not None and key_rule.severity == "critical":
                units[unit[1]] = (key, value)
    flagged = {item.key for item in found}  # a trigger that changed too is its own (critical) finding
    raised = []
    for item in found:
        unit = _UNIT.match(item.key)
        trigger = units.get(unit[1]) if unit is not None else None
        if unit is not None and trigger is not None and trigger[0] not in flagged and item.severity != "critical":
            item = replace(item, severity="critical", notes=(
                *item.notes, f"in {unit[1]}, which runs by itself: {trigger[0]} = {_short(trigger[1])!r}"))
        raised.append(item)
    return raised


def _with_context(found: list[Finding], context: list[str]) -> list[Finding]:
    if not context or not found:
        return found  # context alone is no finding: nothing that runs changed
    shown = ", ".join(context[:_CONTEXT_SHOWN]) + (f" and {len(context) - _CONTEXT_SHOWN} more"
                                                   if len(context) > _CONTEXT_SHOWN else "")
    return [replace(found[0], lines=(*found[0].lines, f"context: {shown}")), *found[1:]]


def _apply(rule: PathRule, path: str, change: Change, view: View) -> list[Finding]:
    new = change.after
    assert new is not None
    file_severity = (rule.added if change.what == "added" and rule.added else rule.severity)
    if new.kind == "symlink":
        # The host's tools read through the link: whatever it points at is this config now.
        return [finding(rule.id, rule.worst, path, f"{rule.title}: now a link to {new.target}", new.target or "",
                        remedy=rule.remedy)]
    if new.kind != "file":
        return []
    value = new.sha256 or ""
    if rule.grep is not None:
        pattern = re.compile(rule.grep)
        hits = [line.strip() for line in view.new_lines(path) if pattern.search(line)]
        if not hits:
            return []
        return [finding(rule.id, file_severity or "medium", path, f"{rule.title}: {_short(hits[0])}", value,
                        remedy=rule.remedy)]
    if rule.fmt is not None:
        parsed = _key_findings(rule, path, view)
        if parsed is None:
            return [finding(rule.id, rule.worst, path,
                            f"{rule.title}: {change.what}, and cannot be read or parsed as {rule.fmt}", value,
                            remedy=rule.remedy)]
        keyed, context = parsed
        if keyed or context or file_severity is None:
            return _with_context(keyed, context)
    if file_severity is None:
        return []
    return [finding(rule.id, file_severity, path, f"{rule.title}: {change.what}", value, remedy=rule.remedy)]


def _tree_judges(path: str, view: View) -> bool:
    """In the workspace, a recognised dependency tree's files are judged by its own rules (trees.py):
    a package.json deep in node_modules is not the project's."""
    return view.kind == "workspace" and judged_by_tree(path, view)


def _removed(rule: PathRule, path: str, view: View) -> list[Finding]:
    """A deleted config can lift a deny list (an .npmrc's ignore-scripts...)."""
    return (_key_findings(rule, path, view) or ([], []))[0]


def config_findings(view: View) -> list[Finding]:
    """Each rule on each path judged on its own (isolation): one that fails is a finding there."""
    found: list[Finding] = []
    # A tree's paths, told once per directory, are its own rules' (but a conftest.py: judged_by_tree).
    known = changed_in_tree(view) if view.kind == "workspace" else {}
    for path, change in view.changed.items():
        if known.get(path) and not path.endswith("/conftest.py"):
            continue
        # The tree first: asked once per directory, where the catalogue's globs are tried per path.
        rules = rules_for(path, view.kind) if change.after is not None and not _tree_judges(path, view) else []
        if rules:
            for rule in rules:
                found.extend(judged(view, rule.id, path, _apply, rule, path, change, view))
    for change in view.changes:
        if change.what != "removed":
            continue
        parsed = [rule for rule in rules_for(change.path, view.kind) if rule.fmt]
        if parsed and not _tree_judges(change.path, view):
            for rule in parsed:
                found.extend(judged(view, rule.id, change.path, _removed, rule, change.path, view))
    return found
