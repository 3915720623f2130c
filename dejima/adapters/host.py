"""Facts about the host the launcher runs on: who, where its files go, which processes live.

Paths follow the XDG base directory spec. ``DEJIMA_SCOPE`` separates independent dejima
installations on one engine (the test suite uses its own scope so it never touches yours).
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import os
import pwd
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.errors import SettingsError, UsageError

if TYPE_CHECKING:  # imported where used: the launcher's prestart (orchestration/prestart.py) imports
    # this module before the plan's code, and starts the filter while that code is imported
    from dejima.core.plan import Identity
    from dejima.core.settings import Settings

SETTINGS_ENV = "DEJIMA_SETTINGS"
SCOPE_ENV = "DEJIMA_SCOPE"
DEFAULT_SCOPE = "default"
_SAFE_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,30}\Z")
_SCOPE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}\Z")


def identity() -> Identity:
    from dejima.core.plan import Identity

    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "dejima"
    return Identity(uid=uid, gid=gid, name=name if _SAFE_NAME.match(name) else "dejima")


def session_identity(workspace: Path, as_root: bool) -> Identity:
    """Who the session runs as (see ``session_ids``), with the name the session image gives it."""
    from dejima.core.plan import Identity, session_ids

    launcher = identity()
    status = workspace.stat()
    uid, gid = session_ids((launcher.uid, launcher.gid), (status.st_uid, status.st_gid), as_root, str(workspace))
    if uid == launcher.uid:
        return replace(launcher, gid=gid)
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "dejima"
    return Identity(uid=uid, gid=gid, name=name if _SAFE_NAME.match(name) else "dejima")


def memory_total(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory this host has (render mode has no engine to ask)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def scope() -> str:
    value = os.environ.get(SCOPE_ENV, DEFAULT_SCOPE)
    if not _SCOPE.match(value):
        raise UsageError(
            f"${SCOPE_ENV}={value!r} is not a valid scope",
            hint="use letters, digits, '.', '_' or '-' (at most 63 characters), or unset it",
        )
    return value


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    return Path(value) if value and value.startswith("/") else Path.home() / fallback


def config_dir() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "dejima"


def data_dir() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "dejima"


def state_dir() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "dejima"


def settings_path() -> Path:
    override = os.environ.get(SETTINGS_ENV)
    return Path(override) if override else config_dir() / "settings.toml"


def load_settings(path: Path | None = None, required: bool = False) -> Settings:
    """Defaults when the file is absent (unless ``required``, or named by $DEJIMA_SETTINGS); otherwise the
    file, strictly validated."""
    from dejima.core.settings import Settings, parse_settings

    path = path or settings_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if required:
            raise SettingsError(f"{path}: the settings file does not exist",
                                hint="give the path of a settings file, or none to use the defaults") from None
        if os.environ.get(SETTINGS_ENV):
            raise SettingsError(
                f"{path}: settings file named by ${SETTINGS_ENV} does not exist",
                hint=f"create it, or unset {SETTINGS_ENV} to use {config_dir() / 'settings.toml'}",
            ) from None
        return Settings()
    except OSError as exc:
        raise SettingsError(
            f"{path}: cannot read the settings file: {exc.strerror}",
            hint="fix its permissions, or move it away to use the defaults",
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                            hint="save the file as UTF-8") from exc
    return parse_settings(text, str(path))


def home_dir_for(workspace: Path) -> Path:
    """The host directory persisted as the session's $HOME for this workspace."""
    key = hashlib.sha256(str(workspace).encode()).hexdigest()[:12]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", workspace.name)[:40] or "root"
    return data_dir() / "homes" / f"{name}-{key}"


def resolv_conf_file(content: str) -> Path:
    """A world-readable host file with ``content``, to mount read-only as a session's resolv.conf."""
    path = state_dir() / "resolv.conf"
    if not path.exists() or path.read_text() != content:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_suffix(f".{os.getpid()}-{secrets.token_hex(4)}.tmp")  # launchers run at once
        temporary.write_text(content)
        temporary.chmod(0o644)
        temporary.replace(path)
    return path


def ensure_private_dir(path: Path, owner: Identity | None = None) -> Path:
    """A 0700 directory; a root launcher hands it to ``owner`` (the session's user), the top only:
    what earlier sessions left inside keeps its owner."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if owner is not None and os.getuid() == 0 and owner.uid != 0:
        os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
    return path


# --- launcher liveness -------------------------------------------------------------------------
# A session records which process launched it. A later run removes sessions whose launcher is
# gone; the boot id and the process start time make a recycled pid count as gone too.


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime); the command name in field 2 may hold spaces, so split after it.
    return stat.rpartition(")")[2].split()[19]


def launcher_token(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{_boot_id()}:{pid}:{_start_time(pid) or '0'}"


@dataclass(frozen=True, slots=True)
class Launcher:
    boot_id: str
    pid: int
    start_time: str

    @classmethod
    def parse(cls, token: str) -> Launcher | None:
        parts = token.split(":")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2])

    def alive(self) -> bool:
        return self.boot_id == _boot_id() and _start_time(self.pid) == self.start_time

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to this launcher if it is alive (the same process: its start time checked) and catches
        it; whether it was sent. Not to one that would die of it (a program running a session off its main thread
        has no handler of dejima's; a launcher still starting has none yet), nor to another user's that this one
        may not signal."""
        if not self.alive() or not _catches(self.pid, signum):
            return False
        try:
            os.kill(self.pid, signum)
        except OSError:
            return False
        return True


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (/proc/PID/status SigCgt, a mask in hex)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def launcher_alive(token: str) -> bool:
    launcher = Launcher.parse(token)
    return launcher is not None and launcher.alive()


# --- who owns a session's state directory ------------------------------------------------------
# A session's directory exists before its containers do (the audit snapshot is taken first), so
# no one may judge it by its containers: the launcher that made it writes its token there, under
# a lock that every launcher takes to create, judge or take over such a directory.

OWNER_FILE = "launcher"
_LOCK_FILE = ".lock"


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """Holds the exclusive lock of the directories under ``root`` (released if the process dies).
    Not re-entrant: a process that takes it again while holding it waits for itself."""
    ensure_private_dir(root)
    descriptor = os.open(root / _LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def claim(directory: Path, token: str | None = None) -> None:
    """Make ``directory`` (if needed) and record ``token`` (this launcher's) as its owner; call it
    holding ``locked(directory.parent)``."""
    ensure_private_dir(directory)
    write_atomically(directory / OWNER_FILE, (token or launcher_token()).encode())


def owner_alive(directory: Path) -> bool:
    """Whether the launcher recorded as ``directory``'s owner still runs (no record: it does not:
    only a launcher that died before writing it, or a dejima from before owners, leaves none)."""
    try:
        token = (directory / OWNER_FILE).read_text()
    except OSError:
        return False
    return launcher_alive(token)


def record(directory: Path, name: str, text: str) -> None:
    """Write a small fact about a session (its workspace, say) into its state directory, atomically."""
    write_atomically(directory / name, text.encode())


def write_atomically(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` (mode 0600): a reader sees the old file or the new, never a part."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "wb") as file:
            os.fchmod(fd, 0o600)  # a stale temporary file keeps its mode through O_CREAT
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_record(directory: Path, name: str) -> str | None:
    try:
        return (directory / name).read_text()
    except OSError:
        return None


def read_extra_cas(directory: str) -> dict[str, bytes]:
    """The ``*.crt`` files update-ca-certificates would read from ``directory`` (recursively)."""
    root = Path(directory)
    if not root.is_dir():
        return {}
    found: dict[str, bytes] = {}
    for cert in sorted(root.rglob("*.crt")):
        if cert.is_file():
            found[str(cert.relative_to(root)).replace("/", "__")] = cert.read_bytes()
    return found


PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.S)


def read_pem_certificates(path: str, key: str) -> list[bytes]:
    """Each certificate of the PEM file ``path`` (``key`` names the setting in errors); an unreadable file
    or one without a certificate is an error: a CA the user named is never left out in silence."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"{key}: cannot read {path}: {exc.strerror or exc}",
                            hint="name a readable PEM file of CA certificates, or leave the setting empty") from None
    found = [m.group(0) + b"\n" for m in PEM_CERTIFICATE.finditer(data)]
    if not found:
        raise SettingsError(f"{key}: {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                            hint="name the PEM file of the proxy's CA certificate")
    return found


def image_cas(extra_ca_dir: str, extra_ca: str) -> dict[str, bytes]:
    """What image builds trust besides the base's store: ``[images] extra_ca_dir``'s ``*.crt`` and each
    certificate of ``[network] extra_ca`` (one file each, as update-ca-certificates wants them)."""
    found = read_extra_cas(extra_ca_dir)
    if extra_ca:
        certificates = read_pem_certificates(extra_ca, "network.extra_ca")
        found.update({f"dejima-network-extra-ca-{n}.crt": cert for n, cert in enumerate(certificates)})
    return found


# --- the host's network, as the filter's policy must know it -------------------------------------


def host_resolvers(path: Path = Path("/etc/resolv.conf")) -> list[str]:
    """IPv4 nameservers of the host that a container can reach (loopback ones cannot be)."""
    found = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                address = ipaddress.ip_address(parts[1])
            except ValueError:
                continue
            if address.version == 4 and not address.is_loopback:
                found.append(str(address))
    return found


def local_addresses(fib_trie: Path = Path("/proc/net/fib_trie")) -> list[str]:
    """Every IPv4 address this host owns (the LOCAL entries of the kernel's routing trie)."""
    try:
        lines = fib_trie.read_text().splitlines()
    except OSError:
        return []
    found: set[str] = set()
    for previous, line in zip(lines, lines[1:], strict=False):
        if "/32 host LOCAL" in line:
            candidate = previous.split()[-1]
            try:
                found.add(str(ipaddress.IPv4Address(candidate)))
            except ValueError:
                continue
    return sorted(found)


def ipv4_address(name: str) -> ipaddress.IPv4Address | None:
    """The first IPv4 address the host's resolver gives ``name`` (a literal is itself), or None."""
    import socket

    try:
        found = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return ipaddress.IPv4Address(found[0][4][0]) if found else None


def proxy_variables() -> dict[str, str]:
    """The host's proxy variables (core/upstream_proxy.py ENV_NAMES) that are set, as the launcher got them."""
    from dejima.core.upstream_proxy import ENV_NAMES

    return {name: os.environ[name] for name in ENV_NAMES if os.environ.get(name)}
