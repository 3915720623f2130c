"""Editor settings carried inside ordinary text files (research I12, I13): Vim modelines in the
first and last five lines, Emacs file-local variables. Opening the file applies them; options that
name a program or an expression run it (CVE-2019-12735 went through a modeline).

Only options that can run or load something make a finding: the everyday `vim: set ts=4 sw=4 et:`
stays quiet.
"""

from __future__ import annotations

import re

from dejima.core.audit.isolation import judged
from dejima.core.audit.model import Finding, View, finding
from dejima.core.audit.treeroots import changed_in_tree, in_tree

_EDGE = 5  # Vim's default 'modelines': lines read at each end of the file
_BIG = 64 << 20  # larger files are not read at all (the rules' read limit)
# vi:, vim:, Vim:, vim600:, vim>702:, ex: -- "ex:" needs white space before it, as in Vim.
_VIM = re.compile(r"(?:^|\s)(?:vi|[vV]im(?:[<=>]?\d+)?):|\sex:")
_SET = re.compile(r"^\s*se(?:t)?\s+(.*?)(?<!\\):")
# Layout options (for the no/inv prefixes; everything not in _RUNS is quiet).
_SAFE = frozenset((
    "ts", "tabstop", "sw", "shiftwidth", "sts", "softtabstop", "et", "expandtab", "ft", "filetype", "syn", "syntax",
    "tw", "textwidth", "ai", "autoindent", "si", "smartindent", "cin", "cindent", "cino", "cinoptions", "ff",
    "fileformat", "fenc", "fileencoding", "list", "wrap", "spell", "fdm", "foldmethod", "fdl", "foldlevel", "fen",
    "foldenable", "fmr", "foldmarker", "fo", "formatoptions", "cc", "colorcolumn", "nu", "number", "rnu",
    "relativenumber", "bomb", "eol", "endofline", "fixeol", "fixendofline", "sr", "shiftround", "ro", "readonly",
    "ma", "modifiable", "lbr", "linebreak", "ci", "copyindent", "pi", "preserveindent", "com", "comments", "cms",
    "commentstring", "isk", "iskeyword", "lisp", "sta", "smarttab", "vts", "vartabstop", "vsts", "varsofttabstop",
    "wm", "wrapmargin", "bt", "buftype", "bl", "buflisted", "conceallevel", "cole", "cursorline", "cul", "nrformats",
    "nf", "ve", "virtualedit", "sol", "startofline", "bin", "binary", "js", "joinspaces", "mps", "matchpairs",
))
# Options whose value is a program, an expression or a path Vim reads or runs.
_RUNS = frozenset((
    "fde", "foldexpr", "inex", "includeexpr", "inde", "indentexpr", "fex", "formatexpr", "fdt", "foldtext", "mp",
    "makeprg", "gp", "grepprg", "kp", "keywordprg", "ep", "equalprg", "fp", "formatprg", "pa", "path", "spf",
    "spellfile", "spl", "spelllang", "dict", "dictionary", "tsr", "thesaurus", "tag", "tags", "sh", "shell", "ccv",
    "charconvert", "pex", "patchexpr", "dex", "diffexpr", "cfu", "completefunc", "ofu", "omnifunc", "tfu",
    "tagfunc", "stl", "statusline", "ruf", "rulerformat", "tal", "tabline", "bex", "backupext", "dir", "directory",
    "bdir", "backupdir", "udir", "undodir", "kmp", "keymap",
))
_EMACS_LINE = re.compile(r"-\*-(.*?)-\*-")
_EMACS_RISKY = re.compile(r"(?:^|[;\s])(eval|[\w-]*-(?:command|program|function|hook|hooks)|load-path|"
                          r"[\w-]*-path)\s*:", re.IGNORECASE)
_EMACS_BLOCK = re.compile(r"Local Variables:(.*?)End:", re.DOTALL | re.IGNORECASE)


def _options(line: str) -> list[str] | None:
    """The option names (no/inv prefixes removed, with their values) a Vim modeline sets."""
    match = _VIM.search(line)
    if match is None:
        return None
    rest = line[match.end():]
    form2 = _SET.match(rest)
    text = form2.group(1) if form2 else rest
    parts = re.split(r"\s+" if form2 else r"[\s:]+", text.strip())
    return [p for p in parts if p]


def _name(option: str) -> str:
    name = re.split(r"[+^-]?=", option, maxsplit=1)[0].rstrip("!&?")
    for prefix in ("no", "inv"):
        if name.startswith(prefix) and name[len(prefix):] in _SAFE | _RUNS:
            return name[len(prefix):]
    return name


def edge_lines(data: bytes) -> list[str]:
    """The first and last five lines, however long they are (Vim counts lines, not bytes)."""
    head = data.split(b"\n", _EDGE)
    lines = head if len(head) <= _EDGE else head[:_EDGE] + data.rsplit(b"\n", _EDGE + 1)[-_EDGE - 1:]
    return [line.decode("utf-8", "surrogateescape") for line in lines]


def vim_modeline(lines: list[str]) -> tuple[str, str] | None:
    """(the modeline, why) for a modeline in ``lines`` (a file's edge_lines) that sets an option
    naming a program, an expression or a path (or holds a backtick or !); layout options stay quiet,
    and so does prose that merely contains "vim:" (Vim rejects what is not an option)."""
    for line in lines:
        options = [o for o in _options(line) or [] if re.match(r"[a-zA-Z]", o)]
        running = [n for n in map(_name, options) if n in _RUNS]
        if any(re.search(r"[`!]", o) for o in options):
            running.append("a backtick or !")
        if running:
            return line.strip(), f"sets {', '.join(dict.fromkeys(running))}, which run or load something"
    return None


def emacs_variables(first: str, end: str) -> tuple[str, str] | None:
    """(the declaration, the risky variables) when Emacs file-local variables (on the first two
    lines, or in a block at the end) set code or programs."""
    candidates = [m.group(1) for m in _EMACS_LINE.finditer(first)]
    candidates += [m.group(1) for m in _EMACS_BLOCK.finditer(end)]
    for declaration in candidates:
        risky = [m.group(1) for m in _EMACS_RISKY.finditer(declaration)]
        if risky:
            return " ".join(declaration.split())[:120], ", ".join(dict.fromkeys(risky))
    return None


def modeline_findings(view: View) -> list[Finding]:
    """Editor settings in changed text files (dependency trees and git directories excluded)."""
    if view.kind != "workspace":
        return []
    found = []
    known = changed_in_tree(view)  # a tree's paths, told once per directory
    for path, change in view.changed.items():
        new = change.after
        if new is None or new.kind != "file" or new.size > _BIG or known.get(path) or in_tree(path, view) or \
                ".git" in path.split("/"):
            continue
        found.extend(judged(view, "I12/I13", path, _modelines, path, view))
    return found


def _modelines(path: str, view: View) -> list[Finding]:
    data = view.data(path)
    if data is None or b"\0" in data[:8192]:
        return []
    found = []
    lines = edge_lines(data)  # modelines sit in the first and last lines: only those are decoded
    before = view.text(path, "before")  # known for watched files only: then old lines stay quiet
    vim = vim_modeline(lines)
    if vim is not None and (before is None or vim[0] not in before):
        line, why = vim
        found.append(finding("I12", "high", path, f"a Vim modeline {why}; Vim applies it when the file is "
                             f"opened: {line[:120]}", line, remedy="restore"))
    emacs = emacs_variables("\n".join(lines[:2]), data[-3000:].decode("utf-8", "surrogateescape"))
    if emacs is not None and (before is None or emacs[0] not in before):
        found.append(finding("I13", "medium", path, f"Emacs file-local variables set {emacs[1]} (Emacs asks "
                             f"before applying them): {emacs[0]}", emacs[0], remedy="restore"))
    return found
