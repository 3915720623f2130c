"""A pod spec run on the local engine the way a kubelet runs it: one network namespace (held by an infra
container), the init containers in order (a native sidecar started, then waited for until its startup
probe passes), then the containers; each container's security context, mounts, environment and limits
as the rendered YAML says.

It reads the rendered objects, never the plan they came from, so a test on it checks what a cluster
would get. Any field it does not know stops it: a security field it skipped would make the check a lie.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dejima.core import labels
from dejima.filter import READY as FILTER_READY
from dejima.proxy.pod import READY as PROXY_READY
from tests.world import docker

POD_FIELDS = {"restartPolicy", "automountServiceAccountToken", "enableServiceLinks", "hostname", "dnsPolicy",
              "dnsConfig", "securityContext", "terminationGracePeriodSeconds", "initContainers", "containers",
              "volumes", "runtimeClassName"}
CONTAINER_FIELDS = {"name", "image", "command", "args", "workingDir", "env", "securityContext", "resources",
                    "volumeMounts", "restartPolicy", "startupProbe", "readinessProbe", "stdin", "tty",
                    "ports"}  # what a container listens on: informational (the Service and the ruleset decide)
SECURITY_FIELDS = {"runAsUser", "runAsGroup", "runAsNonRoot", "allowPrivilegeEscalation", "privileged",
                   "capabilities", "readOnlyRootFilesystem", "seccompProfile"}


@dataclass
class LocalPod:
    """A pod running on the engine: its infra container and one container per name, removed by ``delete``."""

    scope: str
    name: str
    containers: dict[str, str] = field(default_factory=dict)  # container name -> engine id ("pod": the infra)
    directories: list[tempfile.TemporaryDirectory[str]] = field(default_factory=list)
    volumes: dict[str, Path] = field(default_factory=dict)  # volume name -> the host directory it is
    values: dict[tuple[str, str], str] = field(default_factory=dict)  # ConfigMaps' and Secrets' keys

    def delete(self) -> None:
        for container in reversed(list(self.containers.values())):
            docker("rm", "-f", container)
        for directory in self.directories:
            directory.cleanup()


def config_values(objects: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {(o["metadata"]["name"], key): value for o in objects if o["kind"] == "ConfigMap"
            for key, value in o["data"].items()}


def pod_spec(objects: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    pod = next(o for o in objects if o["kind"] in ("Pod", "Sandbox"))
    spec = pod["spec"]["podTemplate"]["spec"] if pod["kind"] == "Sandbox" else pod["spec"]
    return pod["metadata"]["name"], spec


# What each sidecar prints once it is up: the local kubelet waits for the line (no polling), then
# requires the container's startup probe to pass.
STARTED = {"filter": FILTER_READY, "proxy": PROXY_READY}


def start_pod(objects: list[dict[str, Any]], scope: str, network: str, claims: dict[str, Path],
              secrets: dict[tuple[str, str], str] | None = None, probe_timeout: float = 60) -> LocalPod:
    """Start the pod's containers in the kubelet's order; the containers are left to the caller
    (``run_container``), as a test wants their output. ``claims``: a host directory per claim name;
    ``secrets``: the cluster's Secrets, (name, key) -> value."""
    name, spec = pod_spec(objects)
    unknown = set(spec) - POD_FIELDS
    assert not unknown, f"the local kubelet does not know {unknown}"
    assert spec["dnsPolicy"] == "None" and spec["automountServiceAccountToken"] is False
    pod = LocalPod(scope, name)
    try:
        resolv = _directory(pod)
        (resolv / "resolv.conf").write_text(
            "".join(f"nameserver {n}\n" for n in spec["dnsConfig"]["nameservers"])
            + "options " + " ".join(f"{o['name']}:{o['value']}" for o in spec["dnsConfig"]["options"]) + "\n")
        (resolv / "resolv.conf").chmod(0o644)
        sysctls = [arg for s in spec["securityContext"]["sysctls"] for arg in ("--sysctl", f"{s['name']}={s['value']}")]
        pod.containers["pod"] = _checked("run", "-d", *_labels(pod, "pod"), "--network", network,
                                         "--hostname", spec["hostname"], *sysctls, "--cap-drop", "ALL",
                                         "--entrypoint", "sleep", spec["containers"][0]["image"], "infinity")
        pod.volumes = _volumes(pod, spec["volumes"], claims)
        values = {**config_values(objects), **(secrets or {})}
        for container in spec["initContainers"]:
            assert container["restartPolicy"] == "Always", "only native sidecars are rendered as init containers"
            pod.containers[container["name"]] = _checked(
                "run", "-d", *_container_args(pod, container, pod.volumes, values, resolv / "resolv.conf"),
                container["image"], *_arguments(container))
            _wait_started(pod.containers[container["name"]], STARTED[container["name"]], container["startupProbe"],
                          probe_timeout)
        pod.values = values
        return pod
    except BaseException:
        pod.delete()
        raise


def run_container(pod: LocalPod, objects: list[dict[str, Any]], index: int = 0,
                  timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run the pod's container ``index`` to its end (output captured); the pod's other containers keep running."""
    _, spec = pod_spec(objects)
    container = spec["containers"][index]
    resolv = Path(pod.directories[0].name) / "resolv.conf"
    name = f"{pod.name}-{container['name']}-{len(pod.containers)}"
    pod.containers[name] = name
    return subprocess.run(["docker", "run", "--name", name,
                           *_container_args(pod, container, pod.volumes, pod.values, resolv),
                           container["image"], *_arguments(container)],
                          capture_output=True, timeout=timeout, check=False)


def start_container(pod: LocalPod, objects: list[dict[str, Any]], marker: str, index: int = 0,
                    timeout: float = 60) -> str:
    """Start the pod's container ``index`` and return once it printed ``marker`` (its output stays in its
    logs); for a test that talks to it while it runs."""
    _, spec = pod_spec(objects)
    container = spec["containers"][index]
    assert all(p.get("protocol", "TCP") == "TCP" for p in container.get("ports", [])), container["ports"]
    resolv = Path(pod.directories[0].name) / "resolv.conf"
    name = f"{pod.name}-{container['name']}-{len(pod.containers)}"
    pod.containers[name] = _checked("run", "-d", "--name", name,
                                    *_container_args(pod, container, pod.volumes, pod.values, resolv),
                                    container["image"], *_arguments(container))
    _wait_for_log_line(name, marker, timeout)
    return pod.containers[name]


def _arguments(container: dict[str, Any]) -> list[str]:
    """What follows the image: the command's rest (its first word is the entrypoint), then the args."""
    return [*container.get("command", [])[1:], *container.get("args", [])]


def _labels(pod: LocalPod, role: str) -> list[str]:
    return ["--label", f"{labels.SCOPE}={pod.scope}", "--label", f"{labels.ROLE}=test-pod-{role}",
            "--label", f"{labels.LAUNCHER}=test"]


def _directory(pod: LocalPod) -> Path:
    directory = tempfile.TemporaryDirectory(prefix="dejima-pod-")
    pod.directories.append(directory)
    path = Path(directory.name)
    path.chmod(0o777)
    return path


def _volumes(pod: LocalPod, volumes: list[dict[str, Any]], claims: dict[str, Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for volume in volumes:
        if "persistentVolumeClaim" in volume:
            found[volume["name"]] = claims[volume["persistentVolumeClaim"]["claimName"]]
        else:  # an emptyDir: one directory, shared by every container that mounts it (as a pod's is)
            assert set(volume) == {"name", "emptyDir"}, volume
            found[volume["name"]] = _directory(pod)
    return found


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else int(quantity)


def _container_args(pod: LocalPod, container: dict[str, Any], volumes: dict[str, Path],
                    configs: dict[tuple[str, str], str], resolv: Path) -> list[str]:
    unknown = set(container) - CONTAINER_FIELDS
    assert not unknown, f"the local kubelet does not know {unknown}"
    security = container["securityContext"]
    assert not set(security) - SECURITY_FIELDS, security
    assert security["allowPrivilegeEscalation"] is False and security["seccompProfile"] == {"type": "RuntimeDefault"}
    args = [*_labels(pod, container["name"]), "--network", f"container:{pod.containers['pod']}",
            "--security-opt", "no-new-privileges",
            "--cap-drop", "ALL", *(a for cap in security["capabilities"].get("add", []) for a in ("--cap-add", cap)),
            "--user", f"{security['runAsUser']}:{security.get('runAsGroup', security['runAsUser'])}",
            "-v", f"{resolv}:/etc/resolv.conf:ro"]
    if security.get("runAsNonRoot"):
        assert security["runAsUser"] != 0
    if security["readOnlyRootFilesystem"]:
        args.append("--read-only")
    for variable in container.get("env", []):
        if "valueFrom" in variable:
            (kind, ref), = variable["valueFrom"].items()
            assert kind in ("configMapKeyRef", "secretKeyRef"), kind
            value = configs[(ref["name"], ref["key"])]
        else:
            value = variable["value"]
        args += ["-e", f"{variable['name']}={value}"]
    for mount in container["volumeMounts"]:
        path = volumes[mount["name"]] / mount.get("subPath", "")
        args += ["--mount", f"type=bind,source={path},target={mount['mountPath']}"
                 + (",readonly" if mount.get("readOnly") else "")]
    if "workingDir" in container:
        args += ["-w", container["workingDir"]]
    limits = container["resources"].get("limits", {})
    if "memory" in limits:
        args += ["--memory", str(_bytes(limits["memory"])), "--memory-swap", str(_bytes(limits["memory"]))]
    cpu = container["resources"]["requests"]["cpu"]
    args += ["--cpu-shares", str(max(2, int(cpu.removesuffix("m")) * 1024 // 1000))]
    if "command" in container:
        args += ["--entrypoint", container["command"][0]]
    return args


def _checked(*args: str) -> str:
    result = docker(*args)
    assert result.returncode == 0, result.stdout.decode(errors="replace")
    return result.stdout.decode().strip().splitlines()[-1]


def _wait_for_log_line(container: str, marker: str, timeout: float) -> None:
    """Follow the container's logs until a line holds ``marker`` (bounded in time)."""
    from tests.world import wait_for_line

    logs = subprocess.Popen(["docker", "logs", "-f", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_for_line(logs.stdout, marker, timeout)
    finally:
        logs.kill()
        logs.wait()
        if logs.stdout is not None:
            logs.stdout.close()


def _wait_started(container: str, marker: str, probe: dict[str, Any], timeout: float) -> None:
    """The kubelet's wait for a sidecar: the container's own ready line first (no polling), then its
    startup probe, which must pass then; a container that exits first fails the pod."""
    _wait_for_log_line(container, marker, timeout)
    result = docker("exec", container, *probe["exec"]["command"])
    assert result.returncode == 0, f"the startup probe failed after the ready line: {result.stdout!r}"


def inspect(container: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(docker("inspect", container).stdout)[0]
    return found
