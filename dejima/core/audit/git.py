"""Git rules (research §3.1): hooks, config keys (with includes), the git dir itself, nested and
bare repositories, attributes that name drivers, replace refs, operations left in progress.

Git is never run: its files are read as text (gitconfig.py), in every git directory of the mount:
the top one, submodules' (.git/modules/...), worktrees' (.git/worktrees/...) and nested ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from operator import methodcaller

from dejima.core.audit.catalogue import GIT_ALLOWED, GIT_BUILTINS, GIT_HOUSEKEEPING, GIT_INNER, GIT_KEYS
from dejima.core.audit.gitindex import GitIndexError, hash_size, hidden_paths, start_flags_key
from dejima.core.audit.globs import matches
from dejima.core.audit.isolation import correlated, judged
from dejima.core.audit.model import Finding, View, finding, rank, resolve
from dejima.core.gitconfig import GitConfigError, parse_git_config
from dejima.core.snapshot import Change, Snapshot

# What a git directory holds: after modules/<name>/ the first of these starts the inner path.
_GIT_ENTRIES = {"hooks", "config", "config.worktree", "HEAD", "objects", "refs", "info", "logs", "index",
                "packed-refs", "commondir", "gitdir", "modules", "worktrees", "description", "FETCH_HEAD",
                "ORIG_HEAD", "COMMIT_EDITMSG", "rebase-merge", "rebase-apply", "sequencer", "MERGE_HEAD"}
_ATTRIBUTE_DRIVER = re.compile(r"(?:^|\s)(filter|diff|merge|working-tree-encoding)=(\S+)")
_CONFIG_FILES = ("config", "config.worktree")
_TOP_CONFIGS = (".gitmodules", ".lfsconfig")  # read as git config too


@dataclass(frozen=True, slots=True)
class GitPath:
    gitdir: str  # mount-relative path of the git directory ("" for a bare repository at the root)
    inner: str  # path inside it


def split_git(path: str, view: View | None = None) -> GitPath | None:
    """Where a path sits inside a git directory, if it does."""
    parts = path.split("/") if ".git" in path else ()  # most paths have no .git at all: not split
    if ".git" not in parts:
        return _in_bare_repo(path, view) if view is not None else None
    at = parts.index(".git")
    gitdir, rest = "/".join(parts[:at + 1]), parts[at + 1:]
    # Submodules' and worktrees' git dirs live inside the top one; they nest.
    while len(rest) > 2 and rest[0] in ("modules", "worktrees"):
        names = rest[1:]
        end = 1 if rest[0] == "worktrees" else next((i for i, p in enumerate(names) if p in _GIT_ENTRIES and i), 0)
        if end == 0:
            break
        gitdir, rest = "/".join([gitdir, rest[0], *names[:end]]), names[end:]
    return GitPath(gitdir, "/".join(rest))


def _passed_by(path: str, view: View, hooks: str | None) -> bool:
    """Whether a path is, on its face, in no git directory (``split_git`` finds none: no ".git" in
    it, and no bare repository in the mount) and under no hooks path: most paths, not split."""
    return ".git" not in path and not hooks and not _bare_repositories(view)


def _in_git_directories(view: View) -> dict[str, Change]:
    """The changed paths with ".git" in them, and their change: the only ones split_git can place
    in a .git directory (an install's thousands have none; picked once per audit, in C)."""
    if "changed-with-.git" not in view.memo:
        changed = view.changed
        view.memo["changed-with-.git"] = {path: changed[path] for path in filter(methodcaller("__contains__", ".git"),
                                                                                 changed)}
    return view.memo["changed-with-.git"]  # type: ignore[return-value]


def _is_bare_repo(directory: str, snapshot: Snapshot) -> bool:
    prefix = f"{directory}/" if directory else ""
    return f"{prefix}HEAD" in snapshot and f"{prefix}objects" in snapshot and f"{prefix}refs" in snapshot


def _in_bare_repo(path: str, view: View) -> GitPath | None:
    if not _bare_repositories(view):
        return None  # most trees hold none: no walk up the directories of each path
    repository = view.directory_above("bare-repository", path.rpartition("/")[0],
                                      lambda directory: _is_bare_repo(directory, view.after))
    return GitPath(repository, path[len(repository) + 1:]) if repository else None


def _bare_repositories(view: View) -> bool:
    """Whether any directory below the mount's root, outside a .git, may hold a bare repository
    now (HEAD, objects, refs; asked once per audit). Only paths with no .git component are looked
    up in one (split_git), so a .git directory, which holds the same, is none of theirs. Looking
    costs a pass over every entry: worth it only when the changes are a good part of them (an
    install), else each path's directories are asked (True: may)."""
    cached = view.memo.get("bare-repositories")
    if cached is None:
        cached = view.memo["bare-repositories"] = not view.worth_a_pass() or any(
            _is_bare_repo(directory, view.after) for path in view.named("HEAD")
            if (directory := path.rpartition("/")[0]) and ".git" not in directory.split("/"))
    return bool(cached)



def _housekeeping(inner: str) -> bool:
    return inner.startswith(GIT_HOUSEKEEPING)  # alternates, under objects/, are GIT_INNER's first


def housekeeping(path: str) -> bool:
    """A file git itself rewrites during ordinary work (objects, packs, refs, logs, the index), in
    any git directory of the mount: what a host-side `git gc` changes while a walk runs."""
    where = split_git(path)
    if where is None or not where.inner or where.inner.startswith("hooks"):
        return False
    return _housekeeping(where.inner) and not any(matches(p, where.inner) for p, _, _, _ in GIT_INNER)


def _parse(text: str | None) -> list[tuple[str, str]] | None:
    if text is None:
        return []
    try:
        return parse_git_config(text)
    except GitConfigError:
        return None


def key_rule(key: str, value: str, before: list[tuple[str, str]]) -> tuple[str, str] | None:
    """(rule, severity) for a git config key set to value; None for keys ordinary work sets."""
    lowered = key.lower()
    if any(fnmatchcase(lowered, pattern) for pattern in GIT_ALLOWED):
        return None
    if re.fullmatch(r"branch\..*\.(remote|merge)", lowered):
        remote = value if lowered.endswith(".remote") else None
        known = {k for k, _ in before}
        if remote is None or f"remote.{remote}.url" in known or remote == ".":
            return None
        return ("G16", "high")
    rule, severity = next(((r, s) for p, r, s in GIT_KEYS if fnmatchcase(lowered, p)), ("X04", "medium"))
    if rule == "G04" and value.lower() in ("true", "false"):
        return (rule, "low")  # the built-in daemon, not a command
    if rule == "G10":
        name = key.split(".", 1)[1]
        if name.lower() in GIT_BUILTINS:
            return (rule, "low")  # git ignores an alias that shadows a built-in
        if value.lstrip().startswith("!"):
            return (rule, "critical")
    if rule == "G17" and lowered.endswith(".update") and value.lstrip().startswith("!"):
        return (rule, "critical")
    if rule == "G17" and (value.startswith("-") or "ext::" in value or ".." in value or "\r" in value):
        return (rule, "critical")
    return (rule, severity)


def _config_findings(path: str, view: View, included_by: str = "") -> list[Finding]:
    text = view.text(path)
    after = _parse(text)
    if after is None or (text is None and view.entry(path) is not None):  # unparseable, or too big to read
        return [finding("G12" if included_by else "X04", "high", path, "git config no longer parses or cannot be "
                        "read whole", view.data(path) or b"", remedy="restore")]
    before = _parse(view.text(path, "before")) or []
    old = set(before)
    found = []
    for key, value in after:
        if (key, value) in old:
            continue
        rule = key_rule(key, value, before)
        if rule is None:
            continue
        where = f" (included by {included_by})" if included_by else ""
        found.append(finding(rule[0], rule[1], path, f"git config{where}: {key} = {value!r}", value, key, "restore"))
    return found


def git_dirs(view: View) -> Iterator[str]:
    """Git directories at the end: any .git directory, and submodules' and worktrees' inside them
    (a directory holding a HEAD under .git/modules or .git/worktrees)."""
    for path in view.named(".git"):
        if view.after[path].kind == "dir":
            yield path
    for head in view.named("HEAD"):
        directory = head.rpartition("/")[0]
        if re.search(r"\.git/(?:modules/.+|worktrees/[^/]+)\Z", directory):
            yield directory


def config_paths(view: View) -> list[str]:
    """Every git config file at the end (not followed through includes; see include_targets)."""
    found = [f"{d}/{name}" for d in git_dirs(view) for name in _CONFIG_FILES if f"{d}/{name}" in view.after]
    return [*found, *(p for p in _TOP_CONFIGS if p in view.after)]


def include_targets(config_path: str, text: str | None) -> list[str]:
    """Mount-relative files a git config includes (conditions treated as always true)."""
    base = config_path.rpartition("/")[0]
    targets = []
    for key, value in _parse(text) or []:
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            target = resolve(base, value)
            if target:
                targets.append(target)
    return targets


def _hooks_path(view: View) -> str | None:
    for key, value in _parse(view.text(".git/config")) or []:
        if key == "core.hookspath":
            return resolve("", value)
    return None


# Files other tools keep in a git directory, which git never reads: low when they hold what the tool
# writes there (anything else in them is the ordinary X03).
_TOOL_FILES = {"opencode": ("OpenCode's project id (the root commit's hash)", re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}"))}


def _inner_findings(path: str, where: GitPath, view: View) -> list[Finding]:
    change = view.changed[path]
    new = change.after
    assert new is not None
    inner, value = where.inner, new.sha256 or new.target or new.kind
    if inner == "hooks" and change.what == "type":
        return [finding("G01", "critical", path, f"the hooks directory became a {new.kind}", value, remedy="restore")]
    for pattern, rule, severity, title in GIT_INNER:
        if matches(pattern, inner) and not inner.endswith(".sample") and new.kind != "dir":
            if rule == "G01" and ("/modules/" in where.gitdir or "/worktrees/" in where.gitdir):
                rule = "G02"
            if rule == "G22":
                planted = any(re.match(r"\s*(exec|x)\s", line) for line in view.new_lines(path))
                if view.entry(path, "before") is not None and not planted:
                    return []  # an operation already in progress at the start, moving on
                severity = "critical" if planted else severity
            return [finding(rule, severity, path, f"{title} ({change.what})", value, remedy="restore")]
    if inner in _CONFIG_FILES or _housekeeping(inner) or new.kind == "dir":
        return []
    tool = _TOOL_FILES.get(inner)
    if tool is not None and new.kind == "file" and tool[1].fullmatch((view.text(path) or "").strip()):
        return [finding("X03", "low", path, f"{change.what} inside a git directory: {tool[0]}, which git does not "
                        "read", value, remedy="restore")]
    return [finding("X03", "medium", path, f"{change.what} inside a git directory", value, remedy="restore")]


def _replace_refs(view: View) -> list[Finding]:
    found = []
    for path in _in_git_directories(view):
        where = split_git(path)
        if where is not None and where.inner == "packed-refs":
            new = [line for line in view.new_lines(path) if " refs/replace/" in line]
            if new:
                found.append(finding("G21", "high", path, f"packed replace ref: {new[0][:120]}", "\n".join(new),
                                     remedy="restore"))
    return found


def _attribute_drivers(view: View) -> tuple[dict[tuple[str, str], tuple[bool, str]], list[Finding]]:
    """Drivers named by attribute files at the end -> (whether that naming changed, the file that
    names it); plus G18 for new namings."""
    named: dict[tuple[str, str], tuple[bool, str]] = {}
    found = []
    sources = [*view.named(".gitattributes"), *(p for p in view.named("attributes") if p.endswith("/info/attributes"))]
    for path in sources:
        changed = path in view.changed
        new = set(view.new_lines(path)) if changed else set()
        for line in (view.text(path) or "").splitlines():
            for kind, name in _ATTRIBUTE_DRIVER.findall(line):
                if not named.get((kind, name), (False, ""))[0]:
                    named[(kind, name)] = (line in new, path)
                if line in new:
                    found.append(finding("G18", "medium", path, f"attribute {kind}={name}: {line.strip()[:100]}",
                                         line, f"{kind}={name}", "restore"))
    return named, found


# When git runs a driver named by an attribute (research C1): what the evidence says, how severe.
_DRIVER_RUNS = {
    "clean": ("critical", "git runs it on git status, git add and git commit"),
    "smudge": ("critical", "git runs it on git checkout, git switch and git reset"),
    "process": ("critical", "git runs it on git status, git add and git checkout"),
    "textconv": ("critical", "git runs it without a prompt on git diff, git log -p and git show"),
    "command": ("critical", "git runs it as the external diff on git diff and git log -p"),
    "driver": ("high", "git runs it on git merge and git rebase when both sides changed the file"),
}


def _driver_correlation(view: View, config_findings: list[Finding], changed_configs: set[str]) -> list[Finding]:
    """Research C1: a driver defined in config and named by an attribute, either side new."""
    if not changed_configs and not any(p.endswith((".gitattributes", "/info/attributes")) for p in view.changed):
        return []  # neither side changed: nothing new to correlate
    named, found = _attribute_drivers(view)
    defined: dict[tuple[str, str], tuple[bool, list[str]]] = {}
    changed_keys = {f.key for f in config_findings}
    for path in config_paths(view):
        for key, _ in _parse(view.text(path)) or []:
            m = re.fullmatch(r"(filter|diff|merge)\.(.+)\.(clean|smudge|process|command|textconv|driver)", key)
            if m:
                was_changed, programs = defined.get((m[1], m[2]), (False, []))
                defined[(m[1], m[2])] = (was_changed or key in changed_keys, [*programs, m[3]])
    for (kind, name), (attribute_changed, source) in named.items():
        changed, programs = defined.get((kind, name), (False, []))
        if programs and (attribute_changed or changed):
            runs = [_DRIVER_RUNS[p] for p in dict.fromkeys(programs)]
            severity = max((s for s, _ in runs), key=rank)
            found.append(finding("G08", severity, source, f"{kind} driver {name!r} is defined in git config "
                                 f"({', '.join(dict.fromkeys(programs))}) and named here: "
                                 f"{'; '.join(w for _, w in runs)}", f"{kind}.{name}", f"{kind}.{name}", "restore"))
    return found


def _nested_repositories(view: View) -> list[Finding]:
    found = []
    # A bare repository is looked for only where one may be (most installs hold none): else the paths
    # that may be a nested .git.
    for path, change in (view.changed if _bare_repositories(view) else _in_git_directories(view)).items():
        new = change.after
        if new is None or change.what not in ("added", "type"):
            continue
        if path.endswith("/.git") and split_git(path.rpartition("/")[0] + "/x") is None:
            config = view.entry(f"{path}/config")
            found.append(finding("G24", "critical", path, f"a nested git repository ({new.kind}): its hooks and "
                                 "config run when a shell or IDE enters it",
                                 f"{new.kind}:{new.sha256 or (config.sha256 if config else '')}", remedy="restore"))
        elif new.kind == "dir" and _is_bare_repo(path, view.after) and ".git" not in path.split("/") and \
                not _is_bare_repo(path, view.before):
            found.append(finding("G24", "critical", path, "a bare git repository inside the tree", "bare",
                                 remedy="restore"))
    return found


def _is_config(path: str) -> bool:
    where = split_git(path)
    return (where is not None and where.inner in _CONFIG_FILES) or path in _TOP_CONFIGS


def index_hidden(view: View) -> dict[str, str]:
    """Work-tree paths that a changed index newly hides from `git status` -> the index file (all
    hidden ones when the start's flags are unknown)."""
    cached = view.memo.get("index_hidden")
    if isinstance(cached, dict):
        return cached
    hidden: dict[str, str] = {}
    for path, change in _in_git_directories(view).items():
        where = split_git(path)
        if where is None or where.inner != "index" or where.gitdir.rsplit("/", 1)[-1] != ".git" or \
                change.after is None:
            continue
        try:
            flagged = hidden_paths(view.data(path) or b"", hash_size(_parse(view.text(f"{where.gitdir}/config")) or []))
        except GitIndexError:
            continue  # git rewrites a broken index itself; nothing hides behind one it cannot read
        at_start = view.contents("before", start_flags_key(path))
        already = set(at_start.decode("utf-8", "surrogateescape").split("\n")) if at_start is not None else set()
        base = where.gitdir.rpartition("/")[0]
        hidden.update({(f"{base}/{p}" if base else p): path for p in flagged if p not in already})
    view.memo["index_hidden"] = hidden
    return hidden


def _index_findings(view: View) -> list[Finding]:
    by_index: dict[str, list[str]] = {}
    for hidden, index in index_hidden(view).items():
        by_index.setdefault(index, []).append(hidden)
    return [finding("G20", "medium", index, f"{len(paths)} path(s) marked assume-unchanged or skip-worktree: "
                    f"git status no longer shows their changes ({', '.join(sorted(paths)[:5])}"
                    f"{' ...' if len(paths) > 5 else ''})", "\n".join(sorted(paths)), "index-flags", "review")
            for index, paths in by_index.items()]


_TRUE = ("true", "yes", "on", "1", "")


def _switched_on(item: Finding, view: View) -> list[str]:
    """Files a changed config key makes git read (an include, the per-worktree config, the hooks
    path, an attributes file), as they are at the end."""
    key, value, base = item.key.lower(), item.value.strip(), item.path.rpartition("/")[0]
    if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")) or \
            key == "core.attributesfile":
        target = resolve(base if key != "core.attributesfile" else "", value)
        return [target] if target and view.entry(target) is not None else []
    if key == "extensions.worktreeconfig" and value.lower() in _TRUE:
        where = split_git(item.path)
        gitdir = where.gitdir if where else ""
        return [p for p in view.named("config.worktree") if p == f"{gitdir}/config.worktree" or
                re.fullmatch(re.escape(gitdir) + r"/worktrees/[^/]+/config\.worktree", p)]
    if key == "core.hookspath":
        target = resolve("", value)
        prefix = f"{target}/"
        return [p for p, e in view.after.items() if target and p.startswith(prefix) and e.kind != "dir"] \
            if target else []
    return []


def _enabled_files(found: list[Finding], view: View) -> list[Finding]:
    """A setting that switches on another file lists that file at the setting's severity, whether
    the file changed or not: what it holds is what git runs now."""
    enabled = []
    for item in found:
        for target in _switched_on(item, view):
            if target == item.path:
                continue
            keys = sorted({k for k, _ in _parse(view.text(target)) or []}) if item.rule != "G03" else []
            shown = f" (keys: {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''})" if keys else ""
            entry = view.entry(target)
            enabled.append(finding("G01" if item.rule == "G03" else item.rule, item.severity, target,
                                   f"switched on by {item.key} in {item.path}: git reads it now{shown}",
                                   (entry.sha256 or "") if entry else "", remedy="restore"))
    return enabled


def git_findings(view: View) -> list[Finding]:
    found: list[Finding] = []
    # A config's path holds ".git" (split_git) or is one of the top ones: most paths are not asked.
    changed = view.changed
    candidates = {**_in_git_directories(view), **{p: changed[p] for p in _TOP_CONFIGS if p in changed}}
    changed_configs = {p for p, c in candidates.items() if c.after is not None and _is_config(p)}
    # Includes: a changed config's, and the top config's (its unchanged include may name a changed file).
    including = changed_configs | {p for p in (".git/config", ".git/config.worktree") if p in view.after}
    for path in sorted(including):
        if path in changed_configs:
            found.extend(judged(view, "G03-G28/X04", path, _config_findings, path, view))
        found.extend(judged(view, "G12", path, _included, path, view))
    if ".git" in view.changed and view.changed[".git"].what in ("type", "modified"):
        new = view.changed[".git"].after
        kind = new.kind if new else "?"
        found.append(finding("G15", "critical", ".git", f".git is now a {kind} pointing elsewhere: git uses "
                             "whatever hooks and config are there",
                             f"{kind}:{(new.sha256 or new.target or '') if new else ''}", remedy="restore"))
    hooks = _hooks_path(view)
    # A path with no .git in it is in a git directory only in a bare repository or under the hooks path.
    for path, change in (view.changed if hooks or _bare_repositories(view) else _in_git_directories(view)).items():
        if change.after is None or _passed_by(path, view, hooks):
            continue
        where = split_git(path, view)
        if where is not None and path not in changed_configs:
            found.extend(judged(view, "G01/X03", path, _inner_findings, path, where, view))
        elif hooks and path.startswith(hooks + "/") and change.after.kind != "dir":
            found.append(finding("G01", "critical", path, f"a hook under core.hooksPath ({hooks})",
                                 change.after.sha256 or "", remedy="restore"))
    found = correlated(view, "G01/G12/G14/G18", found, lambda found: [*found, *_enabled_files(found, view)])
    found.extend(judged(view, "G21", "", _replace_refs, view))
    found.extend(judged(view, "G20", "", _index_findings, view))
    found.extend(judged(view, "G24", "", _nested_repositories, view))
    found.extend(judged(view, "G08", "", _driver_correlation, view, found, changed_configs))
    return found


def _included(path: str, view: View) -> list[Finding]:
    """The files a git config includes, when either changed."""
    return [f for target in include_targets(path, view.text(path)) if target in view.changed or path in view.changed
            for f in _config_findings(target, view, included_by=path)]


def derived_watch(config_text: str | None) -> list[str]:
    """Files and directories the start snapshot must also keep because the top git config points at
    them (includes, the hooks path, attributes and excludes files): changing them changes git."""
    targets = include_targets(".git/config", config_text)
    for key, value in _parse(config_text) or []:
        if key in ("core.hookspath", "core.attributesfile", "core.excludesfile"):
            target = resolve("", value)
            if target:
                targets.append(target)
    return targets

