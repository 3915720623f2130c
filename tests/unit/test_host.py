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


def test_network_extra_ca_goes_into_image_builds_one_certificate_a_file(tmp_path: Path) -> None:
    import pytest

    from dejima.errors import SettingsError

    first, second = (f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n" for body in ("AAAA", "BBBB"))
    pem = tmp_path / "corp.pem"
    pem.write_text(f"subject=corp\n{first}junk\n{second}")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "local.crt").write_bytes(b"LOCAL")
    found = host.image_cas(str(tmp_path / "dir"), str(pem))
    assert found == {"local.crt": b"LOCAL", "dejima-network-extra-ca-0.crt": first.encode(),
                     "dejima-network-extra-ca-1.crt": second.encode()}
    assert host.image_cas(str(tmp_path / "dir"), "") == {"local.crt": b"LOCAL"}
    with pytest.raises(SettingsError, match="network.extra_ca: cannot read"):
        host.image_cas(str(tmp_path / "dir"), str(tmp_path / "missing.pem"))
    (tmp_path / "empty.pem").write_text("no certificate here\n")
    with pytest.raises(SettingsError, match="holds no PEM certificate"):
        host.image_cas(str(tmp_path / "dir"), str(tmp_path / "empty.pem"))
