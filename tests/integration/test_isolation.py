"""Inside the session: the user's uid, no capabilities, no docker socket, only declared mounts."""

from __future__ import annotations

from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core.paths import GATE_DIR, SESSION_HOME
from tests.integration.conftest import user_workspace
from tests.world import User, parse_json_line, run_dejima

INSPECT = r"""
import json, os
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
read_only = [line.split()[4] for line in open("/proc/self/mountinfo") if "ro" in line.split()[5].split(",")]
try:
    open("/run/dejima-gate/planted", "w")
    gate_writable = True
except OSError:
    gate_writable = False
open("created-in-session.txt", "w").write("x")
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
    "cap_eff": status["CapEff"].strip(), "cap_prm": status["CapPrm"].strip(), "cap_bnd": status["CapBnd"].strip(),
    "no_new_privs": status["NoNewPrivs"].strip(),
    "docker_sock": [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)],
    "mounts": mounts, "cwd": os.getcwd(), "home": os.environ.get("HOME"),
    "read_only": read_only, "gate_writable": gate_writable,
}))
"""

# What any container has, besides the mounts dejima declares.
ENGINE_MOUNTS = {"/", "/proc", "/dev", "/dev/pts", "/dev/mqueue", "/dev/shm", "/sys", "/sys/fs/cgroup",
                 "/etc/resolv.conf", "/etc/hostname", "/etc/hosts", "/dev/console"}


def inspect_session(user: User, scope: str, workspace: Path) -> dict[str, object]:
    result = run_dejima(user, scope, "-q", str(workspace), "--", "python3", "-c", INSPECT)
    assert result.returncode == 0, result.stderr
    return parse_json_line(result.stdout)


def test_session_runs_as_the_invoking_user(runtime: Runtime, images: object, user: User, scope: str,
                                           workspace: Path) -> None:
    seen = inspect_session(user, scope, workspace)
    assert (seen["uid"], seen["gid"]) == (user.uid, user.gid)


def test_session_has_no_capabilities_and_no_new_privileges(runtime: Runtime, images: object, user: User,
                                                           scope: str, workspace: Path) -> None:
    seen = inspect_session(user, scope, workspace)
    assert seen["cap_eff"] == "0000000000000000"
    assert seen["cap_prm"] == "0000000000000000"
    assert seen["cap_bnd"] == "0000000000000000"
    assert seen["no_new_privs"] == "1"


def test_no_docker_socket(runtime: Runtime, images: object, user: User, scope: str, workspace: Path) -> None:
    assert inspect_session(user, scope, workspace)["docker_sock"] == []


def test_workspace_files_belong_to_the_user_on_the_host(runtime: Runtime, images: object, user: User,
                                                        scope: str, workspace: Path) -> None:
    seen = inspect_session(user, scope, workspace)
    assert seen["cwd"] == str(workspace)  # same absolute path as on the host
    created = workspace / "created-in-session.txt"
    assert (created.stat().st_uid, created.stat().st_gid) == (user.uid, user.gid)


def test_only_the_workspace_home_and_tmp_are_mounted(runtime: Runtime, images: object, user: User,
                                                     scope: str, workspace: Path) -> None:
    (workspace.parent / "secret-sibling").mkdir(exist_ok=True)
    seen = inspect_session(user, scope, workspace)
    declared = {str(workspace), SESSION_HOME, "/tmp", GATE_DIR}  # the gate: read-only, one FIFO (test_fifo.py)
    assert isinstance(seen["mounts"], list) and isinstance(seen["read_only"], list), seen
    mounts = set(seen["mounts"])
    assert declared <= mounts
    unexpected = {m for m in mounts - declared - ENGINE_MOUNTS
                  if not m.startswith(("/proc/", "/sys/", "/dev/"))}
    assert unexpected == set()
    assert GATE_DIR in seen["read_only"] and seen["gate_writable"] is False
    listing = run_dejima(user, scope, "-q", str(workspace), "--", "ls", str(workspace.parent))
    assert listing.stdout.split() == [workspace.name]  # the sibling directory is not there


def test_tmp_runs_what_the_session_builds_but_honours_no_setuid(runtime: Runtime, images: object, user: User,
                                                                 scope: str, workspace: Path) -> None:
    # A program copied into /tmp runs (go test and go run build there); /tmp stays nosuid and nodev.
    script = ("cp /bin/true /tmp/built && /tmp/built && echo ran; "
              "grep ' /tmp ' /proc/self/mounts")
    result = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "ran"
    options = set(result.stdout.splitlines()[1].split()[3].split(","))
    assert {"nosuid", "nodev"} <= options and "noexec" not in options


def test_home_persists_per_project(runtime: Runtime, images: object, user: User, scope: str,
                                   workspace: Path, world_dir: Path) -> None:
    first = run_dejima(user, scope, "-q", str(workspace), "--", "sh", "-c", "echo kept > $HOME/note")
    assert first.returncode == 0, first.stderr
    again = run_dejima(user, scope, "-q", str(workspace), "--", "cat", f"{SESSION_HOME}/note")
    assert again.stdout == "kept\n"
    other = user_workspace(world_dir, user, "other-project")
    elsewhere = run_dejima(user, scope, "-q", str(other), "--", "sh", "-c", "test -e $HOME/note; echo $?")
    assert elsewhere.stdout == "1\n"  # another project has its own home
