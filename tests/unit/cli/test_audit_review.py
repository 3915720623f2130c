"""The review a person does: `dejima-audit ack` walked on a real pseudo-terminal (one file at a time,
worst first, a note typed once), the 80-column table against a golden rendering, and the
end-of-session message that names the worst findings."""

from __future__ import annotations

import io
import json
import os
import re
import select
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from dejima.adapters.findings import FileState, FindingStore, Stored
from dejima.core.audit import Finding
from dejima.orchestration import exit_audit
from dejima.ui.audit_views import diff_lines, findings_table
from dejima.ui.console import UI, plain_console

GOLDEN = Path(__file__).parents[2] / "golden" / "audit" / "table-80.txt"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def write(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def plant(root: Path) -> None:
    write(root, ".git/hooks/post-checkout", "#!/bin/sh\nid\n", 0o755)
    write(root, ".vscode/tasks.json", json.dumps({"version": "2.0.0", "tasks": [
        {"label": "build", "type": "shell", "command": "node .vscode/x.js", "runOptions": {"runOn": "folderOpen"}}]}))
    write(root, ".claude/settings.json", json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "sh .claude/x.sh"}]}]}}))
    write(root, ".envrc", "export A=1\n" + "".join(f"export V{i}={i}\n" for i in range(60)))  # a long diff
    write(root, "conftest.py", "import os\n")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root, ".claude/settings.json", "{}\n")
    exit_audit.start("s1", [exit_audit.Mount("workspace", root)])
    plant(root)
    exit_audit.finish("s1", UI(plain_console(io.StringIO())))
    return root


def unreviewed(workspace: Path) -> dict[str, Stored]:
    store = FindingStore()
    try:
        return {s.finding.path: s for s in store.findings(str(workspace), include_acked=True)}
    finally:
        store.close()


class Terminal:
    """`dejima-audit` on a pseudo-terminal, read and typed into like a person would."""

    def __init__(self, *args: str) -> None:
        import pty

        self.master, slave = pty.openpty()
        code = "import sys; from dejima.cli.audit import main; sys.exit(main(sys.argv[1:]))"
        env = {**os.environ, "COLUMNS": "80", "LINES": "40", "TERM": "xterm"}
        self.process = subprocess.Popen([sys.executable, "-c", code, *args], stdin=slave, stdout=slave, stderr=slave,
                                        env=env, start_new_session=True)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 20.0) -> str:
        """Reads until ``text`` shows (terminal codes removed); returns what came before it."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never showed; the screen so far:\n{self.seen}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                assert chunk, f"the command ended before {text!r} showed:\n{self.seen}"
                self.raw = getattr(self, "raw", b"") + chunk
                self.seen += _ANSI.sub("", chunk.decode("utf-8", "replace"))
        before, _, self.seen = self.seen.partition(text)
        return before

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\r")

    def close(self) -> int:
        try:
            while select.select([self.master], [], [], 5)[0] and os.read(self.master, 65536):
                pass
        except OSError:
            pass
        code = self.process.wait(timeout=20)
        os.close(self.master)
        return code


CHOICES = "q) quit: "


def test_ack_walks_each_file_once_worst_first_with_one_note(workspace: Path) -> None:
    term = Terminal("ack")
    screens = []
    try:
        screens.append(term.expect(CHOICES))  # the worst file first
        term.type("a")
        term.expect("note (why it is fine): ")
        term.type("set up by me for the build")
        screens.append(term.expect(CHOICES))
        term.type("a")
        term.expect("note (Enter: same as before, 'set up by me for the build'): ")
        term.type("")  # the note, typed once, reused
        screens.append(term.expect(CHOICES))
        term.type("r")  # restore: the file as it was at the start
        screens.append(term.expect(CHOICES))  # .envrc: a long diff, paged
        assert "more diff lines: m shows them" in screens[-1]
        term.type("m")
        screens.append(term.expect(CHOICES))
        term.type("s")
        screens.append(term.expect(CHOICES))
        term.type("q")
        assert term.close() == 0
    finally:
        if term.process.poll() is None:
            term.process.kill()
            term.process.wait()
    order = [re.search(r"\[\d/5\] (\w+) (\S+)", screen).groups() for screen in screens  # type: ignore[union-attr]
             if re.search(r"\[\d/5\]", screen)]
    assert [severity for severity, _ in order] == ["critical", "critical", "critical", "high", "high"]
    paths = [path for _, path in order]
    assert len(set(paths)) == 5  # each file once
    assert "export V34=34" in screens[4] and "export V34=34" not in screens[3]  # m showed the next page
    found = unreviewed(workspace)
    acked = {path: s.ack_note for path, s in found.items() if s.acked}
    assert acked[paths[0]] == acked[paths[1]] == "set up by me for the build"
    # A restore closes the finding, and is no review: the same content planted again is a finding again.
    assert paths[2] not in acked and found[paths[2]].closed_note.startswith("closed: restored by dejima-audit ack")
    assert not found[paths[3]].acked and not found[paths[4]].acked  # skipped, and not reached (quit)
    restored = workspace / paths[2]
    assert not restored.exists() or restored.read_text() == "{}\n"
    assert "\x1b[2J" not in term.raw.decode("utf-8", "replace")


def test_quit_at_once_leaves_everything_unreviewed(workspace: Path) -> None:
    term = Terminal("ack")
    term.expect(CHOICES)
    term.type("q")
    assert term.close() == 0
    assert not any(s.acked for s in unreviewed(workspace).values())


def stored(id_: int, workspace: str, rule: str, severity: str, path: str, evidence: str, mount: str = "workspace",
           lines: tuple[str, ...] = ()) -> Stored:
    return Stored(id_, "s1", workspace, Finding(rule, severity, path, "", evidence, f"fp{id_}", lines=lines), 0.0,
                  False, mount=mount)


def test_the_table_fits_80_columns_with_long_paths_and_hostile_names(update_golden: bool) -> None:
    workspace = "/home/someone/repositories/a-project-with-a-rather-long-name"
    found = [
        stored(7, workspace, "G01", "critical", ".git/hooks/post-checkout", "git hook (added)"),
        stored(12, workspace, "I01", "critical", ".vscode/tasks.json", "VS Code tasks: tasks.0.runOptions.runOn = "
               "'folderOpen'", lines=("I01 medium: VS Code tasks: tasks.0.command = 'node x.js'",
                                      "context: tasks.0.label = 'build'")),
        stored(13, workspace, "F08", "medium", "docs/very/deeply/nested/directory/structure/that/goes/on/and/on/"
               "report\u202egpj.sh", "the name has a bidi control"),
        stored(14, workspace, "G01", "critical", ".git/hooks/[bold red]x\x1b[2J\n reviewed: yes",
               "git hook (added) [link=http://e]"),
        stored(15, workspace, "M01", "medium", ".cargo/registry/src/index.crates.io-6f17d22bba15001f/serde-1.0.0",
               "existing cache entry changed: src/lib.rs", mount="home"),
        stored(16, "/tmp/other", "E01", "high", "東京/.envrc", "direnv .envrc (added)"),
    ]
    console = Console(file=io.StringIO(), width=80, color_system=None, soft_wrap=True)
    for line in findings_table(found, width=80):
        console.print(line, crop=False)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    if update_golden:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert all(cell_len(line) <= 80 for line in text.splitlines())
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", text)
    assert text.count(workspace) == 1  # once, in its group's header
    assert "[link=http://e]" in text and "\n reviewed: yes" not in text  # markup shown as text, no line of its own


def test_the_end_of_session_message_names_the_worst_findings(tmp_path: Path) -> None:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    exit_audit.start("s2", [exit_audit.Mount("workspace", root)])
    plant(root)
    out = io.StringIO()  # a terminal 80 columns wide (off one, a line is never cut)
    exit_audit.finish("s2", UI(Console(file=out, force_terminal=True, width=80, color_system=None, soft_wrap=True)))
    text = out.getvalue()
    assert "left 5 change(s) that can run code later (worst: critical):" in text
    listed = [line for line in text.splitlines() if line.startswith("  critical") or line.startswith("  high")]
    assert len(listed) == 5 and ".git/hooks/post-checkout" in text and ".vscode/tasks.json" in text
    assert all(cell_len(line) <= 80 for line in listed)
    assert "dejima-audit ack" in text


def test_the_walk_shows_the_remedy_as_the_command_to_type_and_modes_as_chmod_writes_them(tmp_path: Path) -> None:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    write(root, "build.sh", "echo built\n", 0o644)
    exit_audit.start("s3", [exit_audit.Mount("workspace", root)])
    (root / "build.sh").chmod(0o755)
    exit_audit.finish("s3", UI(plain_console(io.StringIO())))
    (finding,) = unreviewed(root).values()
    term = Terminal("ack")
    try:
        first = term.expect(CHOICES)
        term.type("m")  # no diff to page: the finding's whole record
        more = term.expect(CHOICES)
        term.type("q")
        assert term.close() == 0
    finally:
        if term.process.poll() is None:
            term.process.kill()
            term.process.wait()
    assert "made executable (0644 -> 0755)" in first and "0o" not in first + more
    assert f"remedy: dejima-audit restore {finding.id} puts back the start state" in more
    assert "restore ID" not in more


def test_the_end_of_session_lines_are_whole_off_a_terminal_and_cut_on_one() -> None:
    path = "src/" + "deeply/nested/" * 10 + "conftest.py"
    evidence = "pytest conftest (added): " + "x" * 200
    found = [stored(3, "/w", "P01", "high", path, evidence)]
    log = io.StringIO()  # stderr sent to a file: not a terminal (80 columns: what rich assumes there)
    UI(Console(file=log, width=80, color_system=None, highlight=False, soft_wrap=True)).findings_left(found)
    assert "…" not in log.getvalue() and path in log.getvalue() and evidence in log.getvalue()
    screen = io.StringIO()
    UI(Console(file=screen, force_terminal=True, width=80, color_system=None, soft_wrap=True)).findings_left(found)
    assert "…" in screen.getvalue() and all(cell_len(line) <= 80 for line in screen.getvalue().splitlines())


def test_a_quiet_session_whose_changes_another_session_reported_still_says_so(tmp_path: Path) -> None:
    root = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for session_id in ("first", "second", "third"):  # sessions on one workspace
        exit_audit.start(session_id, [exit_audit.Mount("workspace", root)])
    write(root, ".git/hooks/post-checkout", "#!/bin/sh\nid\n", 0o755)
    exit_audit.finish("second", UI(plain_console(io.StringIO())))  # its audit records the finding first
    quiet, told = io.StringIO(), io.StringIO()
    exit_audit.finish("first", UI(plain_console(quiet, width=200), quiet=True))
    said = quiet.getvalue()
    assert said.count("\n") == 1, said  # one line
    assert "session first: 1 change(s) that can run code later, found by its audit, were reported by session(s) " \
           "second on the same workspace" in said
    exit_audit.finish("third", UI(plain_console(told, width=200)))  # not quiet: the same line, and the next step
    assert "reported by session(s) second on the same workspace" in told.getvalue()
    assert "dejima-audit ack" in told.getvalue()


@pytest.mark.parametrize(("state", "expected"), [
    (FileState(before_kind="file", before=b"a\n", after_kind=None), [
        "(a file at the start, nothing at the end)", "--- at the start", "+++ at the end", "@@ -1 +0,0 @@", "-a"]),
    (FileState(before_kind=None, after_kind="fifo"), ["(created in the session: a named pipe)"]),
    (FileState(before_kind="dir", after_kind=None), [
        "(a directory at the start, nothing at the end)",
        "(a directory has no content of its own; the evidence above says what changed in it)"]),
    (FileState(before_kind="dir", after_kind="file", after=b"x\n"), [
        "(a directory at the start, a file at the end)", "--- at the start", "+++ at the end", "@@ -0,0 +1 @@", "+x"]),
    (FileState(before_kind="symlink", before=b"../a", after_kind="symlink", after_target="/etc"), [
        "(a symbolic link at the start, a symbolic link at the end)", "--- at the start", "+++ at the end",
        "@@ -1 +1 @@", "-../a", "+/etc"]),
    (FileState(before_kind="file", before=b"\0\1", after_kind="file", after=b"\0\2"), ["(binary content: not shown)"]),
])
def test_the_diff_says_what_a_path_was_in_words(state: FileState, expected: list[str]) -> None:
    finding = replace(stored(4, "/w", "F01", "high", "x", "changed"), state=state)
    assert [line.plain.strip() for line in diff_lines(finding)] == expected
