"""The only module that imports the docker SDK.

``Runtime`` wraps a docker client and speaks in dejima's values (ContainerSpec, ImageRecipe,
labels). Engine failures become ``EngineError``/``ImageError`` with a hint, never a traceback.
"""

from __future__ import annotations

import io
import ipaddress
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import docker.errors
import requests.exceptions

import docker
from dejima.core.images import ImageRecipe
from dejima.core.plan import ContainerSpec
from dejima.errors import EngineError, ImageError

ENGINE_HINT = (
    "start the Docker engine (e.g. `sudo systemctl start docker`, or `dockerd &` as root) and check "
    "that you may use its socket (`docker info`); DOCKER_HOST selects another engine"
)


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    id: str
    name: str
    status: str  # created, running, exited, ...
    labels: dict[str, str]
    created: str


def connect(timeout: float = 120.0) -> Runtime:
    try:
        client = docker.from_env(timeout=int(timeout))  # type: ignore[attr-defined]
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineError(f"cannot reach the Docker engine: {_short(exc)}", hint=ENGINE_HINT) from exc
    except requests.exceptions.RequestException as exc:
        raise EngineError(f"cannot reach the Docker engine: {_short(exc)}", hint=ENGINE_HINT) from exc
    return Runtime(client)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Runtime:
    def __init__(self, client: Any) -> None:
        self.client = client
        self.api = client.api

    # --- engine ---------------------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        info: dict[str, Any] = self.api.version()
        return info

    # --- images ---------------------------------------------------------------------------
    def image_id(self, ref: str) -> str | None:
        try:
            return str(self.api.inspect_image(ref)["Id"])
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect image {ref}: {_short(exc)}", hint=ENGINE_HINT) from exc

    def pull(self, ref: str) -> str:
        """Pull ``ref``; returns the engine's reason on failure instead of raising."""
        repository, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        try:
            for _ in self.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
                pass
        except docker.errors.APIError as exc:
            return _short(exc)
        return "" if self.image_id(ref) else f"the engine reported success but {ref} is not present"

    def import_rootfs(self, tar_stream: Any, tag: str, image_labels: dict[str, str]) -> str:
        repository, _, version = tag.rpartition(":")
        changes = [f"LABEL {k}={v}" for k, v in image_labels.items()] + ['CMD ["/bin/bash"]']
        try:
            self.api.import_image_from_data(tar_stream, repository=repository, tag=version, changes=changes)
        except docker.errors.APIError as exc:
            raise ImageError(f"docker import of {tag} failed: {_short(exc)}") from exc
        image = self.image_id(tag)
        if image is None:
            raise ImageError(f"docker import of {tag} finished but the image is missing")
        return image

    def build(self, recipe: ImageRecipe, on_line: Callable[[str], None]) -> str:
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for path, content in (("Dockerfile", recipe.dockerfile.encode()), *recipe.files):
                entry = tarfile.TarInfo(path)
                entry.size = len(content)
                entry.mode = 0o644
                tar.addfile(entry, io.BytesIO(content))
        context.seek(0)
        repository, _, version = recipe.tag.rpartition(":")
        try:
            for event in self.api.build(
                fileobj=context,
                custom_context=True,
                tag=recipe.tag,
                labels=recipe.labels,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            ):
                if "error" in event:
                    raise ImageError(
                        f"building the {recipe.role} image failed: {event['error'].strip()}",
                        hint="the build log above shows the failing step; `dejima images build` retries",
                    )
                text = event.get("stream") or event.get("status")
                if text and text.strip():
                    on_line(text.rstrip())
        except docker.errors.APIError as exc:
            raise ImageError(f"building the {recipe.role} image failed: {_short(exc)}") from exc
        image = self.image_id(recipe.tag)
        if image is None:
            raise ImageError(f"the {recipe.role} image build finished without producing {recipe.tag}")
        return image

    def images(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api.images(filters={"label": _label_filters(label_filter)})
        return found

    def remove_image(self, image: str) -> None:
        try:
            self.api.remove_image(image, force=False)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot remove image {image}: {_short(exc)}") from exc

    # --- containers -----------------------------------------------------------------------
    def create(self, spec: ContainerSpec) -> str:
        binds = {b.source: {"bind": b.target, "mode": "ro" if b.read_only else "rw"} for b in spec.binds}
        limits: dict[str, Any] = {}
        if spec.limits is not None:
            limits = {"pids_limit": spec.limits.pids, "cpu_shares": spec.limits.cpu_shares}
            if spec.limits.memory is not None:  # swap limit = memory limit: no swap beyond it
                limits.update(mem_limit=spec.limits.memory, memswap_limit=spec.limits.memory)
        host_config = self.api.create_host_config(
            **limits,
            binds=binds,
            tmpfs=dict(spec.tmpfs),
            cap_drop=["ALL"],
            cap_add=list(spec.cap_add) or None,
            security_opt=["no-new-privileges:true"],
            network_mode=spec.network_mode,
            pid_mode=spec.pid_mode,
            read_only=spec.read_only_rootfs,
            init=False,
            dns=list(spec.dns) or None,
            sysctls=dict(spec.sysctls) or None,
        )
        try:
            created = self.api.create_container(
                image=spec.image,
                command=list(spec.command) if spec.command is not None else None,
                entrypoint=list(spec.entrypoint) if spec.entrypoint is not None else None,
                name=spec.name,
                user=spec.user,
                labels=spec.labels,
                environment=spec.environment,
                working_dir=spec.working_dir,
                hostname=spec.hostname if not spec.network_mode.startswith("container:") else None,
                tty=spec.tty,
                stdin_open=spec.tty,
                host_config=host_config,
            )
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot create container {spec.name}: {_short(exc)}") from exc
        return str(created["Id"])

    def start(self, container: str) -> None:
        try:
            self.api.start(container)
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot start container {container[:12]}: {_short(exc)}") from exc

    def follow_logs(self, container: str) -> Iterator[bytes]:
        stream: Iterator[bytes] = self.api.logs(container, stream=True, follow=True, stdout=True, stderr=True)
        return stream

    def first_log_line(self, container: str) -> str:
        """Block until the container prints a first line (or ends); then stop following."""
        stream = self.api.logs(container, stream=True, follow=True, stdout=True, stderr=True)
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
            return bytes(self.api.logs(container, stdout=True, stderr=True)).decode(errors="replace")
        except docker.errors.NotFound:
            return ""

    def attach(self, container: str) -> Iterator[tuple[bytes | None, bytes | None]]:
        stream: Iterator[tuple[bytes | None, bytes | None]] = self.api.attach(
            container, stdout=True, stderr=True, stream=True, logs=True, demux=True
        )
        return stream

    def wait(self, container: str, timeout: float | None = None) -> int:
        result = self.api.wait(container, timeout=timeout)
        return int(result["StatusCode"])

    def inspect(self, container: str) -> dict[str, Any] | None:
        try:
            info: dict[str, Any] = self.api.inspect_container(container)
            return info
        except docker.errors.NotFound:
            return None

    def address(self, container: str, network: str) -> str:
        """The container's IPv4 address on ``network``."""
        info = self.inspect(container) or {}
        networks = info.get("NetworkSettings", {}).get("Networks") or {}
        entry = networks.get(network) or {}
        return str(entry.get("IPAddress", ""))

    def memory(self) -> int | None:
        """Bytes of memory the engine's machine has (a VM's, under Docker Desktop)."""
        try:
            total = self.api.info().get("MemTotal")
        except docker.errors.APIError:
            return None
        return int(total) if isinstance(total, int) and total > 0 else None

    def gateway(self, network: str) -> str | None:
        """The engine's gateway address on ``network`` (the host, seen from containers)."""
        try:
            info = self.api.inspect_network(network)
        except docker.errors.APIError:
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
            self.api.stop(container, timeout=timeout)
        except docker.errors.APIError:
            pass

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        try:
            self.api.kill(container, signal=signal)
        except docker.errors.APIError:
            pass  # already gone or not running: the remove that follows settles it

    def remove(self, container: str) -> None:
        try:
            self.api.remove_container(container, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise EngineError(f"cannot remove container {container[:12]}: {_short(exc)}") from exc

    def containers(self, label_filter: dict[str, str]) -> list[ContainerInfo]:
        found = self.api.containers(all=True, filters={"label": _label_filters(label_filter)})
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

    def create_network(self, name: str, subnet: str, network_labels: dict[str, str]) -> str:
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])  # type: ignore[attr-defined]
        try:
            created = self.api.create_network(name, driver="bridge", ipam=ipam, labels=network_labels)
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot create network {name}: {_short(exc)}") from exc
        return str(created["Id"])

    def remove_network(self, network: str) -> None:
        try:
            self.api.remove_network(network)
        except docker.errors.NotFound:
            pass

    def networks(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api.networks(filters={"label": _label_filters(label_filter)})
        return found

    def volumes(self, label_filter: dict[str, str]) -> list[dict[str, Any]]:
        found = self.api.volumes(filters={"label": _label_filters(label_filter)})
        return list(found.get("Volumes") or [])


def _label_filters(label_filter: dict[str, str]) -> list[str]:
    return [f"{k}={v}" if v else k for k, v in label_filter.items()]

