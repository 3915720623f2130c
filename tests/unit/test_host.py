import os
from pathlib import Path

from dejima.adapters import host


def test_own_launcher_is_alive_and_a_recycled_pid_is_not() -> None:
    token = host.launcher_token()
    assert host.launcher_alive(token)
    boot, pid, start = token.split(":")
    assert not host.launcher_alive(f"{boot}:{pid}:{int(start) + 1}")  # same pid, other process
    assert not host.launcher_alive(f"other-boot:{pid}:{start}")
    assert not host.launcher_alive("garbage")


def test_dead_process_is_not_alive() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    token = host.launcher_token(pid)
    os.waitpid(pid, 0)
    assert not host.launcher_alive(token)


def test_home_dir_is_per_workspace(tmp_path: Path) -> None:
    a, b = host.home_dir_for(Path("/r/project")), host.home_dir_for(Path("/s/project"))
    assert a != b and a.name.startswith("project-") and b.name.startswith("project-")


def test_extra_cas_are_read_recursively(tmp_path: Path) -> None:
    (tmp_path / "corp").mkdir()
    (tmp_path / "corp" / "proxy.crt").write_bytes(b"PEM")
    (tmp_path / "ignored.pem").write_bytes(b"no")
    assert host.read_extra_cas(str(tmp_path)) == {"corp__proxy.crt": b"PEM"}
    assert host.read_extra_cas(str(tmp_path / "absent")) == {}
