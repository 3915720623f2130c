"""The engine, in dejima's words: containers, images and networks as dejima's values
(ContainerSpec, ImageRecipe, labels). Engine failures become ``EngineError``/``ImageError`` with
a hint, never a traceback.

Every call goes through dejima.adapters.engine, dejima's one client of the engine's API (builds,
pulls and imports too; a pull carries the registry credentials the docker CLI would use,
dejima.adapters.registry_auth). An interactive session's terminal is the docker CLI's
(orchestration/session.py): raw mode and window sizes are its job, and it does them well.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import quote

from dejima.adapters import registry_auth
from dejima.adapters.engine import ENGINE_HINT, STDOUT, APIError, Engine, StreamError
from dejima.core.images import ImageRecipe
from dejima.core.plan import ContainerSpec
from dejima.errors import EngineError, ImageError

_RAISE = object()  # _call's default: a missing object is an error too
PORT_TAKEN = ("address already in use", "port is already allocated")  # the engine's words for a taken host port
__all__ = ["ENGINE_HINT", "ContainerInfo", "Runtime", "connect"]


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    id: str
    name: str
    status: str  # created, running, exited, ...
    labels: dict[str, str]
    created: str


def connect(timeout: float = 120.0) -> Runtime:
    engine = Engine.from_env(timeout)
    try:
        engine.ping()
    except APIError as exc:
        raise EngineError(f"cannot reach the Docker engine: {exc.message}", hint=ENGINE_HINT) from exc
    except OSError as exc:  # reached, then cut off or timed out
        raise EngineError(f"cannot reach the Docker engine: {exc}", hint=ENGINE_HINT) from exc
    return Runtime(engine)


def _c(container: str) -> str:
    return f"/containers/{quote(container, safe='')}"


class Runtime:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- engine ---------------------------------------------------------------------------
    def _call(self, doing: str, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None, *,
              missing: Any = _RAISE, hint: str | None = None) -> Any:
        """An engine call whose failure is an EngineError saying what was being done; with
        ``missing``, a 404 (the object is gone) returns it instead."""
        try:
            return self.engine.call(method, path, params, body)
        except APIError as exc:
            if exc.not_found and missing is not _RAISE:
                return missing
            raise EngineError(f"cannot {doing}: {exc.message}", hint=hint) from exc

    def version(self) -> dict[str, Any]:
        info: dict[str, Any] = self.engine.call("GET", "/version")
        return info

    # --- images ---------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        info = self._call(f"inspect image {ref}", "GET", f"/images/{quote(ref, safe='/:@')}/json", missing=None,
                          hint=ENGINE_HINT)
        return None if info is None else str(info["Id"])

    def pull(self, ref: str) -> str:
        """Pull ``ref``; returns the engine's reason on failure instead of raising."""
        repository, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        auth = registry_auth.header_for(ref)
        try:
            query = {"fromImage": repository, "tag": tag or "latest"}
            with closing(self.engine.progress("POST", "/images/create", query, headers=auth.header)) as events:
                for _ in events:
                    pass
        except StreamError as exc:
            return _with_note(str(exc), auth.note)
        except APIError as exc:
            return _with_note(exc.message, auth.note)
        except (OSError, EngineError) as exc:
            return _with_note(str(exc), auth.note)
        return "" if self.image_id(ref) else f"the engine reported success but {ref} is not present"

    def import_rootfs(self, tar_stream: IO[bytes], tag: str, image_labels: dict[str, str]) -> str:
        """``docker import`` of a root file system's tar, streamed as it is read."""
        repository, _, version = tag.rpartition(":")
        changes = tuple(f"LABEL {k}={v}" for k, v in image_labels.items()) + ('CMD ["/bin/bash"]',)
        try:
            with closing(self.engine.progress("POST", "/images/create", {"fromSrc": "-", "repo": repository,
                                                                         "tag": version, "changes": changes},
                                              data=tar_stream)) as events:
                for _ in events:
                    pass
        except StreamError as exc:
            raise ImageError(f"docker import of {tag} failed: {exc}") from exc
        except (APIError, OSError, EngineError) as exc:
            raise ImageError(f"docker import of {tag} failed: {_short(exc)}") from exc
        image = self.image_id(tag)
        if image is None:
            raise ImageError(f"docker import of {tag} finished but the image is missing")
        return image

    def build(self, recipe: ImageRecipe, on_line: Callable[[str], None]) -> str:
        import io
        import tarfile

        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for path, content in (("Dockerfile", recipe.dockerfile.encode()), *recipe.files):
                entry = tarfile.TarInfo(path)
                entry.size = len(content)
                entry.mode = 0o644
                tar.addfile(entry, io.BytesIO(content))
        params = {"t": recipe.tag, "labels": recipe.labels, "rm": True, "forcerm": True, "pull": False}
        try:
            with closing(self.engine.progress("POST", "/build", params, data=context.getvalue())) as events:
                for event in events:
                    text = event.get("stream") or event.get("status") or ""
                    for line in str(text).splitlines():  # one event may hold several lines (apt's, npm's)
                        if line.strip():
                            on_line(line.rstrip())
        except StreamError as exc:
            raise ImageError(f"building the {recipe.role} image failed: {exc}",
                             hint="the build log's last lines are above; `dejima images build` retries") from exc
        except (APIError, OSError, EngineError) as exc:
            raise ImageError(f"building the {recipe.role} image failed: {_short(exc)}") from exc
        image = self.image_id(recipe.tag)
        if image is None:
            raise ImageError(f"the {recipe.role} image build finished without producing {recipe.tag}")
        return image

    def images(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.engine.call("GET", "/images/json", _filters(label_filter))
        return found

    def remove_image(self, image: str) -> None:
        self._call(f"remove image {image}", "DELETE", f"/images/{quote(image, safe='/:@')}", {"force": False},
                   missing=None)

    # --- containers -----------------------------------------------------------------------
    def create(self, spec: ContainerSpec) -> str:
        created = self._call(f"create container {spec.name}", "POST", "/containers/create", {"name": spec.name},
                             create_body(spec))
        return str(created["Id"])

    def start(self, container: str) -> None:
        try:
            self.engine.call("POST", f"{_c(container)}/start")
        except APIError as exc:
            if any(words in exc.message for words in PORT_TAKEN):  # a published port (core/publish.py)
                raise EngineError(f"cannot start container {container[:12]}: a host port it publishes is taken: "
                                  f"{exc.message}", reference="host-port-taken",
                                  hint="another program on the host listens on that port: stop it, or publish "
                                  "the session's port on another host port (--publish 8081:3000)") from exc
            raise EngineError(f"cannot start container {container[:12]}: {exc.message}") from exc

    def follow_logs(self, container: str) -> Generator[bytes, None, None]:
        """Everything the container prints (stdout and stderr, as it comes) until it goes away."""
        frames = self.engine.frames(f"{_c(container)}/logs", {"follow": 1, "stdout": 1, "stderr": 1})
        try:
            for _, data in frames:
                yield data
        finally:
            frames.close()

    def first_log_line(self, container: str) -> str:
        """Block until the container prints a first line (or ends); then stop following."""
        stream = self.follow_logs(container)
        buffer = b""
        try:
            for chunk in stream:
                buffer += chunk
                if b"\n" in buffer:
                    break
        finally:
            stream.close()
        return buffer.split(b"\n", 1)[0].decode(errors="replace")

    def logs(self, container: str) -> str:
        try:
            frames = self.engine.frames(f"{_c(container)}/logs", {"stdout": 1, "stderr": 1})
            return b"".join(data for _, data in frames).decode(errors="replace")
        except APIError as exc:
            if exc.not_found or exc.status == 409:  # gone, or being removed (by `docker rm -f`): its output with it
                return ""
            raise EngineError(f"cannot read the output of {container[:12]}: {exc.message}") from exc

    def attach(self, container: str, stdin: IO[bytes] | None = None) -> Iterator[tuple[bytes | None, bytes | None]]:
        """(stdout, stderr) pieces of the container's output, from its start (ask before starting it); ``stdin``:
        what its open stdin reads, then end of file (engine.Engine.attach)."""
        frames = self.engine.attach(container, stdin=stdin)
        return ((data, None) if stream == STDOUT else (None, data) for stream, data in frames)

    def wait(self, container: str, timeout: float | None = None) -> int:
        result = self.engine.call("POST", f"{_c(container)}/wait", timeout=timeout)
        return int(result["StatusCode"])

    def exec(self, container: str, command: tuple[str, ...], user: str, timeout: float = 60.0) -> tuple[int, str, str]:
        """Run ``command`` in the running ``container`` as ``user`` and wait: (status, stdout, stderr)."""
        try:
            status, out, err = self.engine.exec_run(container, list(command), user, timeout)
        except APIError as exc:
            raise EngineError(f"cannot run a command in {container[:12]}: {exc.message}") from exc
        except OSError as exc:
            raise EngineError(f"a command in {container[:12]} did not finish: {_short(exc)}") from exc
        return status, out.decode(errors="replace"), err.decode(errors="replace")

    def wait_removed(self, container: str, timeout: float) -> bool:
        """Whether the container is removed (by whoever) within ``timeout`` seconds."""
        try:
            self.engine.call("POST", f"{_c(container)}/wait", {"condition": "removed"}, timeout=timeout)
        except APIError as exc:
            return exc.not_found  # gone already
        except TimeoutError:
            return False
        return True

    def inspect(self, container: str) -> dict[str, Any] | None:
        info: dict[str, Any] | None = self._call(f"inspect container {container[:12]}", "GET", f"{_c(container)}/json",
                                                 missing=None)
        return info

    def address(self, container: str, network: str) -> str:
        """The container's IPv4 address on ``network``."""
        info = self.inspect(container) or {}
        networks = info.get("NetworkSettings", {}).get("Networks") or {}
        entry = networks.get(network) or {}
        return str(entry.get("IPAddress", ""))

    def memory(self) -> int | None:
        """Bytes of memory the engine's machine has (a VM's, under Docker Desktop)."""
        try:
            total = self.engine.call("GET", "/info").get("MemTotal")
        except APIError:
            return None
        return int(total) if isinstance(total, int) and total > 0 else None

    def gateway(self, network: str) -> str | None:
        """The engine's gateway address on ``network`` (the host, seen from containers)."""
        try:
            info = self.engine.call("GET", f"/networks/{quote(network, safe='')}")
        except APIError:
            return None
        configs = (info.get("IPAM") or {}).get("Config") or []
        for config in configs:
            if config.get("Gateway"):
                return str(config["Gateway"])
        # Some engines list no gateway when they chose it themselves: their IPAM gives a bridge
        # network's gateway the subnet's first address.
        for config in configs:
            try:
                subnet = ipaddress.ip_network(config.get("Subnet", ""))
            except ValueError:
                continue
            if subnet.version == 4 and info.get("Driver") == "bridge":
                return str(next(subnet.hosts()))
        return None

    def stop(self, container: str, timeout: int) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; quiet if already gone."""
        try:
            self.engine.call("POST", f"{_c(container)}/stop", {"t": timeout}, timeout=self.engine.timeout + timeout)
        except APIError:
            pass

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        try:
            self.engine.call("POST", f"{_c(container)}/kill", {"signal": signal})
        except APIError:
            pass  # already gone or not running: the remove that follows settles it

    def remove(self, container: str) -> None:
        try:
            self.engine.call("DELETE", _c(container), {"force": True, "v": True})
        except APIError as exc:
            if not exc.not_found and "already in progress" not in exc.message:
                raise EngineError(f"cannot remove container {container[:12]}: {exc.message}") from exc

    def containers(self, label_filter: dict[str, str]) -> list[ContainerInfo]:
        found = self.engine.call("GET", "/containers/json", {"all": True, **_filters(label_filter)})
        return [
            ContainerInfo(
                id=c["Id"],
                name=(c.get("Names") or ["?"])[0].lstrip("/"),
                status=c.get("State", "?"),
                labels=c.get("Labels") or {},
                created=str(c.get("Created", "")),
            )
            for c in found
        ]

    # --- networks and volumes -------------------------------------------------------------
    def create_network(self, name: str, subnet: str, network_labels: dict[str, str]) -> str:
        body = {"Name": name, "Driver": "bridge", "CheckDuplicate": True, "Labels": network_labels,
                "IPAM": {"Driver": "default", "Config": [{"Subnet": subnet}]}}
        created = self._call(f"create network {name}", "POST", "/networks/create", body=body)
        return str(created["Id"])

    def remove_network(self, network: str) -> None:
        self._call(f"remove network {network}", "DELETE", f"/networks/{quote(network, safe='')}", missing=None)

    def networks(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.engine.call("GET", "/networks", _filters(label_filter))
        return found

    def volumes(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found = self.engine.call("GET", "/volumes", _filters(label_filter))
        return list(found.get("Volumes") or [])


def create_body(spec: ContainerSpec) -> dict[str, Any]:
    """The engine's container-create request for ``spec`` (what the SDK's create_container sent)."""
    host: dict[str, Any] = {
        "Binds": [f"{b.source}:{b.target}:{'ro' if b.read_only else 'rw'}" for b in spec.binds],
        "Tmpfs": dict(spec.tmpfs),
        "CapDrop": ["ALL"],
        "CapAdd": list(spec.cap_add) or None,
        "SecurityOpt": ["no-new-privileges:true"],
        "NetworkMode": spec.network_mode,
        "PidMode": spec.pid_mode,
        "ReadonlyRootfs": spec.read_only_rootfs,
        "Init": False,
        "Dns": list(spec.dns) or None,
        "Sysctls": dict(spec.sysctls) or None,
    }
    if spec.limits is not None:
        host.update(PidsLimit=spec.limits.pids, CpuShares=spec.limits.cpu_shares)
        if spec.limits.memory is not None:  # swap limit = memory limit: no swap beyond it
            host.update(Memory=spec.limits.memory, MemorySwap=spec.limits.memory)
    if spec.ports:  # each on the address it names (127.0.0.1 unless said), TCP only
        bindings: dict[str, list[dict[str, str]]] = {}
        for p in spec.ports:
            bindings.setdefault(f"{p.session_port}/tcp", []).append({"HostIp": p.host_address,
                                                                     "HostPort": str(p.host_port)})
        host["PortBindings"] = bindings
    joined = spec.network_mode.startswith("container:")
    body: dict[str, Any] = {
        "Image": spec.image,
        "Cmd": list(spec.command) if spec.command is not None else None,
        "Entrypoint": list(spec.entrypoint) if spec.entrypoint is not None else None,
        "User": spec.user,
        "Labels": spec.labels,
        "Env": [f"{k}={v}" for k, v in spec.environment.items()],
        "WorkingDir": spec.working_dir,
        "Hostname": spec.hostname if not joined else None,
        "Tty": spec.tty,
        "OpenStdin": spec.tty or spec.stdin,
        "StdinOnce": spec.tty or spec.stdin,  # closed when the attached client closes it: end of file
        "AttachStdin": spec.tty or spec.stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "HostConfig": {k: v for k, v in host.items() if v is not None},
    }
    if spec.ports:
        body["ExposedPorts"] = {f"{p.session_port}/tcp": {} for p in spec.ports}
    return body


def _filters(label_filter: dict[str, str]) -> dict[str, Any]:
    return {"filters": {"label": [f"{k}={v}" if v else k for k, v in label_filter.items()]}}


def _with_note(reason: str, note: str) -> str:
    return f"{reason} ({note})" if note else reason


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
