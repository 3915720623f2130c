"""Every example README.md and docs/*.md show, run as written: each shell line of a fenced code block
that starts with dejima, dejima-allow or dejima-audit goes to bash as it is printed (~ is the user's home,
~/repos/project a workspace there), and docs/api.md's Python example runs as a script. Both as root and as
an ordinary user (uid 4242; when the suite itself is not root, its own uid stands for root).

A placeholder is filled the way a reader fills it: SESSION is the id a session printed, `...` a command, the
finding ids 12 13 14 the ids the audit gave, `[a|b]` each of its choices. An example that cannot run here
is in SKIPPED with its reason; one that is neither run nor skipped fails the first test, so a new example
in the docs is run from the day it is written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from dejima.adapters.runtime import Runtime
from tests.integration.test_interactive import read_until
from tests.networld import World
from tests.world import REPO, TEST_GID, TEST_UID, User, containers_of, make_user, spawn_dejima, wait_for_line

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PROGRAMS = {"dejima": "dejima.cli.launch", "dejima-allow": "dejima.cli.allow", "dejima-audit": "dejima.cli.audit"}

# The examples that cannot run here, each with why. Nothing else is left out.
SKIPPED = {
    "dejima ~/repos/project -- make test": "the plain session image has no make (a workflow's image brings its "
                                           "toolchain, built from Debian's mirror: an outside address)",
    "dejima ~/repos/project --allow pypi.org --allow '*.pythonhosted.org:443' -- pip download six":
        "downloads from pypi.org: tests never reach an outside address (test_egress holds --allow against its "
        "own decoys)",
    "dejima ~/repos/project --harness claude-code": "installs Claude Code from npm (an outside address) and needs "
                                                    "an Anthropic account; test_harness runs it against a fake",
    "dejima images bootstrap": "debootstrap downloads Debian from deb.debian.org (an outside address)",
    "dejima images prune": "removes every image this checkout does not use, other test runs' on this engine too",
    "dejima ~/repos/project --publish 3000 -- npm run dev": "the plain session image has no npm (the node "
                                                           "workflow's image is built from outside addresses); "
                                                           "test_published_ports serves a published port the same way",
    **dict.fromkeys(("dejima doctor --session SESSION", "dejima doctor --session SESSION --json"),
                    "probes a documentation address (192.0.2.1) and a foreign resolver by default: tests send "
                    "nothing outside this host, so test_doctor_session runs it with --refused-address and "
                    "--foreign-resolver at the test world's decoys"),
}
API_EXAMPLE = "docs/api.md: the Python example"
# As root the example's temporary workspace belongs to root: the session would run as uid 0, which a root
# launcher does only when asked (as_root=True, as `dejima --as-root`); docs/api.md says so.
SKIPPED_AS_ROOT = {API_EXAMPLE: "its workspace is root's own: the session would be uid 0, which needs "
                                "as_root=True; the test checks that it is refused for that reason"}


def documented_lines() -> dict[str, str]:
    """Every example line as written (its comment dropped) -> the document that shows it."""
    found: dict[str, str] = {}
    for document in DOCUMENTS:
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", document.read_text(), re.S | re.M):
            for line in block.splitlines():
                if line.split()[:1] and line.split()[0] in PROGRAMS:
                    found.setdefault(re.split(r"\s+#\s", line.strip())[0].strip(), document.name)
    return found


def expanded(line: str) -> list[str]:
    """`dejima images [list|build]` is two examples; any other line is one."""
    choice = re.search(r"\[([a-z]+(?:\|[a-z]+)+)\]", line)
    if not choice:
        return [line]
    return [line[:choice.start()] + option + line[choice.end():] for option in choice[1].split("|")]


def examples() -> list[str]:
    return [example for line in documented_lines() for example in expanded(line)]


# The order they run in: a session's id, its refusals and its findings are what later examples name.
PLAIN = [
    "dejima settings path", "dejima settings show", "dejima settings reference", "dejima completion bash",
    "dejima manifests list", "dejima manifests check", "dejima images list", "dejima images build",
    "dejima ~/repos/project --render", "dejima ~/repos/project --render kubernetes",
    "dejima ~/repos/shop --render kubernetes --allow pypi.org -- make test > shop.yaml",
]
AFTER_A_SESSION = [  # the session that left findings, its id as SESSION
    "dejima violations SESSION", "dejima ledger SESSION", "dejima-audit", "dejima-audit show 12 13",
    "dejima-audit ack",  # on a terminal
    "dejima-audit ack 12 13 --note \"my own pre-commit hook\"", "dejima-audit restore 14",
    "dejima-audit ack --all --workspace ~/repos/project --note \"reviewed after the refactor\"",
    "dejima-audit list --all --json", "dejima-audit rules",
]
WHILE_A_SESSION_RUNS = [  # in the workspace, while a session there runs (it was refused a name)
    "dejima sessions", "dejima-allow", "dejima-allow crates.io", "dejima-allow 1 --for 30m --reason \"cargo\"",
    "dejima-allow crates.io --revoke", "dejima-allow crates.io --persist", "dejima stop SESSION",
]
LAST = ["dejima clean", "dejima doctor", "dejima ~/repos/project"]  # the last on a terminal
ON_A_TERMINAL = {"dejima-audit ack", "dejima ~/repos/project"}
THE_SESSION = "dejima ~/repos/project --allow 10.0.5.0/24 --allow-special 10.0.5.0/24 -- ..."
RUN = [*PLAIN, THE_SESSION, *AFTER_A_SESSION, *WHILE_A_SESSION_RUNS, *LAST]
# What `...` stands for in THE_SESSION: a command that leaves three files the audit flags.
PLANT = ("sh -c 'echo export A=1 > .envrc; mkdir -p .vscode; "
         "echo \"{\\\"tasks\\\": [{\\\"command\\\": \\\"x\\\", \\\"runOptions\\\": {\\\"runOn\\\": "
         "\\\"folderOpen\\\"}}]}\" > .vscode/tasks.json; "
         "echo \"{\\\"mcpServers\\\": {\\\"x\\\": {\\\"command\\\": \\\"sh\\\"}}}\" > .mcp.json'")


def test_every_documented_example_is_run_or_skipped_with_its_reason() -> None:
    documented = set(examples())
    assert documented, "no examples found: the parser of the docs' code blocks is broken"
    assert set(RUN) & set(SKIPPED) == set()
    assert documented - set(RUN) - set(SKIPPED) == set(), "a documented example no test runs: add it to RUN"
    assert (set(RUN) | set(SKIPPED)) - documented == set(), "an example the docs no longer show"
    api = (REPO / "docs" / "api.md").read_text()
    assert "## Example" in api and "```python" in api


class Reader:
    """One person following the docs: a home with ~/repos/project, the three commands on PATH, bash."""

    def __init__(self, launcher: User, scope: str, world: World) -> None:
        self.launcher, self.scope = launcher, scope
        home = launcher.home
        self.workspace = home / "repos" / "project"
        for project in (self.workspace, home / "repos" / "shop"):
            project.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "-q", str(project)], check=True)
        settings = home / ".config" / "dejima" / "settings.toml"
        settings.parent.mkdir(parents=True, exist_ok=True)
        # The test world's resolver and network (nothing leaves this host), and docs/kubernetes.md's
        # [kubernetes] block as written.
        (kubernetes,) = re.findall(r"^```toml\n(\[kubernetes\].*?)^```", (REPO / "docs" / "kubernetes.md").read_text(),
                                   re.S | re.M)
        settings.write_text(world.settings.read_text() + "\n" + kubernetes)
        bin_dir = home / "bin"
        bin_dir.mkdir(exist_ok=True)
        for program, module in PROGRAMS.items():
            script = bin_dir / program
            script.write_text(f"#!/bin/sh\nexec {launcher.python} -c 'import sys; from {module} import main; "
                              f"sys.exit(main(sys.argv[1:]))' \"$@\"\n")
        if os.getuid() == 0:  # the workspaces are the ordinary user's, whoever launches
            subprocess.run(["chown", "-R", f"{TEST_UID}:{TEST_GID}", str(home / "repos")], check=True)
            if launcher.uid != 0:
                subprocess.run(["chown", "-R", f"{launcher.uid}:{launcher.gid}", str(home)], check=True)
        for path in [home, *home.rglob("*")]:
            if path.is_dir() or path.parent == bin_dir:
                path.chmod(0o755)
        self.path = f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def env(self) -> dict[str, str]:
        return self.launcher.env(self.scope, PATH=self.path)

    def on_terminal(self, line: str, seen: bytes, then: bytes, ask: bytes = b"") -> int:
        """``line`` on a pseudo-terminal of its own: once ``seen`` shows (``ask`` typed until it does: a
        shell reads nothing typed before it starts), ``then`` is typed; returns the exit status."""
        master, slave = os.openpty()
        process = subprocess.Popen(["setsid", "--ctty", "bash", "-c", line], stdin=slave, stdout=slave,
                                   stderr=slave, env={**self.env(), "TERM": "xterm"}, cwd=str(self.launcher.home),
                                   close_fds=True, **self.launcher.popen_kwargs())
        os.close(slave)
        try:
            for attempt in range(1, 21):
                os.write(master, ask)
                try:
                    read_until(master, seen, timeout=10 * attempt if ask else 120)
                    break
                except AssertionError:
                    if not ask or attempt == 20:
                        raise
            os.write(master, then)
            return process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
            os.close(master)

    def run(self, line: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["bash", "-c", line], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, cwd=str(cwd or self.launcher.home), stdin=subprocess.DEVNULL,
                              **self.launcher.popen_kwargs())
        assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done


@pytest.fixture(params=["root", "user"])
def launcher(request: pytest.FixtureRequest, world_dir: Path) -> User:
    base = world_dir / f"docs-{request.param}"
    if request.param == "root" or os.getuid() != 0:
        return make_user(base, os.getuid(), os.getgid())
    return make_user(base, TEST_UID, TEST_GID)


def test_every_documented_example_runs_as_written(runtime: Runtime, images: object, world: World,
                                                 launcher: User, scope: str) -> None:
    reader = Reader(launcher, scope, world)
    for line in PLAIN:
        reader.run(line)
    assert "kind: Sandbox" in (launcher.home / "shop.yaml").read_text()

    # A session that leaves findings: SESSION and the finding ids come from what it printed.
    ran = reader.run(THE_SESSION.replace("...", PLANT))
    (session,) = re.findall(r"dejima: session (\w+):", ran.stderr)
    listed = [json.loads(line) for line in reader.run("dejima-audit --json").stdout.splitlines()]
    assert {finding["path"] for finding in listed} == {".envrc", ".vscode/tasks.json", ".mcp.json"}, listed
    ids = dict(zip(("12", "13", "14"), (str(finding["id"]) for finding in listed), strict=True))
    for line in AFTER_A_SESSION:
        if line in ON_A_TERMINAL:  # the walk shows the worst file first, and q leaves every finding as it was
            assert reader.on_terminal(line, b"q) quit: ", b"q\r") == 0
            continue
        filled = line.replace("SESSION", session)
        if line.startswith("dejima-audit"):
            filled = re.sub(r"\b1[234]\b", lambda number: ids[number[0]], filled)
        reader.run(filled)
    restored = next(finding["path"] for finding in listed if str(finding["id"]) == ids["14"])
    assert not (reader.workspace / restored).exists()  # restore removed what the session made

    # A session that runs while the examples talk to it; it was refused a name, which becomes number 1.
    command = ("sh", "-c", "getent hosts refused.dejima.invalid; echo READY; exec sleep 300")
    with spawn_dejima(launcher, scope, str(reader.workspace), "--", *command, PATH=reader.path) as live:
        assert live.stderr is not None
        live_id = re.findall(r"dejima: session (\w+):", wait_for_line(live.stderr, "dejima: session "))[0]
        wait_for_line(live.stdout, "READY")
        for line in WHILE_A_SESSION_RUNS:
            reader.run(line.replace("SESSION", live_id), cwd=reader.workspace)
        live.wait(timeout=60)  # stopped by `dejima stop SESSION`
    assert "crates.io" in next((launcher.home / ".config" / "dejima" / "projects").iterdir()).read_text()  # --persist
    assert containers_of(runtime, scope, session=live_id) == []
    for line in LAST:
        if line in ON_A_TERMINAL:  # the interactive shell: a command typed, then exit with a status of its own
            assert reader.on_terminal(line, b"MARK-42", b"exit 5\r", ask=b"echo MARK-$((6*7))\r") == 5
        else:
            reader.run(line)


def test_the_api_example_runs_as_written(runtime: Runtime, images: object, world: World, launcher: User,
                                         scope: str) -> None:
    reader = Reader(launcher, scope, world)
    (example,) = re.findall(r"^## Example\n.*?^```python\n(.*?)^```$", (REPO / "docs" / "api.md").read_text(),
                            re.S | re.M)
    script = launcher.home / "example.py"
    script.write_text(example)
    script.chmod(0o644)
    done = subprocess.run([launcher.python, str(script)], env=reader.env(), capture_output=True, text=True,
                          timeout=300, cwd=str(launcher.home), stdin=subprocess.DEVNULL, **launcher.popen_kwargs())
    assert containers_of(runtime, scope, role="session") == []
    if launcher.uid == 0 and API_EXAMPLE in SKIPPED_AS_ROOT:  # refused before anything starts, for that reason
        assert done.returncode != 0 and "belongs to root and dejima runs as root" in done.stderr, done.stderr
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-2:] == ["status: 0", "refused: ['refused.dejima.invalid']"]
